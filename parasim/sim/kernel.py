"""The batched simulator: reset and step of every lane as plain compiled functions over flat arrays.

PufferLib-Ocean style: all state lives in preallocated arrays (``SimState``), one row per lane; nothing
is allocated after construction; ``reset_lanes`` and ``step_lanes`` each step all lanes in one numba
call. The generative model is shared/DESIGN.md section 3 (see ``sample_call``); every number it uses
comes from the pool tables, and system-level results (what parallel rounds or heterogeneous pools buy)
are never written here: they emerge from the per-call model and the termination vote.

Answers are small integers: 0 is the gold answer, 1..A-1 wrong answers (A = the task's options, or
NUM_ANSWERS for free-form tasks). Only the verifier and the per-call sampler look at which id is gold;
the observation shows candidates ranked by the termination model's score, never their ids.
"""
from __future__ import annotations

import math

from numba import njit

from parasim.protocol.schema import NUM_STATUSES, NUM_TOOLS, Status, Tool
from parasim.sim.rng import normal, uniform
from parasim.sim.tables import (
    MD_LLR_CONFIRM,
    MD_LLR_FLAG,
    MD_SENS,
    MD_SPEC,
    MM_KAPPA,
    MM_LAM,
    MM_RHO,
    P_ENSEMBLE_K,
    P_MAX_OUT,
    P_MGR_CALL,
    P_MGR_ROUND,
    P_PROMPT,
    P_REPAIR,
    P_STATUS,
    R_BENCH,
    R_DOMAIN,
    R_MU,
    R_OPTIONS,
    R_QTOK,
    R_SIGMA,
    R_Z,
    TM_LAT_BASE,
    TM_LAT_PER_TOK,
    TM_LAT_SD,
    TM_P_EXEC,
    TM_PRICE_IN,
    TM_PRICE_OUT,
    TM_TOK_ALPHA,
    TM_TOK_SD,
    TT_COST,
    TT_FEEDBACK,
    TT_TIMEOUT,
    TT_USD_CALL,
    TT_USD_S,
)
from parasim.tasks import FREE_FORM, NUM_ANSWERS

# Subtask targets of a call.
TARGET_QUESTION, TARGET_CARRY, TARGET_VERIFY = 0, 1, 2
NUM_TARGETS = 3
EMPTY_SLOT = NUM_TOOLS  # tool value of an unused slot
NO_CALL = NUM_STATUSES  # last_status of an unused slot
NUM_CANDIDATES = 4  # candidate answers shown in the observation
CAND_FEATURES = 5  # present, score, support, flags, confirms
# Kinds of a call's output.
OUT_NONE, OUT_ANSWER, OUT_FLAG, OUT_CONFIRM = 0, 1, 2, 3

# st_i columns
(I_ROW, I_BENCH, I_DOMAIN, I_NANS, I_ROUND, I_DONE, I_CALLS, I_FMT, I_FINAL, I_ANSWER, I_NOK, I_SEQ,
 I_EPISODE) = range(13)
NUM_I = 13
# st_f columns
F_Z, F_QTOK, F_TOKENS, F_COST, F_USD, F_LAT, F_OUTCOME = range(7)
NUM_F = 7
# task[i, c] columns: the lane's task assignment (see reset_lane)
TASK_ROW, TASK_KEYED = range(2)
# ev[i, k, answer] planes
E_SCORE, E_SUPPORT, E_FLAGS, E_CONFIRMS = range(4)
# last round's per-call records: call_i[i, k, c] and call_f[i, k, c]
C_KIND, C_ANSWER = range(2)
C_TOK_IN, C_TOK_OUT, C_LAT, C_USD, C_COST = range(5)
NUM_CALL_F = 5
# env params
E_MAX_ROUNDS, E_SLOTS, E_SERIAL, E_TOKEN_BUDGET = range(4)
NUM_ENV_PARAMS = 4

_SR = int(Tool.STANDARD_REASONER)
_CR = int(Tool.CRITICAL_REVIEWER)
_ENS = int(Tool.ENSEMBLE_SOLVER)
_FIRST_BASIC = int(Tool.PYTHON)
_OK, _EXEC, _TIMEOUT = int(Status.OK), int(Status.EXEC_ERR), int(Status.TIMEOUT)
_FORMAT, _INVALID, _BUDGET = int(Status.FORMAT_ERR), int(Status.INVALID_TOOL), int(Status.BUDGET_EXCEEDED)


@njit(cache=True, inline="always")
def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@njit(cache=True, inline="always")
def draw_wrong(rng, lane, mm, row, nans, pref, kappa, row_dcdf):
    """A wrong answer: the model's preferred one with prob kappa, else a Zipf-weighted shared distractor."""
    if pref >= 0 and uniform(rng, lane) < kappa:
        return pref
    u = uniform(rng, lane)
    for j in range(nans - 1):
        if u < row_dcdf[row, j]:
            return j + 1
    return nans - 1


@njit(cache=True, inline="always")
def sample_call(rng, lane, tool, mm, target, lead, ctx, exec_before, row, bench, dom, nans, z, qtok, pref,
                scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf):
    """One OK-able call of ``tool`` by model row ``mm`` on a task; the per-call model of DESIGN.md 3.

    Status: TIMEOUT when the sampled latency passes the tool's timeout, EXEC_ERR at the pool's rate
    (code tools; times ``repair`` when the call carries the trajectory after an exec error), else OK.
    An OK solver call is right with p = sigmoid(skill[mm, b] + bonus[t, d] - z - lambda * log(1 + ctx /
    1000)) (ctx = carried context tokens, 0 for a fresh question), copies the carried leading answer
    with prob rho, and answers wrong with the model's preferred wrong answer (kappa) or a distractor.
    The reviewer flags a wrong leading answer with prob sens and a right one with prob 1 - spec.
    Returns (status, kind, answer, tokens_in, tokens_out, latency_s, usd, cost_units).
    """
    k = int(proto[P_ENSEMBLE_K]) if tool == _ENS else 1
    carried = ctx if target != TARGET_QUESTION else 0.0
    tok_in1 = proto[P_PROMPT] + qtok + carried
    mu = tok_mu[tool, mm, dom] + tm[TM_TOK_ALPHA, tool, mm] * z
    tok_out = 0.0
    lat = 0.0
    for _ in range(k):
        t1 = min(math.exp(mu + tm[TM_TOK_SD, tool, mm] * normal(rng, lane)), proto[P_MAX_OUT])
        l1 = (tm[TM_LAT_BASE, tool, mm] + t1 * tm[TM_LAT_PER_TOK, tool, mm]) * math.exp(
            tm[TM_LAT_SD, tool, mm] * normal(rng, lane))
        tok_out += t1
        lat = max(lat, l1)
    tok_in = tok_in1 * k
    status = _OK
    timeout = tt[TT_TIMEOUT, tool]
    if lat > timeout:
        tok_out *= timeout / lat
        lat = timeout
        status = _TIMEOUT
    else:
        p_exec = tm[TM_P_EXEC, tool, mm]
        if exec_before and target == TARGET_CARRY:
            p_exec *= proto[P_REPAIR]
        if p_exec > 0.0 and uniform(rng, lane) < p_exec:
            status = _EXEC
    usd = tok_in * tm[TM_PRICE_IN, tool, mm] + tok_out * tm[TM_PRICE_OUT, tool, mm] + tt[TT_USD_CALL, tool] \
        + tt[TT_USD_S, tool] * lat
    cost = tt[TT_COST, tool]
    kind = OUT_NONE
    answer = -1
    if status == _OK:
        if tool == _CR:
            if lead == 0:
                kind = OUT_FLAG if uniform(rng, lane) >= md[MD_SPEC, mm, dom] else OUT_CONFIRM
            else:
                kind = OUT_FLAG if uniform(rng, lane) < md[MD_SENS, mm, dom] else OUT_CONFIRM
            answer = lead
        else:
            kind = OUT_ANSWER
            theta = skill[mm, bench] + bonus[tool, dom] - z
            if carried > 0.0:
                theta -= mmt[MM_LAM, mm] * math.log(1.0 + carried / 1000.0)
            p = _sigmoid(theta)
            if target == TARGET_CARRY and lead >= 0 and uniform(rng, lane) < mmt[MM_RHO, mm]:
                answer = lead
            elif k == 1:
                answer = 0 if uniform(rng, lane) < p else draw_wrong(rng, lane, mm, row, nans, pref,
                                                                      mmt[MM_KAPPA, mm], row_dcdf)
            else:
                for j in range(k):
                    scratch[lane, j] = 0 if uniform(rng, lane) < p else draw_wrong(rng, lane, mm, row, nans, pref,
                                                                              mmt[MM_KAPPA, mm], row_dcdf)
                best = 0
                for j in range(k):  # plurality; ties go to the earliest sample
                    c = 0
                    cb = 0
                    for j2 in range(k):
                        c += scratch[lane, j2] == scratch[lane, j]
                        cb += scratch[lane, j2] == scratch[lane, best]
                    if c > cb:
                        best = j
                answer = scratch[lane, best]
    return status, kind, answer, tok_in, tok_out, lat, usd, cost


@njit(cache=True, inline="always")
def leading_answer(ev, arrival, i, nans):
    """The termination model's pick: highest score among answers with support, earliest on ties; -1 if none."""
    best = -1
    for a in range(nans):
        if ev[i, E_SUPPORT, a] > 0 and (best < 0 or ev[i, E_SCORE, a] > ev[i, E_SCORE, best] or (
                ev[i, E_SCORE, a] == ev[i, E_SCORE, best] and arrival[i, a] < arrival[i, best])):
            best = a
    return best


@njit(cache=True, inline="always")
def draw_task(rng, lane, row_i, row_f, row_cdf):
    """A task: a suite row by its weights, then its item (``task_item``)."""
    u = uniform(rng, lane)
    row = 0
    while row < len(row_cdf) - 1 and u >= row_cdf[row]:
        row += 1
    return task_item(rng, lane, row, row_i, row_f)


@njit(cache=True, inline="always")
def task_item(rng, lane, row, row_i, row_f):
    """The task of suite row ``row``: its difficulty is given, or drawn as z ~ N(mu_b, sigma_b)."""
    opts = row_i[row, R_OPTIONS]
    nans = NUM_ANSWERS if opts == FREE_FORM else opts
    z = row_f[row, R_Z]
    if math.isnan(z):
        z = row_f[row, R_MU] + row_f[row, R_SIGMA] * normal(rng, lane)
    return row, row_i[row, R_BENCH], row_i[row, R_DOMAIN], nans, z


@njit(cache=True, inline="always")
def reset_lane(i, st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, task, task_rng,
               row_i, row_f, row_cdf, row_dcdf):
    """Draw a new task for lane ``i`` and clear its episode accumulators.

    ``task[i]`` is the lane's task request (``TASK_ROW``: suite row or -1 = drawn by weight; ``TASK_KEYED``: 1 =
    the task's own draws, its row when drawn, difficulty and preferred wrong answers, come from the task stream
    ``task_rng[i]``, so lanes with equal requests play the identical task). The lane's stream is swapped out for
    those draws and back in after, so its tool randomness stays its own.
    """
    keyed = task[i, TASK_KEYED] != 0
    lane_stream = rng[i]
    if keyed:
        rng[i] = task_rng[i]
    if task[i, TASK_ROW] >= 0:
        row, bench, dom, nans, z = task_item(rng, i, task[i, TASK_ROW], row_i, row_f)
    else:
        row, bench, dom, nans, z = draw_task(rng, i, row_i, row_f, row_cdf)
    episode = st_i[i, I_EPISODE]
    for c in range(st_i.shape[1]):
        st_i[i, c] = 0
    st_i[i, I_ROW], st_i[i, I_BENCH], st_i[i, I_DOMAIN], st_i[i, I_NANS] = row, bench, dom, nans
    st_i[i, I_ANSWER] = -1
    st_i[i, I_EPISODE] = episode + 1
    for c in range(st_f.shape[1]):
        st_f[i, c] = 0.0
    st_f[i, F_Z], st_f[i, F_QTOK] = z, row_f[row, R_QTOK]
    for c in range(counts_t.shape[1]):
        counts_t[i, c] = 0
        exec_prev[i, c] = 0
    for c in range(counts_s.shape[1]):
        counts_s[i, c] = 0
    for c in range(last_status.shape[1]):
        last_status[i, c] = NO_CALL
    for a in range(ev.shape[2]):
        arrival[i, a] = -1
        for c in range(ev.shape[1]):
            ev[i, c, a] = 0.0
    for m in range(pref.shape[1]):
        pref[i, m] = draw_wrong(rng, i, m, row, nans, -1, 0.0, row_dcdf)
    if keyed:
        rng[i] = lane_stream


@njit(cache=True, inline="always")
def finalize_lane(i, ended_final, st_i, st_f, pref, ev, arrival, rng, skill, bonus, mmt, proto, row_dcdf):
    """The termination model answers (vote, else the manager's own direct answer); the verifier scores it."""
    nans = st_i[i, I_NANS]
    answer = leading_answer(ev, arrival, i, nans)
    if answer < 0:
        mgr = skill.shape[0] - 1
        p = _sigmoid(skill[mgr, st_i[i, I_BENCH]] + bonus[_SR, st_i[i, I_DOMAIN]] - st_f[i, F_Z])
        answer = 0 if uniform(rng, i) < p else draw_wrong(rng, i, mgr, st_i[i, I_ROW], nans, pref[i, mgr],
                                                           mmt[MM_KAPPA, mgr], row_dcdf)
    if ended_final:
        st_f[i, F_TOKENS] += proto[P_MGR_ROUND]
    st_i[i, I_FINAL] = ended_final
    st_i[i, I_ANSWER] = answer
    st_f[i, F_OUTCOME] = 1.0 if answer == 0 else 0.0
    st_i[i, I_DONE] = 1


@njit(cache=True, inline="always")
def step_lane(i, actions, st_i, st_f, counts_t, counts_s, last_status, exec_prev, pref, ev, arrival, rng, scratch,
              call_i, call_f,
              skill, bonus, tok_mu, tm, tt, mmt, md, rel_logit, proto, row_dcdf, env):
    """One manager turn of lane ``i``: ``final_answer`` or a round of up to K isolated parallel calls.

    Isolation: every call of the round sees the leading answer and context as they were when the round
    began (``lead`` and ``ctx`` are read once), so calls of one round never see each other's outputs.

    Malformed parts of the action never raise: an unknown tool or model, a slot beyond the allowed
    parallelism or a masked tool is INVALID_TOOL; a target outside the range or not applicable is
    FORMAT_ERR; a round with no call at all is a format violation.
    """
    stop = actions[i, 0]
    if stop == 1:
        finalize_lane(i, 1, st_i, st_f, pref, ev, arrival, rng, skill, bonus, mmt, proto, row_dcdf)
        return
    nm = skill.shape[0] - 1
    nans = st_i[i, I_NANS]
    row, bench, dom = st_i[i, I_ROW], st_i[i, I_BENCH], st_i[i, I_DOMAIN]
    z, qtok = st_f[i, F_Z], st_f[i, F_QTOK]
    lead = leading_answer(ev, arrival, i, nans)
    ctx = st_f[i, F_TOKENS]
    slots = last_status.shape[1]
    allowed = int(env[E_SLOTS])
    round_lat = 0.0
    round_tokens = proto[P_MGR_ROUND]
    n_calls = 0
    bad = stop != 0
    loga = math.log(nans - 1.0)
    for k in range(slots):
        tool, model, target = actions[i, 1 + 3 * k], actions[i, 2 + 3 * k], actions[i, 3 + 3 * k]
        call_i[i, k, C_KIND] = OUT_NONE
        call_i[i, k, C_ANSWER] = -1
        for c in range(NUM_CALL_F):
            call_f[i, k, c] = 0.0
        if tool == EMPTY_SLOT:
            last_status[i, k] = NO_CALL
            continue
        n_calls += 1
        round_tokens += proto[P_MGR_CALL]
        valid_tool = 0 <= tool < NUM_TOOLS
        agent = valid_tool and tool < _FIRST_BASIC
        if not valid_tool or k >= allowed or (agent and not 0 <= model < nm) or (tool == _CR and lead < 0):
            status = _INVALID
        elif not 0 <= target < NUM_TARGETS or (target != TARGET_QUESTION and lead < 0) or (
                tool == _CR) != (target == TARGET_VERIFY):
            status = _FORMAT
        elif ctx >= env[E_TOKEN_BUDGET]:
            status = _BUDGET
        else:
            mm = model if agent else nm
            status, kind, answer, tok_in, tok_out, lat, usd, cost = sample_call(
                rng, i, tool, mm, target, lead, ctx, exec_prev[i, tool] != 0, row, bench, dom, nans, z, qtok,
                pref[i, mm], scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf)
            exec_prev[i, tool] = status == _EXEC
            call_i[i, k, C_KIND], call_i[i, k, C_ANSWER] = kind, answer
            call_f[i, k, C_TOK_IN], call_f[i, k, C_TOK_OUT], call_f[i, k, C_LAT] = tok_in, tok_out, lat
            call_f[i, k, C_USD], call_f[i, k, C_COST] = usd, cost
            st_f[i, F_COST] += cost
            st_f[i, F_USD] += usd
            round_lat = round_lat + lat if env[E_SERIAL] != 0 else max(round_lat, lat)
            round_tokens += tok_out * tt[TT_FEEDBACK, tool] if status == _OK else proto[P_STATUS]
            if kind == OUT_ANSWER:
                if arrival[i, answer] < 0:
                    arrival[i, answer] = st_i[i, I_SEQ]
                    st_i[i, I_SEQ] += 1
                ev[i, E_SUPPORT, answer] += 1.0
                ev[i, E_SCORE, answer] += max(0.05, rel_logit[bench, tool, mm] + loga)
                st_i[i, I_NOK] += 1
            elif kind == OUT_FLAG:
                ev[i, E_FLAGS, answer] += 1.0
                ev[i, E_SCORE, answer] += md[MD_LLR_FLAG, mm, dom]
            elif kind == OUT_CONFIRM:
                ev[i, E_CONFIRMS, answer] += 1.0
                ev[i, E_SCORE, answer] += md[MD_LLR_CONFIRM, mm, dom]
            counts_t[i, tool] += 1
        if status == _FORMAT or status == _INVALID:
            bad = True
        if status == _FORMAT or status == _INVALID or status == _BUDGET:
            round_tokens += proto[P_STATUS]
        last_status[i, k] = status
        counts_s[i, status] += 1
    if n_calls == 0:
        bad = True
    st_i[i, I_CALLS] += n_calls
    st_i[i, I_FMT] += bad
    st_i[i, I_ROUND] += 1
    st_f[i, F_TOKENS] += round_tokens
    st_f[i, F_LAT] += round_lat
    if st_i[i, I_ROUND] >= env[E_MAX_ROUNDS]:
        finalize_lane(i, 0, st_i, st_f, pref, ev, arrival, rng, skill, bonus, mmt, proto, row_dcdf)
