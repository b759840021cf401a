"""Where a pool's models are served and the harness that calls them: the parts of a pool file that say how fast a
call is under load and when its output is cut off (docs/simulator.md, "Deployment and harness").

- ``deployment`` (per MODEL, optional): ``kind`` "api" (a provider: per-request speed independent of what else the
  manager sends, ``provider`` names it) or "self_hosted" (``gpu``, ``gpus_per_replica``, ``replicas``,
  ``precision``, ``active_params_b``, ``total_params_b``, ``engine``). Absent: an API model.
  The model's ``latency`` group gives its single-request TTFT and decode speed and, self-hosted only, the optional
  ``concurrency_slope`` beta: with ``c`` concurrent requests on one replica, per-request decode speed is
  ``tokens_per_s / (1 + beta (c - 1))``; a round's ``n`` calls to the model spread over its replicas,
  ``c = ceil(n / replicas)``.
- ``protocol.max_output_tokens`` is the harness's generation cap: a call whose sampled output passes it is
  TRUNCATED (no answer) and costs the capped tokens and their latency. ``protocol.temperature`` and
  ``protocol.reasoning_effort`` (optional) name the sampling setting the pool's token distributions and
  harness-corrected accuracies describe.
- An accuracy target may carry ``cap_tokens``, the generation cap of the setting it was published at (absent:
  uncapped). Skills are solved so that the target is the share of calls right under *that* cap, truncated calls
  counted wrong (``capped_accuracy``), so the same skill gives the harness's accuracy under its own cap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.special import ndtr

import parasim.protocol  # noqa: F401  (loads before param_groups, which the protocol package imports back)
from parasim.config.env_options import check_harness
from parasim.pools.param_groups import SpecError, number, only_keys, prompt_text_field, show

DEPLOYMENT_KINDS = ("api", "self_hosted")
SELF_HOSTED_KEYS = ("gpu", "gpus_per_replica", "replicas", "precision", "active_params_b", "total_params_b", "engine")
DEPLOYMENT_KEYS = ("kind", "provider", *SELF_HOSTED_KEYS)
REASONING_EFFORTS = ("low", "medium", "high")
HARNESS_KEYS = ("temperature", "reasoning_effort")
MAX_REPLICAS = 64
_TEXT_CHARS = 64
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(48)


@dataclass(frozen=True)
class Deployment:
    """Where one model is served (``kind`` "api" or "self_hosted"); ``replicas`` servers share its calls."""

    kind: str = "api"
    provider: str = ""
    gpu: str = ""
    gpus_per_replica: int = 0
    replicas: int = 1
    precision: str = ""
    active_params_b: float = 0.0
    total_params_b: float = 0.0
    engine: str = ""

    @property
    def self_hosted(self) -> bool:
        return self.kind == "self_hosted"


def _int_field(g: dict, key: str, path: str, lo: int, hi: int) -> int:
    v = number(g, key, path, lo, hi)
    if v != int(v):
        raise SpecError(f"{path}.{key}: expected an integer in [{lo}, {hi}], got {show(g[key])}")
    return int(v)


def parse_deployment(g: dict, path: str) -> Deployment:
    """A MODEL's ``deployment`` group (its keys and source already checked by the caller's group check)."""
    kind = g.get("kind")
    if kind not in DEPLOYMENT_KINDS:
        raise SpecError(f"{path}.kind: expected one of {list(DEPLOYMENT_KINDS)}, got {show(kind)}")
    if kind == "api":
        only_keys(g, ("kind", "provider", "source"), path)
        provider = prompt_text_field(g["provider"], f"{path}.provider", _TEXT_CHARS) if "provider" in g else ""
        return Deployment(kind="api", provider=provider)
    only_keys(g, ("kind", *SELF_HOSTED_KEYS, "source"), path)
    missing = [k for k in SELF_HOSTED_KEYS if k not in g]
    if missing:
        raise SpecError(f"{path}.{missing[0]}: missing (a self_hosted deployment needs {list(SELF_HOSTED_KEYS)})")
    text = {k: prompt_text_field(g[k], f"{path}.{k}", _TEXT_CHARS) for k in ("gpu", "precision", "engine")}
    active = number(g, "active_params_b", path, 0.01, 1e4)
    total = number(g, "total_params_b", path, 0.01, 1e4)
    if active > total:
        raise SpecError(f"{path}.active_params_b: {active:g} exceeds total_params_b {total:g}")
    return Deployment(kind="self_hosted", gpus_per_replica=_int_field(g, "gpus_per_replica", path, 1, 1024),
                      replicas=_int_field(g, "replicas", path, 1, MAX_REPLICAS), active_params_b=active,
                      total_params_b=total, **text)


def concurrency_slope(latency: dict, path: str, deployment: Deployment) -> float:
    """``latency.concurrency_slope`` (beta in [0, 10]); only a self-hosted model's speed depends on its load."""
    if "concurrency_slope" not in latency:
        return 0.0
    beta = number(latency, "concurrency_slope", path, 0, 10)
    if beta > 0 and not deployment.self_hosted:
        raise SpecError(f"{path}.concurrency_slope: {beta:g} needs a self_hosted deployment (an API provider's "
                        "per-request speed does not depend on the manager's other calls); set it to 0 or add "
                        "deployment.kind='self_hosted'")
    return beta


@dataclass(frozen=True)
class SamplingSetting:
    """The sampling setting a pool is calibrated at (None: not stated)."""

    temperature: float | None = None
    reasoning_effort: str | None = None


def parse_sampling(proto: dict, path: str) -> SamplingSetting:
    """``protocol.temperature`` in [0, 2] and ``protocol.reasoning_effort`` (one of REASONING_EFFORTS), optional."""
    temperature = number(proto, "temperature", path, 0, 2) if "temperature" in proto else None
    effort = proto.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise SpecError(f"{path}.reasoning_effort: expected one of {list(REASONING_EFFORTS)}, got {show(effort)}")
    return SamplingSetting(temperature, effort)


def parse_cap(entry: dict, path: str) -> float:
    """An accuracy target's ``cap_tokens`` (the published setting's generation cap), inf when absent."""
    return number(entry, "cap_tokens", path, 1, 1e7) if "cap_tokens" in entry else math.inf


def truncation_share(cap: np.ndarray | float, tok_mu: np.ndarray | float, alpha: np.ndarray | float,
                     tok_sd: np.ndarray | float, z: np.ndarray | float) -> np.ndarray:
    """P(T > cap | z) for T = exp(tok_mu + alpha z + tok_sd e), e ~ N(0, 1): a call's chance of truncation on a task
    of difficulty z (broadcasts; 0 for an infinite cap, a step where tok_sd is 0)."""
    cap = np.asarray(cap, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.log(cap) - (np.asarray(tok_mu) + np.asarray(alpha) * np.asarray(z))
        sd = np.asarray(tok_sd, np.float64)
        share = np.where(sd > 0, ndtr(-gap / np.where(sd > 0, sd, 1.0)), (gap < 0).astype(np.float64))
    return np.where(np.isinf(cap), 0.0, share)


def capped_accuracy(theta: np.ndarray, mu: np.ndarray, sigma: np.ndarray, tau: np.ndarray, cap: np.ndarray,
                    tok_mu: np.ndarray, alpha: np.ndarray, tok_sd: np.ndarray) -> np.ndarray:
    """Share of direct calls right under a generation cap, truncated calls counted wrong:
    E_{z, e}[(1 - P(T > cap | z)) sigmoid(theta - z + tau e)], z ~ N(mu, sigma), e ~ N(0, 1), by 48 x 48
    Gauss-Hermite (broadcasts over the leading axes). An infinite cap gives the uncapped accuracy."""
    args = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in (theta, mu, sigma, tau, cap, tok_mu, alpha,
                                                                     tok_sd)))
    theta, mu, sigma, tau, cap, tok_mu, alpha, tok_sd = (a[..., None, None] for a in args)
    z = mu + math.sqrt(2.0) * sigma * _GH_X[:, None]
    e = math.sqrt(2.0) * _GH_X[None, :]
    keep = 1.0 - truncation_share(cap, tok_mu, alpha, tok_sd, z)
    p = keep / (1.0 + np.exp(-(theta - z + tau * e)))
    return (p * _GH_W[:, None] * _GH_W[None, :]).sum((-1, -2)) / math.pi


def solve_capped_skill(target: np.ndarray, mu: np.ndarray, sigma: np.ndarray, tau: np.ndarray, cap: np.ndarray,
                       tok_mu: np.ndarray, alpha: np.ndarray, tok_sd: np.ndarray) -> np.ndarray:
    """Invert ``capped_accuracy`` in theta by bisection on [-30, 30]. Returns (theta, ceiling): the ceiling is the
    accuracy as theta grows (the share of calls never truncated); a target at or above it has no solution, and
    the caller refuses it (``parasim.pools.pool``)."""
    ceiling = capped_accuracy(np.full(np.shape(target), 60.0), mu, sigma, tau, cap, tok_mu, alpha, tok_sd)
    lo, hi = np.full(np.shape(target), -30.0), np.full(np.shape(target), 30.0)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        up = capped_accuracy(mid, mu, sigma, tau, cap, tok_mu, alpha, tok_sd) < target
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    return 0.5 * (lo + hi), ceiling


def with_harness(pool: Any, harness: Any = None) -> Any:
    """``pool`` (a PoolSpec) under an env's ``harness`` option (``parasim.config.env_options.check_harness``): its
    ``max_output_tokens`` replaces the pool's cap; ``temperature`` carries the pool's call model from the temperature
    its figures are stated at to another (``at_temperature``; refused for a pool that states none);
    ``reasoning_effort`` can only name the pool's own (a pool has no figures for another effort), so another value is
    refused naming the allowed one. The pool itself when nothing changes."""
    opts = check_harness(harness)
    effort = opts.get("reasoning_effort")
    if effort is not None and effort != pool.sampling.reasoning_effort:
        raise ValueError(f"harness.reasoning_effort: pool {pool.name!r} is calibrated at "
                         f"{pool.sampling.reasoning_effort!r} only (its token distributions and accuracy targets are "
                         f"that setting's); got {effort!r}")
    temperature = opts.get("temperature")
    if temperature is not None and temperature != pool.sampling.temperature:
        pool = at_temperature(pool, temperature)
    cap = opts.get("max_output_tokens")
    return pool if cap is None else replace(pool, max_output_tokens=float(cap))


GREEDY_FLOOR = 1e-6  # temperatures below this are sampled as this one: a logit scale of T_p / 1e-6 is a step


def temperature_scale(stated_at: float, sampled_at: float) -> float:
    """The softmax law's factor on a log-odds stated at temperature ``stated_at`` for sampling at ``sampled_at``:
    stated_at / sampled_at (sampling at T draws from softmax(l / T)); the one definition of the law, which
    ``at_temperature`` applies to a pool's calls and ``parasim.calibration.joint_fit.temperature_spread`` to a fitted
    spread. Both temperatures must be finite and > 0."""
    for name, t in (("stated_at", stated_at), ("sampled_at", sampled_at)):
        if not (math.isfinite(t) and t > 0):
            raise ValueError(f"temperature_scale: {name} must be a finite temperature > 0, got {t!r}")
    return float(stated_at) / float(sampled_at)


def at_temperature(pool: Any, temperature: float) -> Any:
    """``pool`` with its calls sampled at ``temperature`` instead of the temperature T_p its figures are stated at
    (``protocol.temperature``), by the softmax law docs/simulator.md section 8 tests on the published cons@64 pairs:
    sampling at T divides every log-odds by T, so each call's log-odds of the right answer is scaled by T_p / T
    (``PoolSpec.logit_scale``: the skill, the difficulty's spread and the per-task effects alike, so accuracy moves
    towards 0 or 1 as T falls and towards 1/2 as it rises); and the share of a model's wrong answers on its preferred
    one is kappa^(T / T_p), 1 at T = 0 (a greedy model's wrong answer is the same every time) and falling with T
    (an assumed form: section 8 fits kappa at one temperature only). Token counts, latencies, the reviewer's rates and
    anchoring stay the pool's (no figures say how they move). Refused for a pool that states no temperature or
    states 0 (greedy figures carry nothing to a temperature above 0)."""
    t_p = pool.sampling.temperature
    if t_p is None:
        raise ValueError(f"harness.temperature: pool {pool.name!r} states no temperature (protocol.temperature), so "
                         f"its figures cannot be carried to {temperature!r}")
    if t_p == 0.0:
        raise ValueError(f"harness.temperature: pool {pool.name!r} is stated at temperature 0 (greedy figures: the "
                         f"law cannot carry them to {temperature!r})")
    return replace(pool, logit_scale=pool.logit_scale * temperature_scale(t_p, max(temperature, GREEDY_FLOOR)),
                   kappa=pool.kappa ** (temperature / t_p), sampling=replace(pool.sampling, temperature=temperature))
