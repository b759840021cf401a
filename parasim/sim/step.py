"""The compiled entry points: reset and step every lane in one call, writing each lane's observation after it.

``reset_lanes`` and ``step_lanes`` take the lane state (``LaneArrays``: the lane records and the per-slot
arrays), the suite's row records and row weights, the parameter record (``parasim.sim.tables.kernel_params``)
and the observation buffers (``ObsBuffers``), in that order, so the Python side calls them as
``step_lanes(actions, reset_first, done, *lane_arrays, rows, row_cdf, params, *obs)``.

Each entry point first takes ``borrowed`` views of its arrays: numba counts references to arrays, and every
array passed to an inlined per-lane function costs an atomic increment and decrement per lane (a third of the
step's time before this); a borrowed view has no reference count, so those updates compile away.
"""
from __future__ import annotations

from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from parasim.protocol.schema import NUM_STATUSES, NUM_TOOLS, Tool
from parasim.sim.kernel import (
    CAND_FEATURES,
    E_CONFIRMS,
    E_FLAGS,
    E_MAX_ROUNDS,
    E_SCORE,
    E_SLOTS,
    E_SUPPORT,
    F_COST,
    F_LAT,
    F_QTOK,
    F_TOKENS,
    F_USD,
    I_DOMAIN,
    I_DONE,
    I_NANS,
    I_NOK,
    I_ROUND,
    I_ROW,
    I_SEQ,
    NUM_CANDIDATES,
    NUM_TARGETS,
    reset_lane,
    step_lane,
)
from parasim.tasks import NUM_ANSWERS

_CR = int(Tool.CRITICAL_REVIEWER)
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


@njit(cache=True, inline="always")
def write_obs(i, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """Lane ``i``'s observation from its record ``L``: candidates ranked by the termination score (ids never
    shown)."""
    env = P.env
    st_i, st_f, ev, order = L.st_i, L.st_f, L.ev, L.order
    nans = st_i[I_NANS]
    for c in range(4):
        o_task[i, c] = 0.0
    o_task[i, st_i[I_DOMAIN]] = 1.0
    o_task[i, 4] = 1.0 if nans == NUM_ANSWERS else 0.0
    o_task[i, 5] = 1.0 - o_task[i, 4]
    o_task[i, 6] = nans / NUM_ANSWERS
    o_task[i, 7] = st_f[F_QTOK] / 1000.0
    o_round[i, 0] = st_i[I_ROUND]
    o_round[i, 1] = env[E_MAX_ROUNDS] - st_i[I_ROUND]
    o_budget[i, 0] = st_f[F_TOKENS]
    o_budget[i, 1] = st_f[F_COST]
    o_budget[i, 2] = st_f[F_USD]
    o_budget[i, 3] = st_f[F_LAT]
    # the answers with support, in first-seen order (``order``), ranked by score, earliest first on ties: one
    # insertion pass keeps the top NUM_CANDIDATES positions of ``order`` in the lane's ``scratch`` (free outside
    # a call)
    distinct = st_i[I_SEQ]
    top = L.scratch
    n_top = 0
    for j in range(distinct):
        sj = ev[order[j], E_SCORE]
        p = n_top
        while p > 0 and sj > ev[order[top[p - 1]], E_SCORE]:
            p -= 1
        if p < NUM_CANDIDATES:
            n_top = min(n_top + 1, NUM_CANDIDATES)
            for q in range(n_top - 1, p, -1):
                top[q] = top[q - 1]
            top[p] = j
    for c in range(NUM_CANDIDATES):
        for f in range(CAND_FEATURES):
            o_cand[i, c, f] = 0.0
        if c < n_top:
            a = order[top[c]]
            o_cand[i, c, 0] = 1.0
            o_cand[i, c, 1] = ev[a, E_SCORE]
            o_cand[i, c, 2] = ev[a, E_SUPPORT]
            o_cand[i, c, 3] = ev[a, E_FLAGS]
            o_cand[i, c, 4] = ev[a, E_CONFIRMS]
    o_evid[i, 0] = st_i[I_NOK]
    o_evid[i, 1] = distinct
    o_evid[i, 2] = 1.0 if distinct == 0 else 0.0
    for t in range(NUM_TOOLS):
        o_tools[i, t] = L.counts_t[t]
    for s in range(NUM_STATUSES):
        o_status[i, s] = L.counts_s[s]
    allowed = int(env[E_SLOTS])
    has_lead = 1 if distinct > 0 else 0
    # the mask's static part (stop, models, empty slots, slots past max_parallel) is written once at
    # allocation (``static_action_mask``); only the entries that depend on a leading answer change
    j = 2
    for k in range(P.slots):
        if k < allowed:
            o_mask[i, j + _CR] = has_lead
        jt = j + NUM_TOOLS + 1 + P.nm
        o_mask[i, jt + 1] = has_lead
        o_mask[i, jt + 2] = has_lead
        j = jt + NUM_TARGETS
        o_last[i, k] = last_status[i, k]


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
