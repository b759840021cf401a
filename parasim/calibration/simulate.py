"""Simulated call logs in the calibration schema: data with known parameters for ``parasim calibrate``.

The calls come from the simulator's own per-call model (``parasim.sim.kernel.sample_call``), so a fit that
recovers the pool from them tests the likelihood against the code that runs the environments, not
against a second copy of the model. By default the task difficulty is left out, as in a real log.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from parasim.pools import PoolSpec, load_pool
from parasim.protocol.schema import Domain, Status, Tool
from parasim.sim.kernel import OUT_ANSWER, OUT_FLAG, draw_task, sample_call, task_effects
from parasim.sim.rng import seed_state, uniform
from parasim.sim.tables import MM_REPLICAS, R_QTOK, build_tables
from parasim.tasks import BENCHMARKS, NUM_ANSWERS, load_suite

_CR, _SR_TOOL, _FIRST_BASIC = int(Tool.CRITICAL_REVIEWER), int(Tool.STANDARD_REASONER), int(Tool.PYTHON)


@njit(cache=True)
def _simulate(n_tasks, per_task, per_round, tools, models, carry_prob, max_context, rng, ints, floats, skill, bonus,
              tok_mu, tm, tt, mmt, md, proto, row_i, row_f, row_cdf, row_dcdf):  # pragma: no cover - compiled
    """Tasks of ``per_task`` calls in rounds of ``per_round`` (each round's tools and models drawn before its calls,
    whose server load counts the round's calls to their model); a carrying call or a review targets a random earlier
    answer of its task."""
    nm1 = skill.shape[0]
    pref = np.empty(nm1, np.int64)
    effect = np.empty(nm1)
    scratch = np.empty((1, NUM_ANSWERS), np.int64)
    answers = np.empty(per_task, np.int64)  # answer of each call of the task, -1 where none
    round_tool = np.empty(per_round, np.int64)
    round_mm = np.empty(per_round, np.int64)
    c = 0
    for task in range(n_tasks):
        row, bench, dom, nans, z = draw_task(rng, 0, row_i, row_f, row_cdf)
        task_effects(rng, 0, row, nans, mmt, row_dcdf, pref, effect)
        for j in range(per_task):
            if j % per_round == 0:
                for r in range(min(per_round, per_task - j)):
                    round_tool[r] = tools[int(uniform(rng, 0) * len(tools))]
                    round_mm[r] = models[int(uniform(rng, 0) * len(models))] if round_tool[r] < _FIRST_BASIC \
                        else nm1 - 1
            tool, mm = round_tool[j % per_round], round_mm[j % per_round]
            same = 0
            for r in range(min(per_round, per_task - j + j % per_round)):
                same += round_mm[r] == mm
            load = math.ceil(same / mmt[MM_REPLICAS, mm])
            n_prev = 0
            for i in range(j):
                n_prev += answers[i] >= 0
            source = -1
            if n_prev > 0 and (tool == _CR or uniform(rng, 0) < carry_prob):
                pick = int(uniform(rng, 0) * n_prev)
                for i in range(j):
                    if answers[i] >= 0:
                        if pick == 0:
                            source = i
                            break
                        pick -= 1
            if tool == _CR and source < 0:
                tool = _SR_TOOL  # nothing to review yet: the call becomes a fresh standard_reasoner call
            target = 0 if source < 0 else (2 if tool == _CR else 1)
            lead = answers[source] if source >= 0 else -1
            ctx = uniform(rng, 0) * max_context if source >= 0 else 0.0
            status, kind, answer, tok_in, tok_out, lat, usd, cost = sample_call(
                rng, 0, tool, mm, target, lead, ctx, False, row, bench, dom, nans, z, row_f[row, R_QTOK], pref[mm],
                effect[mm], scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf, load)
            answers[j] = answer if kind == OUT_ANSWER else -1
            ints[c, 0], ints[c, 1], ints[c, 2], ints[c, 3] = task, bench, dom, j
            ints[c, 4], ints[c, 5], ints[c, 6] = tool, mm, status
            ints[c, 7] = (1 if answer == 0 else 0) if kind == OUT_ANSWER else -1
            ints[c, 8] = answers[j]
            ints[c, 9] = -1 if tool != _CR or status != 0 else (1 if kind == OUT_FLAG else 0)
            ints[c, 10] = source
            floats[c, 0], floats[c, 1], floats[c, 2], floats[c, 3] = z, ctx, tok_in, tok_out
            floats[c, 4], floats[c, 5], floats[c, 6] = lat, usd, cost
            c += 1


def simulated_records(pool: str | PoolSpec = "paramanager", suite: Any = "paramanager", calls: int = 50_000, *,
                      calls_per_task: int = 8, calls_per_round: int = 1, carry_prob: float = 0.3,
                      max_context: float = 16_000.0,
                      tools: Sequence[int | str] | None = None, with_difficulty: bool = False,
                      seed: int = 0) -> list[dict[str, Any]]:
    """``calls`` simulated call records (whole tasks of ``calls_per_task`` calls, cut to ``calls``).

    Tools and pool models are drawn uniformly (python and search are the manager's); with probability
    ``carry_prob`` a call carries a random earlier answer of its task (logged as ``target``) with a
    context of up to ``max_context`` tokens, so anchoring (rho) and the long-context penalty (lambda) are
    identifiable; a critical_reviewer call reviews such an answer. The carried answer is itself a logged
    call, so the log's likelihood is exact (an unlogged carried answer would be evidence about the task's
    difficulty that the fit never sees). Calls run in rounds of ``calls_per_round`` (logged as ``round``): a
    round's calls to one model share its servers (``parasim.sim.sim_source.server_load``), so a self-hosted model's
    concurrency slope is identifiable.
    """
    if calls < 1 or calls_per_task < 1:
        raise ValueError(f"calls and calls_per_task: expected positive integers, got {calls}, {calls_per_task}")
    if calls_per_round < 1:
        raise ValueError(f"calls_per_round: expected a positive integer, got {calls_per_round}")
    if not 0.0 <= carry_prob <= 1.0:
        raise ValueError(f"carry_prob: expected a number in [0, 1], got {carry_prob!r}")
    spec, task_suite = load_pool(pool), load_suite(suite)
    tool_ids = np.array([Tool.from_wire(t) if isinstance(t, str) else Tool(t) for t in
                         (tools if tools is not None else range(int(Tool.FINAL_ANSWER)))], np.int64)
    if len(tool_ids) == 0 or (tool_ids == Tool.FINAL_ANSWER).any():
        raise ValueError("tools: expected callable tools (final_answer is not a call)")
    n_tasks = math.ceil(calls / calls_per_task)
    n = n_tasks * calls_per_task
    ints, floats = np.zeros((n, 11), np.int64), np.zeros((n, 7))
    t = build_tables(spec, task_suite)
    _simulate(n_tasks, int(calls_per_task), int(calls_per_round), tool_ids, np.arange(spec.num_models),
              float(carry_prob), float(max_context), np.array([seed_state(seed)], np.uint64), ints, floats, t.skill,
              t.bonus, t.tok_mu, t.tm, t.tt, t.mm, t.md, t.proto, t.row_i, t.row_f, t.row_cdf, t.row_dcdf)
    records = []
    for i in range(min(n, calls)):
        task, bench, dom, index, tool, model, status, correct, answer, flagged, source = (int(x) for x in ints[i])
        z, ctx, tok_in, tok_out, lat, usd, cost = (float(x) for x in floats[i])
        rec: dict[str, Any] = {
            "task_id": f"sim{seed}-{task}", "benchmark": BENCHMARKS[bench].name,
            "domain": Domain(dom).name.lower(), "tool": Tool(tool).wire_name, "model": spec.model_names[model],
            "status": Status(status).name, "correct": None if correct < 0 else bool(correct),
            "flagged": None if flagged < 0 else bool(flagged), "answer": None if answer < 0 else answer,
            "context_tokens": round(ctx), "tokens_in": round(tok_in), "tokens_out": round(tok_out),
            "latency_s": round(lat, 6), "cost_units": cost, "usd": usd,
            "episode": task, "call_index": index, "round": index // calls_per_round, "target": source,
        }
        if with_difficulty:
            rec["difficulty"] = round(z, 6)
        records.append(rec)
    return records


def true_parameters(pool: str | PoolSpec, raw: dict[str, Any]) -> dict[str, np.ndarray]:
    """The pool's parameters in the fit's natural scale, keyed like ``Calibration.values``: the truth a
    recovery test compares estimates with."""
    spec = load_pool(pool)
    models = raw["models"] + [raw["manager"]]
    tools = [raw["tools"][Tool(t).wire_name] for t in range(len(Tool) - 1)]
    domains = [d.name.lower() for d in Domain]
    basic = [int(Tool.PYTHON), int(Tool.SEARCH)]
    manager = len(models) - 1
    return {
        "skill": spec.skill, "bonus": spec.bonus, "lambda": spec.lam, "rho": spec.rho, "interaction_sd": spec.tau,
        "mu": np.array([b.mu for b in BENCHMARKS]), "sigma": np.array([b.sigma for b in BENCHMARKS]),
        "tok_log_median": np.array([[m["tokens_out"]["log_median"][d] for d in domains] for m in models]),
        "tok_scale": np.log([t["runtime"]["tokens_scale"] for t in tools]),
        "tok_log_sd": np.array([m["tokens_out"]["log_sd"] for m in models]),
        "tok_alpha": np.array([m["tokens_out"]["difficulty_slope"] for m in models]),
        "ttft": np.array([m["latency"]["ttft_s"] for m in models]),
        "speed": np.array([m["latency"]["tokens_per_s"] for m in models]),
        "lat_sd": np.array([m["latency"]["log_sd"] for m in models]),
        "lat_slope": np.array([m["latency"].get("concurrency_slope", 0.0) for m in models]),
        "overhead": np.array([t["runtime"]["overhead_s"] for t in tools]),
        "latency_log_median": np.log(spec.lat_base[basic, manager]),
        "latency_log_sd": spec.lat_sd[basic, manager],
        "tokens_log_median": spec.tok_mu[basic, manager, 0],
        "tokens_log_sd": spec.tok_sd[basic, manager],
    }
