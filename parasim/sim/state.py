"""Preallocated state and observation buffers of the batched simulator (one row per lane)."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from parasim.protocol.schema import NUM_STATUSES, NUM_TOOLS, Tool
from parasim.sim.kernel import CAND_FEATURES, NUM_CALL_F, NUM_CANDIDATES, NUM_F, NUM_I, NUM_TARGETS
from parasim.tasks import NUM_ANSWERS

TASK_FEATURES = 8  # domain one-hot (4), free-form, multiple-choice, options / 16, question tokens / 1000


class SimState(NamedTuple):
    """Everything a lane's episode carries, in the argument order of the kernels."""

    st_i: np.ndarray  # int64[N, NUM_I]
    st_f: np.ndarray  # float64[N, NUM_F]
    counts_t: np.ndarray  # int32[N, T] calls per tool
    counts_s: np.ndarray  # int32[N, S] calls per status
    last_status: np.ndarray  # int8[N, K]
    exec_prev: np.ndarray  # uint8[N, T] last call of the tool ended in EXEC_ERR
    pref: np.ndarray  # int64[N, M+1] preferred wrong answer per model
    ev: np.ndarray  # float64[N, 4, NUM_ANSWERS] score, support, flags, confirms per answer
    arrival: np.ndarray  # int64[N, NUM_ANSWERS] first-seen order, -1 unseen
    rng: np.ndarray  # uint64[N]
    scratch: np.ndarray  # int64[N, NUM_ANSWERS] ensemble samples
    call_i: np.ndarray  # int64[N, K, 2] last round, per slot: output kind, answer id (-1 none)
    call_f: np.ndarray  # float64[N, K, 5] last round, per slot: tokens in, tokens out, latency, USD, cost units
    task: np.ndarray  # int64[N, 2] the next reset's task: suite row (-1 = drawn by weight), keyed flag
    task_rng: np.ndarray  # uint64[N] start of the task stream of keyed lanes


class ObsBuffers(NamedTuple):
    """The Dict observation's arrays for all lanes (the env hands out copies)."""

    task: np.ndarray  # float32[N, 8]
    round: np.ndarray  # float32[N, 2]
    budget: np.ndarray  # float32[N, 4]
    candidates: np.ndarray  # float32[N, C, 5]
    evidence: np.ndarray  # float32[N, 3]
    tool_counts: np.ndarray  # float32[N, T]
    status_counts: np.ndarray  # float32[N, S]
    last_status: np.ndarray  # int8[N, K]
    action_mask: np.ndarray  # int8[N, sum(action_nvec)]: the per-dimension masks, concatenated


def action_nvec(slots: int, num_models: int) -> np.ndarray:
    """MultiDiscrete sizes: [stop (2)] + [tool (T + 1), model (M), target (3)] per slot."""
    return np.array([2] + [NUM_TOOLS + 1, num_models, NUM_TARGETS] * slots, np.int64)


def static_action_mask(slots: int, allowed: int, num_models: int) -> np.ndarray:
    """The action mask with no leading answer yet; steps then only flip the lead-dependent entries
    (critical_reviewer, and the carry / verify targets) of each allowed slot."""
    parts = [np.ones(2, np.int8)]
    for k in range(slots):
        tools = np.zeros(NUM_TOOLS + 1, np.int8)
        tools[NUM_TOOLS] = 1
        if k < allowed:
            tools[:NUM_TOOLS] = 1
            tools[Tool.CRITICAL_REVIEWER] = 0
        parts += [tools, np.ones(num_models, np.int8), np.array([1, 0, 0], np.int8)]
    return np.concatenate(parts)


def allocate_state(n: int, slots: int, num_models: int) -> SimState:
    return SimState(
        st_i=np.zeros((n, NUM_I), np.int64), st_f=np.zeros((n, NUM_F)),
        counts_t=np.zeros((n, NUM_TOOLS), np.int32), counts_s=np.zeros((n, NUM_STATUSES), np.int32),
        last_status=np.full((n, slots), NUM_STATUSES, np.int8), exec_prev=np.zeros((n, NUM_TOOLS), np.uint8),
        pref=np.zeros((n, num_models + 1), np.int64), ev=np.zeros((n, 4, NUM_ANSWERS)),
        arrival=np.full((n, NUM_ANSWERS), -1, np.int64), rng=np.zeros(n, np.uint64),
        scratch=np.zeros((n, NUM_ANSWERS), np.int64), call_i=np.full((n, slots, 2), -1, np.int64),
        call_f=np.zeros((n, slots, NUM_CALL_F)), task=np.tile(np.array([-1, 0], np.int64), (n, 1)),
        task_rng=np.zeros(n, np.uint64))


def allocate_obs(n: int, slots: int, num_models: int) -> ObsBuffers:
    obs = ObsBuffers(
        task=np.zeros((n, TASK_FEATURES), np.float32), round=np.zeros((n, 2), np.float32),
        budget=np.zeros((n, 4), np.float32), candidates=np.zeros((n, NUM_CANDIDATES, CAND_FEATURES), np.float32),
        evidence=np.zeros((n, 3), np.float32), tool_counts=np.zeros((n, NUM_TOOLS), np.float32),
        status_counts=np.zeros((n, NUM_STATUSES), np.float32), last_status=np.zeros((n, slots), np.int8),
        action_mask=np.zeros((n, int(action_nvec(slots, num_models).sum())), np.int8))
    obs.action_mask[:] = static_action_mask(slots, slots, num_models)
    return obs
