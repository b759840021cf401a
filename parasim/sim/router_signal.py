"""The router signal: a per-(task, model) feature the manager observes, as informative about each model's
per-task effect as real routers' predictions are.

What a real router sees of a query (its embedding, its text) predicts which model will answer it right only a
little: across 21 routing methods and 5 benchmarks routers converge on a plateau well below the per-query oracle,
near per-dataset routing (The Routing Plateau, arXiv 2606.07587), and on 33 models and 21 datasets the best router
gains about +4-5% over the best single model where the per-query oracle gains +29.9% (LLMRouterBench, arXiv
2601.07206): a router captures about ``ROUTER_CAPTURE`` = 4.5 / 29.9 = 0.15 of the oracle's gain.

The simulator's per-(task, model) effect e_qm = tau_m (...) (``parasim.sim.kernel.draw_model_effects``) is what
makes models complementary per task, so it is what a router could know. The signal of model m on task q is

  s_qm = rho * e_qm / tau_m + sqrt(1 - rho^2) * eps_qm,   eps_qm ~ N(0, 1)

(e_qm / tau_m is standard normal; a model with tau_m = 0 has no effect to predict and gets eps_qm alone), so
E[e_qm | s_qm] = rho tau_m s_qm, and rho, its correlation with the standardized effect, is the router's quality.
``calibrated_rho`` sets rho for a pool and suite so that the router that reads the signal best (per task the model
maximizing logit(its accuracy on the benchmark) + k rho tau_m s_qm, at the best weight k in [0, 1]) captures
``ROUTER_CAPTURE`` of the per-query oracle's gain over the best single model, on one direct call per model and task
simulated by the simulator itself (``router_capture``). Where the best model of each benchmark already captures that
much (a pool of specialists), rho is 0: the published routers sit near that per-dataset plateau, so a query-level
signal would only put the simulated router above them.
The calibration fixes what a router's prediction is worth, not what a manager achieves with it: the manager has to
learn to read the signal in training.

The noise eps_qm is a hash of the task's own draws (its difficulty and every model's effect, bit for bit), not a
stream draw: the signal is a pure function of the lane record, so it needs no state, consumes no random numbers
(every trajectory without the signal stays as it was), and two lanes that play the identical task (keyed tasks)
see the identical signal, single env or vectorized.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from parasim.pools.harness import with_harness
from parasim.pools.pool import load_pool
from parasim.sim.kernel import C_ANSWER, F_Z, TARGET_QUESTION
from parasim.sim.tables import MM_TAU

ROUTER_CAPTURE = 0.15  # LLMRouterBench: best router about +4.5% over the best single model, oracle +29.9%
CALIBRATION_TASKS = 20_000  # tasks of one direct call per model (the capture's SE is about 0.01 at this size)
CALIBRATION_SEED = 20_260_601

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def task_noise(z: np.ndarray, effect: np.ndarray) -> np.ndarray:
    """Standard normals eps[n, m], one per lane and model, each a hash of the lane's task draws: its difficulty
    ``z`` (float64[N]) and every model's effect ``effect`` (float64[N, M]), bit for bit, and the model's index."""
    with np.errstate(over="ignore"):
        h = _mix(np.ascontiguousarray(z, np.float64).view(np.uint64) + _GOLDEN)
        for m in range(effect.shape[1]):
            h = _mix(h ^ (np.ascontiguousarray(effect[:, m], np.float64).view(np.uint64) + _GOLDEN))
        idx = np.arange(effect.shape[1], dtype=np.uint64)
        a = _mix(h[:, None] + (idx[None, :] * np.uint64(2) + np.uint64(1)) * _GOLDEN)
        b = _mix(a + _GOLDEN)
    u1 = ((a >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)  # (0, 1): log stays finite
    u2 = (b >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


def check_rho(rho: float) -> float:
    """The signal's correlation with the standardized effect, a number in [0, 1]."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not (0.0 <= float(rho) <= 1.0):
        raise ValueError(f"router_signal: rho must be a number in [0, 1], got {rho!r}")
    return float(rho)


def router_signal(lanes: np.ndarray, tau: np.ndarray, rho: float) -> np.ndarray:
    """The signal s[n, m] (float32[N, M]; module docstring) of the lane records ``lanes`` (``lane_dtype``) for the
    pool's M models, whose effect SDs are ``tau`` (float64[M], the simulator's tables)."""
    effect = lanes["effect"][:, :len(tau)]
    return _signal(rho, standardized(effect, tau), task_noise(lanes["st_f"][:, F_Z], effect), tau)


def standardized(effect: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """The effects e[n, m] over their SDs tau[m] (standard normal), 0 for a model without an effect (tau 0): what
    the signal and the calibration's router both read."""
    return np.where(tau > 0, effect / np.where(tau > 0, tau, 1.0), 0.0)


def _signal(rho: float, standard: np.ndarray, noise: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """rho * standard + sqrt(1 - rho^2) * noise, and the noise alone for a model without an effect (tau 0): a
    standard normal either way."""
    return np.where(tau > 0, rho * standard + math.sqrt(1.0 - rho * rho) * noise, noise).astype(np.float32)


class DirectCalls(NamedTuple):
    """One direct call of every pool model on each of n tasks, and what a router sees of each task."""

    right: np.ndarray  # bool[n, M] the call's answer was the gold one
    bench: np.ndarray  # int64[n] the task's benchmark (index into the suite's benchmarks present)
    standard: np.ndarray  # float64[n, M] the standardized effect e / tau (0 where tau = 0)
    noise: np.ndarray  # float64[n, M] the signal's noise (``task_noise``)
    tau: np.ndarray  # float64[M]


def direct_calls(pool: object, suite: object, n: int = CALIBRATION_TASKS, seed: int = CALIBRATION_SEED,
                 harness: dict | None = None) -> DirectCalls:
    """``n`` tasks of the suite, each played by M lanes (keyed: the identical task) that make one direct call (the
    pool's first agent solver, on the question) of their model: the outcomes a router's choice is scored on."""
    from parasim.pools.descriptors import direct_tool
    from parasim.sim import Simulator

    spec = with_harness(load_pool(pool), harness)
    m = spec.num_models
    sim = Simulator(spec, suite, n * m, max_rounds=1, max_parallel=1)
    # the lanes' call streams start past the task streams' seeds: a lane seeded like its task would replay, in its
    # call, the uniforms that drew the task
    sim.seed(np.arange(n * m) + seed + n)
    sim.reset(task_seeds=np.tile(np.arange(n) + seed, m))
    actions = np.zeros((n * m, len(sim.nvec)), np.int64)
    actions[:, 1] = direct_tool(sim.pool)
    actions[:, 2] = np.repeat(np.arange(m), n)
    actions[:, 3] = TARGET_QUESTION
    sim.step(actions, np.zeros(n * m, np.uint8))
    answer = sim.state.call_i[:, 0, C_ANSWER].reshape(m, n).T
    status = sim.state.last_status[:, 0].reshape(m, n).T
    right = (answer == 0) & (status == 0)
    lanes = sim.lane_records[:n]
    tau = sim.tables.mm[MM_TAU, :m].astype(np.float64)
    effect = lanes["effect"][:, :m]
    _, bench = np.unique(sim.tasks(slice(0, n))["benchmark"], return_inverse=True)
    return DirectCalls(right, bench.astype(np.int64), standardized(effect, tau),
                       task_noise(lanes["st_f"][:, F_Z], effect), tau)


class Capture(NamedTuple):
    """A router's accuracy on ``DirectCalls`` against the best single model and the per-query oracle."""

    single: float  # the best single model's accuracy
    per_benchmark: float  # the best model of each benchmark's (rho = 0: what a router without the signal gets)
    router: float  # the router's that reads the signal best
    oracle: float  # right when any model is right
    capture: float  # (router - single) / (oracle - single)
    shrink: float  # the router's weight on E[e | s] = rho tau s (``READINGS``)


# The router's weight on E[e_m | s_m] = rho tau_m s_m, relative to 1: logit(accuracy) is a benchmark's average
# log-odds shrunk towards 0 by the spread of its tasks' difficulty, so the best weight on the signal's shift is below
# 1; the router takes the best of these.
READINGS = tuple(np.round(np.linspace(0.0, 1.0, 21), 2))


def router_choice(calls: DirectCalls, rho: float, shrink: float = 1.0) -> np.ndarray:
    """Per task, the model a router reading the signal picks (int64[n]): the one maximizing logit(its accuracy on
    the task's benchmark, from the calls) + shrink * rho tau_m s_m; at rho 0 the best model of the task's benchmark."""
    rho = check_rho(rho)
    right = calls.right.astype(np.float64)
    nb = int(calls.bench.max()) + 1
    acc = np.clip(np.stack([right[calls.bench == b].mean(0) for b in range(nb)]), 1e-4, 1 - 1e-4)  # [B, M]
    base = np.log(acc / (1 - acc))[calls.bench]  # [n, M]
    signal = _signal(rho, calls.standard, calls.noise, calls.tau).astype(np.float64)
    return np.argmax(base + shrink * rho * calls.tau[None, :] * signal, 1)


def router_capture(calls: DirectCalls, rho: float) -> Capture:
    """The accuracy of the router that reads the signal best (``router_choice`` at the best of ``READINGS``, so never
    below the per-benchmark router) against the best single model and the per-query oracle, scored on the calls'
    outcomes (capture NaN when the oracle gains nothing: one model, or models that never differ)."""
    right = calls.right.astype(np.float64)
    rows = np.arange(len(right))
    single = float(right.mean(0).max())
    per_bench = float(right[rows, router_choice(calls, 0.0)].mean())
    scored = [(float(right[rows, router_choice(calls, rho, k)].mean()), k) for k in READINGS]
    router, shrink = max(scored, key=lambda t: t[0])
    oracle = float(right.max(1).mean())
    gain = oracle - single
    return Capture(single, per_bench, router, oracle, (router - single) / gain if gain > 0 else float("nan"),
                   float(shrink))


def fit_rho(calls: DirectCalls, capture: float = ROUTER_CAPTURE) -> float:
    """The rho at which ``router_capture`` is ``capture`` (bisection; the capture rises with rho): 0 when the
    per-benchmark router already captures that much or there is no gain to capture (one model), 1 when even rho = 1
    captures less."""
    at_zero = router_capture(calls, 0.0).capture
    if not math.isfinite(at_zero) or at_zero >= capture:
        return 0.0
    if router_capture(calls, 1.0).capture <= capture:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if router_capture(calls, mid).capture < capture else (lo, mid)
    return 0.5 * (lo + hi)


@lru_cache(maxsize=32)
def _calibrated(pool: str, suite: str, harness_json: str) -> float:
    return fit_rho(direct_calls(pool, suite, harness=json.loads(harness_json) or None))


def calibrated_rho(pool: object, suite: object, harness: dict | None = None) -> float:
    """The pool's rho on the suite (``fit_rho`` on ``direct_calls``): computed once per process for a pool and a
    suite given by name or path (with the harness), each time for a PoolSpec or TaskSuite object."""
    if isinstance(pool, str) and isinstance(suite, str):
        return _calibrated(pool, suite, json.dumps(harness or {}, sort_keys=True))
    return fit_rho(direct_calls(pool, suite, harness=harness))


class RouterSetting(NamedTuple):
    """An env's router signal: its rho and the pool models' effect SDs (the simulator's tables)."""

    rho: float
    tau: np.ndarray  # float64[M]

    def signal(self, lanes: np.ndarray) -> np.ndarray:
        """The signal of the lane records ``lanes`` (float32[N, M])."""
        return router_signal(lanes, self.tau, self.rho)


ROUTER_OPTIONS = "None or 'off' (no router key), True or 'calibrated' (the pool's calibrated rho), or rho in [0, 1]"


ROUTER_KEY = "router"  # the observation key of the signal


def router_request(value: object) -> float | str | None:
    """The env option ``router_signal`` checked (``ROUTER_OPTIONS``; anything else is a ValueError): None when off,
    "calibrated", or rho."""
    if value is None or value is False or value == "off":
        return None
    if value is True or value == "calibrated":
        return "calibrated"
    if isinstance(value, str):
        try:
            return check_rho(float(value))
        except ValueError:
            raise ValueError(f"router_signal: expected {ROUTER_OPTIONS}, got {value!r}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return check_rho(value)
    raise ValueError(f"router_signal: expected {ROUTER_OPTIONS}, got {value!r}")


def router_setting(value: object, sim: object, pool: object, suite: object,
                   harness: dict | None = None) -> RouterSetting | None:
    """The env option ``router_signal`` (``ROUTER_OPTIONS``) for a simulator ``sim`` built from ``pool``, ``suite``
    and ``harness`` (the calibration's own simulator is built from the same three): None when off."""
    request = router_request(value)
    if request is None:
        return None
    rho = calibrated_rho(pool, suite, harness) if request == "calibrated" else float(request)
    m = sim.pool.num_models  # type: ignore[attr-defined]
    return RouterSetting(rho, sim.tables.mm[MM_TAU, :m].astype(np.float64))  # type: ignore[attr-defined]
