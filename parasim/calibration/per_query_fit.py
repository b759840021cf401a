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
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from parasim.calibration.calls import CallTable, calls_from_records
from parasim.calibration.fit import Calibration, calibrate
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
    return cal
