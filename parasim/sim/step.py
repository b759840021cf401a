"""The compiled entry points: reset and step every lane in one call, then write the observations.

``reset_lanes`` and ``step_lanes`` take the state arrays (``SimState``), the pool/suite tables
(``SimTables``), the observation buffers (``ObsBuffers``) and the env parameters, in that order, so
the Python side calls them as ``step_lanes(actions, reset_first, done, *state, *tables, *obs, env)``.
"""
from __future__ import annotations

from numba import njit, prange

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
    I_SEQ,
    NUM_CANDIDATES,
    NUM_TARGETS,
    reset_lane,
    step_lane,
)
from parasim.tasks import NUM_ANSWERS

_CR = int(Tool.CRITICAL_REVIEWER)


@njit(cache=True, inline="always")
def write_obs(i, st_i, st_f, counts_t, counts_s, last_status, ev, arrival, scratch, num_models, env, o_task,
              o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """Lane ``i``'s observation: candidates ranked by the termination score (ids never shown)."""
    nans = st_i[i, I_NANS]
    for c in range(4):
        o_task[i, c] = 0.0
    o_task[i, st_i[i, I_DOMAIN]] = 1.0
    o_task[i, 4] = 1.0 if nans == NUM_ANSWERS else 0.0
    o_task[i, 5] = 1.0 - o_task[i, 4]
    o_task[i, 6] = nans / NUM_ANSWERS
    o_task[i, 7] = st_f[i, F_QTOK] / 1000.0
    o_round[i, 0] = st_i[i, I_ROUND]
    o_round[i, 1] = env[E_MAX_ROUNDS] - st_i[i, I_ROUND]
    o_budget[i, 0] = st_f[i, F_TOKENS]
    o_budget[i, 1] = st_f[i, F_COST]
    o_budget[i, 2] = st_f[i, F_USD]
    o_budget[i, 3] = st_f[i, F_LAT]
    # answers with support are exactly those with an arrival index (0..distinct-1); list them in arrival
    # order in the lane's scratch row (free outside a call) and rank by score, earliest first on ties
    distinct = st_i[i, I_SEQ]
    for a in range(nans):
        if arrival[i, a] >= 0:
            scratch[i, arrival[i, a]] = a
    prev = -1
    for c in range(NUM_CANDIDATES):
        best = -1
        for j in range(distinct):
            sj = ev[i, E_SCORE, scratch[i, j]]
            if prev >= 0:
                sp = ev[i, E_SCORE, scratch[i, prev]]
                if not (sj < sp or (sj == sp and j > prev)):
                    continue
            if best < 0 or sj > ev[i, E_SCORE, scratch[i, best]]:
                best = j
        for f in range(CAND_FEATURES):
            o_cand[i, c, f] = 0.0
        if best >= 0:
            a = scratch[i, best]
            o_cand[i, c, 0] = 1.0
            o_cand[i, c, 1] = ev[i, E_SCORE, a]
            o_cand[i, c, 2] = ev[i, E_SUPPORT, a]
            o_cand[i, c, 3] = ev[i, E_FLAGS, a]
            o_cand[i, c, 4] = ev[i, E_CONFIRMS, a]
            prev = best
    o_evid[i, 0] = st_i[i, I_NOK]
    o_evid[i, 1] = distinct
    o_evid[i, 2] = 1.0 if distinct == 0 else 0.0
    for t in range(NUM_TOOLS):
        o_tools[i, t] = counts_t[i, t]
    for s in range(NUM_STATUSES):
        o_status[i, s] = counts_s[i, s]
    slots = last_status.shape[1]
    allowed = int(env[E_SLOTS])
    has_lead = 1 if distinct > 0 else 0
    # the mask's static part (stop, models, empty slots, slots past max_parallel) is written once at
    # allocation (``static_action_mask``); only the entries that depend on a leading answer change
    j = 2
    for k in range(slots):
        if k < allowed:
            o_mask[i, j + _CR] = has_lead
        jt = j + NUM_TOOLS + 1 + num_models
        o_mask[i, jt + 1] = has_lead
        o_mask[i, jt + 2] = has_lead
        j = jt + NUM_TARGETS
        o_last[i, k] = last_status[i, k]


@njit(cache=True)
def reset_lanes(mask,
                st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch, call_i, call_f,
                task, task_rng,
                skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_i, row_f, row_cdf, row_dcdf,
                o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask, env):
    """Reset the lanes where ``mask`` is set and write their observations."""
    nm = skill.shape[0] - 1
    for i in range(mask.shape[0]):
        if mask[i]:
            reset_lane(i, st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, task,
                       task_rng, row_i, row_f, row_cdf, row_dcdf)
            write_obs(i, st_i, st_f, counts_t, counts_s, last_status, ev, arrival, scratch, nm, env,
                      o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)


@njit(cache=True)
def _step_range(lo, hi, actions, reset_first, done,
                st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch, call_i, call_f,
                task, task_rng,
                skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_i, row_f, row_cdf, row_dcdf,
                o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask, env):
    """Lanes lo..hi-1: the per-lane functions are inlined here, since a numba call that passes a few dozen
    arrays costs more (about 0.5 us of argument and refcount traffic) than simulating a call."""
    nm = skill.shape[0] - 1
    for i in range(lo, hi):
        if reset_first[i]:
            reset_lane(i, st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, task,
                       task_rng, row_i, row_f, row_cdf, row_dcdf)
        elif st_i[i, I_DONE] == 0:
            step_lane(i, actions, st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng,
                      scratch, call_i, call_f, skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_dcdf, env)
        done[i] = st_i[i, I_DONE]
        write_obs(i, st_i, st_f, counts_t, counts_s, last_status, ev, arrival, scratch, nm, env,
                  o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask)


@njit(cache=True)
def step_lanes(actions, reset_first, done,
               st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch, call_i, call_f,
               task, task_rng,
               skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_i, row_f, row_cdf, row_dcdf,
               o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask, env):
    """Step every lane with its action row; lanes with ``reset_first`` set reset instead (NEXT_STEP)."""
    _step_range(0, actions.shape[0], actions, reset_first, done,
                st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch, call_i, call_f,
                task, task_rng,
                skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_i, row_f, row_cdf, row_dcdf,
                o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask, env)


@njit(cache=True, parallel=True)
def step_lanes_parallel(actions, reset_first, done,
                        st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch,
                        call_i, call_f, task, task_rng,
                        skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_i, row_f, row_cdf, row_dcdf,
                        o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask, env):
    """``step_lanes`` over threads, in chunks of lanes: lanes share nothing mutable (own rows, own random
    streams), so the result is identical to the serial loop whatever the scheduling."""
    n = actions.shape[0]
    chunks = min(n, 64)
    for c in prange(chunks):
        _step_range(c * n // chunks, (c + 1) * n // chunks, actions, reset_first, done,
                    st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch,
                    call_i, call_f, task, task_rng,
                    skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_i, row_f, row_cdf, row_dcdf,
                    o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask, env)
