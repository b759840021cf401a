"""The simulator's call source: what the simulated tools and the termination model draw, between the rules.

The rules of a round are ``parasim.sim.rules`` (plan, apply, end, observation). What this module adds is the
simulator's side of a round: the per-call model (``parasim.sim.kernel.call_outcome``) fills each runnable slot's
outcome record, a new episode draws its task (row, difficulty, the models' preferred wrong answers and per-task
effects: ``draw_model_effects``), and the termination model answers (the vote's lead, else the manager's own
direct answer). ``step_lane`` is one lane's compiled step, plan -> simulated calls -> apply, inlined into the step
kernels (``parasim.sim.step``).
"""
from __future__ import annotations

import math

from numba import njit

from parasim.config.env_options import SLOT_LIMIT
from parasim.pools.pool import MAX_MODELS
from parasim.protocol.schema import Status
from parasim.sim.kernel import (
    C_ANSWER,
    C_COST,
    C_KIND,
    C_LAT,
    C_TOK_IN,
    C_TOK_OUT,
    C_USD,
    F_QTOK,
    F_TOKENS,
    F_Z,
    I_BENCH,
    I_DOMAIN,
    I_NANS,
    MM_KAPPA,
    NO_CALL,
    OUT_NONE,
    TASK_KEYED,
    TASK_ROW,
    TM_TOK_ALPHA,
    call_outcome,
    difficulty,
    draw_model_effects,
    pick_row,
    wrong_answer,
)
from parasim.sim.rng import uniform_from
from parasim.sim.rules import (
    PENDING,
    STOP,
    account_slot,
    begin_episode,
    call_row,
    end_episode,
    lane_lead,
    plan_slot,
    round_end,
    round_start,
    slot_call,
)
from parasim.sim.tables import E_SERIAL, E_TOKEN_BUDGET, MM_REPLICAS
from parasim.sim.task_options import begin_options

_EXEC = int(Status.EXEC_ERR)


# A round's concurrent requests per model row, counted while it is planned: 5 bits per row (a count is at most
# SLOT_LIMIT = 16 calls), rows 0..11 in one int64 and 12..MAX_MODELS in a second, so the counts stay in registers.
_ROW_BITS, _ROWS_PER_WORD = 5, 12
assert SLOT_LIMIT < 1 << _ROW_BITS and MAX_MODELS + 1 <= 2 * _ROWS_PER_WORD


@njit(cache=True, inline="always")
def count_request(lo, hi, mm):
    """The per-row request counts (``lo``, ``hi``) with one more request on model row ``mm``."""
    if mm < _ROWS_PER_WORD:
        return lo + (1 << (_ROW_BITS * mm)), hi
    return lo, hi + (1 << (_ROW_BITS * (mm - _ROWS_PER_WORD)))


@njit(cache=True, inline="always")
def server_load(lo, hi, mm, P):
    """Concurrent requests on one server of model row ``mm`` this round: the round's calls that run with that row
    (``count_request`` over the planned slots), spread over the model's replicas, ceil(n / R)."""
    word, shift = (lo, mm) if mm < _ROWS_PER_WORD else (hi, mm - _ROWS_PER_WORD)
    n = (word >> (_ROW_BITS * shift)) & ((1 << _ROW_BITS) - 1)
    return math.ceil(n / P.mm[mm, MM_REPLICAS])


@njit(cache=True, inline="always")
def sim_call(L, i, k, call_i, call_f, R, P, s, tool, model, target, lead, ctx, nans, bench, dom, z, qtok, load):
    """Phase (b) with simulated tools for the pending slot ``k`` of lane ``i`` (on a task of ``nans`` answer ids,
    benchmark, domain, difficulty and question tokens as given): ``call_outcome`` on the stream state ``s``, seeing
    the round-start ``lead`` and ``ctx``, written to the slot's outcome record. ``L.exec_prev`` is the call model's
    memory of each tool's last exec error (a carried call repairs it at the pool's rate); ``load`` the concurrent
    requests on the model's server (``server_load``). Returns (stream state,
    status, kind, answer, tokens out, latency, USD, cost units)."""
    mm = call_row(P.tt, tool, model, P.nm)
    s, status, kind, answer, tok_in, tok_out, lat, usd, cost = call_outcome(
        s, target, lead, ctx, L.exec_prev[tool] != 0, nans, z, qtok, L.pref[mm], R.dcdf, L.scratch,
        P.tok_mu[tool, mm, dom] + P.tm[tool, mm, TM_TOK_ALPHA] * z, P.skill[mm, bench] + P.bonus[tool, dom] - z
        + L.effect[mm], P.tm[tool, mm], P.tt[tool], P.mm[mm], P.md[mm, dom], P.proto, load)
    L.exec_prev[tool] = status == _EXEC
    call_i[i, k, C_KIND], call_i[i, k, C_ANSWER] = kind, answer
    call_f[i, k, C_TOK_IN], call_f[i, k, C_TOK_OUT], call_f[i, k, C_LAT] = tok_in, tok_out, lat
    call_f[i, k, C_USD], call_f[i, k, C_COST] = usd, cost
    return s, status, kind, answer, tok_out, lat, usd, cost


@njit(cache=True, inline="always")
def sim_finish(L, R, P, ended_final):
    """The simulated termination model answers (the vote's lead, else the manager's own direct answer, right with
    the manager's skill and the direct tool's bonus, ``P.direct``) and the verifier scores it (answer 0 is the gold
    answer)."""
    s = L.rng
    st_i = L.st_i
    answer = lane_lead(L)
    if answer < 0:
        mgr = P.nm
        p = 1.0 / (1.0 + math.exp(-(P.skill[mgr, st_i[I_BENCH]] + P.bonus[P.direct, st_i[I_DOMAIN]] - L.st_f[F_Z]
                                     + L.effect[mgr])))
        s, u = uniform_from(s)
        if u < p:
            answer = 0
        else:
            s, answer = wrong_answer(s, st_i[I_NANS], L.pref[mgr], P.mm[mgr, MM_KAPPA], R.dcdf)
    end_episode(L, P, ended_final, answer, 1.0 if answer == 0 else 0.0)
    L.rng = s


@njit(cache=True, inline="always")
def reset_lane(L, i, last_status, rows, row_cdf, P):
    """Draw a new task for lane ``i`` (record ``L``) and begin its episode (``begin_episode``).

    ``L.task`` is the lane's task request (``TASK_ROW``: suite row or -1 = drawn by weight; ``TASK_KEYED``: 1 =
    the task's own draws, its row when drawn, difficulty, preferred wrong answers and model effects, come from the
    task stream ``L.task_rng``, so lanes with equal requests play the identical task). Those draws then leave the
    lane's own stream untouched, so its tool randomness stays its own. Then the episode's task options
    (``parasim.sim.task_options.begin_options``: given, drawn from their own stream, or none).
    """
    keyed = L.task[TASK_KEYED] != 0
    s = L.task_rng if keyed else L.rng
    row = L.task[TASK_ROW]
    if row < 0:
        s, row = pick_row(s, row_cdf)
    R = rows[row]
    s, z = difficulty(s, R.z, R.mu, R.sigma)
    begin_episode(L, i, last_status, P, row, R, z)
    s = draw_model_effects(s, R.nans, R.dcdf, P.nm, P.mm, L.pref, L.effect)
    if not keyed:
        L.rng = s
    begin_options(L, P, keyed)


@njit(cache=True, inline="always")
def step_lane(L, i, last_status, call_i, call_f, R, P, actions):
    """One manager turn of lane ``i`` with simulated tools: ``final_answer`` (stop flag 1), or a round of up to K
    isolated parallel calls, recorded per slot in ``last_status[i]``, ``call_i[i]`` and ``call_f[i]``; the round
    limit ends the episode. Phase (a) plans every slot first, counting the calls that run per model row, so that a
    call's server load is known when it runs (``server_load``); then each slot's simulated call and its accounting
    run together, so that the call's outcome stays in registers. Calls see only the round-start lead and context,
    so the order of phases changes no result. A call of a tool the episode prices
    (``L.priced``) costs that price in USD instead of the pool's figure."""
    if actions[i, 0] == STOP:
        sim_finish(L, R, P, 1)
        return
    st_i, st_f, env = L.st_i, L.st_f, P.env
    nm = P.nm
    nans, bench, dom = st_i[I_NANS], st_i[I_BENCH], st_i[I_DOMAIN]
    z, qtok = st_f[F_Z], st_f[F_QTOK]
    lead = lane_lead(L)
    has_lead = lead >= 0
    ctx = st_f[F_TOKENS]
    allowed, budget, serial = P.slots, env[E_TOKEN_BUDGET], env[E_SERIAL] != 0
    off, priced = L.tools_off, L.priced
    s = L.rng
    lo, hi = 0, 0  # the round's requests per model row
    for k in range(P.slots):
        status, tool, model, _target = plan_slot(i, k, last_status, call_i, call_f, actions, P.tt, allowed, nm,
                                                 has_lead, ctx, budget, off)
        if status == PENDING:
            lo, hi = count_request(lo, hi, call_row(P.tt, tool, model, nm))
    round_lat, round_tokens, n_calls, bad = round_start(P, actions, i)
    for k in range(P.slots):
        status = last_status[i, k]
        if status == NO_CALL:
            continue
        tool, model, target = slot_call(actions, i, k)
        kind, answer, tok_out, lat, usd, cost = OUT_NONE, -1, 0.0, 0.0, 0.0, 0.0
        if status == PENDING:
            load = 1.0 if serial else server_load(lo, hi, call_row(P.tt, tool, model, nm), P)
            s, status, kind, answer, tok_out, lat, usd, cost = sim_call(
                L, i, k, call_i, call_f, R, P, s, tool, model, target, lead, ctx, nans, bench, dom, z, qtok, load)
            if (priced >> tool) & 1:
                usd = L.price[tool]
                call_f[i, k, C_USD] = usd
            last_status[i, k] = status
        round_lat, round_tokens, n_calls, bad = account_slot(L, R, P, status, tool, model, kind, answer, tok_out, lat,
                                                             usd, cost, serial, bench, dom, round_lat, round_tokens,
                                                             n_calls, bad)
    L.rng = s
    if round_end(L, P, round_lat, round_tokens, n_calls, bad):
        sim_finish(L, R, P, 0)
