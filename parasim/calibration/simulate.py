"""Simulated single calls with the env's own per-call model: columns for statistics, records for call logs.

The calls come from the simulator's own per-call model (``parasim.sim.kernel.sample_call``), so a fit that
recovers the pool from them tests the likelihood against the code that runs the environments, not
against a second copy of the model, and docs/simulator.md's tool-level tables (scripts/simulator_stats.py)
describe the same calls. ``simulated_calls`` returns them as columns, ``simulated_records`` as call-log records
in the calibration schema (by default without the task difficulty, as in a real log).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from parasim.calibration.joint_stats import OutcomeMatrix
from parasim.config.env_options import check_int, check_seed
from parasim.pools.pool import PoolSpec, load_pool
from parasim.protocol.schema import Domain, Status, Tool
from parasim.sim.kernel import (
    OUT_ANSWER,
    OUT_FLAG,
    TARGET_CARRY,
    TARGET_VERIFY,
    draw_task,
    sample_call,
    task_effects,
    task_item,
)
from parasim.sim.rng import seed_state, uniform
from parasim.sim.tables import (
    B_REVIEWER,
    MM_REPLICAS,
    R_QTOK,
    R_SIGMA,
    TT_AGENT,
    TT_BEHAVIOUR,
    build_tables,
    distractor_cdf,
)
from parasim.tasks.suites import BENCHMARKS, NUM_ANSWERS, TaskSuite, benchmark_suite, load_suite

_SR_TOOL = int(Tool.STANDARD_REASONER)
_OK = int(Status.OK)
_INT_FIELDS = ("task", "benchmark", "domain", "options", "call_index", "tool", "model", "status", "correct", "answer",
               "flagged", "target", "carried_answer", "reviewed_correct")
_FLOAT_FIELDS = ("difficulty", "context_tokens", "tokens_in", "tokens_out", "latency_s", "usd", "cost_units")
CALL_FIELDS = _INT_FIELDS + _FLOAT_FIELDS  # the columns of ``simulated_calls``


@njit(cache=True)
def _simulate(n_tasks, per_task, per_round, tools, models, carry_prob, max_context, fixed_load, rng, ints, floats,
              skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_i, row_f, row_cdf, row_dcdf):  # pragma: no cover
    """Tasks of ``per_task`` calls in rounds of ``per_round`` (each round's tools and models drawn before its calls,
    whose server load counts the round's calls to their model, or is ``fixed_load`` when positive); a carrying call
    or a review targets a random earlier answer of its task. Writes one row of ``ints`` / ``floats`` per call, in the
    order of ``_INT_FIELDS`` / ``_FLOAT_FIELDS``."""
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
                    round_mm[r] = models[int(uniform(rng, 0) * len(models))] if tt[TT_AGENT, round_tool[r]] != 0 \
                        else nm1 - 1
            tool, mm = round_tool[j % per_round], round_mm[j % per_round]
            if fixed_load > 0:
                load = fixed_load
            else:
                same = 0
                for r in range(min(per_round, per_task - j + j % per_round)):
                    same += round_mm[r] == mm
                load = float(math.ceil(same / mmt[MM_REPLICAS, mm]))
            reviewer = tt[TT_BEHAVIOUR, tool] == B_REVIEWER
            n_prev = 0
            for i in range(j):
                n_prev += answers[i] >= 0
            source = -1
            if n_prev > 0 and (reviewer or uniform(rng, 0) < carry_prob):
                pick = int(uniform(rng, 0) * n_prev)
                for i in range(j):
                    if answers[i] >= 0:
                        if pick == 0:
                            source = i
                            break
                        pick -= 1
            if reviewer and source < 0:
                tool, reviewer = _SR_TOOL, False  # nothing to review yet: a fresh standard_reasoner call
            target = 0 if source < 0 else (TARGET_VERIFY if reviewer else TARGET_CARRY)
            lead = answers[source] if source >= 0 else -1
            ctx = uniform(rng, 0) * max_context if source >= 0 else 0.0
            status, kind, answer, tok_in, tok_out, lat, usd, cost = sample_call(
                rng, 0, tool, mm, target, lead, ctx, False, row, bench, dom, nans, z, row_f[row, R_QTOK], pref[mm],
                effect[mm], scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf, load)
            answers[j] = answer if kind == OUT_ANSWER else -1
            ints[c, 0], ints[c, 1], ints[c, 2], ints[c, 3] = task, bench, dom, nans if nans != NUM_ANSWERS else 0
            ints[c, 4], ints[c, 5], ints[c, 6], ints[c, 7] = j, tool, mm, status
            ints[c, 8] = (1 if answer == 0 else 0) if kind == OUT_ANSWER else -1
            ints[c, 9] = answers[j]
            ints[c, 10] = -1 if not reviewer or status != 0 else (1 if kind == OUT_FLAG else 0)
            ints[c, 11] = source
            ints[c, 12] = lead if target == TARGET_CARRY else -1
            ints[c, 13] = (1 if lead == 0 else 0) if reviewer else -1
            floats[c, 0], floats[c, 1], floats[c, 2], floats[c, 3] = z, ctx, tok_in, tok_out
            floats[c, 4], floats[c, 5], floats[c, 6] = lat, usd, cost
            c += 1


def simulated_calls(pool: str | PoolSpec = "paramanager", suite: str | TaskSuite = "paramanager", n_tasks: int = 1000,
                    calls_per_task: int = 8, *, calls_per_round: int = 1, tools: Sequence[int | str] | None = None,
                    models: Sequence[int] | None = None, carry_prob: float = 0.0, max_context: float = 16_000.0,
                    load: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """``n_tasks * calls_per_task`` simulated calls as columns named by ``CALL_FIELDS`` (one entry per call, the
    calls of a task consecutive: they share its difficulty and preferred wrong answers, as the random-effect
    likelihood assumes).

    Tools are drawn uniformly from ``tools`` (callable tools; all by default) and the agent tools' models from
    ``models`` (pool rows; all by default); ``model`` is the manager's row M for python and search. With probability
    ``carry_prob`` a call carries a random earlier answer of its task (``target``: that call's ``call_index``;
    ``carried_answer``: its answer) with a context of up to ``max_context`` tokens; a critical_reviewer call reviews
    one (``reviewed_correct``: whether it was the gold answer; ``flagged``: the review's verdict when OK) and is a
    fresh standard_reasoner call when its task has no answer yet. Calls run in rounds of ``calls_per_round``: a
    call's server load counts its round's calls to its model over the model's replicas
    (``parasim.sim.sim_source.server_load``), unless ``load`` fixes it for every call. ``correct`` / ``answer`` are
    -1 unless an OK call returned an answer (``answer`` 0 is gold); ``options`` is 0 for free-form tasks.
    """
    n_tasks = check_int("n_tasks", n_tasks, 1, 2**31 - 1)
    per_task = check_int("calls_per_task", calls_per_task, 1, 2**31 - 1)
    per_round = check_int("calls_per_round", calls_per_round, 1, 2**31 - 1)
    fixed_load = 0.0 if load is None else float(check_int("load", load, 1, 1024))
    if not 0.0 <= carry_prob <= 1.0:
        raise ValueError(f"carry_prob: expected a number in [0, 1], got {carry_prob!r}")
    spec, task_suite = load_pool(pool), load_suite(suite)
    tool_ids = np.array([Tool.from_wire(t) if isinstance(t, str) else Tool(t) for t in
                         (tools if tools is not None else range(int(Tool.FINAL_ANSWER)))], np.int64)
    if len(tool_ids) == 0 or (tool_ids == Tool.FINAL_ANSWER).any():
        raise ValueError("tools: expected callable tools (final_answer is not a call)")
    model_ids = np.arange(spec.num_models) if models is None else np.asarray(models, np.int64)
    if len(model_ids) == 0 or model_ids.min() < 0 or model_ids.max() >= spec.num_models:
        raise ValueError(f"models: expected pool model indices in [0, {spec.num_models}), got {list(model_ids)}")
    n = n_tasks * per_task
    ints, floats = np.zeros((n, len(_INT_FIELDS)), np.int64), np.zeros((n, len(_FLOAT_FIELDS)))
    t = build_tables(spec, task_suite)
    _simulate(n_tasks, per_task, per_round, tool_ids, model_ids, float(carry_prob), float(max_context), fixed_load,
              np.array([seed_state(seed)], np.uint64), ints, floats, t.skill, t.bonus, t.tok_mu, t.tm, t.tt, t.mm,
              t.md, t.proto, t.row_i, t.row_f, t.row_cdf, t.row_dcdf)
    return {**{k: np.ascontiguousarray(ints[:, i]) for i, k in enumerate(_INT_FIELDS)},
            **{k: np.ascontiguousarray(floats[:, i]) for i, k in enumerate(_FLOAT_FIELDS)}}


def simulated_records(pool: str | PoolSpec = "paramanager", suite: Any = "paramanager", calls: int = 50_000, *,
                      calls_per_task: int = 8, calls_per_round: int = 1, carry_prob: float = 0.3,
                      max_context: float = 16_000.0,
                      tools: Sequence[int | str] | None = None, with_difficulty: bool = False,
                      seed: int = 0) -> list[dict[str, Any]]:
    """``calls`` simulated call records (whole tasks of ``calls_per_task`` calls of ``simulated_calls``, cut to
    ``calls``), every pool model callable.

    The carried answer (logged as ``target``) is itself a logged call, so the log's likelihood is exact (an unlogged
    carried answer would be evidence about the task's difficulty that the fit never sees), and carrying makes
    anchoring (rho) and the long-context penalty (lambda) identifiable. Calls run in rounds of ``calls_per_round``
    (logged as ``round``) whose calls to one model share its servers, so a self-hosted model's concurrency slope is
    identifiable.
    """
    if calls < 1 or calls_per_task < 1:
        raise ValueError(f"calls and calls_per_task: expected positive integers, got {calls}, {calls_per_task}")
    seed = check_seed(seed)  # the simulator's seed rule: -1 would wrap to another stream, not a new one
    spec = load_pool(pool)
    cols = simulated_calls(spec, suite, math.ceil(calls / calls_per_task), calls_per_task,
                           calls_per_round=calls_per_round, tools=tools, carry_prob=carry_prob,
                           max_context=max_context, seed=seed)
    records = []
    for i in range(calls):
        task, index, correct, answer, flagged = (int(cols[k][i]) for k in ("task", "call_index", "correct", "answer",
                                                                            "flagged"))
        rec: dict[str, Any] = {
            "task_id": f"sim{seed}-{task}", "benchmark": BENCHMARKS[int(cols["benchmark"][i])].name,
            "domain": Domain(int(cols["domain"][i])).name.lower(), "tool": Tool(int(cols["tool"][i])).wire_name,
            "model": spec.model_names[int(cols["model"][i])], "status": Status(int(cols["status"][i])).name,
            "correct": None if correct < 0 else bool(correct), "flagged": None if flagged < 0 else bool(flagged),
            "answer": None if answer < 0 else answer, "context_tokens": round(float(cols["context_tokens"][i])),
            "tokens_in": round(float(cols["tokens_in"][i])), "tokens_out": round(float(cols["tokens_out"][i])),
            "latency_s": round(float(cols["latency_s"][i]), 6), "cost_units": float(cols["cost_units"][i]),
            "usd": float(cols["usd"][i]), "episode": task, "call_index": index, "round": index // calls_per_round,
            "target": int(cols["target"][i]),
        }
        if with_difficulty:
            rec["difficulty"] = round(float(cols["difficulty"][i]), 6)
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


@njit(cache=True)
def _outcomes(n_questions, models, n_samples, rng, hits, answers, plural, sigma, skill, bonus, tok_mu, tm, tt, mmt, md,
              proto, row_i, row_f, row_dcdf):  # pragma: no cover - compiled
    """``n_samples[j]`` fresh ``standard_reasoner`` calls of each model row ``models[j]`` on each of ``n_questions``
    tasks
    of suite row 0 (difficulty spread ``sigma`` when positive, else the row's): right answers summed into
    ``hits[q, j]``, the first call's answer id into ``answers[q, j]`` (-1 when it gave none), and into
    ``plural[q, j]`` 1 when the plurality answer of the calls that gave one is the gold answer (ties to the answer
    given first, as the ensemble's vote breaks them; 0 when none gave an answer)."""
    nm1 = skill.shape[0]
    pref = np.empty(nm1, np.int64)
    effect = np.empty(nm1)
    scratch = np.empty((1, NUM_ANSWERS), np.int64)
    tally = np.zeros(NUM_ANSWERS, np.int64)  # per answer id: calls that gave it (this question and model)
    first = np.full(NUM_ANSWERS, -1, np.int64)  # per answer id: the call that first gave it
    rf = row_f.copy()
    if sigma > 0:
        rf[0, R_SIGMA] = sigma
    for q in range(n_questions):
        row, bench, dom, nans, z = task_item(rng, 0, 0, row_i, rf)
        task_effects(rng, 0, row, nans, mmt, row_dcdf, pref, effect)
        for j in range(len(models)):
            mm = models[j]
            tally[:] = 0
            first[:] = -1
            for k in range(n_samples[j]):
                status, kind, answer, _, _, _, _, _ = sample_call(
                    rng, 0, _SR_TOOL, mm, 0, -1, 0.0, False, row, bench, dom, nans, z, rf[row, R_QTOK], pref[mm],
                    effect[mm], scratch, skill, bonus, tok_mu, tm, tt, mmt, md, proto, row_dcdf)
                given = status == _OK and kind == OUT_ANSWER
                if given and answer == 0:
                    hits[q, j] += 1.0
                if k == 0:
                    answers[q, j] = answer if given else -1
                if given:
                    tally[answer] += 1
                    if first[answer] < 0:
                        first[answer] = k
            best = -1
            for a in range(NUM_ANSWERS):
                if tally[a] > 0 and (best < 0 or tally[a] > tally[best] or (
                        tally[a] == tally[best] and first[a] < first[best])):
                    best = a
            plural[q, j] = 1.0 if best == 0 else 0.0


def simulated_outcomes(pool: str | PoolSpec, benchmark: str, n_questions: int, n_samples: int | Sequence[int] = 1, *,
                       models: Sequence[str] | None = None, sigma: float | None = None, zipf_s: float | None = None,
                       seed: int = 0) -> OutcomeMatrix:
    """A per-query outcome table drawn with the simulator's own per-call model (``sample_call``): ``n_samples`` (one
    count, or one per model) direct ``standard_reasoner`` calls of each named model (default: every pool model; the
    manager may be named too) on ``n_questions`` fresh questions of ``benchmark``, as the ``OutcomeMatrix`` that
    ``parasim.calibration.joint_stats`` and ``joint_fit`` read (answer codes are the simulator's answer ids, 0
    gold). ``sigma`` overrides the benchmark's difficulty spread sigma_b for this table, ``zipf_s`` the Zipf exponent
    of its distractor weights (a fitted answer space, ``joint_fit.zipf_exponent``). A call cut at the cap or failed
    counts as a wrong sample without an answer, as an eval harness scores it."""
    return _draw_outcomes(pool, benchmark, n_questions, n_samples, models, sigma, zipf_s, seed)[0]


def simulated_consensus(pool: str | PoolSpec, benchmark: str, n_questions: int, n_samples: int | Sequence[int], *,
                        models: Sequence[str] | None = None, sigma: float | None = None, zipf_s: float | None = None,
                        seed: int = 0) -> tuple[OutcomeMatrix, np.ndarray]:
    """``simulated_outcomes``' table and, per [question, model], whether the plurality answer of the model's
    ``n_samples`` calls is the gold one (1.0 / 0.0): its mean over questions is the model's cons@n (majority vote over
    n samples with answers, as the DeepSeek-R1 report's cons@64)."""
    return _draw_outcomes(pool, benchmark, n_questions, n_samples, models, sigma, zipf_s, seed)


def _draw_outcomes(pool: str | PoolSpec, benchmark: str, n_questions: int, n_samples: int | Sequence[int],
                   models: Sequence[str] | None, sigma: float | None, zipf_s: float | None,
                   seed: int) -> tuple[OutcomeMatrix, np.ndarray]:
    """The draw behind ``simulated_outcomes`` and ``simulated_consensus``: (table, plurality-right [Q, M])."""
    spec = pool if isinstance(pool, PoolSpec) else load_pool(pool)
    check_int("n_questions", n_questions, 1, 10**7)
    names = list(spec.model_names) if models is None else list(models)
    counts = [n_samples] * len(names) if isinstance(n_samples, int | np.integer) else list(n_samples)
    if len(counts) != len(names):
        raise ValueError(f"simulated_outcomes: {len(counts)} sample counts for {len(names)} models")
    counts = np.array([check_int("n_samples", n, 1, 1000) for n in counts], np.int64)
    unknown = [m for m in names if m not in spec.model_names]
    if unknown:
        raise ValueError(f"simulated_outcomes: models {unknown} are not in pool {spec.name!r}: "
                         f"{list(spec.model_names)}")
    if sigma is not None and not sigma > 0:
        raise ValueError(f"simulated_outcomes: sigma must be > 0, got {sigma!r}")
    rows = np.array([spec.model_names.index(m) for m in names], np.int64)
    if zipf_s is not None and not (math.isfinite(zipf_s) and zipf_s >= 0):
        raise ValueError(f"simulated_outcomes: zipf_s must be a finite number >= 0, got {zipf_s!r}")
    suite = benchmark_suite([benchmark])
    t = build_tables(spec, suite)
    if zipf_s is not None:
        t = t._replace(row_dcdf=distractor_cdf(int(suite.options[0]), float(zipf_s))[None, :])
    hits = np.zeros((n_questions, len(rows)))
    answers = np.full((n_questions, len(rows)), -1, np.int64)
    plural = np.zeros((n_questions, len(rows)))
    _outcomes(n_questions, rows, counts, np.array([seed_state(seed)], np.uint64), hits, answers, plural,
              -1.0 if sigma is None else float(sigma), t.skill, t.bonus, t.tok_mu, t.tm, t.tt, t.mm, t.md, t.proto,
              t.row_i, t.row_f, t.row_dcdf)
    samples = np.broadcast_to(counts.astype(np.float64), hits.shape).copy()
    return OutcomeMatrix(names, np.arange(n_questions), hits, samples, answers), plural
