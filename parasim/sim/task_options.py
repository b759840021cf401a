"""An episode's task options: which tools it offers, what each call costs, and the user's preference vector.

ToolOrchestra (Su et al., arXiv 2511.21689) trains its orchestrator on tasks that each come with their own tools and
a user preference over tools, outcome, cost and latency, which its reward weighs (the ``toolorchestra`` preset). Here
an episode gets them from the reset options ``tools_available``, ``tool_prices`` and ``preference`` (checked by
``parasim.config.env_options``), or draws them itself with the simulator's ``task_options="random"``; none of them:
every tool at the pool's price and no preference vector of its own, exactly the episode of an env without options.

They live in the lane record (``parasim.sim.state.lane_dtype``): ``tools_off`` and ``priced`` are bit masks that the
rules read per call (``parasim.sim.rules.lane_rule``, the simulated call's USD), ``price`` and ``preference`` arrays
that only a priced call and the trajectory gather read. ``begin_options`` sets them when an episode begins, inside
the compiled reset, so autoresets draw too and a single env equals a vector env's lane.

The draw (``task_options="random"``; its distributions are ours, not the paper's): each tool is offered with
probability ``OFFER_P`` (the first agent solver, whose answer the manager falls back on, always is), each tool's
price is log-uniform over [``PRICE_LO``, ``PRICE_HI``] USD per call, and the preference vector has, per tool, 0 with
probability 1/2 else U(0, 1), outcome 1, cost and latency U(0, 1) each. The draws come from the lane's own options
stream (seeded with the lane, apart from its call stream), or, for a lane reset with a ``task_seed``, from a stream
keyed by that seed, so the lanes of a GRPO group that share a task share its tools, prices and preferences.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from parasim.sim.rng import seed_state, uniform_from

# bits of a lane's ``opt_req``: options given for its next reset, kept instead of drawn or cleared
REQ_PREFERENCE, REQ_TOOLS, REQ_PRICES = 1, 2, 4
# ``task_opts`` of the parameter record: what an episode without given options gets. OPTS_NONE: no reset of these
# lanes was ever given options either, so every lane has none and ``begin_options`` has nothing to keep or clear (it
# returns without touching the record's option fields: reading them at every reset cost 6% of a 4,096-lane step);
# the first reset given options (``set_lane_options``) turns OPTS_NONE into OPTS_GIVEN: none drawn, given ones kept
# for their episode and cleared after it.
OPTS_NONE, OPTS_RANDOM, OPTS_GIVEN = 0, 1, 2
TASK_OPTION_MODES = {None: OPTS_NONE, "random": OPTS_RANDOM}
OFFER_P = 0.75  # probability that a drawn episode offers a tool
PRICE_LO, PRICE_HI = 1e-4, 1e-1  # USD per call: the range of a drawn price (log-uniform)
_LOG_LO, _LOG_SPAN = math.log(PRICE_LO), math.log(PRICE_HI) - math.log(PRICE_LO)
OPT_TAG = 0x6F7074696F6E73  # "options": keeps the options' streams apart from the call and task streams


def option_stream(seed: int) -> np.uint64:
    """The start of the options stream of a lane seeded with ``seed`` (or of a task keyed by ``seed``)."""
    return np.uint64(int(seed_state(seed)) ^ OPT_TAG)


@njit(cache=True, inline="always")
def begin_options(L, P, keyed):
    """The task options of the episode lane record ``L`` begins: the ones its reset was given (``L.opt_req``) stay;
    the others are drawn (``P.task_opts`` = OPTS_RANDOM; the whole draw is made either way, so a given option does not
    shift the stream) or cleared (every tool offered at the pool's price, no preference vector)."""
    if P.task_opts == OPTS_NONE:
        return
    req = L.opt_req
    L.opt_req = 0
    t = L.price.shape[0]
    if P.task_opts == OPTS_RANDOM:
        s = L.task_rng ^ np.uint64(OPT_TAG) if keyed else L.opt_rng
        off = 0
        for tool in range(t):
            s, u = uniform_from(s)
            if u >= OFFER_P and tool != P.direct:
                off |= 1 << tool
        if not req & REQ_TOOLS:
            L.tools_off = off
        for tool in range(t):
            s, u = uniform_from(s)
            if not req & REQ_PRICES:
                L.price[tool] = math.exp(_LOG_LO + _LOG_SPAN * u)
        if not req & REQ_PRICES:
            L.priced = (1 << t) - 1 if t < 63 else -1
        for tool in range(t):
            s, u = uniform_from(s)
            s, w = uniform_from(s)
            if not req & REQ_PREFERENCE:
                L.preference[tool] = w if u < 0.5 else 0.0
        s, wc = uniform_from(s)
        s, wl = uniform_from(s)
        if not req & REQ_PREFERENCE:
            L.preference[t], L.preference[t + 1], L.preference[t + 2] = 1.0, wc, wl
        if not keyed:
            L.opt_rng = s
        return
    if not req & REQ_TOOLS:
        L.tools_off = 0
    if not req & REQ_PRICES:
        L.priced = 0
    if not req & REQ_PREFERENCE and not math.isnan(L.preference[0]):
        for f in range(t + 3):
            L.preference[f] = math.nan


def set_lane_options(lanes: np.ndarray, params: np.ndarray, idx: np.ndarray, preference: np.ndarray | None,
                     tools_available: np.ndarray | None, tool_prices: np.ndarray | None) -> None:
    """Give lanes ``idx`` of the records ``lanes`` these options for their next reset (``begin_options`` keeps them):
    ``preference`` float64[N, T + 3], ``tools_available`` bool[N, T], ``tool_prices`` float64[N, T] (NaN: the pool's
    price), rows indexed by lane; each None leaves that option to the reset. Values are checked by the caller
    (``parasim.config.env_options``). The lanes' parameter record ``params`` leaves OPTS_NONE for OPTS_GIVEN."""
    if not len(idx) or preference is None and tools_available is None and tool_prices is None:
        return
    if params[0]["task_opts"] == OPTS_NONE:
        params[0]["task_opts"] = OPTS_GIVEN
    t = lanes.dtype["price"].shape[0]
    bits = np.int64(1) << np.arange(t, dtype=np.int64)
    req = np.zeros(len(idx), np.int64)
    if preference is not None:
        lanes["preference"][idx] = preference[idx]
        req |= REQ_PREFERENCE
    if tools_available is not None:
        lanes["tools_off"][idx] = (~tools_available[idx] * bits).sum(1)
        req |= REQ_TOOLS
    if tool_prices is not None:
        given = ~np.isnan(tool_prices[idx])
        lanes["price"][idx] = np.where(given, tool_prices[idx], 0.0)
        lanes["priced"][idx] = (given * bits).sum(1)
        req |= REQ_PRICES
    lanes["opt_req"][idx] = req


def preference_fields(lane_preference: np.ndarray) -> dict[str, np.ndarray]:
    """The trajectory fields ``preference`` and ``has_preference`` of lanes' ``preference`` arrays ([..., T + 3], NaN:
    none), as the compiled gather writes them: a lane without a vector has zeros and the flag 0."""
    own = ~np.isnan(lane_preference[..., 0])
    return {"preference": np.where(own[..., None], lane_preference, 0.0), "has_preference": own.astype(np.uint8)}
