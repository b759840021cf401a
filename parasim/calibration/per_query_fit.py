"""Fitting a pool to per-query outcomes: the eval results people have, read as direct calls of each model.

An evaluation of model m on question q with n samples is n fresh ``standard_reasoner`` calls of m on task q: the
call model's correctness part (skill minus difficulty per domain, with the task difficulty integrated out), its
interaction sd (from the repeated samples of one model on one question, where a table has them) and its
wrong-answer agreement (kappa, affinity; from the answers of wrong calls) are identified by such a table, and the
existing likelihood fit (``parasim.calibration.fit.calibrate``, standard errors included) fits them. Latency and
tokens are not: the calls carry no latency and no token count (an eval log's token counts are not the pool's
harness), so those parameters stay at the base pool's values, and the report says so. A pass rate k / n becomes
k right and n - k wrong calls (the same likelihood as the n samples it summarizes, which are exchangeable).

Each benchmark needs its domain: a benchmark of the task catalogue (``parasim.tasks.suites``, e.g. ``MMLU-Pro``,
``LiveCodeBench``) has its own; any other is named in ``domains`` (``{"gsm8k": "math"}``) and fitted as the
domain's generic benchmark.

The shared parts of the effect come after (``fit_shared_effects``): the calls fit treats two models' effects on a
question as independent, but models of one family (one maker within a kind) and of one kind fail together
(docs/simulator.md, section 8), so on each benchmark where two or more of the table's models share a family the
joint fit of the shipped pools (``parasim.calibration.joint_fit.fit_correctness``) gives the family share w and,
where two kinds have two families each, the kind share o, with Hessian SEs; the benchmarks' estimates are pooled by
inverse variance and every table model's ``interaction`` group carries its family, its kind and the shares, so the
written pool draws the correlation the table shows. A table where no two models share a family leaves the models
without groups, as the calls fit has them, and the report says so.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special

from parasim.calibration.calls import CallTable, calls_from_records
from parasim.calibration.fit import Calibration, calibrate
from parasim.calibration.joint_fit import CorrectnessFit, family_groups, fit_correctness
from parasim.calibration.joint_stats import outcome_matrices
from parasim.calibration.model_groups import kind_of, pool_family
from parasim.calibration.per_query import PerQueryError, PerQueryTable
from parasim.calibration.poolfile import read_raw
from parasim.pools.pool import MAX_MODELS
from parasim.protocol.schema import Domain, Tool
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS

DOMAIN_NAMES = tuple(d.name.lower() for d in Domain)
NOTE = ("fitted to per-query outcomes as fresh standard_reasoner calls: skills, interaction sd and wrong-answer "
        "agreement from the table; latency, tokens and tool effects stay at the base pool's values")


def benchmark_domains(table: PerQueryTable, domains: Mapping[str, str] | None = None) -> dict[str, str]:
    """The domain of each benchmark of ``table``: ``domains`` first, then the task catalogue's; unknown ones are an
    error naming them."""
    domains = dict(domains or {})
    for name, dom in domains.items():
        if dom not in DOMAIN_NAMES:
            raise PerQueryError(f"domain of {name!r}: expected one of {list(DOMAIN_NAMES)}, got {dom!r}")
    out, missing = {}, []
    for bench in table.benchmarks():
        if bench in domains:
            out[bench] = domains[bench]
        elif bench in BENCHMARK_INDEX:
            out[bench] = DOMAIN_NAMES[BENCHMARKS[BENCHMARK_INDEX[bench]].domain]
        else:
            missing.append(bench)
    if missing:
        raise PerQueryError(f"{table.source}: benchmark(s) {missing} are not in the task catalogue: name each one's "
                            f"domain ({'/'.join(DOMAIN_NAMES)}), e.g. --domain {missing[0]}=math")
    unused = sorted(set(domains) - set(out))
    if unused:
        raise PerQueryError(f"domain given for {unused}, which {table.source} does not hold; its benchmarks are "
                            f"{table.benchmarks()}")
    return out


def call_records(table: PerQueryTable, domains: Mapping[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, call record)`` per sample of ``table``, in the call-log schema (docs/calibration.md)."""
    tool = Tool.STANDARD_REASONER.wire_name
    successes = table.successes
    for i in range(len(table)):
        bench = str(table.benchmark[i])
        base = {"task_id": f"{bench}/{table.question[i]}", "benchmark": bench, "domain": domains[bench],
                "tool": tool, "model": str(table.model[i]), "status": "ok", "tokens_in": 0, "tokens_out": 0,
                "latency_s": 0.0}
        n, k = int(table.n_samples[i]), int(successes[i])
        answer = str(table.answer[i]) if n == 1 and table.answer[i] else None
        for s in range(n):
            rec = {**base, "correct": s < k}
            if answer is not None:
                rec["answer"] = answer
            yield f"{table.source}: row {i} sample {s}", rec


def per_query_calls(table: PerQueryTable, domains: Mapping[str, str] | None = None) -> CallTable:
    """``table`` as a ``CallTable`` of fresh standard_reasoner calls (see the module docstring)."""
    return calls_from_records(call_records(table, benchmark_domains(table, domains)))


def select_models(table: PerQueryTable, names: list[str] | None) -> PerQueryTable:
    """The rows of the named models (all when ``names`` is None); a name the table lacks is an error."""
    if names is None:
        return table
    unknown = [n for n in names if n not in table.models()]
    if unknown:
        raise PerQueryError(f"{table.source}: no model(s) {unknown}; its models are {table.models()}")
    return table.select(np.isin(table.model, names))


def calibrate_per_query(table: PerQueryTable, base: str | Path = "paramanager", *,
                        domains: Mapping[str, str] | None = None, nodes: int = 8) -> Calibration:
    """The likelihood fit of the call model to ``table``'s outcomes; what they cannot identify stays at ``base``."""
    raw, _ = read_raw(base)
    agents = {m["name"] for m in raw.get("models", []) if isinstance(m, dict)}
    new = [m for m in table.models() if m not in agents]
    if len(agents) + len(new) > MAX_MODELS:
        raise PerQueryError(f"{table.source}: {len(new)} models beside the base pool's {len(agents)}: a pool holds at "
                            f"most {MAX_MODELS}; select at most {MAX_MODELS - len(agents)} (--models a,b,...)")
    cal = calibrate(per_query_calls(table, domains), base, nodes=nodes)
    cal.notes.insert(0, NOTE)
    rows = {name: m for m, name in enumerate(cal.models)}
    sd_mean = float(np.mean([cal.values["interaction_sd"][rows[m]] for m in table.models()]))
    shared = fit_shared_effects(table, sd_mean)
    if shared is None:
        cal.notes.append("family and kind shares not fitted: no two of the table's models share a family (maker "
                         "within kind, parasim.calibration.model_groups); the models keep no groups")
        return cal
    cal.moments += [("family_share", shared.family_share, shared.family_share_se)]
    if np.isfinite(shared.kind_share_se):  # fitted: two kinds of two families each
        cal.moments += [("kind_share", shared.kind_share, shared.kind_share_se)]
    cal.groups = {m: {"family": shared.family[m], "kind": shared.kind[m], "family_share": shared.family_share,
                      "kind_share": shared.kind_share} for m in table.models()}
    unfitted = [m for m in table.models() if not cal.free["interaction_sd"][rows[m]]]
    if unfitted and np.isfinite(shared.tau):  # the joint fit's tau, where samples repeat, beats the base's sd
        cal.moments += [("interaction_sd (joint fit)", shared.tau, shared.tau_se)]
        for m in unfitted:
            cal.groups[m]["sd"] = shared.tau
        cal.notes.append(f"interaction sd of {', '.join(unfitted)} from the joint fit's tau (too few repeated "
                         f"samples for a sd of their own)")
    elif unfitted:
        cal.notes.append(f"interaction sd of {', '.join(unfitted)} kept at the base pool's values under the fitted "
                         f"shares (no repeated samples: the joint fit held tau at {sd_mean:.3f})")
    cal.notes.append(f"family share w (and kind share o where two kinds have two families each) from the joint fit "
                     f"of {', '.join(shared.benchmarks)} (parasim.calibration.joint_fit), families by maker within "
                     f"kind; the wrong-answer family share (errors.family_share) is not fitted")
    return cal


@dataclass(frozen=True)
class SharedEffects:
    """The shared parts of the per-(question, model) effect fitted to a table (``fit_shared_effects``)."""

    family: dict[str, str]  # model -> its family (maker within kind)
    kind: dict[str, str]  # model -> "reasoning" or "chat"
    family_share: float  # w, pooled over ``benchmarks``
    family_share_se: float
    kind_share: float  # o (0, SE NaN, where no benchmark identifies it)
    kind_share_se: float
    benchmarks: tuple[str, ...]  # where w was identified
    tau: float  # the joint fit's tau, pooled over the benchmarks with repeated samples (NaN: none has them)
    tau_se: float


def _pooled(values: list[float], ses: list[float], logit: bool = False) -> tuple[float, float]:
    """The inverse-variance mean of estimates and its SE (NaN, NaN when none has a finite positive SE); ``logit``
    pools shares on the logit scale their fit uses (a share near 0 or 1 has a natural-scale SE near 0, which would
    outweigh every other estimate) and maps the mean back by the delta method."""
    ok = [(v, s) for v, s in zip(values, ses) if np.isfinite(s) and s > 0 and (not logit or 0 < v < 1)]
    if not ok:
        return float("nan"), float("nan")
    if logit:
        ok = [(float(special.logit(v)), s / (v * (1 - v))) for v, s in ok]
    w = np.array([1.0 / s ** 2 for _, s in ok])
    mean, se = float(np.dot(w, [v for v, _ in ok]) / w.sum()), float(1.0 / np.sqrt(w.sum()))
    if not logit:
        return mean, se
    p = float(special.expit(mean))
    return p, se * p * (1 - p)


def fit_shared_effects(table: PerQueryTable, sd: float) -> SharedEffects | None:
    """w and o (module docstring) on every benchmark of ``table`` where two models share a family; tau is free where
    the benchmark has repeated samples and fixed at ``sd`` (the models' mean interaction sd) where it has none, since
    one sample per question does not tell tau from the difficulty spread. None when no benchmark identifies w."""
    kind = {m: kind_of(m) for m in table.models()}
    family = {m: pool_family(m, kind[m]) for m in table.models()}
    done: list[tuple[str, CorrectnessFit]] = []
    for bench, om in outcome_matrices(table).items():
        if np.bincount(family_groups(om.models, family)).max() < 2:
            continue
        fit = fit_correctness(om, family, tau=None if om.samples.max() > 1 else sd, kind=kind)
        if np.isfinite(fit.share_se) and fit.share_se > 0 and 0 < fit.share < 1:
            done.append((bench, fit))
    if not done:
        return None
    w, w_se = _pooled([f.share for _, f in done], [f.share_se for _, f in done], logit=True)
    o, o_se = _pooled([f.kind_share for _, f in done], [f.kind_share_se for _, f in done], logit=True)
    o = 0.0 if not np.isfinite(o) else min(o, 1.0 - w)
    tau, tau_se = _pooled([f.tau for _, f in done], [f.tau_se for _, f in done])  # a held tau has SE NaN
    return SharedEffects(family, kind, w, w_se, o, o_se, tuple(b for b, _ in done), tau, tau_se)
