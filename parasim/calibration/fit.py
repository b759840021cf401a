"""Fit a pool to a call log by maximum likelihood: the driver behind ``parasim calibrate``.

The log is split by what each part of the call model explains (``parasim.sim.kernel.sample_call``):
correctness and agent output tokens share the task difficulty and are fitted jointly with it
integrated out (``irt``); latency, basic-tool tokens, execution errors and reviewer verdicts do not
depend on it (``runtime``). The likelihood factorizes over those parts, so fitting them separately is
the joint MLE, and each keeps a small Hessian. Parameters the log cannot identify stay at the base
pool's values, and the report says which: the benchmark difficulty means (only skill minus difficulty
is identified without logged difficulties), one tool bonus per connected set of (model, tool) pairs in
a domain (the standard reasoner's where it was called), one tool overhead and one token scale.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from parasim.calibration.agreement import MIN_PAIRS, agreement_moments
from parasim.calibration.calls import CallTable
from parasim.calibration.irt import (
    CorrectRows,
    DifficultyModel,
    TokenRows,
    same_wrong_probability,
    vote_polynomial,
)
from parasim.calibration.mle import Estimate, maximize, optimize
from parasim.calibration.params import Block, Layout
from parasim.calibration.poolfile import model_entries, read_raw
from parasim.calibration.quadrature import DEFAULT_NODES, Marginal
from parasim.calibration.runtime import (
    AgentLatencyRows,
    Proportion,
    fit_agent_latency,
    fit_lognormal_groups,
    proportion,
)
from parasim.pools.pool import TOOLS, PoolError, PoolSpec, effective_spread, parse_pool
from parasim.protocol.schema import NUM_DOMAINS, NUM_TOOLS, Domain, Status, Tool
from parasim.tasks.suites import (
    BENCHMARK_INDEX,
    BENCHMARKS,
    FREE_FORM,
    GENERIC,
    NUM_ANSWERS,
    NUM_BENCHMARKS,
)
from parasim.tools.spec import default_tool_spec

DOMAINS = tuple(d.name.lower() for d in Domain)
BENCH_NAMES = tuple(b.name for b in BENCHMARKS)
_AGENT = [t for t in range(NUM_TOOLS) if Tool(t).is_agent]
_BASIC = (int(Tool.PYTHON), int(Tool.SEARCH))
_SR, _CR, _CODE, _ENS, _PY = (int(Tool.STANDARD_REASONER), int(Tool.CRITICAL_REVIEWER), int(Tool.CODE_REASONER),
                              int(Tool.ENSEMBLE_SOLVER), int(Tool.PYTHON))
_RAN = (int(Status.OK), int(Status.EXEC_ERR))  # calls that ran to the end: their tokens and latency are whole
_CUT = int(Status.TRUNCATED)  # cut at the generation cap: no answer (never a wrong one), tokens censored at the cap
_RUNS = (*_RAN, int(Status.TIMEOUT), _CUT)  # calls that occupied their model's server
_RENAME = {"lambda": "lam", "tok_log_median": "tok_mu", "tok_log_sd": "tok_sd", "tok_alpha": "alpha",
           "interaction_sd": "tau"}
OVERHEAD_FLOOR_S = 0.01  # seconds: a fitted agent-tool overhead below this is taken as not identified
# the smallest output-length spread (log-SD) a fit reports: a model whose logged output lengths are all equal (a
# scripted server, a fixed-length tool) has its likelihood rise without bound as the spread shrinks, and would
# otherwise divide by an underflowed 0
TOK_SD_FLOOR = 1e-3
MIN_REPEATS = 20  # tasks with two or more correctness rows of a model before its interaction sd is fitted
TAU_START = 0.05  # the fit's start for a base pool without interaction (the log scale needs tau > 0)


ABNORMAL_STOP = 2  # L-BFGS-B's status for a failed line search


class FitError(ValueError):
    """The likelihood could not be maximized (no convergence, a non-finite likelihood, estimate or standard error)."""


@dataclass
class Calibration:
    """Everything a fit produced: estimates with SEs, rates, log-likelihood, fit checks, notes."""

    raw: dict[str, Any]  # the base pool file
    base: PoolSpec
    models: tuple[str, ...]  # pool rows: agent models, then the manager
    parts: list[Estimate]
    rates: list[Proportion]
    values: dict[str, np.ndarray]  # natural-scale arrays of every block (fixed entries at base values)
    free: dict[str, np.ndarray]  # which entries of each block were fitted
    calibration_rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    moments: list[tuple[str, float, float]] = field(default_factory=list)  # (label, estimate, bootstrap SE)
    # per model name, the ``interaction`` keys that place it in a family and kind with fitted shares (per-query
    # tables: ``parasim.calibration.per_query_fit.fit_shared_effects``); a call log's fit has none
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    num_calls: int = 0

    @property
    def loglik(self) -> float:
        return sum(e.loglik for e in self.parts) + sum(r.loglik for r in self.rates)

    @property
    def num_params(self) -> int:
        return sum(e.num_params for e in self.parts) + len(self.rates)

    @property
    def aic(self) -> float:
        return 2.0 * self.num_params - 2.0 * self.loglik

    def parameters(self) -> list[tuple[str, float, float]]:
        """(label, estimate, standard error) of every fitted parameter, natural scale."""
        rows = [(lab, float(v), float(s)) for e in self.parts for lab, v, s in zip(e.labels, e.value, e.se)]
        return rows + [(r.label, r.value, r.se) for r in self.rates] + list(self.moments)

    def _add(self, estimate: Estimate) -> None:
        """Keep a fitted part; one the optimizer could not fit is a ``FitError``: a pool of unfitted (base) values
        written as a fit would be a wrong result that says nothing. An abnormal stop (the line search failed: a
        likelihood broken by an outlying value) and non-finite figures are errors; reaching the evaluation limit
        along a direction the log does not identify stays the report's warning (small logs do that)."""
        part = estimate.labels[0].split("[")[0] if estimate.labels else "(empty part)"
        problem = ("the optimizer stopped abnormally" if estimate.status == ABNORMAL_STOP else
                   "the log-likelihood is not finite" if not math.isfinite(estimate.loglik) else
                   "an estimate is not finite" if not np.all(np.isfinite(estimate.value)) else
                   "a standard error is not finite"
                   if estimate.info is not None and not np.all(np.isfinite(estimate.se))
                   else "")
        if problem:
            raise FitError(f"the fit of {part} failed: {problem} ({estimate.message}; log-likelihood "
                           f"{estimate.loglik:.6g}); no pool is written. Check the log for outlying values")
        self.parts.append(estimate)
        values, _ = estimate.layout.unpack(estimate.vec)
        self.values.update(values)
        self.free.update({name: block.free for name, block in estimate.layout.blocks.items()})


def _model_rows(table: CallTable, base: PoolSpec, notes: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """Pool rows (base agent models, new models from the log, the manager last) and each call's row.

    Basic tools (python, search) are run by the manager in the simulator, whatever model the log names.
    """
    agents = list(base.model_names[:-1])
    for i, name in enumerate(table.models):
        uses_agent = bool(np.any((table.model == i) & np.isin(table.tool, _AGENT)))
        if uses_agent and name not in agents and name != base.model_names[-1]:
            agents.append(name)
            notes.append(f"model {name!r} is not in the base pool: its unfitted parameters copy {agents[0]!r}")
    names = (*agents, base.model_names[-1])
    manager = len(names) - 1
    lookup = np.array([names.index(n) if n in names else manager for n in table.models], np.int64)
    return names, np.where(np.isin(table.tool, _BASIC), manager, lookup[table.model])


def _bench_rows(table: CallTable, notes: list[str]) -> np.ndarray:
    """Catalogue benchmark index per call (unknown names fall back to the domain's generic row)."""
    index = []
    for name, dom in zip(table.benchmarks, table.bench_domain):
        if name in BENCHMARK_INDEX and BENCHMARKS[BENCHMARK_INDEX[name]].domain == dom:
            index.append(BENCHMARK_INDEX[name])
        else:
            index.append(GENERIC[Domain(dom)])
            notes.append(f"benchmark {name!r} is not in the task catalogue: fitted as generic_{DOMAINS[dom]}")
    return np.asarray(index, np.int64)[table.bench]


def _by_name(values: np.ndarray, names: tuple[str, ...], base: PoolSpec) -> np.ndarray:
    """Base-pool rows for ``names`` (new models copy the first base model)."""
    return np.take(values, [base.model_names.index(n) if n in base.model_names else 0 for n in names], axis=0)


def _finder(parent: list[int]) -> Callable[[int], int]:
    """Union-find root lookup with path halving over ``parent``."""

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    return find


def _anchors(tool: np.ndarray, model: np.ndarray, domain: np.ndarray, num_models: int) -> np.ndarray:
    """bool[T, D]: the tool bonus fixed per connected set of (model, tool) pairs in each domain.

    skill[m, b] + bonus[t, d] is unchanged by adding c to the bonuses and subtracting it from the skills of
    one connected set, so each set pins one bonus: the standard reasoner's if it is in the set, else its
    most used tool's.
    """
    fixed = np.zeros((NUM_TOOLS, NUM_DOMAINS), bool)
    for d in range(NUM_DOMAINS):
        rows = domain == d
        parent = list(range(num_models + NUM_TOOLS))
        find = _finder(parent)
        for m, t in set(zip(model[rows].tolist(), tool[rows].tolist())):
            parent[find(m)] = find(num_models + t)
        counts = np.bincount(tool[rows], minlength=NUM_TOOLS)
        groups: dict[int, list[int]] = {}
        for t in np.flatnonzero(counts):
            groups.setdefault(find(num_models + int(t)), []).append(int(t))
        for members in groups.values():
            fixed[_SR if _SR in members else max(members, key=lambda t: counts[t]), d] = True
    return fixed


def _ensemble_poly(table: CallTable, rows: np.ndarray, model: np.ndarray, bench: np.ndarray, kappa: np.ndarray,
                   k: int) -> np.ndarray:
    """[N, 3] P(right)-in-p coefficients: (1, 0, 0) for one sample, the plurality vote for the ensemble."""
    poly = np.zeros((len(table), 3))
    poly[:, 0] = 1.0
    ens = rows & (table.tool == _ENS)
    for b, m in set(zip(bench[ens].tolist(), model[ens].tolist())):
        opts = BENCHMARKS[b].options
        p_same = same_wrong_probability(kappa[m], BENCHMARKS[b].zipf_s, NUM_ANSWERS if opts == FREE_FORM else opts)
        poly[ens & (bench == b) & (model == m)] = vote_polynomial(k, p_same)
    return poly


def _difficulty_part(table: CallTable, raw: dict[str, Any], base: PoolSpec, entries: list[dict[str, Any]],
                     names: tuple[str, ...], model: np.ndarray, bench: np.ndarray, nodes: int,
                     notes: list[str]) -> Estimate:
    """Correctness and agent tokens with the task difficulty and the model effects integrated out (adaptive
    Gauss-Hermite over z, plain over each (task, model) effect)."""
    n_models, k = len(names), base.ensemble_k
    ok = table.status == int(Status.OK)
    correct = ok & (table.correct >= 0) & (table.tool != _CR) & ((table.tool != _ENS) | (k <= 3))
    if k > 3 and np.any(ok & (table.tool == _ENS)):
        notes.append(f"ensemble_solver calls are left out of the correctness fit (vote model covers k <= 3, k={k})")
    tokens = (np.isin(table.tool, _AGENT) & (table.tool != _ENS) & np.isin(table.status, (*_RAN, _CUT))
              & (table.tokens_out > 0) & (model < n_models - 1))
    kappa = np.array([e["errors"]["kappa"] for e in entries])
    poly = _ensemble_poly(table, correct, model, bench, kappa, k)
    used = np.unique(np.concatenate([table.task[correct], table.task[tokens]]))
    remap = np.full(len(table.task_ids), -1, np.int64)
    remap[used] = np.arange(len(used))
    c = CorrectRows(remap[table.task[correct]], model[correct], bench[correct], table.tool[correct],
                    table.domain[correct], np.log1p(table.context[correct] / 1000.0), table.correct[correct],
                    poly[correct], table.carried[correct])
    cut = (table.tokens_out[tokens] >= base.max_output_tokens - 0.5) | (table.status[tokens] == _CUT)
    for m in np.unique(model[tokens]):  # every output at the cap: the length distribution has nothing to fit
        if cut[model[tokens] == m].all():
            raise FitError(f"model {names[m]!r}: all {int((model[tokens] == m).sum())} of its agent calls reached "
                           "the generation cap (TRUNCATED or tokens_out at protocol.max_output_tokens), so neither "
                           "its output length nor its accuracy can be fitted; log calls with a higher max_tokens")
    t = TokenRows(remap[table.task[tokens]], model[tokens], table.tool[tokens], table.domain[tokens],
                  np.log(table.tokens_out[tokens]), cut.astype(np.int64))
    task_bench = np.zeros(len(used), np.int64)
    inside = remap[table.task] >= 0
    task_bench[remap[table.task[inside]]] = bench[inside]
    known_z = table.task_difficulty[used]
    mu = np.array([b.mu for b in BENCHMARKS])
    sigma = np.array([b.sigma for b in BENCHMARKS])
    seen = np.bincount(task_bench, minlength=NUM_BENCHMARKS) > 0
    logged = np.bincount(task_bench[np.isfinite(known_z)], minlength=NUM_BENCHMARKS) > 0
    several = np.bincount(np.concatenate([c.task, t.task]), minlength=len(used)) > 1
    free_sigma = seen & (logged | (np.bincount(task_bench, several, minlength=NUM_BENCHMARKS) >= 20))
    if np.any(seen & ~free_sigma):
        notes.append("difficulty spread kept at the catalogue value (fewer than 20 tasks with several calls): "
                     + ", ".join(BENCH_NAMES[b] for b in np.flatnonzero(seen & ~free_sigma)))
    skill_free = np.zeros((n_models, NUM_BENCHMARKS), bool)
    skill_free[c.model, c.bench] = True
    bonus_seen = np.zeros((NUM_TOOLS, NUM_DOMAINS), bool)
    bonus_seen[c.tool, c.domain] = True
    tok_seen = np.zeros((n_models, NUM_DOMAINS), bool)
    tok_seen[t.model, t.domain] = True
    tok_models = np.bincount(t.model, minlength=n_models) > 0
    counts = np.bincount(t.tool, minlength=NUM_TOOLS)
    scale_anchor = _SR if counts[_SR] else int(np.argmax(counts))
    tools_raw = base_tools(raw)
    # tau needs calls of one model repeated on a task: MIN_REPEATS tasks with two or more of its correctness rows
    per_group = np.bincount(c.task * n_models + c.model, minlength=len(used) * n_models).reshape(len(used), n_models)
    tau_free = (per_group >= 2).sum(0) >= MIN_REPEATS
    if np.any(~tau_free & (per_group.sum(0) > 0)):
        notes.append("interaction sd kept at the base pool's values (fewer than "
                     f"{MIN_REPEATS} tasks with two calls of the model): "
                     + ", ".join(names[m] for m in np.flatnonzero(~tau_free & (per_group.sum(0) > 0))))
    layout = Layout([
        Block("skill", _by_name(base.skill, names, base), skill_free, "identity", (names, BENCH_NAMES)),
        Block("bonus", base.bonus, bonus_seen & ~_anchors(c.tool, c.model, c.domain, n_models), "identity",
              (TOOLS, DOMAINS)),
        Block("lambda", [e["long_context"]["lambda"] for e in entries],
              np.bincount(c.model[c.ctx > 0], minlength=n_models) > 0, "identity", (names,)),
        Block("rho", np.clip([e["anchoring"]["rho"] for e in entries], 0.02, 0.98),
              np.bincount(c.model[c.carried >= 0], minlength=n_models) > 0, "logit", (names,)),
        Block("interaction_sd", np.maximum([e.get("interaction", {}).get("sd", 0.0) for e in entries], TAU_START),
              tau_free, "log", (names,)),
        Block("mu", mu, logged, "identity", (BENCH_NAMES,)),
        Block("sigma", sigma, free_sigma, "log", (BENCH_NAMES,)),
        Block("tok_log_median", [[e["tokens_out"]["log_median"][d] for d in DOMAINS] for e in entries], tok_seen,
              "identity", (names, DOMAINS)),
        Block("tok_scale", np.log(tools_raw["tokens_scale"]), (counts > 0) & (np.arange(NUM_TOOLS) != scale_anchor),
              "identity", (TOOLS,)),
        Block("tok_log_sd", np.maximum([e["tokens_out"]["log_sd"] for e in entries], 2 * TOK_SD_FLOOR), tok_models,
              "log", (names,), lower=TOK_SD_FLOOR),
        Block("tok_alpha", [e["tokens_out"]["difficulty_slope"] for e in entries], tok_models, "identity", (names,)),
    ])
    marginal = Marginal(task_bench, known_z, nodes)
    marginal.place_prior(mu, sigma)
    model_ll = DifficultyModel(marginal, c, t, NUM_BENCHMARKS)

    def objective(vec: np.ndarray) -> tuple[float, np.ndarray]:
        P, jac = layout.unpack(vec)
        ll, grads = model_ll({_RENAME.get(k, k): v for k, v in P.items()})
        return ll, layout.gradient({k: grads[_RENAME.get(k, k)] for k in P}, jac)

    # Adaptive quadrature: re-center the nodes on each task's posterior between optimizer runs (short runs
    # first, while the centers are still poor) until re-centering no longer moves the log-likelihood.
    vec = layout.initial()
    for attempt in range(30):
        vec = optimize(objective, vec, max_iter=40 if attempt < 3 else 3000).x
        before = objective(vec)[0]
        marginal.recenter(model_ll.post)
        if attempt >= 3 and abs(objective(vec)[0] - before) < 1e-3:
            break
    return maximize(objective, layout, start=vec)


def base_tools(raw: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per-tool runtime values of the base pool file, in ``Tool`` order."""
    runtime = [raw["tools"][name]["runtime"] for name in TOOLS]
    return {"tokens_scale": np.array([r["tokens_scale"] for r in runtime]),
            "overhead": np.maximum([r["overhead_s"] for r in runtime], 1e-3)}


def calibrate(table: CallTable, base: str | Path = "paramanager", *, nodes: int = DEFAULT_NODES) -> Calibration:
    """Fit every identifiable parameter of the call model to ``table``; the ``base`` pool supplies the rest."""
    raw, name = read_raw(base)
    spec = parse_pool(raw, name=name)
    if spec.tools is not default_tool_spec():
        # the call log names the default spec's tools and the blocks below are laid out by them
        raise PoolError(f"{base}: tool_spec: calibrate fits pools of the default tool spec "
                        f"{list(default_tool_spec().names)}; this pool's spec {spec.tools.name!r} has "
                        f"{list(spec.tools.names)}")
    notes: list[str] = []
    names, model = _model_rows(table, spec, notes)
    entries = model_entries(raw, names)
    bench = _bench_rows(table, notes)
    cal = Calibration(raw, spec, names, [], [], {}, {}, notes=notes, num_calls=len(table))
    _wrong_answers(cal, table, model, bench, entries)
    cal._add(_difficulty_part(table, raw, spec, entries, names, model, bench, nodes, notes))
    _runtime_parts(cal, table, model, entries)
    cal.calibration_rows = calibration_table(table, model, bench, cal.values, names, spec, cal.moments)
    return cal


def _wrong_answers(cal: Calibration, table: CallTable, model: np.ndarray, bench: np.ndarray,
                   entries: list[dict[str, Any]]) -> None:
    """Moment estimates of kappa and the shared-distractor affinity from logged answers
    (``agreement.agreement_moments``); kappa also feeds the ensemble vote model."""
    rows = ((table.status == int(Status.OK)) & (table.correct == 0) & (table.answer >= 0) & (table.carried < 0)
            & ~np.isin(table.tool, (_CR, _ENS)))
    if not rows.any():
        cal.notes.append("kappa and affinity kept at the base pool's values (no logged answers of wrong calls)")
        return
    est = agreement_moments(table.task[rows], model[rows], bench[rows], table.answer[rows], len(cal.models),
                            distractor_overlap())
    for m, name in enumerate(cal.models):
        if np.isfinite(est.kappa[m]) and est.kappa_se[m] > 0:
            cal.moments.append((f"kappa[{name}]", float(est.kappa[m]), float(est.kappa_se[m])))
            entries[m]["errors"]["kappa"] = float(est.kappa[m])
        if np.isfinite(est.affinity[m]) and est.affinity_se[m] > 0:
            cal.moments.append((f"affinity[{name}]", float(est.affinity[m]), float(est.affinity_se[m])))
    if not np.isfinite(est.affinity).any():
        cal.notes.append("affinity kept at the base pool's values (it needs wrong answers of three or more models "
                         f"with {MIN_PAIRS} cross-model pairs each)")


def distractor_overlap() -> np.ndarray:
    """S_b = sum_j q_j^2 of each catalogue benchmark's distractor weights: the chance that two independent draws
    of a wrong answer agree."""
    return np.array([same_wrong_probability(0.0, b.zipf_s, NUM_ANSWERS if b.options == FREE_FORM else b.options)
                     for b in BENCHMARKS])


def server_load(table: CallTable, model: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Each call's server load: ceil(calls of its (episode, round) to its model that ran / the model's replicas),
    as the simulator counts them (``parasim.sim.sim_source.server_load``); 1 where the round is not logged."""
    runs = np.isin(table.status, _RUNS) & (table.round >= 0) & np.isin(table.tool, _AGENT)
    key = np.stack([table.episode, table.round, model], 1)
    _, inverse, counts = np.unique(key[runs], axis=0, return_inverse=True, return_counts=True)
    load = np.ones(len(table), np.float64)
    load[runs] = np.ceil(counts[inverse.ravel()] / replicas[model[runs]])
    return load


def _runtime_parts(cal: Calibration, table: CallTable, model: np.ndarray, entries: list[dict[str, Any]]) -> None:
    """Latency, basic-tool tokens, exec errors and reviewer rates, added to ``cal`` in place."""
    spec, names = cal.base, cal.models
    manager, spec_manager = len(names) - 1, len(spec.model_names) - 1
    timeout = spec.timeout
    agent = (np.isin(table.tool, _AGENT) & (table.tool != _ENS) & np.isin(table.status, (*_RAN, _CUT))
             & (table.tokens_out > 0) & (model != manager))
    if agent.any():
        counts = np.bincount(table.tool[agent], minlength=NUM_TOOLS)
        anchor = _SR if counts[_SR] else int(np.argmax(counts))
        load = server_load(table, model, np.array([e.get("deployment", {}).get("replicas", 1) for e in entries]))
        rows = AgentLatencyRows(model[agent], table.tool[agent], table.tokens_out[agent],
                                np.log(np.maximum(table.latency[agent], 1e-9)), np.log(timeout[table.tool[agent]]),
                                load[agent])
        start = (np.maximum([e["latency"]["ttft_s"] for e in entries], 1e-3),
                 np.array([e["latency"]["tokens_per_s"] for e in entries]),
                 np.maximum([e["latency"]["log_sd"] for e in entries], 1e-3))
        overhead = base_tools(cal.raw)["overhead"]
        slope = np.array([e["latency"].get("concurrency_slope", 0.0) for e in entries])
        free = (counts > 0) & (np.arange(NUM_TOOLS) != anchor)
        est = fit_agent_latency(rows, *start, overhead, free, names, TOOLS, slope)
        # a tool overhead far below the calls' decode time is not identified (its estimate runs to the boundary
        # and the information matrix is singular): such overheads stay at the base pool's values
        fitted = dict(zip(est.labels, est.value, strict=True))
        lost = [t for t in np.flatnonzero(free) if fitted[f"overhead[{TOOLS[t]}]"] < OVERHEAD_FLOOR_S]
        if est.info is None and lost:
            free[lost] = False
            cal.notes.append("agent-tool overheads kept at the base pool's values (not identified next to the "
                             "calls' decode time): " + ", ".join(TOOLS[t] for t in lost))
            est = fit_agent_latency(rows, *start, overhead, free, names, TOOLS, slope)
        cal._add(est)
    basic = np.isin(table.tool, _BASIC) & np.isin(table.status, (*_RAN, int(Status.TIMEOUT)))
    if basic.any():
        group = np.where(table.tool[basic] == _PY, 0, 1)
        labels = ("python", "search")
        censored = table.status[basic] == int(Status.TIMEOUT)
        log_lat = np.where(censored, np.log(timeout[table.tool[basic]]), np.log(np.maximum(table.latency[basic], 1e-9)))
        cal._add(fit_lognormal_groups("latency", group, log_lat, censored, labels,
                                      np.log(spec.lat_base[list(_BASIC), spec_manager]),
                                      np.maximum(spec.lat_sd[list(_BASIC), spec_manager], 1e-3)))
        keep = ~censored & (table.tokens_out[basic] > 0)
        tok = np.minimum(table.tokens_out[basic][keep], spec.max_output_tokens)
        cal._add(fit_lognormal_groups("tokens", group[keep], np.log(tok), tok >= spec.max_output_tokens - 0.5, labels,
                                      spec.tok_mu[list(_BASIC), spec_manager, 0],
                                      np.maximum(spec.tok_sd[list(_BASIC), spec_manager], 1e-3)))
    _rates(cal, table, model)


def _rates(cal: Calibration, table: CallTable, model: np.ndarray) -> None:
    names = cal.models
    ran = np.isin(table.status, _RAN)
    exec_err = table.status == int(Status.EXEC_ERR)
    for m, name in enumerate(names[:-1]):
        rows = ran & (table.tool == _CODE) & (model == m)
        if rows.any():
            cal.rates.append(proportion(f"code_exec_error[{name}]", int(exec_err[rows].sum()), int(rows.sum())))
    rows = ran & (table.tool == _PY)
    if rows.any():
        cal.rates.append(proportion("python_exec_error", int(exec_err[rows].sum()), int(rows.sum())))
    review = (table.tool == _CR) & (table.status == int(Status.OK)) & (table.flagged >= 0) & (table.carried >= 0)
    for m, name in enumerate(names[:-1]):
        for d, dname in enumerate(DOMAINS):
            rows = review & (model == m) & (table.domain == d)
            wrong, right = rows & (table.carried == 0), rows & (table.carried == 1)
            if wrong.any():
                cal.rates.append(proportion(f"sensitivity[{name},{dname}]", int(table.flagged[wrong].sum()),
                                            int(wrong.sum())))
            if right.any():
                cal.rates.append(proportion(f"specificity[{name},{dname}]", int((table.flagged[right] == 0).sum()),
                                            int(right.sum())))


def calibration_table(table: CallTable, model: np.ndarray, bench: np.ndarray, values: dict[str, np.ndarray],
                      names: tuple[str, ...], spec: PoolSpec, moments: list[tuple[str, float, float]] = (),
                      min_calls: int = 30) -> list[dict[str, Any]]:
    """Predicted vs observed accuracy of fresh (not carried) OK answers per (tool, model, benchmark).

    The prediction integrates the difficulty over its fitted prior, not over each task's posterior
    (which would reproduce the table by construction); z = (observed - predicted) / binomial SE.
    """
    x, w = np.polynomial.hermite.hermgauss(32)
    out = []
    ok = (table.status == int(Status.OK)) & (table.correct >= 0) & (table.tool != _CR) & (table.carried < 0)
    kappa = _by_name(spec.kappa, names, spec)
    for label, value, _ in moments:
        if label.startswith("kappa["):
            kappa[names.index(label[len("kappa["):-1])] = value
    for t, m, b in sorted(set(zip(table.tool[ok].tolist(), model[ok].tolist(), bench[ok].tolist()))):
        rows = ok & (table.tool == t) & (model == m) & (bench == b)
        n = int(rows.sum())
        if n < min_calls or (t == _ENS and spec.ensemble_k > 3):
            continue
        z = values["mu"][b] + math.sqrt(2.0) * effective_spread(values["sigma"][b], values["interaction_sd"][m]) * x
        ctx = np.log1p(table.context[rows] / 1000.0)
        eta = values["skill"][m, b] + values["bonus"][t, BENCHMARKS[b].domain] - values["lambda"][m] * ctx[:, None]
        p = 1.0 / (1.0 + np.exp(-(eta - z[None, :])))
        if t == _ENS:
            c1, c2, c3 = _ensemble_poly(table, rows, model, bench, kappa, spec.ensemble_k)[rows][0]
            p = p * (c1 + p * (c2 + p * c3))
        predicted = float((p @ w).mean() / math.sqrt(math.pi))
        observed = float(table.correct[rows].mean())
        se = math.sqrt(max(predicted * (1.0 - predicted), 1e-12) / n)
        out.append({"tool": TOOLS[t], "model": names[m], "benchmark": BENCH_NAMES[b], "calls": n,
                    "observed": observed, "predicted": predicted, "z": (observed - predicted) / se})
    return out
