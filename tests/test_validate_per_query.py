"""validate-sim on per-query outcomes: the joint statistics, the simulated design, the comparison and the command."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from parasim.calibration.joint_stats import joint_statistics, majority_vote
from parasim.calibration.per_query import PerQueryTable, make_table, write_table
from parasim.cli import main
from parasim.pools.pool import load_pool
from parasim.validation.per_query import compare_per_query, design, simulated_table


def test_joint_statistics_by_hand() -> None:
    # a, b: one sample of 4 questions; c: 3 samples of each (k right of 3)
    t = make_table(model=["a"] * 4 + ["b"] * 4 + ["c"] * 12, question=["1", "2", "3", "4"] * 2 + [
        q for q in "1234" for _ in range(3)], benchmark=["x"] * 20,
        correct=[1, 0, 0, 1, 1, 0, 0, 0] + [1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0],
        sample=[0] * 8 + [0, 1, 2] * 4, answer=["g", "p", "q", "g", "g", "p", "r", "s"] + [""] * 12)
    s = joint_statistics(t)["x"]
    assert s["accuracy"] == {"a": 0.5, "b": 0.25, "c": pytest.approx((2 + 0 + 3 + 1) / 12)}
    assert s["oracle"]["a|b"] == 0.5 and s["phi"]["a|b"] == pytest.approx(np.corrcoef([1, 0, 0, 1], [1, 0, 0, 0])[0, 1])
    assert s["same_wrong"]["a|b"] == 0.5 and s["same_wrong_pairs"]["a|b"] == 2  # q2 both "p", q3 "q" vs "r"
    assert "a|c" not in s["same_wrong"]  # c has several samples per question
    assert s["vote"]["c"]["3"] == pytest.approx(np.mean([1, 0, 1, 0])) and "a" not in s["vote"]
    assert majority_vote(np.array([2]), np.array([4]), 3)[0] == pytest.approx(2 / 4)  # 2 right of 4, draw 3


def _sim(seed: int, n: int) -> PerQueryTable:
    pool = load_pool("paramanager")
    models = list(pool.model_names[:2])
    grid = make_table(model=[m for m in models for _ in range(n)], question=[str(q) for _ in models for q in range(n)],
                      benchmark=["MMLU-Pro"] * (2 * n), correct=[0.0] * (2 * n))
    reps = make_table(model=[models[0]] * n, question=[str(q) for q in range(n)], benchmark=["LiveCodeBench"] * n,
                      correct=[0.0] * n, n_samples=[5] * n)
    return simulated_table(PerQueryTable.concat([grid, reps]), pool, {}, seed=seed)


def test_simulated_design_and_a_self_comparison() -> None:
    """The simulator against itself (another seed) stays within the tolerances; a shifted model is flagged."""
    a, b = _sim(0, 1500), _sim(1, 1500)
    assert design(a) == design(b) and design(a)["LiveCodeBench"][1] == {load_pool("paramanager").model_names[0]: 5}
    assert len(a) == 2 * 1500 + 5 * 1500
    result = compare_per_query(a, b)
    judged = [i for i in result["items"] if i["within"] is not None]
    assert {i["statistic"] for i in judged} == {"accuracy", "phi", "oracle", "same_wrong", "vote"}
    assert all(i["within"] for i in judged), [i for i in judged if not i["within"]]
    worse = a.correct.copy()
    first = np.flatnonzero((a.model == a.models()[0]) & (a.benchmark == "MMLU-Pro") & (a.correct == 1))
    worse[first[: len(first) // 5]] = 0.0  # a fifth of its right answers made wrong
    shifted = PerQueryTable(**{**{k: getattr(a, k) for k in ("model", "question", "benchmark", "sample", "n_samples",
                                                                "answer", "output_tokens")}, "correct": worse},
                            source="shifted")
    acc = [i for i in compare_per_query(shifted, b)["items"]
           if i["statistic"] == "accuracy" and i["benchmark"] == "MMLU-Pro" and i["key"] == a.models()[0]]
    assert acc and acc[0]["within"] is False


def test_validate_sim_command_on_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_table(_sim(2, 300).select(slice(0, 600)), tmp_path / "mine.csv.gz")
    assert main(["validate-sim", str(path), "--pool", "paramanager", "--out", str(tmp_path / "v")]) == 0
    report = json.loads((tmp_path / "v" / "validate_sim.json").read_text())
    assert report["kind"] == "per_query" and report["pool"]["source"] == "loaded" and report["rows"] == 600
    assert report["totals"]["items"] == len([i for i in report["items"] if i["within"] is not None]) > 0
    assert "items within their tolerance" in capsys.readouterr().out
    other = make_table(model=["not-a-pool-model"], question=["q"], benchmark=["MMLU-Pro"], correct=[1.0])
    bad = write_table(other, tmp_path / "other.csv")
    assert main(["validate-sim", str(bad), "--pool", "paramanager"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "has no model(s) ['not-a-pool-model']" in err[0]
