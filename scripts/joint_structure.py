"""The call model's joint structure fitted to the shipped per-query outcomes, checked on held-out questions.

For each of the three public tables shipped in ``parasim/calibration/data`` (MMLU-Pro, MATH-L5, LiveCodeBench),
the questions are split in two with a fixed seed; the structure is fitted on the first half
(``parasim.calibration.joint_fit``) and a pool with the fitted structure (``structure_pool``) simulates tables of
the same design (each model's samples per question; ``SIM_FACTOR`` times the held-out questions) with the
simulator's own per-call model (``simulated_outcomes``). Real held-out and simulated joint statistics
(``parasim.calibration.joint_stats``) are compared against the tolerances ``TOLERANCES``, fixed before the held-out
comparison was first run. Usage:

    python scripts/joint_structure.py                              # print the section
    python scripts/joint_structure.py --update docs/simulator.md  # rewrite it between the markers

What is fitted where: tau (the per-(question, model) effect) only on LiveCodeBench, the one table with repeated
samples; the single-sample tables fit sigma and the family share with tau fixed at LiveCodeBench's. The wrong-answer
curve is fitted on the tables with answers (MMLU-Pro letters, MATH-L5 answers); kappa, which only repeated samples
with answers could identify, stays assumed (``KAPPA``).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

from parasim.calibration.joint_fit import StructureModel, fit_agreement, fit_correctness, structure_pool
from parasim.calibration.joint_stats import OutcomeMatrix, matrix_statistics, outcome_matrices
from parasim.calibration.per_query import read_per_query
from parasim.calibration.simulate import simulated_outcomes
from parasim.config.jsonl import read_json_file
from parasim.pools.pool import MAX_MODELS, parse_pool, pool_file
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS, FREE_FORM, NUM_ANSWERS

BEGIN, END = "<!-- joint:begin -->", "<!-- joint:end -->"
DATA = Path(__file__).resolve().parent.parent / "parasim" / "calibration" / "data"
SEED = 0
SIM_FACTOR = 4  # simulated questions per held-out question
FIT_QUESTIONS_MAX = 2000  # fit questions used of a table's fit half (MMLU-Pro's 6,000 would take minutes per fit)
KAPPA = 0.75  # assumed: P(a wrong answer is the model's preferred one); single samples do not identify it
# Tolerances on |simulated - real| per item, fixed before the first held-out comparison; a row is `within` when at
# least SHARE_WITHIN of its items are.
TOLERANCES = {"accuracy": 0.03, "phi": 0.10, "oracle of 2": 0.03, "oracle of 3": 0.03, "same wrong answer": 0.10,
              "vote@k": 0.03, "spread": 0.08}
SHARE_WITHIN = 0.9
# table file -> (the catalogue benchmark whose answer format and distractor weights the simulation uses, fit tau?)
TABLES = {"livecodebench": ("LiveCodeBench", True), "mmlu_pro": ("MMLU-Pro", False), "math_l5": ("generic_math", False)}
# model family by maker, read from the model names (a shared provider: Kim et al.'s "same provider" effect)
MAKERS = (("claude", "anthropic"), ("chatgpt", "openai"), ("gpt", "openai"), ("o1", "openai"), ("o4", "openai"),
          ("gemini", "google"), ("gemma", "google"), ("llama", "meta"), ("qwen", "qwen"), ("mixtral", "mistral"),
          ("mathstral", "mistral"), ("codestral", "mistral"), ("yi-", "01ai"), ("phi-", "microsoft"),
          ("deepseek", "deepseek"), ("reka", "reka"), ("grok", "xai"))


def family_of(model: str) -> str | None:
    """The maker of a model, from its name (None when unknown)."""
    low = model.lower().removeprefix("meta-")
    for prefix, maker in MAKERS:
        if low.startswith(prefix):
            return maker
    return None


def split(om: OutcomeMatrix, seed: int = SEED) -> tuple[OutcomeMatrix, OutcomeMatrix]:
    """The table's questions in two halves, a fixed permutation: (fit, held out)."""
    perm = np.random.default_rng(seed).permutation(len(om.questions))
    half = len(perm) // 2

    def take(idx: np.ndarray) -> OutcomeMatrix:
        idx = np.sort(idx)
        return OutcomeMatrix(om.models, om.questions[idx], om.hits[idx], om.samples[idx], om.answer[idx])

    return take(perm[:half]), take(perm[half:])


def subset(om: OutcomeMatrix, models: list[str]) -> OutcomeMatrix:
    cols = [om.models.index(m) for m in models]
    return OutcomeMatrix(models, om.questions, om.hits[:, cols], om.samples[:, cols], om.answer[:, cols])


def chance_agreement(bench: str) -> float:
    """S = sum_j q_j^2 of the simulated benchmark's distractor weights."""
    b = BENCHMARKS[BENCHMARK_INDEX[bench]]
    a = NUM_ANSWERS if b.options == FREE_FORM else b.options
    w = np.arange(1, a, dtype=np.float64) ** -b.zipf_s
    return float(((w / w.sum()) ** 2).sum())


def items(real: dict, sim: dict) -> dict[str, list[tuple[float, float]]]:
    """Per statistic, the (real, simulated) pairs of the items both tables have."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in TOLERANCES}

    def pairs(name: str, a: dict, b: dict) -> None:
        for key, v in a.items():
            if key in b and math.isfinite(v) and math.isfinite(b[key]):
                out[name].append((v, b[key]))

    pairs("accuracy", real["accuracy"], sim["accuracy"])
    pairs("phi", real["phi"], sim["phi"])
    pairs("oracle of 2", {k: v for k, v in real["oracle"].items() if k.count("|") == 1}, sim["oracle"])
    pairs("oracle of 3", {k: v for k, v in real["oracle"].items() if k.count("|") == 2}, sim["oracle"])
    pairs("same wrong answer", real["same_wrong"], sim["same_wrong"])
    for m, v in real["vote"].items():
        if m in sim["vote"]:
            pairs("vote@k", {k: x for k, x in v.items() if k != "single"}, sim["vote"][m])
    for m, v in real["spread"].items():
        if m in sim["spread"]:
            pairs("spread", {k: v[k] for k in ("zero", "one", "between")}, sim["spread"][m])
    return {k: v for k, v in out.items() if v}


def run(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """Fit every table and compare on its held-out half. Returns (fitted parameters per table, comparison rows)."""
    base = read_json_file(pool_file("paramanager"))
    fits, rows = [], []
    tau = None
    for name in ("livecodebench", "mmlu_pro", "math_l5"):  # LiveCodeBench first: its tau is carried to the others
        bench, free_tau = TABLES[name]
        (label, om), = outcome_matrices(read_per_query(DATA / f"{name}.csv.gz")).items()
        fit_om, held = split(om, seed)
        if len(fit_om.questions) > FIT_QUESTIONS_MAX:
            keep = np.sort(np.random.default_rng(seed + 1).choice(len(fit_om.questions), FIT_QUESTIONS_MAX, False))
            fit_om = OutcomeMatrix(fit_om.models, fit_om.questions[keep], fit_om.hits[keep], fit_om.samples[keep],
                                   fit_om.answer[keep])
        family = {m: f for m in om.models if (f := family_of(m))}
        cf = fit_correctness(fit_om, family, tau=None if free_tau else tau)
        if free_tau:
            tau = cf.tau
        has_answers = bool((fit_om.answer >= 0).any())
        af = fit_agreement(fit_om, chance_agreement(bench), family) if has_answers else None
        fits.append({"table": label, "questions": len(om.questions), "fit_questions": len(fit_om.questions),
                     "models": len(om.models), "fit": cf, "agreement": af})
        models = sorted(om.models)[:MAX_MODELS + 1]  # a pool holds MAX_MODELS models and the manager
        acc = np.nansum(fit_om.hits, 0) / np.maximum(fit_om.samples.sum(0), 1)
        spec = []
        for m in models:
            j = cf.models.index(m)
            aff = 0.0 if af is None else float(min(1.0, af.c(acc[j]) / KAPPA))
            fw = 0.0 if af is None or aff >= 1.0 else float(min(1.0, af.d / (KAPPA * (1.0 - aff))))
            spec.append(StructureModel(m, float(cf.theta[j]), cf.tau, KAPPA, aff, family.get(m), cf.share,
                                       fw if family.get(m) else 0.0))
        pool = parse_pool(structure_pool(base, bench, spec, "fit"))
        held_m = subset(held, models)
        n = [int(held_m.samples[:, j].max()) for j in range(len(models))]
        sim = simulated_outcomes(pool, bench, SIM_FACTOR * len(held.questions), n, models=models, sigma=cf.sigma,
                                 seed=seed)
        real_st, sim_st = matrix_statistics(held_m), matrix_statistics(sim)
        for stat, pairs in items(real_st, sim_st).items():
            r, s = np.array(pairs).T
            d = np.abs(s - r)
            share = float(np.mean(d <= TOLERANCES[stat]))
            rows.append({"table": label, "statistic": stat, "items": len(r), "real": float(r.mean()),
                         "sim": float(s.mean()), "mean_diff": float(d.mean()), "max_diff": float(d.max()),
                         "tol": TOLERANCES[stat], "share": share, "within": share >= SHARE_WITHIN,
                         "models": len(models), "held": len(held.questions)})
    return fits, rows


def _se(v: float, se: float) -> str:
    return f"{v:.3f} ± {se:.3f}" if math.isfinite(se) else f"{v:.3f} (fixed)"


def render(fits: list[dict], rows: list[dict], seed: int = SEED) -> str:
    out = [BEGIN, f"<!-- written by scripts/joint_structure.py --seed {seed}: edit the script, not this section -->",
           "", "#### Fitted structure", "",
           "Maximum-likelihood estimates on the fit half of each table (± Hessian SE; the agreement curve's SEs are "
           "the sandwich over questions). sigma: SD of the shared question difficulty; tau: SD of the per-(question, "
           "model) effect; w: the share of tau^2 a maker's models have in common; c(acc) = sigmoid(a0 + a1 logit acc) "
           "= kappa * affinity; d^2: the extra wrong-answer agreement of two models of one maker.", "",
           "| table | questions (fit) | models | sigma | tau | w | a0 | a1 | d |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for f in fits:
        c, a = f["fit"], f["agreement"]
        ag = ["—"] * 3 if a is None else [_se(a.a0, a.se[0]), _se(a.a1, a.se[1]), _se(a.d, a.se[2])]
        out.append(f"| {f['table']} | {f['questions']:,} ({f['fit_questions']:,}) | {f['models']} | "
                   f"{_se(c.sigma, c.sigma_se)} | {_se(c.tau, c.tau_se)} | {_se(c.share, c.share_se)} | "
                   + " | ".join(ag) + " |")
    out += ["", "#### Held-out questions: real against simulated", "",
            f"Per table and statistic: the items compared (models, pairs, triples, vote sizes, spread shares), their "
            f"mean real and simulated values, the mean and largest absolute difference, the tolerance fixed in advance "
            f"and the share of items within it; `within`: at least {SHARE_WITHIN:.0%} of the items are. Simulated "
            f"tables have {SIM_FACTOR}x the held-out questions and each model's real samples per question.", "",
            "| table | statistic | models | held-out questions | items | real | simulated | mean abs diff "
            "| max abs diff | tolerance | share within | within |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['table']} | {r['statistic']} | {r['models']} | {r['held']:,} | {r['items']} | "
                   f"{r['real']:.3f} | {r['sim']:.3f} | {r['mean_diff']:.3f} | {r['max_diff']:.3f} | {r['tol']:.2f} | "
                   f"{r['share']:.2f} | {'yes' if r['within'] else 'no'} |")
    out.append(END)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--update", type=Path, help="rewrite this file's section between the markers")
    args = ap.parse_args(argv)
    text = render(*run(args.seed), seed=args.seed)
    if args.update is None:
        print(text)
        return 0
    doc = args.update.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        print(f"{args.update}: markers {BEGIN} / {END} not found", file=sys.stderr)
        return 1
    head, rest = doc.split(BEGIN, 1)
    tmp = args.update.with_suffix(".tmp")
    tmp.write_text(head + text + rest.split(END, 1)[1], encoding="utf-8")
    tmp.replace(args.update)
    return 0


if __name__ == "__main__":
    sys.exit(main())
