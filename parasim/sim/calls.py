"""Single simulated calls with the env's own per-call model: the data behind calibration logs.

``parasim simulate-log`` writes these records as JSONL so that ``parasim calibrate`` can be tested on
data with known parameters. Each task gets ``calls_per_task`` calls (the shared difficulty z makes calls
of one task correlated, as the random-effect likelihood assumes); tools and models are drawn uniformly
from the given lists; a share ``carry_prob`` of solver calls carries an earlier answer (a standard-reasoner
answer of a random pool model) and a context of up to ``max_context`` tokens, so that anchoring (rho) and
the long-context penalty (lambda) are identifiable; a critical_reviewer call reviews such an answer.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from parasim.env_options import check_int
from parasim.pools import PoolSpec, load_pool
from parasim.protocol.schema import Tool
from parasim.sim.kernel import (
    MM_KAPPA,
    OUT_ANSWER,
    OUT_FLAG,
    TARGET_CARRY,
    TARGET_VERIFY,
    _sigmoid,
    draw_task,
    draw_wrong,
    sample_call,
    task_effects,
)
from parasim.sim.rng import seed_state, uniform
from parasim.sim.tables import B_REVIEWER, R_QTOK, TT_AGENT, TT_BEHAVIOUR, build_tables
from parasim.tasks import NUM_ANSWERS, TaskSuite, load_suite

CALL_FIELDS = ("task", "benchmark", "domain", "options", "difficulty", "tool", "model", "status", "correct", "answer",
               "flagged", "reviewed_correct", "context_tokens", "carried_answer", "tokens_in", "tokens_out",
               "latency_s", "usd", "cost_units")


@njit(cache=True)
def _simulate(n_tasks, per_task, tools, models, carry_prob, max_context, rng, ints, floats, skill, bonus, tok_mu, tm,
              tt, mmt, md, proto, row_i, row_f, row_cdf, row_dcdf, load):
    nm1 = skill.shape[0]
    pref = np.empty(nm1, np.int64)
    effect = np.empty(nm1)
    scratch = np.empty((1, NUM_ANSWERS), np.int64)
    c = 0
    for task in range(n_tasks):
        row, bench, dom, nans, z = draw_task(rng, 0, row_i, row_f, row_cdf)
        task_effects(rng, 0, row, nans, mmt, row_dcdf, pref, effect)
        for _ in range(per_task):
            tool = tools[int(uniform(rng, 0) * len(tools))]
            mm = models[int(uniform(rng, 0) * len(models))] if tt[TT_AGENT, tool] != 0 else nm1 - 1
            reviewer = tt[TT_BEHAVIOUR, tool] == B_REVIEWER
            lead = -1
            ctx = 0.0
            target = 0
            if reviewer or uniform(rng, 0) < carry_prob:
                ml = models[int(uniform(rng, 0) * len(models))]
                right = uniform(rng, 0) < _sigmoid(skill[ml, bench] + bonus[0, dom] - z + effect[ml])
                lead = 0 if right else draw_wrong(rng, 0, ml, row, nans, pref[ml], mmt[MM_KAPPA, ml], row_dcdf)
                ctx = uniform(rng, 0) * max_context
                target = TARGET_VERIFY if reviewer else TARGET_CARRY
            status, kind, answer, tok_in, tok_out, lat, usd, cost = sample_call(
                rng, 0, tool, mm, target, lead, ctx, False, row, bench, dom, nans, z, row_f[row, R_QTOK], pref[mm],
                effect[mm], scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf, load)
            ints[c, 0], ints[c, 1], ints[c, 2], ints[c, 3] = task, bench, dom, nans if nans != NUM_ANSWERS else 0
            ints[c, 4], ints[c, 5], ints[c, 6] = tool, mm, status
            ints[c, 7] = (1 if answer == 0 else 0) if kind == OUT_ANSWER else -1
            ints[c, 8] = answer if kind == OUT_ANSWER else -1
            ints[c, 9] = -1 if not reviewer or status != 0 else (1 if kind == OUT_FLAG else 0)
            ints[c, 10] = -1 if not reviewer else (1 if lead == 0 else 0)
            ints[c, 11] = lead if target == TARGET_CARRY else -1
            floats[c, 0], floats[c, 1], floats[c, 2], floats[c, 3] = z, ctx, tok_in, tok_out
            floats[c, 4], floats[c, 5], floats[c, 6] = lat, usd, cost
            c += 1


def simulate_calls(pool: str | PoolSpec, suite: str | TaskSuite = "paramanager", n_tasks: int = 1000,
                   calls_per_task: int = 8, *, tools: Sequence[int | str] | None = None,
                   models: Sequence[int] | None = None, carry_prob: float = 0.0, max_context: float = 16000.0,
                   load: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """``n_tasks * calls_per_task`` simulated calls as columns named by ``CALL_FIELDS``, each made with ``load``
    concurrent requests on its model's server (``parasim.sim.sim_source.server_load``).

    ``model`` is a pool row (M = the manager, for python and search); ``correct`` / ``answer`` are -1
    unless an OK call returned an answer; ``flagged`` / ``reviewed_correct`` describe reviewer calls.
    """
    p, s = load_pool(pool), load_suite(suite)
    tool_ids = np.array([Tool.from_wire(t) if isinstance(t, str) else Tool(t) for t in
                         (tools if tools is not None else range(int(Tool.FINAL_ANSWER)))], np.int64)
    if (tool_ids == Tool.FINAL_ANSWER).any() or len(tool_ids) == 0:
        raise ValueError("tools: expected callable tools (final_answer is not a call)")
    model_ids = np.arange(p.num_models) if models is None else np.asarray(models, np.int64)
    if len(model_ids) == 0 or model_ids.min() < 0 or model_ids.max() >= p.num_models:
        raise ValueError(f"models: expected pool model indices in [0, {p.num_models}), got {list(model_ids)}")
    if not 0.0 <= carry_prob <= 1.0:
        raise ValueError(f"carry_prob: expected a number in [0, 1], got {carry_prob!r}")
    n = int(n_tasks) * int(calls_per_task)
    ints, floats = np.zeros((n, 12), np.int64), np.zeros((n, 7))
    t = build_tables(p, s)
    rng = np.array([seed_state(seed)], np.uint64)
    _simulate(int(n_tasks), int(calls_per_task), tool_ids, model_ids, float(carry_prob), float(max_context), rng,
              ints, floats, t.skill, t.bonus, t.tok_mu, t.tm, t.tt, t.mm, t.md, t.proto, t.row_i, t.row_f,
              t.row_cdf, t.row_dcdf, float(check_int("load", load, 1, 1024)))
    int_names = ("task", "benchmark", "domain", "options", "tool", "model", "status", "correct", "answer", "flagged",
                 "reviewed_correct", "carried_answer")
    float_names = ("difficulty", "context_tokens", "tokens_in", "tokens_out", "latency_s", "usd", "cost_units")
    cols = {**dict(zip(int_names, ints.T, strict=False)), **dict(zip(float_names, floats.T, strict=False))}
    return {k: np.ascontiguousarray(cols[k]) for k in CALL_FIELDS}
