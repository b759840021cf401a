"""The parts of the call model that do not depend on the task difficulty: latency, basic-tool output
tokens, execution errors and the reviewer's verdicts (``parasim.sim.kernel.sample_call``).

- Agent-tool latency: log latency ~ Normal(log(ttft[m] + overhead[t] + tokens_out / speed[m] * (1 + beta[m]
  (c - 1))), sd[m]), truncated at the tool's timeout (a call past it is a TIMEOUT, whose truncated tokens are
  not logged faithfully, so those rows leave this fit and the truncation keeps the rest unbiased); c is the
  call's server load, ceil(calls of its round to the model / replicas), and beta (the concurrency slope of a
  self-hosted model) is free where the log has rounds with c > 1. Only single-sample calls (the ensemble's
  latency is a maximum over its samples); calls cut at the generation cap keep their whole (capped) latency.
- Basic-tool latency (python, search): log latency ~ Normal(log base[t], sd[t]), with TIMEOUT rows as
  right-censored observations at the timeout: exact, since these latencies do not depend on tokens.
- Basic-tool output tokens: log tokens ~ Normal(mu[t], sd[t]), right-censored at the generation cap.
- Execution errors and reviewer verdicts are Bernoulli: their MLE is a proportion and its standard
  error sqrt(p (1 - p) / n), the inverse observed information of a binomial.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr

from parasim.calibration.mle import Estimate, maximize
from parasim.calibration.params import Block, Layout

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _mills(u: np.ndarray) -> np.ndarray:
    """phi(u) / Phi(u), computed in log space."""
    return np.exp(-0.5 * u ** 2 - _HALF_LOG_2PI - log_ndtr(u))


def normal_terms(y: np.ndarray, mean: np.ndarray, sd: np.ndarray, censored: np.ndarray,
                 upper: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray]:
    """Log-likelihood of y ~ Normal(mean, sd) (right-censored rows give log P(Y > y); with ``upper``,
    uncensored rows are truncated to Y < upper), and its derivatives per row in mean and sd."""
    u = (y - mean) / sd
    ll = np.where(censored, log_ndtr(-u), -0.5 * u ** 2 - np.log(sd) - _HALF_LOG_2PI)
    hazard = _mills(-u)
    d_mean = np.where(censored, hazard / sd, u / sd)
    d_sd = np.where(censored, hazard * u / sd, (u ** 2 - 1.0) / sd)
    if upper is not None:
        v = (upper - mean) / sd
        ll = ll - np.where(censored, 0.0, log_ndtr(v))
        m = np.where(censored, 0.0, _mills(v))
        d_mean = d_mean + m / sd
        d_sd = d_sd + m * v / sd
    return float(ll.sum()), d_mean, d_sd


@dataclass(frozen=True)
class AgentLatencyRows:
    """Single-sample agent calls that did not time out."""

    model: np.ndarray
    tool: np.ndarray
    tokens: np.ndarray
    log_latency: np.ndarray
    log_timeout: np.ndarray
    load: np.ndarray  # concurrent requests on the call's server (1 where the round is not logged)


def fit_agent_latency(rows: AgentLatencyRows, ttft: np.ndarray, speed: np.ndarray, sd: np.ndarray,
                      overhead: np.ndarray, free_overhead: np.ndarray, models: tuple[str, ...],
                      tools: tuple[str, ...], slope: np.ndarray | None = None) -> Estimate:
    """ttft[M], speed[M] (tokens / s), sd[M], overhead[T] and, where rows ran concurrently, the concurrency slope
    beta[M] (start ``slope``, fixed elsewhere) by truncated-normal regression on log latency.

    ttft and the tool overheads add up, so one overhead per connected set must stay fixed
    (``free_overhead``, the caller pins the standard reasoner's).
    """
    used = np.zeros(len(models), bool)
    used[rows.model] = True
    concurrent = np.bincount(rows.model, rows.load > 1, minlength=len(models)) > 0
    slope = np.zeros(len(models)) if slope is None else np.asarray(slope, np.float64)
    layout = Layout([
        Block("ttft", ttft, used, "log", (models,)), Block("speed", speed, used, "log", (models,)),
        Block("lat_sd", sd, used, "log", (models,)), Block("overhead", overhead, free_overhead, "log", (tools,)),
        Block("lat_slope", np.where(concurrent, np.maximum(slope, 0.02), slope), concurrent, "log", (models,)),
    ])
    m, t, tok, extra = rows.model, rows.tool, rows.tokens, rows.load - 1.0
    censored = np.zeros(len(m), bool)

    def objective(vec: np.ndarray) -> tuple[float, np.ndarray]:
        P, jac = layout.unpack(vec)
        slow = 1.0 + P["lat_slope"][m] * extra
        base = P["ttft"][m] + P["overhead"][t] + tok / P["speed"][m] * slow
        ll, d_mean, d_sd = normal_terms(rows.log_latency, np.log(base), P["lat_sd"][m], censored, rows.log_timeout)
        d_base = d_mean / base
        grads = {
            "ttft": np.bincount(m, d_base, minlength=len(models)),
            "overhead": np.bincount(t, d_base, minlength=len(tools)),
            "speed": np.bincount(m, -d_base * tok * slow / P["speed"][m] ** 2, minlength=len(models)),
            "lat_sd": np.bincount(m, d_sd, minlength=len(models)),
            "lat_slope": np.bincount(m, d_base * tok / P["speed"][m] * extra, minlength=len(models)),
        }
        return ll - rows.log_latency.sum(), layout.gradient(grads, jac)

    return maximize(objective, layout)


def fit_lognormal_groups(name: str, group: np.ndarray, log_y: np.ndarray, censored: np.ndarray,
                         labels: tuple[str, ...], start_mu: np.ndarray, start_sd: np.ndarray) -> Estimate:
    """Per-group log-normal (mean of log, sd of log), right-censored rows allowed: basic-tool latency and tokens."""
    used = np.zeros(len(labels), bool)
    used[group] = True
    layout = Layout([Block(f"{name}_log_median", start_mu, used, "identity", (labels,)),
                     Block(f"{name}_log_sd", start_sd, used, "log", (labels,))])

    def objective(vec: np.ndarray) -> tuple[float, np.ndarray]:
        P, jac = layout.unpack(vec)
        ll, d_mean, d_sd = normal_terms(log_y, P[f"{name}_log_median"][group], P[f"{name}_log_sd"][group], censored)
        grads = {f"{name}_log_median": np.bincount(group, d_mean, minlength=len(labels)),
                 f"{name}_log_sd": np.bincount(group, d_sd, minlength=len(labels))}
        return ll - log_y[~censored].sum(), layout.gradient(grads, jac)

    return maximize(objective, layout)


@dataclass(frozen=True)
class Proportion:
    """A Bernoulli rate: estimate, standard error, successes, trials; ``loglik`` of the data at the MLE."""

    label: str
    value: float
    se: float
    hits: int
    trials: int

    @property
    def loglik(self) -> float:
        p, k, n = self.value, self.hits, self.trials
        return (k * math.log(p) if k else 0.0) + ((n - k) * math.log1p(-p) if n - k else 0.0)


def proportion(label: str, hits: int, trials: int) -> Proportion:
    """MLE k / n with SE sqrt(p (1 - p) / n) (zero at 0 or 1, where the Wald interval is degenerate)."""
    p = hits / trials
    return Proportion(label, p, math.sqrt(p * (1.0 - p) / trials), int(hits), int(trials))
