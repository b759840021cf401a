"""Tool-level statistics of the shipped pools, simulated with the env's own per-call model, as Markdown tables.

Why a script: docs/simulator.md states what the simulator does to single calls (direct-call accuracy against each
pool's published targets, wrong-answer agreement between models, the per-query oracle and majority-vote gains,
output lengths against the generation cap, the latency of parallel calls). Every simulated figure on that page is
written here from ``parasim.calibration.simulate.simulated_calls`` (the kernel's own ``sample_call``) with fixed
seeds, each with its Monte Carlo standard error, and tests/test_simulator_doc.py re-simulates a smaller sample and
checks the page's figures against it within their joint error. A developer's generator, not part of the installed
package::

    python scripts/simulator_stats.py                             # print the section
    python scripts/simulator_stats.py --update docs/simulator.md  # rewrite it between the markers
"""
from __future__ import annotations

import argparse
import copy
import math
import re
import sys
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from parasim.calibration.simulate import simulated_calls
from parasim.pools.harness import truncation_share, with_harness
from parasim.pools.pool import (
    PoolSpec,
    accuracy_under_cap,
    load_pool,
    parse_pool,
    pool_file,
    read_pool_file,
)
from parasim.protocol.schema import Domain, Status, Tool
from parasim.sim.router_signal import (
    CALIBRATION_SEED,
    CALIBRATION_TASKS,
    ROUTER_CAPTURE,
    direct_calls,
    fit_rho,
    router_capture,
    router_choice,
)
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS, FREE_FORM, SUITES

BEGIN, END = "<!-- stats:begin -->", "<!-- stats:end -->"
POOLS = ("paramanager", "paramanager_mono", "toolorchestra", "openweight")
SUITE = "paramanager"  # the seven benchmarks every pool's accuracy table covers, in equal weights
BENCHES = SUITES[SUITE]
MULTIPLE_CHOICE = tuple(b for b in BENCHES if BENCHMARKS[BENCHMARK_INDEX[b]].options != FREE_FORM)
MAX_PARALLEL = 4
VOTES = (3, 5)
# Tasks per estimate at --scale 1 (each estimate's standard error is printed beside it).
SAMPLES = {"accuracy": 200_000, "agreement": 500_000, "oracle": 200_000, "vote": 200_000, "router": 100_000}
CHUNK_CALLS = 1_000_000  # calls per simulated_calls call (its buffers are about 170 bytes a call)
Z_TOLERANCE = 5.0  # a page figure and a fresh one may differ by this many joint standard errors
# Targets of the tool-level statistics and their tolerances (docs/simulator.md, section 6).
ACCURACY_TOLERANCE = 2.0  # points: each direct-call accuracy against its published target
RELATIVE_TOLERANCE = 0.2  # the other targeted statistics: 20% of the target
KIM_AGREEMENT = "about 60% on 4-option MMLU, 33% by chance (Kim et al. 2025)"
KIM_TARGET = 60.0  # % of two different models' wrong answers on a 4-option item that agree
ROUTERBENCH_ORACLE = "+29.9% over the best single model, 13 flagship models (LLMRouterBench)"
RHO_SEEDS, RHO_SEED_STEP = 5, 10**6  # other calibration samples for the router table's rho spread
ROUTERBENCH_ROUTER = "LLMRouterBench: best router +4-5% where the oracle gains +29.9%"
# The temperatures the two joint figures were measured at (found in session 10, before the pools carried the fit):
# Kim et al.'s answers are the HF leaderboard's log-likelihood scoring of the options (no sampling: 0);
# LLMRouterBench's 13 flagship models answered once each at 0.2 (ynulihao/LLMRouterBench,
# config/data_collector_proprietary_model_config.yaml: temperature 0.2, top_p 1.0). A pool that states its
# temperature is checked against each at the source's (``at_source_temperature``); one that states none as it is.
KIM_TEMPERATURE = 0.0
ROUTERBENCH_TEMPERATURE = 0.2
# The (pool, table) whose target the simulation misses, reported as missed (docs/simulator.md section 6.1 says by how
# much and why) rather than tuned away; the tests require every other target met. Session 11: the paramanager pool's
# per-query oracle gain at LLMRouterBench's 0.2, 17.3% against [17.6, 26.4], once the pool carried section 8's fit.
KNOWN_MISSES = frozenset({("paramanager", "Per-query oracle")})
# The per-pool oracle target (``oracle_target``): LLMRouterBench's 13-model gain, carried to a pool's size and
# accuracies through a Gaussian copula of per-query correctness fitted to it.
REF_MODELS, REF_GAIN = 13, 0.299
REF_CEILING = 0.975  # assumed: the 13-model oracle's accuracy (items no model solves, label noise)
REF_SPREAD = 0.15  # assumed: the 13 flagship models' accuracies fall evenly from the best by this much
_ETA, _ETA_W = np.polynomial.hermite_e.hermegauss(96)
_ETA_W = _ETA_W / _ETA_W.sum()
# Mean call latency shown to ToolOrchestra's orchestrator (source TOc); the pool's tokens/s are set from it.
TOC_MEAN_LATENCY_S = {"GPT-5": 96.0, "GPT-5-mini": 27.0, "Llama-3.3-70B-Instruct": 15.0, "Qwen3-32B": 11.0,
                      "Qwen2.5-Math-72B-Instruct": 13.0, "Qwen2.5-Math-7B-Instruct": 9.0,
                      "Qwen2.5-Coder-32B-Instruct": 9.0}
NO_TARGET = "no target in this pool"
MIN_TRUNCATION_TARGET = 1.0  # %: smaller truncation shares are shown but not targeted
CONCURRENCY = (1, 4, 10)  # concurrent requests on one server in the concurrency table
# Published per-request decode speed (tokens/s) by (latency source, concurrency): MSA, one H200 SXM, vLLM, a
# 3B-active MoE at 1K context: 210.8 single-request, and 5.6x that throughput at 10 concurrent requests.
PUBLISHED_SPEED = {("MSA", 1): 210.8, ("MSA", 10): 210.8 * 5.6 / 10}
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(48)
_SR = int(Tool.STANDARD_REASONER)


@dataclass(frozen=True)
class Estimate:
    """A simulated figure and its Monte Carlo standard error, printed as ``value ± se``."""

    value: float
    se: float

    def __str__(self) -> str:
        digits = 2 if self.se <= 0 else min(4, max(0, 1 - math.floor(math.log10(self.se))))  # two digits of se
        return f"{self.value:.{digits}f} ± {self.se:.{digits}f}"


@dataclass(frozen=True)
class Table:
    """A Markdown table with a heading and a note under it."""

    title: str
    note: str
    header: Sequence[str]
    rows: Sequence[Sequence[object]]

    def markdown(self) -> str:
        lines = [f"#### {self.title}", "", self.note, "", "| " + " | ".join(self.header) + " |",
                 "| " + " | ".join("---" for _ in self.header) + " |"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)


def share(x: np.ndarray) -> Estimate:
    """A percentage of a boolean sample, with the binomial standard error."""
    if x.size == 0:
        raise ValueError("share: empty sample (raise the sample size)")
    p = float(np.mean(x))
    return Estimate(100.0 * p, 100.0 * math.sqrt(p * (1.0 - p) / x.size))


def mean(x: np.ndarray, factor: float = 1.0) -> Estimate:
    """The mean of i.i.d. values (one per task), with its standard error."""
    if x.size < 2:
        raise ValueError("mean: fewer than two values (raise the sample size)")
    return Estimate(factor * float(np.mean(x)), factor * float(np.std(x, ddof=1)) / math.sqrt(x.size))


def ratio(a: np.ndarray, b: np.ndarray, factor: float = 1.0) -> Estimate:
    """mean(a) / mean(b) over paired per-task values, with the delta-method standard error."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    r = ma / mb
    cov = np.cov(a, b, ddof=1)
    var = (cov[0, 0] - 2.0 * r * cov[0, 1] + r * r * cov[1, 1]) / (mb * mb * a.size)
    return Estimate(factor * r, factor * math.sqrt(max(var, 0.0)))


def _seed(seed: int, key: str) -> int:
    """A stable seed per simulation, so that each table's figures do not depend on which others were computed."""
    return zlib.crc32(f"{seed}/{key}".encode())


def simulate(pool: PoolSpec, suite: str, n_tasks: int, per_task: int, tools: Sequence[str], models: Sequence[int],
             seed: int, key: str, fields: Sequence[str], load: int = 1) -> dict[str, np.ndarray]:
    """``simulated_calls`` in chunks of at most CHUNK_CALLS calls, keeping ``fields``, each shaped [n_tasks,
    per_task] (calls of one task share its difficulty and preferred wrong answers)."""
    per_chunk = max(1, CHUNK_CALLS // per_task)
    parts: list[dict[str, np.ndarray]] = []
    for c, start in enumerate(range(0, n_tasks, per_chunk)):
        cols = simulated_calls(pool, suite, n_tasks=min(per_chunk, n_tasks - start), calls_per_task=per_task,
                              tools=list(tools), models=list(models), load=load, seed=_seed(seed, f"{key}/{c}"))
        parts.append({f: cols[f] for f in fields})
    return {f: np.concatenate([p[f] for p in parts]).reshape(n_tasks, per_task) for f in fields}


def with_manager_callable(name: str) -> PoolSpec:
    """The pool with its manager also listed as a callable model (the last one): the manager's direct answer,
    the termination model's fallback when a trajectory has no evidence, uses the same p as a standard_reasoner
    call, so its accuracy is simulated as that model's calls."""
    raw = copy.deepcopy(read_pool_file(pool_file(name))[0])
    raw["models"].append(copy.deepcopy(raw["manager"]))
    return parse_pool(raw, name=name)


def expected_direct(pool: PoolSpec) -> np.ndarray:
    """Expected accuracy [model, benchmark of BENCHES] of one direct standard_reasoner call under the pool's
    generation cap (z integrated out, truncated calls wrong: ``parasim.pools.pool.accuracy_under_cap``)."""
    idx = [BENCHMARK_INDEX[b] for b in BENCHES]
    return accuracy_under_cap(pool, pool.max_output_tokens)[:-1][:, idx]


@dataclass(frozen=True)
class Target:
    """A target with its tolerance band [value - tolerance, value + tolerance]."""

    value: float
    tolerance: float

    def __str__(self) -> str:
        return f"{self.value:.1f} [{self.value - self.tolerance:.1f}, {self.value + self.tolerance:.1f}]"

    def met(self, estimate: Estimate) -> str:
        """``yes`` when the simulated value lies inside the band, else ``no``."""
        return "yes" if abs(estimate.value - self.value) <= self.tolerance else "no"


def copula_oracle(acc: np.ndarray, r: float) -> float:
    """P(at least one of the models is right) when model m is right on a query iff sqrt(r) eta + sqrt(1 - r) eps_m
    < Phi^-1(acc_m), eta shared by the query, eps_m its own: per-query correctness with pairwise latent
    correlation r and the given accuracies (``acc``: [M])."""
    t = norm.ppf(np.clip(acc, 1e-9, 1 - 1e-9))
    wrong = norm.sf((t[:, None] - math.sqrt(r) * _ETA[None, :]) / math.sqrt(1.0 - r))
    return float(1.0 - (np.prod(wrong, 0) * _ETA_W).sum())


def reference_correlation() -> float:
    """The latent correlation r at which REF_MODELS models, the best at A = REF_CEILING / (1 + REF_GAIN) and the
    others evenly down to A - REF_SPREAD, have a per-query oracle REF_GAIN above the best (LLMRouterBench)."""
    best = REF_CEILING / (1.0 + REF_GAIN)
    acc = np.linspace(best, best - REF_SPREAD, REF_MODELS)
    return brentq(lambda r: copula_oracle(acc, r) / best - 1.0 - REF_GAIN, 1e-4, 1 - 1e-4)


def oracle_target(pool: PoolSpec) -> Target:
    """The relative oracle gain (%) LLMRouterBench implies for this pool: the copula at ``reference_correlation``
    with the pool's own direct-call accuracies, benchmark by benchmark, over its best single model."""
    acc = expected_direct(pool)
    r = reference_correlation()
    best = int(np.argmax(acc.mean(1)))
    oracle = np.mean([copula_oracle(acc[:, b], r) for b in range(acc.shape[1])])
    gain = 100.0 * (oracle / acc[best].mean() - 1.0)
    return Target(gain, RELATIVE_TOLERANCE * gain)


def implied_cross_agreement(pool: PoolSpec, bench: int) -> float:
    """The cross-model wrong-answer agreement (%) the pool's parameters imply on a benchmark, averaged over model
    pairs: c_m c_m' + (1 - c_m c_m') S with c = kappa * affinity (``parasim.calibration.agreement``)."""
    b = BENCHMARKS[bench]
    s = _zipf_sq(b.options, b.zipf_s)
    c = (pool.kappa * pool.affinity)[:-1]
    pairs = [c[m] * c[n] for m in range(len(c)) for n in range(len(c)) if m != n]
    return 100.0 * float(np.mean([x + (1.0 - x) * s for x in pairs])) if pairs else math.nan


def source_table(name: str) -> Table:
    """Which source keys each parameter group of the pool file cites, with how many models or tools cite each."""
    groups: dict[str, Counter] = {}
    for path, src in load_pool(name).sources.items():
        owner, _, rest = path.partition(".")
        if owner.startswith("models["):
            group = f"models[*].{rest.split('.')[0]}"
        elif owner == "manager":
            group = f"manager.{rest.split('.')[0]}"
        elif owner == "tools":
            group = f"tools.*.{rest.split('.')[1]}"
        else:
            group = owner
        groups.setdefault(group, Counter())[src] += 1
    rows = [(f"`{g}`", ", ".join(f"{s} x{n}" for s, n in sorted(c.items()))) for g, c in sorted(groups.items())]
    return Table("Parameter sources", "Source keys cited by each parameter group of the pool file (`x N`: how many "
                 "models, benchmarks or tools cite it; `accuracy` counts targets). Keys are described above.",
                 ("group", "sources"), rows)


def truncation_target(pool: PoolSpec, m: int, bench: str) -> float:
    """The share (%) of direct calls of model ``m`` on ``bench`` that the pool's output-token distribution puts past
    its generation cap: E_z[P(T > cap | z)], z ~ N(mu_b, sigma_b) (``parasim.pools.harness.truncation_share``)."""
    b = BENCHMARKS[BENCHMARK_INDEX[bench]]
    z = b.mu + math.sqrt(2.0) * b.sigma * _GH_X
    cut = truncation_share(pool.max_output_tokens, pool.tok_mu[_SR, m, b.domain], pool.tok_alpha[_SR, m],
                           pool.tok_sd[_SR, m], z)
    return 100.0 * float((cut * _GH_W).sum() / math.sqrt(math.pi))


def accuracy_tables(name: str, scale: float, seed: int) -> tuple[Table, Table]:
    """Direct-call accuracy against the pool's targets corrected to its harness, and the share of calls truncated at
    the generation cap against the share the token distributions imply, from the same calls."""
    pool = with_manager_callable(name)
    n = _n("accuracy", scale)
    harness = accuracy_under_cap(pool, pool.max_output_tokens)
    acc_rows, cap_rows = [], []
    for m, model in enumerate(pool.model_names[:-1]):
        manager = m == pool.num_models - 1
        acc_row: list[object] = [f"{model} (manager)" if manager else model]
        cap_row: list[object] = [model]
        cut, timeouts = [], []
        within = cap_within = True
        for b in BENCHES:
            calls = simulate(pool, b, n, 1, ["standard_reasoner"], [m], seed, f"{name}/accuracy/{model}/{b}",
                             ("correct", "status"))
            bi = BENCHMARK_INDEX[b]
            target = pool.accuracy_target[m, bi]
            simulated = share(calls["correct"] == 1)  # of all calls: a truncated call has no answer, so it is wrong
            published = "—" if math.isnan(target) else (
                f"{100 * target:.1f}" + ("" if math.isinf(pool.accuracy_cap[m, bi]) else
                                         f" @{pool.accuracy_cap[m, bi] / 1024:g}k"))
            corrected = "" if math.isnan(target) else f" → {100 * harness[m, bi]:.1f}"
            acc_row.append(f"{published}{corrected} / {simulated}")
            within &= math.isnan(target) or abs(simulated.value - 100 * harness[m, bi]) <= ACCURACY_TOLERANCE
            was_cut = calls["status"] == Status.TRUNCATED
            cut.append(was_cut)
            timeouts.append(calls["status"] == Status.TIMEOUT)
            expected = truncation_target(pool, m, b)
            got = share(was_cut)
            if expected >= MIN_TRUNCATION_TARGET:
                cap_within &= abs(got.value - expected) <= RELATIVE_TOLERANCE * expected
                cap_row.append(f"{expected:.2f} / {got}")
            else:
                cap_row.append(f"({expected:.3f}) / {got}")
        acc_rows.append(acc_row + ["yes" if within else "no"])
        if not manager:
            src = pool.sources.get(f"models[{m}].tokens_out", "assumed")
            cap_rows.append(cap_row + [share(np.concatenate(cut)), share(np.concatenate(timeouts)), src,
                                       "yes" if cap_within else "no"])
    acc = Table("Direct-call accuracy",
                "Published / harness-corrected / simulated accuracy (%) of one `standard_reasoner` call on a fresh "
                f"question ({n:,} tasks per cell, ± one standard error), truncated calls counted wrong. The published "
                "figure was measured at its source's own setting (`@16k`: under a 16,384-token cap; no suffix: "
                "uncapped), the skill is solved there, and the arrow gives the accuracy that skill has under this "
                f"pool's {pool.max_output_tokens:,.0f}-token cap (section 2.2): the target the simulation is checked "
                f"against. `—`: {NO_TARGET}; the skill is then the model's per-domain skill. The manager row is its "
                "own direct answer, the termination model's fallback when a trajectory has no evidence. `within`: "
                f"every targeted cell of the row within {ACCURACY_TOLERANCE:g} points of its corrected target.",
                ("model", *BENCHES, "within"), acc_rows)
    cap = Table(f"Truncation under the {pool.max_output_tokens:,.0f}-token cap",
                "Target / simulated share (%) of `standard_reasoner` calls TRUNCATED at the pool's "
                "`max_output_tokens`: the target is the share the model's output-token distribution implies "
                "(E_z P(T > cap | z), quadrature), whose source is the `tokens_out` column; shares below "
                f"{MIN_TRUNCATION_TARGET:g}% are shown in parentheses and not targeted (the 20% band is then inside "
                "the sampling error). `all`: over the seven benchmarks; `timeouts`: calls that timed out first. "
                "`within`: every targeted cell within 20% of its target.",
                ("model", *BENCHES, "all", "timeouts", "tokens_out", "within"), cap_rows)
    return acc, cap


def _zipf_sq(options: int, s: float) -> float:
    """sum_j q_j^2 of the Zipf(s) distractor weights over the options - 1 wrong answers (``tables.build_tables``)."""
    w = np.arange(1, options, dtype=np.float64) ** -s
    q = w / w.sum()
    return float((q * q).sum())


def wrong_answer_agreement(pool: PoolSpec, bench: str, n: int, seed: int,
                           key: str) -> tuple[Estimate | None, Estimate]:
    """When two ``standard_reasoner`` calls on one task of ``bench`` both answer wrong, the share that picked the
    same wrong option: for two different pool models (None for a pool of one model) and for two calls of one model
    (``n`` tasks of two calls, models drawn uniformly)."""
    calls = simulate(pool, bench, n, 2, ["standard_reasoner"], range(pool.num_models), seed, key,
                     ("correct", "answer", "model"))
    both_wrong = (calls["correct"] == 0).all(1)
    same_answer = calls["answer"][:, 0] == calls["answer"][:, 1]
    same_model = calls["model"][:, 0] == calls["model"][:, 1]
    cross = share(same_answer[both_wrong & ~same_model]) if pool.num_models > 1 else None
    return cross, share(same_answer[both_wrong & same_model])


def at_source_temperature(pool: PoolSpec, temperature: float) -> tuple[PoolSpec, str]:
    """The pool sampled at the temperature a published figure was measured at, where the pool states its own
    (``harness.temperature``), and the table's label for it; a pool that states none is taken as it is."""
    if pool.sampling.temperature is None:
        return pool, "the pool's (none stated)"
    return with_harness(pool, {"temperature": temperature}), f"{temperature:g} (the source's)"


def agreement_table(name: str, scale: float, seed: int) -> Table:
    """How often two erring calls on one multiple-choice task pick the same wrong option, at the pool's temperature
    and, where a target applies, at the temperature its source measured at."""
    pool = load_pool(name)
    n = _n("agreement", scale)
    rows = []
    for b in MULTIPLE_CHOICE:
        bench = BENCHMARKS[BENCHMARK_INDEX[b]]
        cross_est, same_est = wrong_answer_agreement(pool, b, n, seed, f"{name}/agreement/{b}")
        cross = "no pair (one model)" if cross_est is None else cross_est
        target = Target(KIM_TARGET, RELATIVE_TOLERANCE * KIM_TARGET) if bench.options == 4 else None
        at_t, there = "—", "—"
        if target is not None and cross_est is not None:
            source, at_t = at_source_temperature(pool, KIM_TEMPERATURE)
            there = cross_est if source is pool else \
                wrong_answer_agreement(source, b, n, seed, f"{name}/agreement/{b}/source")[0]
        met = "—" if isinstance(there, str) else target.met(there)
        implied = implied_cross_agreement(pool, BENCHMARK_INDEX[b])
        rows.append((b, bench.options, f"{100 / (bench.options - 1):.1f}", cross,
                     "—" if math.isnan(implied) else f"{implied:.1f}",
                     f"{100 * _zipf_sq(bench.options, bench.zipf_s):.1f}", same_est, at_t, there,
                     NO_TARGET if target is None else str(target), met,
                     KIM_AGREEMENT if bench.options == 4 else NO_TARGET))
    return Table("Wrong-answer agreement",
                 "When two `standard_reasoner` calls on one task both answer wrong, the share (%) that picked the same "
                 f"wrong option: two different pool models, and two calls of one model ({n:,} tasks of two calls, "
                 "models drawn uniformly), at the pool's temperature. `implied`: the cross-model value the pool's "
                 "kappa and affinity imply (c c' + (1 - c c') S, c = kappa * affinity, averaged over model pairs); "
                 "`S`: sum_j q_j^2 of the task's distractor weights, the value without a shared distractor; "
                 "`target`: the published cross-model figure with its tolerance "
                 f"({100 * RELATIVE_TOLERANCE:g}% of it), checked at the temperature its source measured at "
                 f"(`target at`: Kim et al.'s log-likelihood scoring, {KIM_TEMPERATURE:g}, for a pool that states "
                 "its temperature; `harness.temperature`) and `within`: whether the cross-model value there "
                 "(`cross-model there`) lies inside it.",
                 ("benchmark", "options", "chance", "cross-model", "implied", "S", "same model", "target at",
                  "cross-model there", "target", "within", "published"), rows)


def direct_outcomes(pool: PoolSpec, n: int, seed: int, key: str) -> tuple[np.ndarray, np.ndarray]:
    """One direct ``standard_reasoner`` call of every pool model on each of up to ``n`` tasks of SUITE: (right
    [tasks, model], no answer counting as wrong; each task's benchmark, as an index into BENCHES). Models are drawn
    per call, so a task keeps each model's first call and tasks missing one are dropped."""
    m = pool.num_models
    calls = simulate(pool, SUITE, n, 6 * m, ["standard_reasoner"], range(m), seed, key,
                     ("model", "correct", "benchmark"))
    first = np.stack([np.argmax(calls["model"] == j, axis=1) for j in range(m)], 1)
    keep = (np.take_along_axis(calls["model"], first, 1) == np.arange(m)).all(1)
    right = np.take_along_axis(calls["correct"], first, 1)[keep] == 1
    return right, np.array([BENCHES.index(BENCHMARKS[i].name) for i in calls["benchmark"][keep, 0]])


def oracle_gain(right: np.ndarray, best: int) -> Estimate:
    """The per-query oracle's relative gain (%) over model ``best`` from ``direct_outcomes``' right [tasks, model]."""
    single = right[:, best].astype(float)
    return ratio(right.any(1).astype(float) - single, single, 100.0)


def oracle_table(name: str, scale: float, seed: int) -> Table:
    """Per-query oracle over the pool's models (one direct call each) against the best single model."""
    pool = load_pool(name)
    m = pool.num_models
    if m == 1:
        return Table("Per-query oracle", f"One model: the oracle is that model ({NO_TARGET}).",
                     ("best single model", "oracle"), [(pool.model_names[0], "the same model")])
    right, bench = direct_outcomes(pool, _n("oracle", scale), seed, f"{name}/oracle")
    expected = expected_direct(pool)
    best = int(np.argmax(expected.mean(1)))
    single = right[:, best].astype(float)
    per_bench = right[np.arange(len(bench)), np.argmax(expected, 0)[bench]].astype(float)
    oracle = right.any(1).astype(float)
    gain = oracle_gain(right, best)
    source, at_t = at_source_temperature(pool, ROUTERBENCH_TEMPERATURE)
    target = oracle_target(source)
    if source is pool:
        there = gain
    else:
        there = oracle_gain(direct_outcomes(source, _n("oracle", scale), seed, f"{name}/oracle/source")[0],
                            int(np.argmax(expected_direct(source).mean(1))))
    return Table("Per-query oracle",
                 f"Accuracy (%) on the `{SUITE}` suite (its seven benchmarks in equal weights) of one direct call per "
                 f"model ({len(right):,} tasks): the best single model by expected accuracy, the best model of "
                 "each benchmark (a router that knows the benchmark), and the per-query oracle (right when any model "
                 "is right), at the pool's temperature; the gain is the oracle's over the best single model, in "
                 "points and relative. `target`: the relative gain LLMRouterBench's figure implies for this pool's "
                 f"models (`oracle_target`, section 6.1) with its tolerance ({100 * RELATIVE_TOLERANCE:g}% of it), "
                 "checked at the temperature its source sampled at (`target at`: LLMRouterBench's "
                 f"{ROUTERBENCH_TEMPERATURE:g} for a pool that states its temperature; `harness.temperature`), where "
                 "the relative gain is `gain there`.",
                 ("best single model", "single", "best per benchmark", "oracle", "gain (points)", "gain (relative %)",
                  "target at", "gain there (relative %)", "target", "within", "published"),
                 [(pool.model_names[best], mean(single, 100.0), mean(per_bench, 100.0), mean(oracle, 100.0),
                   mean(oracle - single, 100.0), gain, at_t, there, str(target), target.met(there),
                   ROUTERBENCH_ORACLE)])


def router_table(name: str, scale: float, seed: int) -> Table:
    """The router signal (``parasim.sim.router_signal``; docs/simulator.md section 2.3) of the pool: its calibrated
    rho and reading weight, and on fresh tasks the accuracy of a router without and with it against the best single
    model and the per-query oracle."""
    calib = direct_calls(name, SUITE)  # the calibration's own tasks and seed: rho and k do not depend on ``seed``
    rho = fit_rho(calib)
    shrink = router_capture(calib, rho).shrink
    # how far the calibration's own task sample moves rho: the same fit on RHO_SEEDS other calibration samples
    others = [fit_rho(direct_calls(name, SUITE, seed=CALIBRATION_SEED + (k + 1) * RHO_SEED_STEP))
              for k in range(RHO_SEEDS)]
    calls = direct_calls(name, SUITE, _n("router", scale), seed=seed + 1)
    right = calls.right.astype(float)
    rows = np.arange(len(right))
    single = right[:, int(np.argmax(right.mean(0)))]
    per_bench = right[rows, router_choice(calls, 0.0)]
    router = right[rows, router_choice(calls, rho, shrink)]
    oracle = right.max(1)
    gain = oracle - single
    capture = (lambda x: ratio(x - single, gain, 100.0)) if gain.any() else (lambda x: NO_TARGET)
    return Table("Router signal",
                 f"The `router` observation key's calibration (`router_signal=\"calibrated\"`): rho, the signal's "
                 f"correlation with each model's standardized per-task effect, set so that the router reading it "
                 f"best (the model maximizing logit(its accuracy on the benchmark) + k rho tau s, k the best weight) "
                 f"captures {100 * ROUTER_CAPTURE:g}% of the per-query oracle's gain over the best single model on "
                 f"{CALIBRATION_TASKS:,} tasks, or 0 where the best model of each benchmark already captures that "
                 f"much (`rho elsewhere`: mean ± SD of the same fit on {RHO_SEEDS} other samples of as many tasks, "
                 f"how far the calibration's own sample moves it); then on {len(right):,} fresh tasks (one direct call "
                 f"per model, the pool's temperature) the "
                 "accuracy (%) of the best single model, of the best model per benchmark (no signal), of that "
                 "router and of the oracle, and the share of the oracle's gain each router captures.",
                 ("rho", "rho elsewhere", "k", "best single", "best per benchmark", "router with the signal", "oracle",
                  "captured without (%)", "captured with (%)", "published"),
                 [(f"{rho:.3f}", f"{np.mean(others):.3f} (SD {np.std(others, ddof=1):.3f})", f"{shrink:.2f}",
                   mean(single, 100.0), mean(per_bench, 100.0), mean(router, 100.0),
                   mean(oracle, 100.0), capture(per_bench), capture(router), ROUTERBENCH_ROUTER)])


def vote_and_latency_tables(name: str, scale: float, seed: int) -> tuple[Table, Table]:
    """Majority votes over same-model samples, and the latency of rounds of parallel calls, from the same calls."""
    pool = load_pool(name)
    n = _n("vote", scale)
    k_max = max(*VOTES, MAX_PARALLEL)
    vote_rows, lat_rows = [], []
    for m, model in enumerate(pool.model_names[:-1]):
        calls = simulate(pool, SUITE, n, k_max, ["standard_reasoner"], [m], seed, f"{name}/vote/{model}",
                         ("correct", "answer", "latency_s", "benchmark"))
        ens = simulate(pool, SUITE, n, 1, ["ensemble_solver"], [m], seed, f"{name}/ensemble/{model}", ("correct",))
        single = (calls["correct"][:, 0] == 1).astype(float)
        votes = [plurality_right(calls["answer"][:, :k]).astype(float) for k in VOTES]
        vote_rows.append([model, mean(single, 100.0), *(mean(v, 100.0) for v in votes),
                          *(mean(v - single, 100.0) for v in votes), share(ens["correct"][:, 0] == 1)])
        lat = calls["latency_s"]
        rounds = [lat[:, 0]] + [simulate(pool, SUITE, n, k, ["standard_reasoner"], [m], seed,
                                         f"{name}/round/{model}/{k}", ("latency_s",), load=k)["latency_s"].max(1)
                                for k in range(2, MAX_PARALLEL + 1)]
        math_tasks = np.array([BENCHMARKS[b].domain == Domain.MATH for b in calls["benchmark"][:, 0]])
        published = TOC_MEAN_LATENCY_S.get(model) if pool.sources.get(f"models[{m}].latency") == "TOc" else None
        lat_rows.append([model, *(mean(r) for r in rounds), ratio(rounds[-1], rounds[0]), mean(lat[:, :MAX_PARALLEL]
                         .sum(1)), mean(lat[math_tasks, 0]), NO_TARGET if published is None else f"{published:g}"])
    votes_table = Table("Majority vote",
                        f"Accuracy (%) on the `{SUITE}` suite of one `standard_reasoner` call and of the plurality "
                        f"of {' and '.join(map(str, VOTES))} calls of the same model on the same task (ties to the "
                        "earliest sample, as `ensemble_solver` votes), the gains in points, and the simulated "
                        f"`ensemble_solver` (k = {pool.ensemble_k}) itself ({n:,} tasks). {NO_TARGET.capitalize()}.",
                        ("model", "single", *(f"vote@{k}" for k in VOTES), *(f"gain@{k}" for k in VOTES),
                         "ensemble_solver"), vote_rows)
    lat_table = Table("Latency of parallel calls",
                      f"Mean round latency (s) of 1..{MAX_PARALLEL} parallel `standard_reasoner` calls of one model on "
                      "one task (the slowest call: the critical path), its ratio to one call, the serial sum of "
                      f"{MAX_PARALLEL} calls, the mean latency of one call on math tasks and the published mean call "
                      "latency the pool's speed was set from (TOc). The k calls of a round share the model's server "
                      "(k concurrent requests on one replica), so a self-hosted model decodes each more slowly; an API "
                      "model's calls are as fast in a round of four as alone.",
                      ("model", *(f"{k} call{'s' * (k > 1)}" for k in range(1, MAX_PARALLEL + 1)),
                       f"{MAX_PARALLEL} / 1", f"serial {MAX_PARALLEL}", "math call", "published mean"), lat_rows)
    return votes_table, lat_table


def decode_speed(lat: np.ndarray, tokens: np.ndarray, base: float, jitter_mean: float) -> Estimate:
    """Per-request decode speed (tokens / s) of simulated calls: mean tokens over the mean latency less the fixed
    part (TTFT plus overhead, times the jitter's mean exp(s^2 / 2)), with a delta-method standard error."""
    decode = lat - base * jitter_mean
    return ratio(tokens, decode)


def concurrency_table(name: str, scale: float, seed: int) -> Table:
    """Per-request decode speed against the number of concurrent requests on one server, simulated (calls made with
    that server load) against the published serving curve the pool's speed and slope were taken from."""
    pool = load_pool(name)
    n = _n("vote", scale)
    rows = []
    for m, model in enumerate(pool.model_names[:-1]):
        dep, beta = pool.deployments[m], float(pool.lat_slope[_SR, m])
        base = float(pool.lat_base[_SR, m])
        jitter = math.exp(float(pool.lat_sd[_SR, m]) ** 2 / 2)
        speed1 = 1.0 / float(pool.lat_per_tok[_SR, m])
        row: list[object] = [model, "self-hosted, " + f"{dep.gpu} x{dep.gpus_per_replica}, {dep.replicas} replica"
                             f"{'s' * (dep.replicas > 1)}" if dep.self_hosted else "API"]
        within = True
        for c in CONCURRENCY:
            calls = simulate(pool, SUITE, n, 1, ["standard_reasoner"], [m], seed, f"{name}/concurrency/{model}/{c}",
                             ("latency_s", "tokens_out", "status"), load=c)
            ran = calls["status"][:, 0] != Status.TIMEOUT
            got = decode_speed(calls["latency_s"][ran, 0], calls["tokens_out"][ran, 0], base, jitter)
            target = speed1 / (1.0 + beta * (c - 1))
            published = PUBLISHED_SPEED.get((pool.sources.get(f"models[{m}].latency"), c)) if dep.self_hosted \
                else None
            if published is not None:
                within &= abs(got.value - published) <= RELATIVE_TOLERANCE * published
            row.append(f"{target:.1f} / {got}")
        src = pool.sources.get(f"models[{m}].latency", "assumed")
        rows.append(row + [f"{beta:g}", src, "yes" if within else "no"])
    return Table("Latency against concurrency",
                 "Per-request decode speed (tokens/s) of one call with c concurrent requests on its model's server "
                 "(a round's calls to the model, ceil(n / replicas)): the pool's curve s1 / (1 + beta (c - 1)) / "
                 f"simulated ({n:,} calls each: mean tokens over mean latency less TTFT and overhead). The published "
                 "points it is checked against (`within`, 20%): MSA's single request 210.8 tokens/s and 5.6x that "
                 "throughput at 10 concurrent requests (118.0 tokens/s per request) on one H200 with vLLM. API "
                 "models keep their provider's speed at any concurrency.",
                 ("model", "deployment", *(f"c = {c}" for c in CONCURRENCY), "beta", "latency source", "within"), rows)


def plurality_right(answers: np.ndarray) -> np.ndarray:
    """Whether the plurality answer of each row is the gold answer 0; -1 (no answer) never votes, ties go to the
    earliest sample, a row with no answer at all is wrong."""
    valid = answers >= 0
    counts = ((answers[:, :, None] == answers[:, None, :]) & valid[:, None, :]).sum(2) * valid
    pick = np.take_along_axis(answers, counts.argmax(1)[:, None], 1)[:, 0]
    return valid.any(1) & (pick == 0)


def suite_table() -> Table:
    """The benchmarks' task parameters (``parasim.tasks.suites.BENCHMARKS``: fitted or assumed)."""
    rows = []
    for b in BENCHES:
        bb = BENCHMARKS[BENCHMARK_INDEX[b]]
        rows.append((b, bb.domain.name.lower(), "free-form" if bb.options == FREE_FORM else bb.options, f"{bb.mu:g}",
                     f"{bb.sigma:g}", f"{bb.zipf_s:g}", f"{bb.question_tokens:g}"))
    return Table("Task suite", "The `paramanager` suite's benchmarks (equal weights), from "
                 "`parasim.tasks.suites.BENCHMARKS`: sigma_b of the math, MMLU-Pro and LiveCodeBench rows and the "
                 "math rows' Zipf s from section 8's fit (PQ), every other value assumed.",
                 ("benchmark", "domain", "options", "mu_b", "sigma_b", "Zipf s", "question tokens"), rows)


def misses(text: str) -> list[tuple[str, str, str]]:
    """(pool, table title, line) of every table line of a generated section whose `within` column says ``no``."""
    out, within, pool, title = [], None, "", ""
    for line in text.splitlines():
        if line.startswith("### Pool `"):
            pool = line.split("`")[1]
        elif line.startswith("#### "):
            title = line[5:].strip()
        if not line.startswith("|"):
            within = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if within is None:
            within = cells.index("within") if "within" in cells else -1
        elif within >= 0 and cells[within] == "no":
            out.append((pool, title, line))
    return out


def unmet(text: str) -> list[str]:
    """The table lines of a generated section whose `within` column says ``no``."""
    return [line for _, _, line in misses(text)]


def _n(stat: str, scale: float) -> int:
    return max(2, round(SAMPLES[stat] * scale))


def section(scale: float = 1.0, seed: int = 0) -> str:
    """The generated part of docs/simulator.md (without its markers)."""
    if not scale > 0:
        raise ValueError(f"scale: expected a positive number, got {scale!r}")
    parts = [f"<!-- written by scripts/simulator_stats.py --seed {seed} --scale {scale:g}: edit the script, "
             "not this section -->", suite_table().markdown()]
    for name in POOLS:
        acc, cap = accuracy_tables(name, scale, seed)
        votes, lat = vote_and_latency_tables(name, scale, seed)
        parts += [f"### Pool `{name}`", source_table(name).markdown(), acc.markdown(),
                  agreement_table(name, scale, seed).markdown(), oracle_table(name, scale, seed).markdown(),
                  router_table(name, scale, seed).markdown(),
                  votes.markdown(), cap.markdown(), lat.markdown(), concurrency_table(name, scale, seed).markdown()]
    return "\n\n".join(parts) + "\n"


def extract_section(text: str) -> str:
    """The text between the markers; ``ValueError`` when they are missing or out of order."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"expected a section between {BEGIN!r} and {END!r}")
    return text[start + len(BEGIN):end].strip("\n") + "\n"


def replace_section(text: str, new: str) -> str:
    """``text`` with its marked section replaced by ``new``."""
    extract_section(text)
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + new + text[end:]


_ESTIMATE = re.compile(r"(-?\d+(?:\.\d+)?) ± (\d+(?:\.\d+)?)")


def _estimates(line: str) -> tuple[str, list[tuple[float, float, float]]]:
    """A table line with its estimates replaced by ``#``, and each estimate's (value, se, rounding step)."""
    found = [(float(v), float(s), 10.0 ** -len(v.partition(".")[2])) for v, s in _ESTIMATE.findall(line)]
    return _ESTIMATE.sub("#", line), found


def compare_sections(page: str, fresh: str, z: float = Z_TOLERANCE) -> list[str]:
    """Differences between a page's section and a fresh simulation's: headings and table text must be equal, and
    every ``value ± se`` within ``z`` joint standard errors (plus rounding) of the fresh one. Notes and the
    settings comment are not compared (they name sample sizes)."""

    def lines(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if ln.startswith(("|", "#"))]

    a, b = lines(page), lines(fresh)
    if len(a) != len(b):
        return [f"the page has {len(a)} heading and table lines, a fresh simulation {len(b)}"]
    problems = []
    for la, lb in zip(a, b, strict=True):
        ta, ea = _estimates(la)
        tb, eb = _estimates(lb)
        if ta != tb or len(ea) != len(eb):
            problems.append(f"text differs:\n  page:  {la}\n  fresh: {lb}")
            continue
        for (va, sa, ra), (vb, sb, rb) in zip(ea, eb, strict=True):
            if abs(va - vb) > z * math.hypot(sa, sb) + (ra + rb) / 2:
                problems.append(f"{va} ± {sa} on the page vs {vb} ± {sb} fresh, in: {la}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", type=Path, help="rewrite this file's section between the stats markers")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every sample size (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    args = parser.parse_args(argv)
    text = section(args.scale, args.seed)
    if args.update is None:
        sys.stdout.write(text)
    else:
        args.update.write_text(replace_section(args.update.read_text(), text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
