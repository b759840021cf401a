"""Simulated against real, per benchmark: each real figure against the spread of its simulated replicas.

Every compared figure is a ratio of sums over episodes, sum(numerator) / sum(denominator): a per-episode mean
(accuracy, tokens, cost, USD, latency: denominator 1), a status rate (slots of the status / issued slots), a tool
share (OK calls of the tool / OK calls), a model share (OK agent calls of the model / OK agent calls) or the agent
calls' accuracy (right / graded answers).

Replica r of the log (replica r of every episode) is one simulated version of the whole log, so its figure f_r is
what the real figure would be if the simulator were right. The verdict is that predictive check: the real figure's
two-sided mid-p among the f_r, p = 2 min(P(f < real) + P(f = real) / 2, P(f > real) + P(f = real) / 2), and the
figure is ``consistent`` when p >= 1 - level (``is_consistent``). It covers rare events (a status no real call
had: replicas show zeros too) and every simulated source of noise, including the hidden difficulty of each task
(replicas draw it, shared by the task's episodes). Under a right simulator the real figure's rank among the R
replicas is uniform, so it is flagged with probability ``chance_rate`` = 2 ceil((1 - level) R / 2) / (R + 1) (exact
without ties, ties only raise p): 2 / 41 with 40 replicas at level 0.95, a real figure outside all of them. With
fewer than 39 replicas that alone is likelier than 1 - level, so chance flags exceed the level (the summary gives
their expected number). ``sim_range`` is the replicas' central ``level`` interval, ``sim`` their mean. The real
figure's own interval ``real_ci`` is a bootstrap over the benchmark's tasks (episodes of one task resampled
together), over episodes when the benchmark has a single task.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parasim.protocol.schema import Tool
from parasim.validation.replay import STATUS_GROUPS, EpisodeMetrics

HEADLINE = ("accuracy", "tokens", "cost_units", "usd", "latency_s", "call_accuracy")
# p is a multiple of 1 / R; 1 - level is not exact in binary (1 - 0.95 = 0.05000000000000004), so without this slack
# a p of exactly 1 - level (40 replicas, one beyond the real figure) was flagged, nearly doubling the chance rate
_P_SLACK = 1e-9


@dataclass(frozen=True)
class Figure:
    """One compared figure: per-episode numerator and denominator, real [E] and simulated [E, R]."""

    name: str
    real_num: np.ndarray
    real_den: np.ndarray
    sim_num: np.ndarray
    sim_den: np.ndarray


def figures(real: EpisodeMetrics, sim: EpisodeMetrics, model_names: Sequence[str]) -> list[Figure]:
    """Every figure the report compares (module docstring), in report order; ``sim`` is [episode, replica]."""
    one_r, one_s = np.ones_like(real.outcome), np.ones_like(sim.outcome)
    out = [Figure(name, getattr(real, key), one_r, getattr(sim, key), one_s) for name, key in (
        ("accuracy", "outcome"), ("tokens", "tokens"), ("cost_units", "cost_units"), ("usd", "usd"),
        ("latency_s", "latency_s"))]
    out.append(Figure("call_accuracy", real.right, real.graded, sim.right, sim.graded))
    issued_r, issued_s = real.status.sum(-1), sim.status.sum(-1)
    out += [Figure(f"status.{g}", real.status[:, j], issued_r, sim.status[..., j], issued_s)
            for j, g in enumerate(STATUS_GROUPS)]
    ok_r, ok_s = real.tool_ok.sum(-1), sim.tool_ok.sum(-1)
    out += [Figure(f"tool.{Tool(t).wire_name}", real.tool_ok[:, t], ok_r, sim.tool_ok[..., t], ok_s)
            for t in range(real.tool_ok.shape[1])]
    agent_r, agent_s = real.model_ok.sum(-1), sim.model_ok.sum(-1)
    out += [Figure(f"model.{name}", real.model_ok[:, m], agent_r, sim.model_ok[..., m], agent_s)
            for m, name in enumerate(model_names)]
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _interval(values: np.ndarray, level: float) -> list[float | None]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return [None, None]
    tail = 100 * (1 - level) / 2
    return [float(np.percentile(finite, tail)), float(np.percentile(finite, 100 - tail))]


def _value(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def predictive_p(real: float, replicas: np.ndarray) -> float | None:
    """Two-sided mid-p of ``real`` among the replica figures (module docstring); None without both sides."""
    f = replicas[np.isfinite(replicas)]
    if not np.isfinite(real) or f.size == 0:
        return None
    scale = max(1.0, float(np.abs(f).max()), abs(real))
    equal = np.abs(f - real) <= 1e-9 * scale  # sums of the same floats in another order
    below, above = (f < real) & ~equal, (f > real) & ~equal
    tie = equal.mean() / 2
    return float(min(1.0, 2 * min(below.mean() + tie, above.mean() + tie)))


def is_consistent(p: float, level: float) -> bool:
    """The predictive check's verdict: ``p`` >= 1 - ``level``, a p of exactly 1 - level included."""
    return p >= 1 - level - _P_SLACK


def chance_rate(level: float, replicas: int) -> float:
    """The probability that a figure is flagged under a right simulator (module docstring): the real figure's rank
    among ``replicas`` exchangeable draws is uniform over R + 1 places, and a place with k replicas beyond it on its
    nearer side has p = 2k / R (without ties)."""
    places = math.ceil((1 - level) * replicas / 2 - _P_SLACK)
    return min(1.0, 2 * places / (replicas + 1))


def compare_group(figs: list[Figure], rows: np.ndarray, clusters: np.ndarray, *, level: float, draws: int,
                  rng: np.random.Generator) -> dict[str, Any]:
    """The figures over episodes ``rows``; ``clusters`` are the episodes' task ids (as ints), for ``real_ci``."""
    ids, cluster = np.unique(clusters[rows], return_inverse=True)
    by = "task" if len(ids) >= 2 else "episode"
    if by == "episode":
        cluster = np.arange(len(rows))
    c = int(cluster.max()) + 1
    weights = rng.multinomial(c, np.full(c, 1.0 / c), size=draws).astype(np.float64)  # [draws, clusters]
    metrics: dict[str, Any] = {}
    for f in figs:
        num_r, den_r = (np.bincount(cluster, a[rows], minlength=c) for a in (f.real_num, f.real_den))
        num_s, den_s = f.sim_num[rows].sum(0), f.sim_den[rows].sum(0)  # [replicas]
        if den_r.sum() == 0 and den_s.sum() == 0:
            continue  # neither side has anything to measure (a tool never called)
        real = num_r.sum() / den_r.sum() if den_r.sum() else np.nan
        per_replica = _ratio(num_s, den_s)
        finite = per_replica[np.isfinite(per_replica)]
        # the replicas' mean, kept inside their span: a mean of equal floats can round just outside it
        sim = float(np.clip(finite.mean(), finite.min(), finite.max())) if finite.size else np.nan
        p = predictive_p(real, per_replica)
        metrics[f.name] = {"real": _value(real), "real_ci": _interval(_ratio(weights @ num_r, weights @ den_r), level),
                           "sim": _value(sim), "sim_range": _interval(per_replica, level),
                           "diff": _value(sim - real), "p": p,
                           "consistent": None if p is None else is_consistent(p, level)}
    return {"episodes": int(len(rows)), "tasks": int(len(ids)), "resampled_by": by, "metrics": metrics}


def compare(figs: list[Figure], benchmarks: Sequence[str], task_ids: Sequence[str], *, level: float, draws: int,
            seed: int) -> dict[str, dict[str, Any]]:
    """``compare_group`` per benchmark (in first-seen order) and, with several, over all episodes (``"all"``)."""
    rng = np.random.default_rng(seed)
    names = list(dict.fromkeys(benchmarks))
    bench = np.array([names.index(b) for b in benchmarks])
    _, clusters = np.unique(np.asarray(task_ids, dtype=str), return_inverse=True)
    out = {name: compare_group(figs, np.flatnonzero(bench == b), clusters, level=level, draws=draws, rng=rng)
           for b, name in enumerate(names)}
    if len(names) > 1:
        out["all"] = compare_group(figs, np.arange(len(bench)), clusters, level=level, draws=draws, rng=rng)
    return out


def flagged(groups: dict[str, dict[str, Any]]) -> list[str]:
    """``benchmark/figure`` of every figure the predictive check rejects."""
    return [f"{g}/{name}" for g, group in groups.items() for name, m in group["metrics"].items()
            if m["consistent"] is False]
