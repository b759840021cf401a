"""Joint statistics of a per-query outcome table: what every vote, ensemble and review of an episode turns into
accuracy, computed the same way for real eval logs and for tables the simulator writes.

A table is columns of equal length (``model``, ``question``, ``correct`` in [0, 1], and optionally ``benchmark``,
``n_samples`` and ``answer``): one row per (model, question, sample), or one row per (model, question) holding the
success rate over ``n_samples`` samples (LiveCodeBench's pass@1 over about ten samples). Per benchmark, over the
questions both (or all) members of a model set answered:

- ``accuracy[m]``: the mean per-question success rate r_qm;
- ``phi[m|m']``: the Pearson correlation of r_qm and r_qm' (phi for single 0/1 samples);
- ``oracle[m|m'(|m'')]``: the per-query oracle of one sample per member, mean of 1 - prod(1 - r_qm), for every 2- and
  3-model subset, and ``oracle_gain`` its excess over the subset's best member, in points;
- ``same_wrong[m|m']``: for two models with one sample per question, the share of the questions both got wrong (both
  answers known) on which they named the same wrong answer (``same_wrong_pairs``: how many such questions);
- ``vote[m][k]``: where a model has n >= k samples per question, the accuracy of a majority-correct vote of k of them
  (k odd: right when more than k/2 of k samples drawn without replacement are right; with no answer strings to
  cluster, a code sample is a pass or a fail), and ``single`` beside it;
- ``spread[m]``: for models with repeated samples, the shares of questions at rate 0, at rate 1 and strictly between.

``parasim.calibration.joint_fit`` fits the call model's joint structure to these tables and
``scripts/joint_structure.py`` compares real and simulated statistics on held-out questions.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Any

import numpy as np

VOTE_KS = (3, 5, 9)  # vote sizes reported where a model has that many samples per question
KEY_SEP = "|"


@dataclass(frozen=True)
class OutcomeMatrix:
    """One benchmark's outcomes as dense [questions, models] arrays: success-rate sums and sample counts (0 where a
    model did not answer the question), and the first sample's answer code (-1 where unknown)."""

    models: list[str]
    questions: np.ndarray
    hits: np.ndarray  # float64[Q, M], sum of correct over samples
    samples: np.ndarray  # float64[Q, M], number of samples
    answer: np.ndarray  # int64[Q, M], first sample's answer code per question, -1 where none

    @property
    def rate(self) -> np.ndarray:
        """Per-question success rate r_qm (NaN where the model has no sample of the question)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.samples > 0, self.hits / np.maximum(self.samples, 1), np.nan)


def _column(table: Any, name: str, required: bool = True) -> np.ndarray | None:
    value = table.get(name) if isinstance(table, dict) else getattr(table, name, None)
    if value is None:
        if required:
            raise ValueError(f"per-query table: column {name!r} is missing")
        return None
    return np.asarray(value)


def outcome_matrices(table: Any) -> dict[str, OutcomeMatrix]:
    """The table's rows grouped into one ``OutcomeMatrix`` per benchmark (``""`` when the table has no benchmark
    column)."""
    model = _column(table, "model").astype(str)
    question = _column(table, "question").astype(str)
    correct = _column(table, "correct").astype(np.float64)
    n = len(model)
    if len(question) != n or len(correct) != n:
        raise ValueError(f"per-query table: columns have different lengths ({n}, {len(question)}, {len(correct)})")
    bad = ~((correct >= 0) & (correct <= 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"per-query table: row {i}: correct = {float(correct[i])!r}, expected a number in [0, 1]")
    bench = _column(table, "benchmark", required=False)
    bench = np.full(n, "", object) if bench is None else bench.astype(str)
    ns = _column(table, "n_samples", required=False)
    ns = np.ones(n) if ns is None else np.asarray(ns, np.float64)
    if np.any(~(ns >= 1)):
        i = int(np.flatnonzero(~(ns >= 1))[0])
        raise ValueError(f"per-query table: row {i}: n_samples = {float(ns[i])!r}, expected an integer >= 1")
    answer = _column(table, "answer", required=False)
    out = {}
    for b in np.unique(bench):
        rows = np.flatnonzero(bench == b)
        models, mi = np.unique(model[rows], return_inverse=True)
        questions, qi = np.unique(question[rows], return_inverse=True)
        shape = (len(questions), len(models))
        hits = np.zeros(shape)
        samples = np.zeros(shape)
        np.add.at(hits, (qi, mi), correct[rows] * ns[rows])
        np.add.at(samples, (qi, mi), ns[rows])
        codes = np.full(shape, -1, np.int64)
        if answer is not None:
            a = answer[rows]
            known = np.array([x is not None and x == x and str(x) != "" for x in a], bool)  # x == x: not NaN
            _, ai = np.unique(np.where(known, a.astype(str), ""), return_inverse=True)
            first = np.full(shape, -1, np.int64)
            for r in range(len(rows) - 1, -1, -1):  # the first sample of each cell wins
                if known[r]:
                    first[qi[r], mi[r]] = ai[r]
            codes = first
        out[str(b)] = OutcomeMatrix([str(x) for x in models], questions, hits, samples, codes)
    return out


def _key(names: Sequence[str]) -> str:
    return KEY_SEP.join(names)


def majority_vote(hits: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
    """P(more than k/2 of k samples are right) for k samples drawn without replacement from n samples of which
    ``hits`` were right (hypergeometric), per entry; NaN where n < k."""
    nn = np.asarray(n).astype(np.int64)
    hits = np.rint(np.asarray(hits, np.float64)).astype(np.int64)
    out = np.full(nn.shape, np.nan)
    for idx in zip(*np.nonzero(nn >= k)):
        h, t = int(hits[idx]), int(nn[idx])
        total = comb(t, k)
        out[idx] = sum(comb(h, j) * comb(t - h, k - j) for j in range(k // 2 + 1, k + 1)) / total
    return out


def matrix_statistics(om: OutcomeMatrix) -> dict[str, Any]:
    """The joint statistics (module docstring) of one benchmark's ``OutcomeMatrix``."""
    r = om.rate
    names = om.models
    m = len(names)
    seen = om.samples > 0
    stats: dict[str, Any] = {"models": names, "questions": len(om.questions),
                             "accuracy": {}, "phi": {}, "oracle": {}, "oracle_gain": {}, "same_wrong": {},
                             "same_wrong_pairs": {}, "vote": {}, "spread": {}}
    for j in range(m):
        stats["accuracy"][names[j]] = float(np.nanmean(r[:, j])) if seen[:, j].any() else float("nan")
    for size in (2, 3):
        for sub in combinations(range(m), size):
            both = seen[:, list(sub)].all(1)
            if not both.any():
                continue
            rs = r[both][:, list(sub)]
            key = _key([names[j] for j in sub])
            oracle = float(np.mean(1.0 - np.prod(1.0 - rs, 1)))
            stats["oracle"][key] = oracle
            stats["oracle_gain"][key] = oracle - float(rs.mean(0).max())
            if size == 2:
                a, b = rs[:, 0], rs[:, 1]
                sa, sb = a.std(), b.std()
                stats["phi"][key] = float(np.mean((a - a.mean()) * (b - b.mean())) / (sa * sb)) \
                    if sa > 0 and sb > 0 else float("nan")
                ans = om.answer[both][:, list(sub)]
                wrong = (np.rint(om.hits[both][:, list(sub)]) == 0).all(1) & (ans >= 0).all(1)
                if om.samples[both][:, list(sub)].max(initial=1) == 1 and wrong.any():
                    stats["same_wrong"][key] = float(np.mean(ans[wrong, 0] == ans[wrong, 1]))
                    stats["same_wrong_pairs"][key] = int(wrong.sum())
    for j in range(m):
        n = om.samples[seen[:, j], j]
        if len(n) == 0 or n.min() < 2:
            continue
        rj = r[seen[:, j], j]
        hj = om.hits[seen[:, j], j]
        stats["spread"][names[j]] = {"zero": float(np.mean(rj == 0)), "one": float(np.mean(rj == 1)),
                                     "between": float(np.mean((rj > 0) & (rj < 1))), "samples": int(n.min())}
        votes = {"single": float(rj.mean())}
        for k in VOTE_KS:
            if n.min() >= k:
                votes[str(k)] = float(np.mean(majority_vote(hj, n, k)))
        stats["vote"][names[j]] = votes
    return stats


def joint_statistics(table: Any) -> dict[str, dict[str, Any]]:
    """Per benchmark of a per-query table (any object or dict with the columns of the module docstring, such as
    ``parasim.calibration.per_query.PerQueryTable``), its joint statistics."""
    return {b: matrix_statistics(om) for b, om in outcome_matrices(table).items()}
