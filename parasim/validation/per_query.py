"""validate-sim on per-query outcomes: the simulator's joint statistics against a real eval table's.

A user's eval results (a ``PerQueryTable``: plain table, lm-eval samples, lighteval details) say how often the
models are right, how their errors go together, what an oracle of two of them or a vote of one model's samples would
reach. The simulator, with a pool that holds the table's models (``--pool``, or one fitted to the same table as
``parasim calibrate`` fits it), draws the same design: for each benchmark as many fresh questions as the table has,
and on each as many direct ``standard_reasoner`` calls of each model as the table has samples of it. Both tables'
joint statistics (``parasim.calibration.joint_stats``: per-model accuracy, pairwise correctness correlation, the
per-query oracle of every pair, the same-wrong-answer rate per pair, majority votes where samples repeat) are
compared item by item against tolerances fixed here in advance (``TOLERANCES``), so the report shows where the
simulator disagrees.

The simulated design uses ``parasim.calibration.simulate.simulated_calls`` (the kernel's own ``sample_call``):
models are drawn per call there, so each question gets ``OVERSAMPLE`` times the calls needed and the first calls of
each model are kept; a question on which some model drew too few calls is skipped (which model a call goes to is
independent of its outcome, so this selects no outcomes). The simulated models answer every question, while a real
table may leave some (model, question) cells empty; each statistic is over the questions its models both answered.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from parasim.calibration.joint_stats import joint_statistics
from parasim.calibration.per_query import PerQueryTable, make_table
from parasim.calibration.simulate import simulated_calls
from parasim.pools.pool import PoolSpec
from parasim.tasks.suites import BENCHMARK_INDEX, benchmark_suite

# |simulated - real| each statistic may differ by (fractions; phi in correlation units), stated before any run
TOLERANCES = {"accuracy": 0.03, "phi": 0.10, "oracle": 0.03, "same_wrong": 0.10, "vote": 0.03}
OVERSAMPLE = 3  # calls per question per needed sample, before the first of each model are kept
_MIN_SPARE = 8  # and at least this many spare calls per model and question


def design(table: PerQueryTable) -> dict[str, tuple[int, dict[str, int]]]:
    """Per benchmark: its number of questions and each model's samples per question (the most any question has)."""
    out = {}
    for bench in table.benchmarks():
        rows = table.benchmark == bench
        per: dict[tuple[str, str], int] = {}
        for m, q, n in zip(table.model[rows], table.question[rows], table.n_samples[rows]):
            per[(m, q)] = per.get((m, q), 0) + int(n)
        samples: dict[str, int] = {}
        for (m, _), n in per.items():
            samples[m] = max(samples.get(m, 0), n)
        out[bench] = (len(set(table.question[rows].tolist())), dict(sorted(samples.items())))
    return out


def simulated_table(table: PerQueryTable, pool: PoolSpec, domains: Mapping[str, str], *, seed: int = 0
                    ) -> PerQueryTable:
    """The simulator's outcomes on ``table``'s design (module docstring); answers are the simulator's answer ids."""
    cols: dict[str, list[Any]] = {k: [] for k in ("model", "question", "benchmark", "sample", "correct", "answer")}
    for b_index, (bench, (n_questions, samples)) in enumerate(design(table).items()):
        missing = [m for m in samples if m not in pool.model_names]
        if missing:
            raise ValueError(f"pool {pool.name!r} has no model(s) {missing} of benchmark {bench!r}; its models are "
                             f"{list(pool.model_names)}")
        rows = np.array([pool.model_names.index(m) for m in samples], np.int64)
        need = np.array(list(samples.values()), np.int64)
        per_task = int(len(rows) * max(OVERSAMPLE * need.max(), need.max() + _MIN_SPARE))
        suite = benchmark_suite([bench if bench in BENCHMARK_INDEX else f"generic_{domains[bench]}"])
        kept = 0
        for attempt in range(8):
            n_tasks = max(16, math.ceil((n_questions - kept) * 1.2))
            calls = simulated_calls(pool, suite, n_tasks, per_task, tools=["standard_reasoner"], models=rows.tolist(),
                                    seed=seed * 1_000_003 + b_index * 101 + attempt)
            task, model = calls["task"], calls["model"]
            lookup = np.full(len(pool.model_names), -1, np.int64)
            lookup[rows] = np.arange(len(rows))
            col = lookup[model]
            order = np.lexsort((calls["call_index"], col, task))
            task, col = task[order], col[order]
            correct, answer = calls["correct"][order], calls["answer"][order]
            start = np.r_[0, np.flatnonzero((np.diff(task) != 0) | (np.diff(col) != 0)) + 1]
            rank = np.arange(len(task)) - np.repeat(start, np.diff(np.r_[start, len(task)]))
            counts = np.zeros((n_tasks, len(rows)), np.int64)
            np.add.at(counts, (task, col), 1)
            complete = np.flatnonzero((counts >= need[None, :]).all(1))[: n_questions - kept]
            use = np.isin(task, complete) & (rank < need[col])
            qid = {t: kept + i for i, t in enumerate(complete)}
            for t, j, r, c, a in zip(task[use], col[use], rank[use], correct[use], answer[use]):
                cols["model"].append(list(samples)[j])
                cols["question"].append(f"sim{qid[t]}")
                cols["benchmark"].append(bench)
                cols["sample"].append(int(r))
                cols["correct"].append(1.0 if c == 1 else 0.0)
                cols["answer"].append(str(a) if c >= 0 else "")
            kept += len(complete)
            if kept >= n_questions:
                break
        else:
            raise ValueError(f"benchmark {bench!r}: could not simulate {n_questions} complete questions")
    return make_table(**cols, source=f"simulated({pool.name}, seed {seed})")


def compare_per_query(real: PerQueryTable, sim: PerQueryTable) -> dict[str, Any]:
    """Item by item, real against simulated joint statistics with each item's tolerance; a summary per statistic."""
    rs, ss = joint_statistics(real), joint_statistics(sim)
    items = []
    for bench, r in rs.items():
        s = ss.get(bench, {})
        for stat in ("accuracy", "phi", "oracle", "same_wrong"):
            for key, value in r[stat].items():
                other = s.get(stat, {}).get(key)
                items.append(_item(bench, stat, key, value, other))
        for model, votes in r["vote"].items():
            for k, value in votes.items():
                if k != "single":
                    items.append(_item(bench, "vote", f"{model}@{k}", value, s.get("vote", {}).get(model, {}).get(k)))
    summary = {}
    for bench in rs:
        for stat in TOLERANCES:
            these = [i for i in items if i["benchmark"] == bench and i["statistic"] == stat and i["sim"] is not None]
            if these:
                summary[f"{bench}:{stat}"] = {
                    "benchmark": bench, "statistic": stat, "items": len(these),
                    "within": sum(i["within"] for i in these), "tolerance": TOLERANCES[stat],
                    "real_mean": float(np.mean([i["real"] for i in these])),
                    "sim_mean": float(np.mean([i["sim"] for i in these])),
                    "max_abs_diff": float(max(abs(i["diff"]) for i in these))}
    return {"items": items, "summary": summary}


def _item(bench: str, stat: str, key: str, real: float, sim: float | None) -> dict[str, Any]:
    diff = None if sim is None else sim - real
    return {"benchmark": bench, "statistic": stat, "key": key, "real": real, "sim": sim, "diff": diff,
            "tolerance": TOLERANCES[stat], "within": None if diff is None else bool(abs(diff) <= TOLERANCES[stat])}
