"""Moment estimates of the wrong-answer model from how often logged wrong answers agree.

In the simulator (``parasim.sim.kernel.draw_model_effects`` and ``wrong_answer``) a task draws one attractive
distractor a* from its distractor weights q; model m's preferred wrong answer is a* with probability affinity_m
(gamma_m), else its own draw from q; a wrong answer of m is its preferred one with probability kappa_m, else a
draw from q. With S_b = sum_j q_j^2 of the benchmark's weights (known from the task catalogue, like mu_b), two
wrong answers on one task agree with probability

  same model m:          kappa_m^2 + (1 - kappa_m^2) S_b               (the shared distractor drops out)
  models m != m':        c_m c_m' + (1 - c_m c_m') S_b,   c_m = kappa_m gamma_m

So kappa_m^2 = sum_b (agree_mb - n_mb S_b) / sum_b n_mb (1 - S_b) over same-model pairs, each cross-model pair
gives the product x_mm' = c_m c_m' the same way, and c is the weighted rank-one fit of those products (identified
with three or more models that pair with each other; with two only the product is, and the affinity is kept).
Log answers are strings, so only equality within a task is used. The exact likelihood needs q and the preferred
answers of every model, so these are method-of-moments estimators; their SEs come from a Poisson bootstrap over
tasks, because pairs within a task share calls. The rows passed must be fresh wrong single-sample answers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_PAIRS = 30  # same-model (or cross-model) pairs a model needs before its rate is estimated


@dataclass(frozen=True)
class Agreement:
    """Per model: kappa and affinity estimates and their bootstrap SEs (NaN where not identified)."""

    kappa: np.ndarray
    kappa_se: np.ndarray
    affinity: np.ndarray
    affinity_se: np.ndarray


def _pair_counts(task: np.ndarray, model: np.ndarray, bench: np.ndarray, answer: np.ndarray,
                 num_models: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per task: pairs [T, M, M] and agreeing pairs [T, M, M] of wrong answers by model pair (upper triangle and
    diagonal), and each task's benchmark."""
    order = np.lexsort((answer, model, task))
    task, model, bench, answer = task[order], model[order], bench[order], answer[order]
    tasks, start = np.unique(task, return_index=True)
    stop = np.append(start[1:], len(task))
    pairs = np.zeros((len(tasks), num_models, num_models))
    agree = np.zeros((len(tasks), num_models, num_models))
    for i, (a, b) in enumerate(zip(start, stop)):
        m, ans = model[a:b], answer[a:b]
        r, c = np.nonzero(np.triu(np.ones((b - a, b - a), bool), 1))
        lo, hi = np.minimum(m[r], m[c]), np.maximum(m[r], m[c])
        np.add.at(pairs[i], (lo, hi), 1.0)
        np.add.at(agree[i], (lo, hi), (ans[r] == ans[c]).astype(np.float64))
    return pairs, agree, bench[start]


def _rank_one(x: np.ndarray, w: np.ndarray, iters: int = 200) -> np.ndarray:
    """c >= 0 minimizing sum_{m<m'} w (x - c_m c_m')^2 over the pairs with weight w > 0 (alternating updates)."""
    w = np.triu(w, 1) + np.triu(w, 1).T
    x = np.triu(x, 1) + np.triu(x, 1).T
    c = np.full(len(x), np.sqrt(max(float((w * x).sum() / max(w.sum(), 1e-12)), 1e-6)))
    for _ in range(iters):
        for m in range(len(c)):
            den = (w[m] * c ** 2).sum()
            if den > 0:
                c[m] = max((w[m] * x[m] * c).sum() / den, 0.0)
    return c


def _estimate(pairs: np.ndarray, agree: np.ndarray, task_bench: np.ndarray, s_bench: np.ndarray,
              weight: np.ndarray, num_bench: int, linked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kappa, affinity) from task-weighted pair counts (NaN where not identified)."""
    num_models = pairs.shape[1]
    n = np.zeros((num_bench, num_models, num_models))
    a = np.zeros_like(n)
    np.add.at(n, task_bench, weight[:, None, None] * pairs)
    np.add.at(a, task_bench, weight[:, None, None] * agree)
    s = s_bench[:, None, None]
    num = (a - n * s).sum(0)
    den = (n * (1.0 - s)).sum(0)
    x = np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)
    diag = np.diag(x).copy()
    kappa = np.sqrt(np.clip(np.where(np.isfinite(diag), diag, np.nan), 0.0, 1.0))
    cross = np.where(np.isfinite(x), np.clip(x, 0.0, 1.0), 0.0)
    c = _rank_one(cross, np.where(np.isfinite(x), den, 0.0))
    affinity = np.where(linked & (kappa > 0), np.clip(c / np.where(kappa > 0, kappa, 1.0), 0.0, 1.0), np.nan)
    return kappa, affinity


def agreement_moments(task: np.ndarray, model: np.ndarray, bench: np.ndarray, answer: np.ndarray, num_models: int,
                      s_bench: np.ndarray, *, reps: int = 200, seed: int = 0) -> Agreement:
    """kappa and affinity per model from the agreement of wrong answers (module docstring); ``s_bench`` is
    S_b = sum_j q_j^2 per benchmark index."""
    pairs, agree, task_bench = _pair_counts(task, model, bench, answer, num_models)
    n_tasks = len(task_bench)
    totals = pairs.sum(0)
    same = np.diag(totals).copy()
    cross = totals + totals.T - 2 * np.diag(same)  # symmetric cross-model pair counts
    enough = np.triu(cross >= MIN_PAIRS, 1)
    enough = enough | enough.T
    # a model's c is identified when it pairs with two models that pair with each other (a triangle)
    linked = np.array([bool(np.any(enough[m][:, None] & enough[m][None, :] & enough)) for m in range(num_models)])
    kappa, affinity = _estimate(pairs, agree, task_bench, s_bench, np.ones(n_tasks), len(s_bench), linked)
    rng = np.random.default_rng(seed)
    boots = np.array([np.concatenate(_estimate(pairs, agree, task_bench, s_bench,
                                               rng.poisson(1.0, n_tasks).astype(np.float64), len(s_bench), linked))
                      for _ in range(reps)])
    se = np.full(2 * num_models, np.nan)
    for k in range(2 * num_models):
        draws = boots[np.isfinite(boots[:, k]), k]
        if len(draws) > 1:
            se[k] = draws.std(ddof=1)
    kappa = np.where(same >= MIN_PAIRS, kappa, np.nan)
    return Agreement(kappa, se[:num_models], affinity, se[num_models:])
