"""Flat tables the compiled simulator reads: a pool and a task suite joined once, at env construction.

``SimTables`` holds the parameters in a few dense arrays (one per shape), the form the calibration code and
the envs read. The step kernel reads the same numbers as records (``kernel_params``): one record of all pool
and episode parameters, with the columns one call reads side by side and padded to the largest pool
(``MAX_MODELS``) so that its dtype, and with it the compiled kernel, is the same for every pool, and one record
per suite row. A record reaches the kernel's inlined per-lane functions as a plain pointer with its shapes
known at compile time. Column indices below are compile-time constants of the kernels.

The tool dimension T is the pool's tool spec's (``parasim.tools.spec``): each tool's behaviour and kind are columns
of the tool table (``TT_BEHAVIOUR``, ``TT_AGENT``), so the rules and the per-call model branch on what a tool does,
never on which tool it is. The parameter record's dtype is built per T (``params_dtype``): the default spec's is the
one every shipped pool uses, and a pool with another tool count compiles the kernels once more for its dtype.
"""
from __future__ import annotations

import math
from functools import cache
from typing import NamedTuple

import numpy as np

from parasim.pools.pool import MAX_MODELS, PoolSpec, reliability
from parasim.protocol.schema import NUM_DOMAINS
from parasim.tasks.suites import FREE_FORM, NUM_ANSWERS, NUM_BENCHMARKS, TaskSuite
from parasim.tools.spec import BEHAVIOURS

# tm[k, tool, model] (TM_LAT_SLOPE: beta of the server's per-request decode slowdown, per_tok * (1 + beta * (load - 1)))
(TM_TOK_SD, TM_TOK_ALPHA, TM_LAT_BASE, TM_LAT_PER_TOK, TM_LAT_SD, TM_PRICE_IN, TM_PRICE_OUT, TM_P_EXEC,
 TM_LAT_SLOPE) = range(9)
NUM_TM = 9
# tt[k, tool]: its costs and runtime, then what it does: its behaviour (a ``B_*`` code) and 1 for an agent tool
TT_USD_CALL, TT_USD_S, TT_COST, TT_TIMEOUT, TT_FEEDBACK, TT_BEHAVIOUR, TT_AGENT = range(7)
NUM_TT = 7
# behaviour codes (``parasim.tools.spec.BEHAVIOURS`` in order), as the tool table's TT_BEHAVIOUR column holds them
B_SOLVER, B_REVIEWER, B_ENSEMBLE, B_CODE_EXEC, B_SEARCH = range(5)
assert BEHAVIOURS == ("solver", "reviewer", "ensemble", "code_exec", "search")
# mm[k, model] (MM_FAMILY: the row of the model's family's first model, -1 for none; MM_FAM_SHARE: the share of the
# per-task effect's variance the family shares; MM_FAM_WRONG: P(a non-shared preferred wrong answer is the family's);
# MM_KIND, MM_KIND_SHARE: the same row and variance share for the model's kind)
(MM_KAPPA, MM_RHO, MM_LAM, MM_TAU, MM_AFFINITY, MM_REPLICAS, MM_FAMILY, MM_FAM_SHARE, MM_FAM_WRONG, MM_KIND,
 MM_KIND_SHARE) = range(11)
NUM_MM = 11
# md[k, model, domain]
MD_SENS, MD_SPEC, MD_LLR_FLAG, MD_LLR_CONFIRM = range(4)
NUM_MD = 4
# proto[k]
# (P_LOGIT_SCALE: the factor on every call's log-odds of the right answer, ``PoolSpec.logit_scale``)
P_ENSEMBLE_K, P_MGR_ROUND, P_MGR_CALL, P_PROMPT, P_STATUS, P_REPAIR, P_MAX_OUT, P_LOGIT_SCALE = range(8)
NUM_PROTO = 8
# row_i[r, k] and row_f[r, k]
R_BENCH, R_DOMAIN, R_OPTIONS = range(3)
R_Z, R_MU, R_SIGMA, R_QTOK = range(4)
# env params (the episode options)
E_MAX_ROUNDS, E_SERIAL, E_TOKEN_BUDGET = range(3)
NUM_ENV_PARAMS = 3

_M1 = MAX_MODELS + 1  # pool models and the manager's row


@cache
def params_dtype(num_tools: int) -> np.dtype:
    """The kernel's parameter record for T = ``num_tools`` tools: the SimTables arrays with the (tool, model)
    tables transposed so that the columns a call reads are adjacent (tm[tool, model, k], md[model, domain, k],
    ...), padded to MAX_MODELS; then the tools the rules look up by behaviour (``direct``: the first agent solver,
    whose bonus the manager's own direct answer gets; ``reviewers``: the reviewer tools, whose action-mask entry
    needs a leading answer, the first ``num_reviewers`` entries); last, how episodes get their task options
    (``task_opts``: ``parasim.sim.task_options.OPTS_*``)."""
    t = num_tools
    return np.dtype([
        ("nm", np.int64),  # pool models (row nm of the model tables is the manager)
        ("slots", np.int64),  # call slots per round (the action's K)
        ("env", np.float64, (NUM_ENV_PARAMS,)),
        ("proto", np.float64, (NUM_PROTO,)),
        ("tm", np.float64, (t, _M1, NUM_TM)),
        ("tok_mu", np.float64, (t, _M1, NUM_DOMAINS)),
        ("rel_logit", np.float64, (t, _M1, NUM_BENCHMARKS)),
        ("tt", np.float64, (t, NUM_TT)),
        ("bonus", np.float64, (t, NUM_DOMAINS)),
        ("mm", np.float64, (_M1, NUM_MM)),
        ("md", np.float64, (_M1, NUM_DOMAINS, NUM_MD)),
        ("skill", np.float64, (_M1, NUM_BENCHMARKS)),
        ("direct", np.int64),
        ("num_reviewers", np.int64),
        ("reviewers", np.int64, (t,)),
        ("task_opts", np.int64),  # what an episode without given task options gets (``parasim.sim.task_options``)
    ], align=True)


# One suite row as the kernel reads it (nans: the answer ids in play, NUM_ANSWERS for free-form tasks; log_odds:
# log(nans - 1), the prior odds term of the weighted vote, computed once per row instead of once per step).
ROW_DTYPE = np.dtype([
    ("bench", np.int64), ("domain", np.int64), ("nans", np.int64), ("log_odds", np.float64), ("z", np.float64),
    ("mu", np.float64), ("sigma", np.float64), ("qtok", np.float64), ("dcdf", np.float64, (NUM_ANSWERS,)),
], align=True)


class SimTables(NamedTuple):
    """Pool and suite parameters as arrays, in the argument order of the kernels."""

    skill: np.ndarray  # [M+1, NB]
    bonus: np.ndarray  # [T, D]
    tok_mu: np.ndarray  # [T, M+1, D]
    tm: np.ndarray  # [9, T, M+1]
    tt: np.ndarray  # [7, T] costs, runtime, behaviour code, agent flag
    mm: np.ndarray  # [11, M+1] kappa, rho, lambda, tau (per-task effect SD), affinity (shared distractor), replicas,
    #                 family row, family share of the effect, family share of the preferred wrong answers, kind row,
    #                 kind share of the effect
    md: np.ndarray  # [4, M+1, D]
    rel_logit: np.ndarray  # [NB, T, M+1] log-odds of an OK call's expected accuracy
    proto: np.ndarray  # [8]
    row_i: np.ndarray  # int32[R, 3]
    row_f: np.ndarray  # [R, 4]
    row_cdf: np.ndarray  # [R]
    row_dcdf: np.ndarray  # [R, NUM_ANSWERS] cumulative Zipf weights over wrong answers 1..A-1


def _groups(pool: PoolSpec) -> tuple[np.ndarray, ...]:
    """The pool's family and kind rows and shares as mm rows (none: row -1, shares 0; a pool built without them)."""
    m1 = len(pool.kappa)
    none = np.full(m1, -1.0), np.zeros(m1)
    family = (pool.family.astype(np.float64), pool.family_share, pool.family_wrong) if len(pool.family) else \
        (*none, np.zeros(m1))
    kind = (pool.kind.astype(np.float64), pool.kind_share) if len(pool.kind) else none
    return (*family, *kind)


def vote_probabilities(pool: PoolSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The probabilities behind the vote's weights, clipped off 0 and 1 so every weight is finite: an OK call's
    expected accuracy (``reliability``, [NB, T, M+1]) and the reviewers' sensitivity and specificity ([M+1, D])."""
    return np.clip(reliability(pool), 1e-4, 1 - 1e-4), np.clip(pool.sens, 0.01, 0.99), np.clip(pool.spec, 0.01, 0.99)


def vote_weights(rel: np.ndarray, sens: np.ndarray, spec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vote's weights from those probabilities (any shapes): an answer's log-odds ``rel_logit``, and the reviewer
    table ``md`` stacked on a new first axis (sensitivity, specificity, the log-likelihood ratio of a flag, of a
    confirmation), which ``parasim.sim.rules.add_evidence`` adds. The simulator's tables and the real-tools source's
    parameter record (its prior pool's mean model for unknown ids) both take them from here."""
    return np.log(rel / (1 - rel)), np.stack([sens, spec, np.log((1 - spec) / sens), np.log(spec / (1 - sens))])


def distractor_cdf(options: int, zipf_s: float) -> np.ndarray:
    """A suite row's cumulative distractor weights over wrong answers 1..A-1 ([NUM_ANSWERS], ones past A-2): Zipf
    weights j^-zipf_s (A = NUM_ANSWERS for a free-form row, else its option count), as ``wrong_answer`` reads them."""
    a = NUM_ANSWERS if options == FREE_FORM else options
    w = np.arange(1, a, dtype=np.float64) ** -zipf_s
    out = np.ones(NUM_ANSWERS)
    out[: a - 1] = np.cumsum(w) / w.sum()
    out[a - 2:] = 1.0
    return out


def build_tables(pool: PoolSpec, suite: TaskSuite) -> SimTables:
    """Join a pool and a suite into the simulator's tables."""
    tools = pool.tools.tools
    rel_logit, md = vote_weights(*vote_probabilities(pool))
    t = suite.tables()
    r = len(suite)
    dcdf = np.stack([distractor_cdf(int(t["row_options"][j]), float(t["row_zipf"][j])) for j in range(r)])
    return SimTables(
        skill=np.ascontiguousarray(pool.skill, np.float64),
        bonus=np.ascontiguousarray(pool.bonus, np.float64),
        tok_mu=np.ascontiguousarray(pool.tok_mu, np.float64),
        tm=np.ascontiguousarray(np.stack([pool.tok_sd, pool.tok_alpha, pool.lat_base, pool.lat_per_tok, pool.lat_sd,
                                          pool.price_in, pool.price_out, pool.p_exec, pool.lat_slope])),
        tt=np.ascontiguousarray(np.stack([
            pool.usd_call, pool.usd_s, pool.cost_units, pool.timeout, pool.feedback_frac,
            np.array([BEHAVIOURS.index(t.behaviour) for t in tools], np.float64),
            np.array([t.is_agent for t in tools], np.float64)])),
        mm=np.ascontiguousarray(np.stack([pool.kappa, pool.rho, pool.lam, pool.tau, pool.affinity,
                                          pool.replicas.astype(np.float64), *_groups(pool)])),
        md=np.ascontiguousarray(md),
        rel_logit=np.ascontiguousarray(rel_logit),
        proto=np.array([pool.ensemble_k, pool.manager_tokens_round, pool.manager_tokens_call, pool.prompt_tokens,
                        pool.status_tokens, pool.repair, pool.max_output_tokens, pool.logit_scale], np.float64),
        row_i=np.ascontiguousarray(np.stack([t["row_bench"], t["row_domain"], t["row_options"]], 1), np.int32),
        row_f=np.ascontiguousarray(np.stack([t["row_z"], t["row_mu"], t["row_sigma"], t["row_qtok"]], 1)),
        row_cdf=np.ascontiguousarray(t["row_cdf"]),
        row_dcdf=dcdf,
    )


def episode_params(max_rounds: int, serial: bool, token_budget: float | None) -> np.ndarray:
    """The episode parameters (float64[NUM_ENV_PARAMS]) of both call sources, the simulator and real tools: the round
    limit, serial latency, the token budget (inf for none). The parallel width is not among them: it is the parameter
    record's ``slots`` alone (``kernel_params``), one number that sizes the slot arrays and bounds the calls."""
    env = np.zeros(NUM_ENV_PARAMS)
    env[E_MAX_ROUNDS], env[E_SERIAL] = max_rounds, float(bool(serial))
    env[E_TOKEN_BUDGET] = np.inf if token_budget is None else float(token_budget)
    return env


def kernel_params(t: SimTables, env: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """The step kernel's records of ``t``: the parameter record (a 1-element ``params_dtype(T)`` array) with the
    episode parameters ``env`` (float64[NUM_ENV_PARAMS]) and ``slots``, and one ROW_DTYPE record per suite row."""
    m1 = t.skill.shape[0]
    params = np.zeros(1, params_dtype(t.tt.shape[1]))
    p = params[0]
    set_tool_roles(p, t.tt)
    p["nm"], p["slots"], p["env"], p["proto"] = m1 - 1, slots, env, t.proto
    p["tm"][:, :m1] = t.tm.transpose(1, 2, 0)
    p["tok_mu"][:, :m1] = t.tok_mu
    p["rel_logit"][:, :m1] = t.rel_logit.transpose(1, 2, 0)
    p["tt"], p["bonus"] = t.tt.T, t.bonus
    p["mm"][:m1] = t.mm.T
    p["md"][:m1] = t.md.transpose(1, 2, 0)
    p["skill"][:m1] = t.skill
    rows = np.zeros(len(t.row_cdf), ROW_DTYPE)
    opts = t.row_i[:, R_OPTIONS]
    rows["bench"], rows["domain"] = t.row_i[:, R_BENCH], t.row_i[:, R_DOMAIN]
    rows["nans"] = np.where(opts == FREE_FORM, NUM_ANSWERS, opts)
    rows["log_odds"] = [answer_log_odds_offset(int(o)) for o in opts]
    rows["z"], rows["mu"], rows["sigma"], rows["qtok"] = t.row_f[:, R_Z], t.row_f[:, R_MU], t.row_f[:, R_SIGMA], \
        t.row_f[:, R_QTOK]
    rows["dcdf"] = t.row_dcdf
    return params, rows


def set_tool_roles(p: np.void, tt: np.ndarray) -> None:
    """The parameter record ``p``'s tools looked up by behaviour (``direct``, ``reviewers``; see ``params_dtype``)
    from the SimTables tool table ``tt`` ([NUM_TT, T])."""
    beh, agent = tt[TT_BEHAVIOUR], tt[TT_AGENT] != 0
    solvers = np.flatnonzero((beh == B_SOLVER) & agent)
    reviewers = np.flatnonzero(beh == B_REVIEWER)
    p["direct"] = solvers[0]  # a pool's spec has one (``parasim.pools.pool`` refuses a spec without)
    p["num_reviewers"] = len(reviewers)
    p["reviewers"][:len(reviewers)] = reviewers


def answer_log_odds_offset(options: int) -> float:
    """log(A - 1): the prior odds term of a weighted plurality vote over A answers."""
    a = NUM_ANSWERS if options == FREE_FORM else options
    return math.log(a - 1)
