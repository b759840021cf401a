"""Joint statistics of per-query outcomes: what votes, ensembles and reviews turn into accuracy.

The same statistics of a real ``PerQueryTable`` and of one the simulator draws on the same design are what
``parasim validate-sim`` compares on a per-query input. Per benchmark, over the questions every member of a model
set answered:

- ``accuracy[m]``: the mean per-question success rate r_qm (a pass rate over samples, or 0/1);
- ``phi["a|b"]``: the Pearson correlation of r_qa and r_qb (phi for single 0/1 samples);
- ``oracle["a|b"]``: the per-query oracle of one sample of each member, mean of 1 - (1 - r_qa)(1 - r_qb);
- ``same_wrong["a|b"]``: where both have one sample per question with known answers, the share of the questions
  both got wrong on which they gave the same wrong answer (``same_wrong_pairs``: how many such questions);
- ``vote[m][k]``: where m has n >= k samples of every question, the accuracy of a majority of k samples drawn
  without replacement (right when more than k/2 are right; k odd), ``vote[m]["single"]`` beside it.
"""
from __future__ import annotations

from itertools import combinations
from math import comb
from typing import Any

import numpy as np

from parasim.calibration.per_query import PerQueryTable

KEY_SEP = "|"
VOTE_KS = (3, 5, 9)


def majority_vote(hits: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
    """P(more than k/2 right) for k of n samples without replacement, ``hits`` of them right (hypergeometric)."""
    hits, n = hits.astype(np.int64), n.astype(np.int64)
    out = np.zeros(len(hits))
    for j in range(k // 2 + 1, k + 1):
        out += np.array([comb(h, j) * comb(t - h, k - j) for h, t in zip(hits, n)], np.float64)
    return out / np.array([comb(t, k) for t in n], np.float64)


def benchmark_statistics(table: PerQueryTable) -> dict[str, Any]:
    """The joint statistics (module docstring) of a table of one benchmark."""
    models = sorted(set(table.model.tolist()))
    questions, qi = np.unique(table.question.astype(str), return_inverse=True)
    mi = np.searchsorted(np.array(models, dtype=object), table.model)
    shape = (len(questions), len(models))
    hits, samples = np.zeros(shape), np.zeros(shape)
    np.add.at(hits, (qi, mi), table.successes.astype(np.float64))
    np.add.at(samples, (qi, mi), table.n_samples.astype(np.float64))
    first = np.lexsort((table.sample, mi, qi))  # each cell's first sample's answer
    answers, codes = np.unique(table.answer.astype(str), return_inverse=True)
    answer = np.full(shape, -1, np.int64)
    for r in first[::-1]:
        answer[qi[r], mi[r]] = codes[r] if answers[codes[r]] else -1
    seen = samples > 0
    rate = np.where(seen, hits / np.maximum(samples, 1.0), np.nan)
    stats: dict[str, Any] = {"models": models, "questions": len(questions), "accuracy": {}, "phi": {}, "oracle": {},
                             "same_wrong": {}, "same_wrong_pairs": {}, "vote": {}}
    for j, m in enumerate(models):
        stats["accuracy"][m] = float(np.nanmean(rate[:, j]))
    for a, b in combinations(range(len(models)), 2):
        both = seen[:, a] & seen[:, b]
        if not both.any():
            continue
        key = KEY_SEP.join((models[a], models[b]))
        ra, rb = rate[both, a], rate[both, b]
        stats["oracle"][key] = float(np.mean(1.0 - (1.0 - ra) * (1.0 - rb)))
        if ra.std() > 0 and rb.std() > 0:
            stats["phi"][key] = float(np.corrcoef(ra, rb)[0, 1])
        single = (samples[both][:, [a, b]] == 1).all()
        wrong = (ra == 0) & (rb == 0) & (answer[both, a] >= 0) & (answer[both, b] >= 0)
        if single and wrong.any():
            stats["same_wrong"][key] = float(np.mean(answer[both, a][wrong] == answer[both, b][wrong]))
            stats["same_wrong_pairs"][key] = int(wrong.sum())
    for j, m in enumerate(models):
        n = samples[seen[:, j], j]
        if n.min() < 2:
            continue
        h = hits[seen[:, j], j]
        votes = {"single": float(np.mean(h / n))}
        for k in VOTE_KS:
            if n.min() >= k:
                votes[str(k)] = float(np.mean(majority_vote(h, n, k)))
        stats["vote"][m] = votes
    return stats


def joint_statistics(table: PerQueryTable) -> dict[str, dict[str, Any]]:
    """Per benchmark of ``table``, its joint statistics."""
    return {b: benchmark_statistics(table.select(table.benchmark == b)) for b in table.benchmarks()}
