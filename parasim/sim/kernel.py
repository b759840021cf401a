"""The batched simulator's per-call model and the lane record's layout (the rules of a round: ``parasim.sim.rules``).

PufferLib-Ocean style: all state lives in preallocated arrays, nothing is allocated after construction, and
``parasim.sim.step`` steps every lane in one numba call. A lane's state is one record of a structured array
(``parasim.sim.state.lane_dtype``: its counters, evidence and random stream side by side, in a few adjacent
cache lines instead of lines of fifteen arrays), the pool's parameters are one record too
(``parasim.sim.tables.params_dtype``), and the per-lane functions below take records, scalars and the
kernels' borrowed array views (``parasim.sim.step.borrowed``): an array passed to an inlined numba function
otherwise costs an atomic reference-count increment and decrement per call, which with the two dozen arrays of
a lane step was a third of the step's time. The lane's random stream is a local for the whole lane step.

The generative model is ``call_outcome``; every number it uses comes from the pool tables, and system-level
results (what parallel rounds or heterogeneous pools buy) are never written here: they emerge from the
per-call model and the termination vote. ``sample_call``, ``draw_task`` and ``draw_wrong`` are the same
model over the ``SimTables`` arrays, for the calibration code's single simulated calls.

Answers are small integers: 0 is the gold answer, 1..A-1 wrong answers (A = the task's options, or
NUM_ANSWERS for free-form tasks). Only the verifier and the per-call sampler look at which id is gold;
the observation shows candidates ranked by the termination model's score, never their ids.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from parasim.protocol.schema import NUM_STATUSES, NUM_TOOLS, Status
from parasim.sim.rng import normal_from, uniform_from
from parasim.sim.tables import (
    B_ENSEMBLE,
    B_REVIEWER,
    MD_SENS,
    MD_SPEC,
    MM_AFFINITY,
    MM_FAM_SHARE,
    MM_FAM_WRONG,
    MM_FAMILY,
    MM_KAPPA,
    MM_KIND,
    MM_KIND_SHARE,
    MM_LAM,
    MM_RHO,
    MM_TAU,
    P_ENSEMBLE_K,
    P_LOGIT_SCALE,
    P_MAX_OUT,
    P_PROMPT,
    P_REPAIR,
    R_BENCH,
    R_DOMAIN,
    R_MU,
    R_OPTIONS,
    R_SIGMA,
    R_Z,
    TM_LAT_BASE,
    TM_LAT_PER_TOK,
    TM_LAT_SD,
    TM_LAT_SLOPE,
    TM_P_EXEC,
    TM_PRICE_IN,
    TM_PRICE_OUT,
    TM_TOK_ALPHA,
    TM_TOK_SD,
    TT_BEHAVIOUR,
    TT_COST,
    TT_TIMEOUT,
    TT_USD_CALL,
    TT_USD_S,
)
from parasim.tasks.suites import FREE_FORM, NUM_ANSWERS

# Subtask targets of a call.
TARGET_QUESTION, TARGET_CARRY, TARGET_VERIFY = 0, 1, 2
NUM_TARGETS = 3
# tool value of an unused slot with the default tool spec; a pool's is its tool count T (the rules read it from
# the parameter record's tool table)
EMPTY_SLOT = NUM_TOOLS
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
# task[c] columns: the lane's task assignment (see reset_lane)
TASK_ROW, TASK_KEYED = range(2)
# the evidence per answer: ev[answer, c] in a lane record (the state view ``SimState.ev`` is [lane, c, answer])
E_SCORE, E_SUPPORT, E_FLAGS, E_CONFIRMS = range(4)
NUM_EVIDENCE = 4
# last round's per-call records: call_i[k, c] and call_f[k, c]; C_RULE is the rule that decided the slot
# (``parasim.sim.rules.slot_rule``: RULE_RUNS for a call that ran or an empty slot), so a caller that shows why a call
# was rejected (the text env) reads the plan's own verdict instead of checking the slot again
C_KIND, C_ANSWER, C_RULE = range(3)
NUM_CALL_I = 3
C_TOK_IN, C_TOK_OUT, C_LAT, C_USD, C_COST = range(5)
NUM_CALL_F = 5

_OK, _EXEC, _TIMEOUT = int(Status.OK), int(Status.EXEC_ERR), int(Status.TIMEOUT)
_FORMAT, _INVALID, _BUDGET = int(Status.FORMAT_ERR), int(Status.INVALID_TOOL), int(Status.BUDGET_EXCEEDED)
_TRUNCATED = int(Status.TRUNCATED)


@njit(cache=True, inline="always")
def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@njit(cache=True, inline="always")
def wrong_answer(s, nans, pref, kappa, dcdf):
    """A wrong answer: the model's preferred one with prob kappa, else a Zipf-weighted shared distractor
    (``dcdf``: the row's cumulative distractor weights). Returns (stream state, answer)."""
    if pref >= 0:
        s, u = uniform_from(s)
        if u < kappa:
            return s, pref
    s, u = uniform_from(s)
    for j in range(nans - 1):
        if u < dcdf[j]:
            return s, j + 1
    return s, nans - 1


_FAMILY_SALT = 0xD1B54A32D192ED03  # odd multiplier that spreads family rows over the stream's state space


@njit(cache=True, inline="always")
def family_state(s0, family, which):
    """A stream state of its own for the task's draw ``which`` (0: effect, 1: wrong answer) of model family row
    ``family``, derived from the task's stream state ``s0``: every member of the family reads the same draw
    without the task storing it, and a pool without families consumes its stream exactly as before."""
    return s0 ^ (np.uint64(2 * family + which + 1) * np.uint64(_FAMILY_SALT))


_KIND_SALT = 0xA0761D6478BD642F  # a second odd multiplier (not the stream's increment): kind rows apart from families'


@njit(cache=True, inline="always")
def kind_state(s0, kind):
    """``family_state``'s counterpart for the effect draw of model kind row ``kind``."""
    return s0 ^ (np.uint64(2 * kind + 1) * np.uint64(_KIND_SALT))


@njit(cache=True, inline="always")
def draw_model_effects(s, nans, dcdf, nm, mm, pref, effect):
    """The task's per-model draws, for pool models 0..nm-1 and the manager nm (``mm``: the MM_* rows).

    First the task's attractive distractor a* (a wrong answer drawn from the distractor weights ``dcdf``); then
    per model m its preferred wrong answer ``pref[m]``: a* with probability affinity_m, else, for a model of a
    family, the family's own preferred answer (one draw from the weights per task and family) with probability
    family_wrong_m, else its own draw from the weights (so two models' wrong answers agree more often than the
    weights alone imply, and two of one family more still); and its per-(task, model) effect ``effect[m]`` =
    tau_m * (sqrt(w_m) f + sqrt(o_m) g + sqrt(1 - w_m - o_m) n_m), f ~ N(0, 1) one draw per task and family,
    g ~ N(0, 1) one per task and kind, n_m ~ N(0, 1) the model's own, w_m and o_m its family and kind shares (0
    without one), added to the logit of every call of m on this task (so models are complementary per task, members
    of a family or a kind less so: reasoning models fail on other problems than chat models do). Constant for the
    episode. Returns the stream state.
    """
    s0 = s
    s, shared = wrong_answer(s, nans, -1, 0.0, dcdf)
    for m in range(nm + 1):
        fam = int(mm[m, MM_FAMILY])
        s, u = uniform_from(s)
        if u < mm[m, MM_AFFINITY]:
            pref[m] = shared
        else:
            own = True
            if fam >= 0 and mm[m, MM_FAM_WRONG] > 0.0:
                s, u = uniform_from(s)
                if u < mm[m, MM_FAM_WRONG]:
                    _, pref[m] = wrong_answer(family_state(s0, fam, 1), nans, -1, 0.0, dcdf)
                    own = False
            if own:
                s, a = wrong_answer(s, nans, -1, 0.0, dcdf)
                pref[m] = a
        s, n = normal_from(s)
        w = mm[m, MM_FAM_SHARE]
        kind = int(mm[m, MM_KIND])
        wk = mm[m, MM_KIND_SHARE] if kind >= 0 else 0.0
        if (fam >= 0 and w > 0.0) or wk > 0.0:
            common = 0.0
            rest = 1.0
            if fam >= 0 and w > 0.0:
                _, f = normal_from(family_state(s0, fam, 0))
                common += math.sqrt(w) * f
                rest -= w
            if wk > 0.0:
                _, g = normal_from(kind_state(s0, kind))
                common += math.sqrt(wk) * g
                rest -= wk
            n = common + math.sqrt(max(rest, 0.0)) * n
        effect[m] = mm[m, MM_TAU] * n
    return s


@njit(cache=True, inline="always")
def call_outcome(s, target, lead, ctx, exec_before, nans, z, qtok, pref, dcdf, votes, mu, theta0, tmv, ttv,
                 mmv, mdv, proto, load):
    """One OK-able call of a tool by a model on a task: the per-call model, for the tool's behaviour (its tool
    table column ``ttv[TT_BEHAVIOUR]``).

    The model's parameters: ``mu`` = the log output tokens' mean (tok_mu + tok_alpha * z), ``theta0`` = the
    right answer's logit on a fresh question (skill + bonus - z + the task's effect for the model), ``tmv`` /
    ``ttv`` / ``mmv`` / ``mdv`` the (tool, model), tool, model and (model, domain) columns TM_* / TT_* / MM_* /
    MD_*, ``proto`` the P_* values; ``dcdf`` the row's distractor weights, ``votes`` room for the ensemble's samples;
    ``load`` the concurrent requests on the call's server this round (a self-hosted model's per-request decode time
    per token grows by the factor 1 + beta (load - 1); beta = 0 for API models and basic tools).
    A sample whose output passes the generation cap is cut there (its tokens and latency are the capped ones) and
    has no answer. Status: TIMEOUT when the sampled latency passes the tool's timeout, TRUNCATED when every sample
    was cut, EXEC_ERR at the pool's rate (code tools; times ``repair`` when the call carries the trajectory after
    an exec error), else OK; an ensemble votes over its samples that were not cut.
    An OK solver call is right with p = sigmoid(scale * (theta0 - lambda * log(1 + ctx / 1000))) (ctx = carried
    context tokens, 0 for a fresh question; scale = ``proto[P_LOGIT_SCALE]``, the sampling temperature's law),
    copies the carried leading answer with prob rho, and answers wrong with the model's preferred wrong answer
    (kappa) or a distractor; an ensemble call is the plurality of
    ``ensemble_k`` such samples. A reviewer flags a wrong leading answer with prob sens and a right one with
    prob 1 - spec.
    Returns (stream state, status, kind, answer, tokens_in, tokens_out, latency_s, usd, cost_units).
    """
    k = int(proto[P_ENSEMBLE_K]) if ttv[TT_BEHAVIOUR] == B_ENSEMBLE else 1
    carried = ctx if target != TARGET_QUESTION else 0.0
    tok_in1 = proto[P_PROMPT] + qtok + carried
    tok_out = 0.0
    lat = 0.0
    cap = proto[P_MAX_OUT]
    per_tok = tmv[TM_LAT_PER_TOK] * (1.0 + tmv[TM_LAT_SLOPE] * (load - 1.0))
    n_cut = 0
    for j in range(k):
        s, n_tok = normal_from(s)
        t1 = math.exp(mu + tmv[TM_TOK_SD] * n_tok)
        votes[j] = 0
        if t1 > cap:
            t1 = cap
            votes[j] = -1  # cut at the cap: this sample has no answer
            n_cut += 1
        s, n_lat = normal_from(s)
        l1 = (tmv[TM_LAT_BASE] + t1 * per_tok) * math.exp(tmv[TM_LAT_SD] * n_lat)
        tok_out += t1
        lat = max(lat, l1)
    tok_in = tok_in1 * k
    status = _OK
    timeout = ttv[TT_TIMEOUT]
    if lat > timeout:
        tok_out *= timeout / lat
        lat = timeout
        status = _TIMEOUT
    elif n_cut == k:
        status = _TRUNCATED
    else:
        p_exec = tmv[TM_P_EXEC]
        if exec_before and target == TARGET_CARRY:
            p_exec *= proto[P_REPAIR]
        if p_exec > 0.0:
            s, u = uniform_from(s)
            if u < p_exec:
                status = _EXEC
    usd = tok_in * tmv[TM_PRICE_IN] + tok_out * tmv[TM_PRICE_OUT] + ttv[TT_USD_CALL] + ttv[TT_USD_S] * lat
    cost = ttv[TT_COST]
    kind = OUT_NONE
    answer = -1
    if status == _OK:
        if ttv[TT_BEHAVIOUR] == B_REVIEWER:
            s, u = uniform_from(s)
            if lead == 0:
                kind = OUT_FLAG if u >= mdv[MD_SPEC] else OUT_CONFIRM
            else:
                kind = OUT_FLAG if u < mdv[MD_SENS] else OUT_CONFIRM
            answer = lead
        else:
            kind = OUT_ANSWER
            theta = theta0
            if carried > 0.0:
                theta -= mmv[MM_LAM] * math.log(1.0 + carried / 1000.0)
            p = _sigmoid(proto[P_LOGIT_SCALE] * theta)
            copied = False
            if target == TARGET_CARRY and lead >= 0:
                s, u = uniform_from(s)
                copied = u < mmv[MM_RHO]
            if copied:
                answer = lead
            elif k == 1:
                s, u = uniform_from(s)
                if u < p:
                    answer = 0
                else:
                    s, answer = wrong_answer(s, nans, pref, mmv[MM_KAPPA], dcdf)
            else:
                best = -1
                for j in range(k):
                    if votes[j] < 0:
                        continue  # a sample cut at the cap does not vote
                    s, u = uniform_from(s)
                    vote = 0
                    if not u < p:
                        s, vote = wrong_answer(s, nans, pref, mmv[MM_KAPPA], dcdf)
                    votes[j] = vote
                    if best < 0:
                        best = j
                for j in range(k):  # plurality of the samples that answered; ties go to the earliest sample
                    if votes[j] < 0:
                        continue
                    c = 0
                    cb = 0
                    for j2 in range(k):
                        c += votes[j2] == votes[j]
                        cb += votes[j2] == votes[best]
                    if c > cb:
                        best = j
                answer = votes[best]
    return s, status, kind, answer, tok_in, tok_out, lat, usd, cost


@njit(cache=True, inline="always")
def pick_row(s, row_cdf):
    """A suite row drawn by its weights (``row_cdf``: their cumulative sums). Returns (stream state, row)."""
    s, u = uniform_from(s)
    row = 0
    while row < len(row_cdf) - 1 and u >= row_cdf[row]:
        row += 1
    return s, row


@njit(cache=True, inline="always")
def difficulty(s, z, mu, sigma):
    """A task's difficulty: the row's own, or drawn as z ~ N(mu_b, sigma_b) where it has none (NaN)."""
    if math.isnan(z):
        s, n = normal_from(s)
        z = mu + sigma * n
    return s, z


# ---- the same model over the SimTables arrays and a stream array (calibration's simulated_calls) ----

@njit(cache=True, inline="always")
def draw_wrong(rng, lane, mm, row, nans, pref, kappa, row_dcdf):
    """``wrong_answer`` on the stream ``rng[lane]`` and row ``row`` of ``row_dcdf`` (``mm``: the model, unused)."""
    s, answer = wrong_answer(rng[lane], nans, pref, kappa, row_dcdf[row])
    rng[lane] = s
    return answer


@njit(cache=True, inline="always")
def task_item(rng, lane, row, row_i, row_f):
    """The task of suite row ``row``: (row, benchmark, domain, answer ids in play, difficulty)."""
    opts = row_i[row, R_OPTIONS]
    nans = NUM_ANSWERS if opts == FREE_FORM else opts
    s, z = difficulty(rng[lane], row_f[row, R_Z], row_f[row, R_MU], row_f[row, R_SIGMA])
    rng[lane] = s
    return row, row_i[row, R_BENCH], row_i[row, R_DOMAIN], nans, z


@njit(cache=True, inline="always")
def draw_task(rng, lane, row_i, row_f, row_cdf):
    """A task: a suite row by its weights, then its item (``task_item``)."""
    s, row = pick_row(rng[lane], row_cdf)
    rng[lane] = s
    return task_item(rng, lane, row, row_i, row_f)


@njit(cache=True, inline="always")
def task_effects(rng, lane, row, nans, mmt, row_dcdf, pref, effect):
    """``draw_model_effects`` on the stream ``rng[lane]`` for suite row ``row``, with the SimTables ``mm``
    table ``mmt`` ([NUM_MM, M+1]); fills ``pref`` and ``effect`` ([M+1])."""
    rng[lane] = draw_model_effects(rng[lane], nans, row_dcdf[row], mmt.shape[1] - 1, mmt.T, pref, effect)


@njit(cache=True, inline="always")
def sample_call(rng, lane, tool, mm, target, lead, ctx, exec_before, row, bench, dom, nans, z, qtok, pref, effect,
                scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf, load=1.0):
    """``call_outcome`` of model row ``mm`` on the stream ``rng[lane]``, with the SimTables arrays (``pref`` and
    ``effect``: the model's draws of ``task_effects``; ``load``: concurrent requests on the model's server).
    Returns (status, kind, answer, tokens_in, tokens_out, latency_s, usd, cost_units)."""
    s, status, kind, answer, tok_in, tok_out, lat, usd, cost = call_outcome(
        rng[lane], target, lead, ctx, exec_before, nans, z, qtok, pref, row_dcdf[row], scratch[lane],
        tok_mu[tool, mm, dom] + tm[TM_TOK_ALPHA, tool, mm] * z, skill[mm, bench] + bonus[tool, dom] - z + effect,
        tm[:, tool, mm], tt[:, tool], mmt[:, mm], md[:, mm, dom], proto, load)
    rng[lane] = s
    return status, kind, answer, tok_in, tok_out, lat, usd, cost


@njit(cache=True)
def leading_answer(ev, arrival, i, nans):
    """The termination model's pick in lane ``i`` of the state views (``SimState.ev``, ``SimState.arrival``):
    highest score among answers with support, earliest on ties; -1 if none (``parasim.sim.rules.lane_lead`` on a
    lane record)."""
    best = -1
    for a in range(nans):
        if ev[i, E_SUPPORT, a] > 0 and (best < 0 or ev[i, E_SCORE, a] > ev[i, E_SCORE, best] or (
                ev[i, E_SCORE, a] == ev[i, E_SCORE, best] and arrival[i, a] < arrival[i, best])):
            best = a
    return best
