"""``parasim calibrate`` on per-query outcomes: an lm-eval samples folder, a plain table (the shipped LiveCodeBench
rows), and the errors of a per-query input."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_log_fixtures import readme_example

from parasim.calibration.per_query import make_table, read_per_query, write_table
from parasim.calibration.per_query_fit import per_query_calls
from parasim.cli import main
from parasim.pools.pool import load_pool

DATA = Path(__file__).resolve().parents[1] / "parasim" / "calibration" / "data"


def test_lm_eval_folder_fits_skills_in_the_models_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme_example(tmp_path / "lm")
    out, report = tmp_path / "pool.json", tmp_path / "report.json"
    assert main(["calibrate", str(tmp_path / "lm"), "--domain", "arith_gen=math", "--domain", "quiz_mc=knowledge",
                 "-o", str(out), "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "read 240 per-query rows (lm_eval): 3 models, 2 benchmarks" in printed
    pool = load_pool(str(out))
    assert {"org/model-small", "org/model-mid", "org/model-big"} <= set(pool.model_names)
    params = {p["name"]: p["estimate"] for p in json.loads(report.read_text())["parameters"]}
    for dom in ("generic_math", "generic_knowledge"):
        s = [params[f"skill[org/model-{m},{dom}]"] for m in ("small", "mid", "big")]
        assert s[0] < s[1] < s[2], (dom, s)


def test_repeated_samples_fit_the_interaction_sd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LiveCodeBench's 10-sample pass rates identify each model's interaction sd (tau): the fit frees it."""
    lcb = read_per_query(DATA / "livecodebench.csv.gz")
    keep = np.isin(lcb.model, ["GPT-4O-2024-05-13", "Claude-3-Haiku"]) & np.isin(
        lcb.question, np.unique(lcb.question)[:60])
    path = write_table(lcb.select(keep), tmp_path / "lcb.csv.gz")
    calls = per_query_calls(read_per_query(path))
    assert len(calls) == int(lcb.n_samples[keep].sum()) and calls.correct.sum() == lcb.successes[keep].sum()
    out, report = tmp_path / "pool.json", tmp_path / "report.json"
    assert main(["calibrate", str(path), "-o", str(out), "--report", str(report)]) == 0
    labels = {p["name"] for p in json.loads(report.read_text())["parameters"]}
    assert {"interaction_sd[GPT-4O-2024-05-13]", "interaction_sd[Claude-3-Haiku]"} <= labels, labels
    # the base pool's models carry families and kinds (its fitted structure); the calibration fit has none, so the
    # fitted models' interaction groups hold their own sd only, not the base's shares under another model's family
    raw = json.loads(out.read_text())
    fitted = [m for m in raw["models"] if m["name"] in ("GPT-4O-2024-05-13", "Claude-3-Haiku")]
    assert len(fitted) == 2 and all(set(m["interaction"]) == {"sd", "source"} for m in fitted), fitted
    assert "family" in json.loads((DATA.parent.parent / "pools" / "files" / "paramanager.json").read_text())[
        "models"][0]["interaction"]


def test_answers_and_pass_rates_become_calls() -> None:
    t = make_table(model=["a", "b"], question=["q", "q"], benchmark=["MMLU-Pro", "MMLU-Pro"], correct=[0.0, 0.5],
                   n_samples=[1, 4], answer=["C", ""])
    calls = per_query_calls(t)
    assert len(calls) == 5 and calls.correct.tolist() == [0, 1, 1, 0, 0]
    assert calls.answer[0] >= 0 and (calls.answer[1:] == -1).all()  # one known answer; pass rates carry none
    assert calls.task_ids == ("MMLU-Pro/q",)


def _one_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("parasim calibrate: error: "), err
    return lines[0]


def test_per_query_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme_example(tmp_path / "lm")
    assert main(["calibrate", str(tmp_path / "lm"), "-o", str(tmp_path / "p.json")]) == 2
    assert "benchmark(s) ['arith_gen', 'quiz_mc'] are not in the task catalogue" in _one_error(capsys.readouterr().err)
    assert main(["calibrate", str(tmp_path / "lm"), "--domain", "arith_gen=maths", "-o", "p.json"]) == 2
    assert "expected one of ['math', 'science', 'knowledge', 'code'], got 'maths'" in _one_error(
        capsys.readouterr().err)
    assert main(["calibrate", str(tmp_path / "lm"), "--domain", "arith_gen", "-o", "p.json"]) == 2
    assert "expected BENCHMARK=DOMAIN" in _one_error(capsys.readouterr().err)
    (tmp_path / "calls.jsonl").write_text("{}\n")
    assert main(["calibrate", str(tmp_path / "calls.jsonl"), "--metric", "acc", "-o", "p.json"]) == 2
    assert "reads as a call log" in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "p.json").exists()


def test_a_table_of_more_models_than_a_pool_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped MATH-L5 table has 23 models: with the base pool's 3 that is more than a pool's 16, said before
    any fit; --models selects; an unknown name is an error."""
    math = str(DATA / "math_l5.csv.gz")
    assert main(["calibrate", math, "--domain", "MATH-L5=math", "-o", str(tmp_path / "p.json")]) == 2
    assert "23 models beside the base pool's 3: a pool holds at most 16; select at most 13" in _one_error(
        capsys.readouterr().err)
    assert main(["calibrate", math, "--domain", "MATH-L5=math", "--models", "gpt-4o,nope", "-o", "p.json"]) == 2
    assert "no model(s) ['gpt-4o', 'nope']" in _one_error(capsys.readouterr().err)


@pytest.mark.slow
def test_a_table_with_families_fits_their_share_into_the_pool(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Outcomes drawn with two families of two (one maker each, by name) at a known family share: calibrate fits
    the share within 3 SEs and writes each table model's family, kind and share into its interaction group; the
    model with one sample per question, which has no sd of its own, gets the joint fit's tau."""
    from parasim.calibration.joint_fit import StructureModel, structure_pool
    from parasim.calibration.simulate import simulated_outcomes
    from parasim.pools.pool import parse_pool, pool_file

    share = 0.5
    names = ["gpt-x", "gpt-y", "claude-x", "claude-y", "llama-x"]
    base = json.loads(pool_file("paramanager").read_text())
    models = [StructureModel(n, t, 2.0, 0.7, 0.5, n.split("-")[0], share if n != "llama-x" else 0.0)
              for n, t in zip(names, (1.0, -0.5, 0.5, 0.0, 1.5))]
    om = simulated_outcomes(parse_pool(structure_pool(base, "LiveCodeBench", models, "assumed")), "LiveCodeBench",
                            500, [5, 5, 5, 5, 1], models=names, sigma=2.0, seed=5)
    q, m = np.nonzero(om.samples > 0)
    table = make_table(model=[om.models[j] for j in m], question=[str(om.questions[i]) for i in q],
                       benchmark=["LiveCodeBench"] * len(q), correct=om.hits[q, m] / om.samples[q, m],
                       n_samples=om.samples[q, m].astype(int))
    path = write_table(table, tmp_path / "families.csv.gz")
    out, report = tmp_path / "pool.json", tmp_path / "report.json"
    assert main(["calibrate", str(path), "-o", str(out), "--report", str(report)]) == 0
    params = {p["name"]: (p["estimate"], p["se"]) for p in json.loads(report.read_text())["parameters"]}
    w, se = params["family_share"]
    assert abs(w - share) < 3 * se and se < 0.2, (w, se)
    assert "kind_share" not in params  # one kind (chat): the kind share is not identified
    tau, tau_se = params["interaction_sd (joint fit)"]
    assert abs(tau - 2.0) < 3 * tau_se and "interaction_sd[llama-x]" not in params, (tau, tau_se)
    raw = {e["name"]: e for e in json.loads(out.read_text())["models"]}
    assert raw["gpt-x"]["interaction"]["family"] == raw["gpt-y"]["interaction"]["family"] == "openai/chat"
    assert raw["claude-x"]["interaction"]["family"] == "anthropic/chat"
    assert raw["gpt-x"]["interaction"]["family_share"] == round(w, 6)
    assert raw["llama-x"]["interaction"]["sd"] == round(tau, 6)
    pool = load_pool(str(out))
    rows = [pool.model_names.index(n) for n in names]
    assert pool.family[rows[0]] == pool.family[rows[1]] != pool.family[rows[2]] == pool.family[rows[3]]
    assert "family share w" in capsys.readouterr().out
