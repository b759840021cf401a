"""The rules of an episode, compiled once for every call source: ParaOrch-v0's one definition of a round.

A round has three phases over a lane record ``L`` (``parasim.sim.state.lane_dtype``), the parameter record ``P``
(``parasim.sim.tables.params_dtype``) and the task's row record ``R`` (``ROW_DTYPE``):

  (a) ``plan_slot`` (``plan_round`` for all slots): each slot of the action row is checked (``slot_rule``); a
      malformed or over-budget call gets its protocol status (INVALID_TOOL / FORMAT_ERR / BUDGET_EXCEEDED) without
      running, a well-formed one is marked ``PENDING``. Every call of the round sees the round-start leading answer
      and context (isolation).
  (b) the call source fills each ``PENDING`` slot's outcome record (``last_status``, ``call_i``: kind, answer id;
      ``call_f``: tokens in / out, latency, USD, cost units): the simulator samples it
      (``parasim.sim.sim_source.sim_call``), the real-tools env runs the calls and maps each result
      (``envs.real_source``).
  (c) ``account_slot`` per slot between ``round_start`` and ``round_end`` (``apply_round`` for all slots): the
      evidence (vote scores from the parameter record's ``rel_logit`` and the reviewers'
      log-likelihood ratios, plus the row's prior odds ``log_odds``), the accounting (the trajectory length in
      tokens with the manager's per-round / per-call tokens and ``status_tokens`` per failed call, cost units,
      USD, the round's latency: its slowest call, the sum in serial mode), the counters, and whether the round
      limit ends the episode.

``end_episode`` is the end's bookkeeping (the call source gives the answer: the simulator's termination model,
the real engine's ``finish``), ``begin_episode`` a new episode's, and ``write_obs`` the observation encoding.
The vector env inlines plan -> simulated call -> account slot by slot in its one compiled step per lane
(``parasim.sim.sim_source.step_lane``); the real-tools env runs ``plan_round``, its calls, then ``apply_round``
through the one-lane entry points of ``parasim.sim.step``.
"""
from __future__ import annotations

from typing import Any

from numba import njit

from parasim.protocol.schema import NUM_STATUSES
from parasim.sim.kernel import (
    C_ANSWER,
    C_COST,
    C_KIND,
    C_LAT,
    C_RULE,
    C_TOK_OUT,
    C_USD,
    CAND_FEATURES,
    E_CONFIRMS,
    E_FLAGS,
    E_SCORE,
    E_SUPPORT,
    F_COST,
    F_LAT,
    F_OUTCOME,
    F_QTOK,
    F_TOKENS,
    F_USD,
    F_Z,
    I_ANSWER,
    I_BENCH,
    I_CALLS,
    I_DOMAIN,
    I_DONE,
    I_EPISODE,
    I_FINAL,
    I_FMT,
    I_NANS,
    I_NOK,
    I_ROUND,
    I_ROW,
    I_SEQ,
    NO_CALL,
    NUM_CALL_F,
    NUM_CANDIDATES,
    NUM_EVIDENCE,
    NUM_F,
    NUM_I,
    NUM_TARGETS,
    OUT_ANSWER,
    OUT_CONFIRM,
    OUT_FLAG,
    OUT_NONE,
    TARGET_QUESTION,
    TARGET_VERIFY,
)
from parasim.sim.tables import (
    B_REVIEWER,
    E_MAX_ROUNDS,
    E_SERIAL,
    E_TOKEN_BUDGET,
    MD_LLR_CONFIRM,
    MD_LLR_FLAG,
    P_MGR_CALL,
    P_MGR_ROUND,
    P_STATUS,
    TT_AGENT,
    TT_BEHAVIOUR,
    TT_FEEDBACK,
)
from parasim.tasks.suites import NUM_ANSWERS

# ``last_status`` of a slot that the plan lets run, until its call source writes the call's status
PENDING = NUM_STATUSES + 1

# The stop flag, an action row's first value: ROUND plays the row's slots as a round, STOP is ``final_answer``; any
# other value is a malformed turn that still plays its slots and counts as one format violation (``round_start``),
# once per round whatever else in it broke the protocol. The text env writes MALFORMED_ROUND for a turn whose text
# broke the protocol outside its slots (unreadable blocks, calls beyond max_parallel).
ROUND, STOP, MALFORMED_ROUND = 0, 1, 2

# Why a slot does or does not run (``slot_rule``), checked in this order: the INVALID_TOOL rules, then the
# FORMAT_ERR rules, then the budget.
(RULE_RUNS, RULE_UNKNOWN_TOOL, RULE_SLOT_NOT_ALLOWED, RULE_UNKNOWN_MODEL, RULE_NOTHING_TO_REVIEW, RULE_BAD_TARGET,
 RULE_NOTHING_TO_CARRY, RULE_REVIEWER_TARGET, RULE_BUDGET) = range(9)
# the status each rule gives (RULE_RUNS: the call's own, written by the call source)
RULE_STATUS = (PENDING, 4, 4, 4, 4, 3, 3, 3, 5)

_OK, _EXEC, _TIMEOUT = 0, 1, 2
_FORMAT, _INVALID, _BUDGET, _TRUNCATED = 3, 4, 5, 6


@njit(cache=True, inline="always")
def is_agent(tt, tool):
    """Whether ``tool`` (a valid index of the tool table ``tt``, [T, NUM_TT]) is an agent tool, which runs on a pool
    model; a basic tool runs on the manager's row."""
    return tt[tool, TT_AGENT] != 0.0


@njit(cache=True, inline="always")
def is_reviewer(tt, tool):
    """Whether ``tool`` reviews the leading answer (behaviour ``reviewer``) instead of answering."""
    return tt[tool, TT_BEHAVIOUR] == B_REVIEWER


@njit(cache=True, inline="always")
def slot_rule(tt, tool, model, target, slot, allowed, nm, has_lead, tokens, token_budget):
    """The rule that decides one non-empty slot, with the tool table ``tt`` ([T, NUM_TT]: tools 0..T-1): an unknown
    tool, a slot beyond the allowed parallelism, an agent tool's model outside the pool or a reviewer with nothing
    to review is INVALID_TOOL; a target outside the range, a carry or verify target with no leading answer, or a
    reviewer without the verify target (or the verify target on another tool) is FORMAT_ERR; a call made once the
    trajectory holds ``token_budget`` tokens is BUDGET_EXCEEDED; else the call runs (RULE_RUNS). ``RULE_STATUS``
    maps the rule to the status."""
    valid_tool = 0 <= tool < tt.shape[0]
    if not valid_tool:
        return RULE_UNKNOWN_TOOL
    if slot >= allowed:
        return RULE_SLOT_NOT_ALLOWED
    if is_agent(tt, tool) and not 0 <= model < nm:
        return RULE_UNKNOWN_MODEL
    reviewer = is_reviewer(tt, tool)
    if reviewer and not has_lead:
        return RULE_NOTHING_TO_REVIEW
    if not 0 <= target < NUM_TARGETS:
        return RULE_BAD_TARGET
    if target != TARGET_QUESTION and not has_lead:
        return RULE_NOTHING_TO_CARRY
    if reviewer != (target == TARGET_VERIFY):
        return RULE_REVIEWER_TARGET
    if tokens >= token_budget:
        return RULE_BUDGET
    return RULE_RUNS


@njit(cache=True, inline="always")
def lane_rule(tt, off, tool, model, target, slot, allowed, nm, has_lead, tokens, token_budget):
    """``slot_rule`` within the episode's tool subset (``off``: the lane's ``tools_off`` bits): a call of a tool the
    episode does not offer is INVALID_TOOL, as one of an unknown tool (``RULE_UNKNOWN_TOOL``, the first rule)."""
    rule = slot_rule(tt, tool, model, target, slot, allowed, nm, has_lead, tokens, token_budget)
    if rule != RULE_UNKNOWN_TOOL and (off >> tool) & 1:
        return RULE_UNKNOWN_TOOL
    return rule


@njit(cache=True, inline="always")
def rule_status(rule):
    """``RULE_STATUS[rule]`` as a branch chain (no tuple indexing in the hot loop)."""
    if rule == RULE_RUNS:
        return PENDING
    if rule <= RULE_NOTHING_TO_REVIEW:
        return _INVALID
    if rule <= RULE_REVIEWER_TARGET:
        return _FORMAT
    return _BUDGET


@njit(cache=True, inline="always")
def slot_call(actions, i, k):
    """Slot ``k`` of action row ``actions[i]``: (tool, model, target). The action layout: ``[stop]`` then
    ``[tool, model, target]`` per slot (``parasim.sim.state.action_nvec``)."""
    j = 1 + 3 * k
    return actions[i, j], actions[i, j + 1], actions[i, j + 2]


@njit(cache=True, inline="always")
def call_row(tt, tool, model, nm):
    """The model row a call's parameters come from: the model for an agent tool, the manager's row ``nm`` for a
    basic tool (python, search), which the manager runs itself."""
    return model if is_agent(tt, tool) else nm


@njit(cache=True, inline="always")
def lane_lead(L):
    """The termination model's pick in lane record ``L``: highest score among answers with support, earliest
    seen on ties; -1 if none. Answers with support are exactly those in ``L.order`` (first-seen order), so the
    first of the highest score in that order is the pick (``parasim.sim.kernel.leading_answer`` on the views)."""
    best = -1
    for j in range(L.st_i[I_SEQ]):
        a = L.order[j]
        if best < 0 or L.ev[a, E_SCORE] > L.ev[best, E_SCORE]:
            best = a
    return best


@njit(cache=True, inline="always")
def begin_episode(L, i, last_status, P, row, R, z):
    """Clear lane ``i``'s episode accumulators for a task of suite row ``row`` (record ``R``) with difficulty ``z``;
    its episode number (episodes since the lane was seeded) goes up by one."""
    st_i, st_f = L.st_i, L.st_f
    episode = st_i[I_EPISODE]
    for c in range(NUM_I):
        st_i[c] = 0
    st_i[I_ROW], st_i[I_BENCH], st_i[I_DOMAIN], st_i[I_NANS] = row, R.bench, R.domain, R.nans
    st_i[I_ANSWER] = -1
    st_i[I_EPISODE] = episode + 1
    for c in range(NUM_F):
        st_f[c] = 0.0
    st_f[F_Z], st_f[F_QTOK] = z, R.qtok
    for c in range(L.counts_t.shape[0]):
        L.counts_t[c] = 0
        L.exec_prev[c] = 0
    for c in range(NUM_STATUSES):
        L.counts_s[c] = 0
    for k in range(P.slots):
        last_status[i, k] = NO_CALL
    for a in range(NUM_ANSWERS):
        L.arrival[a] = -1
        for c in range(NUM_EVIDENCE):
            L.ev[a, c] = 0.0


@njit(cache=True, inline="always")
def plan_slot(i, k, last_status, call_i, call_f, actions, tt, allowed, nm, has_lead, ctx, budget, off):
    """Phase (a) for slot ``k`` of lane ``i`` (the tool table ``tt``, ``allowed`` slots, ``nm`` pool models, the
    round-start lead and context, the token budget, the episode's unoffered tools ``off``): its outcome record
    cleared, its rule (``lane_rule``; ``RULE_RUNS`` for an empty slot) written to ``call_i[i, k, C_RULE]`` and its
    status (``NO_CALL`` for an empty slot, tool value T, a protocol status, or ``PENDING`` for a call that runs) to
    ``last_status[i, k]``, and returned with the slot's (tool, model, target)."""
    call_i[i, k, C_KIND] = OUT_NONE
    call_i[i, k, C_ANSWER] = -1
    for c in range(NUM_CALL_F):
        call_f[i, k, c] = 0.0
    tool, model, target = slot_call(actions, i, k)
    if tool == tt.shape[0]:
        rule, status = RULE_RUNS, NO_CALL
    else:
        rule = lane_rule(tt, off, tool, model, target, k, allowed, nm, has_lead, ctx, budget)
        status = rule_status(rule)
    call_i[i, k, C_RULE] = rule
    last_status[i, k] = status
    return status, tool, model, target


@njit(cache=True, inline="always")
def plan_round(L, i, last_status, call_i, call_f, P, actions):
    """Phase (a) of a round: ``plan_slot`` for every slot. Returns the round-start (lead, context tokens)."""
    lead = lane_lead(L)
    ctx = L.st_f[F_TOKENS]
    allowed, budget = P.slots, P.env[E_TOKEN_BUDGET]
    for k in range(P.slots):
        plan_slot(i, k, last_status, call_i, call_f, actions, P.tt, allowed, P.nm, lead >= 0, ctx, budget, L.tools_off)
    return lead, ctx


@njit(cache=True, inline="always")
def add_evidence(L, kind, answer, tool, mm, bench, dom, R, P):
    """One call's evidence: an answer joins its candidate (first-seen order) with a vote weight of
    ``max(0.05, logit(reliability) + log(A - 1))``; a reviewer's flag or confirmation adds its log-likelihood
    ratio to the answer it reviewed."""
    ev = L.ev
    if kind == OUT_ANSWER:
        st_i = L.st_i
        if L.arrival[answer] < 0:
            L.arrival[answer] = st_i[I_SEQ]
            L.order[st_i[I_SEQ]] = answer
            st_i[I_SEQ] += 1
        ev[answer, E_SUPPORT] += 1.0
        ev[answer, E_SCORE] += max(0.05, P.rel_logit[tool, mm, bench] + R.log_odds)
        st_i[I_NOK] += 1
    elif kind == OUT_FLAG:
        ev[answer, E_FLAGS] += 1.0
        ev[answer, E_SCORE] += P.md[mm, dom, MD_LLR_FLAG]
    elif kind == OUT_CONFIRM:
        ev[answer, E_CONFIRMS] += 1.0
        ev[answer, E_SCORE] += P.md[mm, dom, MD_LLR_CONFIRM]


@njit(cache=True, inline="always")
def account_slot(L, R, P, status, tool, model, kind, answer, tok_out, lat, usd, cost, serial, bench, dom, round_lat,
                 round_tokens, n_calls, bad):
    """Phase (c) for one slot with its outcome (status, kind, answer id, output tokens, latency, USD, cost units):
    its evidence, cost and USD, and the round's accumulators (latency: the slowest call, the sum when ``serial``;
    trajectory tokens: the manager's per call, then the share of an OK call's output fed back or ``status_tokens``
    for a failed or rejected call; calls; whether the round is a format violation). Returns the accumulators."""
    if status == NO_CALL:
        return round_lat, round_tokens, n_calls, bad
    proto = P.proto
    n_calls += 1
    round_tokens += proto[P_MGR_CALL]
    if status <= _TIMEOUT or status == _TRUNCATED:  # the call ran: OK, EXEC_ERR, TIMEOUT or TRUNCATED
        st_f = L.st_f
        st_f[F_COST] += cost
        st_f[F_USD] += usd
        round_lat = round_lat + lat if serial else max(round_lat, lat)
        round_tokens += tok_out * P.tt[tool, TT_FEEDBACK] if status == _OK else proto[P_STATUS]
        add_evidence(L, kind, answer, tool, call_row(P.tt, tool, model, P.nm), bench, dom, R, P)
        L.counts_t[tool] += 1
    else:  # a protocol status, given without a call
        if status != _BUDGET:
            bad = True
        round_tokens += proto[P_STATUS]
    L.counts_s[status] += 1
    return round_lat, round_tokens, n_calls, bad


@njit(cache=True, inline="always")
def round_start(P, actions, i):
    """The round's accumulators before its slots (latency, trajectory tokens: the manager's per round, calls, format
    violation: a stop flag other than 0 / 1)."""
    return 0.0, P.proto[P_MGR_ROUND], 0, actions[i, 0] != ROUND


@njit(cache=True, inline="always")
def round_end(L, P, round_lat, round_tokens, n_calls, bad):
    """The round's totals into the lane (a round with no call is a format violation); True when the round limit
    ends the episode (the call source then answers: ``end_episode``)."""
    st_i, st_f = L.st_i, L.st_f
    if n_calls == 0:
        bad = True
    st_i[I_CALLS] += n_calls
    st_i[I_FMT] += bad
    st_i[I_ROUND] += 1
    st_f[F_TOKENS] += round_tokens
    st_f[F_LAT] += round_lat
    return st_i[I_ROUND] >= P.env[E_MAX_ROUNDS]


@njit(cache=True, inline="always")
def apply_round(L, i, last_status, call_i, call_f, R, P, actions):
    """Phase (c) of a round, after the call source filled the ``PENDING`` slots' outcome records: ``account_slot``
    for every slot, then ``round_end`` (its return value)."""
    round_lat, round_tokens, n_calls, bad = round_start(P, actions, i)
    serial, bench, dom = P.env[E_SERIAL] != 0, L.st_i[I_BENCH], L.st_i[I_DOMAIN]
    for k in range(P.slots):
        tool, model, _target = slot_call(actions, i, k)
        cf = call_f[i, k]
        round_lat, round_tokens, n_calls, bad = account_slot(
            L, R, P, last_status[i, k], tool, model, call_i[i, k, C_KIND], call_i[i, k, C_ANSWER], cf[C_TOK_OUT],
            cf[C_LAT], cf[C_USD], cf[C_COST], serial, bench, dom, round_lat, round_tokens, n_calls, bad)
    return round_end(L, P, round_lat, round_tokens, n_calls, bad)


@njit(cache=True, inline="always")
def end_episode(L, P, ended_final, answer, outcome):
    """The end of an episode with the call source's ``answer`` (an answer id, -1 none) and verdict ``outcome``:
    a ``final_answer`` turn costs the manager one more round of tokens."""
    st_i = L.st_i
    if ended_final:
        L.st_f[F_TOKENS] += P.proto[P_MGR_ROUND]
    st_i[I_FINAL] = ended_final
    st_i[I_ANSWER] = answer
    L.st_f[F_OUTCOME] = outcome
    st_i[I_DONE] = 1


def malformed_stop(lanes: Any, i: int) -> None:
    """A ``final_answer`` turn whose text also broke the protocol (unreadable blocks): one format violation, counted
    in lane ``i``'s record before the stop (a stop plays no round, so nothing else counts it; a malformed round's is
    its stop flag's, ``MALFORMED_ROUND``)."""
    lanes["st_i"][i, I_FMT] += 1


@njit(cache=True, inline="always")
def write_obs(i, L, last_status, P, o_task, o_round, o_budget, o_cand, o_evid, o_tools, o_status, o_last, o_mask):
    """Lane ``i``'s observation from its record ``L``: candidates ranked by the termination score (ids never
    shown). Afterwards ``L.scratch[:min(distinct, NUM_CANDIDATES)]`` holds the shown candidates' positions in
    ``L.order`` (the real-tools env reads it for the board's answer texts)."""
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
    num_tools = L.counts_t.shape[0]
    for t in range(num_tools):
        o_tools[i, t] = L.counts_t[t]
    for s in range(NUM_STATUSES):
        o_status[i, s] = L.counts_s[s]
    allowed = P.slots
    has_lead = 1 if distinct > 0 else 0
    # the mask's static part (stop, models, empty slots, slots past max_parallel) is written once at
    # allocation (``static_action_mask``); only the entries that depend on a leading answer change (the reviewer
    # tools', the carry and verify targets), and the tools' entries when the episode's tool subset changes
    off = L.tools_off
    rewrite = off != L.mask_off
    L.mask_off = off
    j = 2
    for k in range(P.slots):
        if k < allowed:
            if rewrite:
                for t in range(num_tools):
                    o_mask[i, j + t] = 1 - ((off >> t) & 1)
            for r in range(P.num_reviewers):
                rv = P.reviewers[r]
                o_mask[i, j + rv] = has_lead & (1 - ((off >> rv) & 1))
        jt = j + num_tools + 1 + P.nm
        o_mask[i, jt + 1] = has_lead
        o_mask[i, jt + 2] = has_lead
        j = jt + NUM_TARGETS
        o_last[i, k] = last_status[i, k]
