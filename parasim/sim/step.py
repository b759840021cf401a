"""The compiled entry points: reset and step every lane in one call, writing each lane's observation after it.

``reset_lanes`` and ``step_lanes`` take the lane state (``LaneArrays``: the lane records and the per-slot
arrays), the suite's row records and row weights, the parameter record (``parasim.sim.tables.kernel_params``)
and the observation buffers (``ObsBuffers``), in that order, so the Python side calls them as
``step_lanes(actions, reset_first, done, *lane_arrays, rows, row_cdf, params, *obs)``.

Each entry point first takes ``borrowed`` views of its arrays: numba counts references to arrays, and every
array passed to an inlined per-lane function costs an atomic increment and decrement per lane (a third of the
step's time before this); a borrowed view has no reference count, so those updates compile away.

The one-lane entry points at the end (``begin_one``, ``plan_one``, ``apply_one``, ``end_one``) are the same rules
for a call source that runs its calls outside compiled code (the real-tools env): the state and observation of
lane 0, in the argument order above, with the row records of its one task.
"""
from __future__ import annotations

from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from parasim.sim.kernel import F_LAT, F_USD, I_DONE, I_ROW, TASK_KEYED
from parasim.sim.rules import apply_round, begin_episode, end_episode, plan_round, write_obs
from parasim.sim.sim_source import reset_lane, sim_finish, step_lane
from parasim.sim.task_options import begin_options

# No division in the kernels can have a zero divisor (polynomial denominators > 0, 1 + exp(-x) >= 1, a timed-out
# latency > 0, constants), so NumPy's error model gives the same results without Python's zero checks and their
# branches to a raise in the hot code.
ERROR_MODEL = "numpy"


@intrinsic
def borrowed(typingctx, arr):
    """``arr`` as a view without a reference count (no meminfo, no parent), valid while the caller holds ``arr``:
    only for arrays that an entry point received, never to be returned or stored."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        view = context.make_array(arr)(context, builder, value=args[0])
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        view.parent = cgutils.get_null_value(view.parent.type)
        return view._getvalue()

    return arr(arr), codegen


@njit(cache=True, error_model=ERROR_MODEL)
def reset_lanes(mask, lanes, last_status, call_i, call_f, rows, row_cdf, params, o_task, o_round, o_budget, o_cand,
                o_evid, o_tools, o_status, o_last, o_mask):
    """Reset the lanes where ``mask`` is set and write their observations."""
    mask, lanes, last_status, rows, row_cdf = borrowed(mask), borrowed(lanes), borrowed(last_status), \
        borrowed(rows), borrowed(row_cdf)
    o_task, o_round, o_budget, o_cand, o_evid = borrowed(o_task), borrowed(o_round), borrowed(o_budget), \
        borrowed(o_cand), borrowed(o_evid)
    o_tools, o_status, o_last, o_mask = borrowed(o_tools), borrowed(o_status), borrowed(o_last), borrowed(o_mask)
    P = params[0]
    for i in range(mask.shape[0]):
        if mask[i]:
            L = lanes[i]
            reset_lane(L, i, last_status, rows, row_cdf, P)
            write_obs(i, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last,
                      o_mask)


@njit(cache=True, error_model=ERROR_MODEL)
def cut_lanes(mask, done, lanes, last_status, call_i, call_f, rows, row_cdf, params, o_task, o_round, o_budget,
              o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """End the running episodes of the lanes where ``mask`` is set, as episodes that never answered: the simulated
    termination model answers from the evidence so far, as at the round limit (no round, no format violation), and
    each lane's observation is written (a trainer's token limit cut the manager off mid-episode)."""
    P = params[0]
    for i in range(mask.shape[0]):
        L = lanes[i]
        if mask[i] and L.st_i[I_DONE] == 0:
            sim_finish(L, rows[L.st_i[I_ROW]], P, 0)
            done[i] = 1
            write_obs(i, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last,
                      o_mask)


@njit(cache=True, error_model=ERROR_MODEL)
def _step_range(lo, hi, actions, reset_first, done, lanes, last_status, call_i, call_f, rows, row_cdf, params,
                o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """Lanes lo..hi-1 of ``step_lanes``."""
    actions, reset_first, done, lanes = borrowed(actions), borrowed(reset_first), borrowed(done), borrowed(lanes)
    last_status, call_i, call_f = borrowed(last_status), borrowed(call_i), borrowed(call_f)
    rows, row_cdf = borrowed(rows), borrowed(row_cdf)
    o_task, o_round, o_budget, o_cand, o_evid = borrowed(o_task), borrowed(o_round), borrowed(o_budget), \
        borrowed(o_cand), borrowed(o_evid)
    o_tools, o_status, o_last, o_mask = borrowed(o_tools), borrowed(o_status), borrowed(o_last), borrowed(o_mask)
    P = params[0]
    for i in range(lo, hi):
        L = lanes[i]
        if reset_first[i]:
            reset_lane(L, i, last_status, rows, row_cdf, P)
        elif L.st_i[I_DONE] == 0:
            step_lane(L, i, last_status, call_i, call_f, rows[L.st_i[I_ROW]], P, actions)
        done[i] = L.st_i[I_DONE]
        write_obs(i, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)


@njit(cache=True, error_model=ERROR_MODEL)
def step_lanes(actions, reset_first, done, lanes, last_status, call_i, call_f, rows, row_cdf, params, o_task, o_round,
               o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """Step every lane with its action row; lanes with ``reset_first`` set reset instead (NEXT_STEP)."""
    _step_range(0, actions.shape[0], actions, reset_first, done, lanes, last_status, call_i, call_f, rows, row_cdf,
                params, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)


@njit(cache=True, parallel=True, error_model=ERROR_MODEL)
def step_lanes_parallel(actions, reset_first, done, lanes, last_status, call_i, call_f, rows, row_cdf, params, o_task,
                        o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """``step_lanes`` over threads, in chunks of lanes: lanes share nothing mutable (own records and rows, own
    random streams), so the result is identical to the serial loop whatever the scheduling."""
    n = actions.shape[0]
    chunks = min(n, 64)
    for c in prange(chunks):
        _step_range(c * n // chunks, (c + 1) * n // chunks, actions, reset_first, done, lanes, last_status, call_i,
                    call_f, rows, row_cdf, params, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status,
                    o_last, o_mask)


# ---- one lane, a phase at a time: the real-tools env's calls (``envs.real_source``) ----

@njit(cache=True, error_model=ERROR_MODEL)
def begin_one(lanes, last_status, call_i, call_f, rows, params, row, z, o_task, o_round, o_budget, o_cand, o_evid,
              o_tools, o_status, o_last, o_mask):
    """Begin lane 0's episode on row ``row`` of ``rows`` with difficulty ``z`` and its task options
    (``begin_options``; keyed by the lane's task stream when ``L.task`` says so) and write its observation."""
    lanes, last_status, rows = borrowed(lanes), borrowed(last_status), borrowed(rows)
    P = params[0]
    L = lanes[0]
    begin_episode(L, 0, last_status, P, row, rows[row], z)
    begin_options(L, P, L.task[TASK_KEYED] != 0)
    write_obs(0, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)


@njit(cache=True, error_model=ERROR_MODEL)
def plan_one(actions, lanes, last_status, call_i, call_f, params):
    """Phase (a) of lane 0's round (``plan_round``); returns the round-start leading answer id (-1 none)."""
    actions, lanes, last_status = borrowed(actions), borrowed(lanes), borrowed(last_status)
    call_i, call_f = borrowed(call_i), borrowed(call_f)
    lead, _ctx = plan_round(lanes[0], 0, last_status, call_i, call_f, params[0], actions)
    return lead


@njit(cache=True, error_model=ERROR_MODEL)
def apply_one(actions, lanes, last_status, call_i, call_f, rows, params, o_task, o_round, o_budget, o_cand, o_evid,
              o_tools, o_status, o_last, o_mask):
    """Phase (c) of lane 0's round (``apply_round``) and its observation; True when the round limit ends it."""
    actions, lanes, last_status = borrowed(actions), borrowed(lanes), borrowed(last_status)
    call_i, call_f, rows = borrowed(call_i), borrowed(call_f), borrowed(rows)
    P = params[0]
    L = lanes[0]
    ended = apply_round(L, 0, last_status, call_i, call_f, rows[L.st_i[I_ROW]], P, actions)
    write_obs(0, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)
    return ended


@njit(cache=True, error_model=ERROR_MODEL)
def end_one(lanes, last_status, params, ended_final, answer, outcome, usd, latency_s, o_task, o_round, o_budget,
            o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """End lane 0's episode (``end_episode``) with the call source's answer id and verdict, adding what the
    termination call itself cost (``usd``, ``latency_s``: 0 in simulation), and write its observation."""
    lanes, last_status = borrowed(lanes), borrowed(last_status)
    P = params[0]
    L = lanes[0]
    end_episode(L, P, ended_final, answer, outcome)
    L.st_f[F_USD] += usd
    L.st_f[F_LAT] += latency_s
    write_obs(0, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)
