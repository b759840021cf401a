"""``parasim validate-sim``: does the simulator reproduce what real tools did under the same decisions?

From the real-tools logs (``parasim.validation.logs``) it takes a pool (loaded, or fitted to the same calls by
``parasim calibrate``'s maximum likelihood), replays every logged episode's round actions in the simulator in
several replicas (``parasim.validation.replay``) and compares simulated with real per benchmark, with paired
bootstrap intervals (``parasim.validation.compare``); ``parasim.validation.report`` prints and writes the result.
docs/validate_sim.md describes the logs, the replay and the report.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from parasim.config.fields import opt, validate
from parasim.pools.pool import PoolSpec, load_pool, parse_pool
from parasim.validation.compare import chance_rate, compare, figures, flagged
from parasim.validation.logs import LogError, Logs, read_logs, slot_count
from parasim.validation.replay import model_indices, real_metrics, replay


@dataclasses.dataclass(frozen=True)
class ValidateSimConfig:
    """The settings of ``parasim validate-sim`` (flags ``--NAME VALUE`` or a ``--config`` file)."""

    pool: str = opt("", help="pool to compare against: shipped name or pool JSON path; empty: fit one to the logged "
                             "calls (parasim calibrate, in-sample)")
    base: str = opt("paramanager", help="with no pool: the pool that supplies what the log cannot identify")
    nodes: int = opt(8, lo=2, hi=64, help="with no pool: adaptive Gauss-Hermite nodes per task of the fit")
    replicas: int = opt(40, lo=2, hi=10_000, help="simulated replicas of each logged episode (the predictive check "
                                                 "is as strict as --level from about 40)")
    bootstrap: int = opt(2000, lo=100, hi=1_000_000, help="bootstrap draws of the real figures' intervals")
    level: float = opt(0.95, lo=0.5, hi=0.999, help="coverage of the intervals")
    seed: int = opt(0, lo=0, hi=2**62, help="seed of the replicas' streams and of the bootstrap")
    serial: bool = opt(False, help="the real env ran serial rounds (latency = sum of the calls, not the slowest)")
    token_budget: float | None = opt(None, lo=0, lo_open=True,
                                     help="the real env's token_budget (none: no budget), replayed as is")
    out: str = opt("", help="directory of validate_sim.json and validate_sim.png (empty: LOGS/validate_sim, or "
                            "beside the log file)")
    domain: str = opt("", pattern=r"([^=,]+=[a-z]+(,[^=,]+=[a-z]+)*)?", what="BENCH=DOMAIN pairs joined by commas",
                      help="per-query input: the domain of each benchmark the task catalogue does not hold, "
                           "BENCH=DOMAIN[,BENCH=DOMAIN...]")
    models: str = opt("", help="per-query input: compare only these models, comma-separated (empty: all)")

    def __post_init__(self) -> None:
        validate(self)


def resolve_pool(cfg: ValidateSimConfig, logs: Logs) -> tuple[PoolSpec, dict[str, Any]]:
    """The pool to replay on, and how it was obtained (for the report)."""
    if cfg.pool:
        return load_pool(cfg.pool), {"source": "loaded", "pool": cfg.pool}
    from parasim.calibration import calibrate, fitted_pool

    cal = calibrate(logs.calls, cfg.base, nodes=cfg.nodes)
    raw, clipped = fitted_pool(cal, source="fit:validate-sim")
    return parse_pool(raw, name=raw["name"]), {
        "source": "fitted", "base": cfg.base, "calls": len(logs.calls), "log_likelihood": float(cal.loglik),
        "clipped": clipped,
        "note": "fitted to the same calls it is compared on (in-sample): per-call figures agree by construction "
                "more than they would out of sample; episode-level figures (accuracy after the vote, latency of "
                "rounds) are not fitted directly"}


def validate_sim(logs_path: str | Path, cfg: ValidateSimConfig) -> dict[str, Any]:
    """Read, resolve the pool, replay, compare: the report (``parasim.validation.report`` writes it)."""
    logs = read_logs(logs_path)
    pool, pool_info = resolve_pool(cfg, logs)
    models = model_indices(logs.episodes, pool)
    slots = slot_count(logs.episodes)
    real = real_metrics(logs.episodes, models, serial=cfg.serial)
    sim = replay(logs.episodes, pool, models, replicas=cfg.replicas, seed=cfg.seed, slots=slots, serial=cfg.serial,
                 token_budget=cfg.token_budget)
    figs = figures(real, sim.metrics, pool.model_names[:-1])
    groups = compare(figs, [e.benchmark for e in logs.episodes], [e.task_id for e in logs.episodes],
                     level=cfg.level, draws=cfg.bootstrap, seed=cfg.seed)
    bad = flagged(groups)
    judged = sum(m["consistent"] is not None for g in groups.values() for m in g["metrics"].values())
    exact = all(r.action is not None for e in logs.episodes for r in e.rounds)
    return {
        "logs": [str(p) for p in logs.files], "episodes": len(logs.episodes), "calls": len(logs.calls),
        "replicas": cfg.replicas, "bootstrap": cfg.bootstrap, "level": cfg.level, "seed": cfg.seed,
        "serial": cfg.serial, "token_budget": None if cfg.token_budget is None or math.isinf(cfg.token_budget)
        else cfg.token_budget, "slots": slots, "actions": "logged" if exact else "rebuilt from the calls",
        "pool": {"name": pool.name, "models": list(pool.model_names[:-1]), **pool_info},
        "replay": {"slots": sim.slots, "adapted": sim.adapted,
                   "adapted_share": sim.adapted / sim.slots if sim.slots else 0.0},
        "benchmarks": groups, "notes": list(logs.notes),
        "summary": {"figures": judged, "flagged": len(bad), "flagged_figures": bad,
                    "expected_by_chance": round(chance_rate(cfg.level, cfg.replicas) * judged, 2)},
    }


def is_per_query_input(path: str | Path) -> bool:
    """Whether ``path`` is per-query outcomes (a plain table, lm-eval samples, lighteval details), not real-tools
    logs."""
    from parasim.calibration.per_query import PerQueryError, sniff_format

    try:
        sniff_format(Path(path))
    except PerQueryError:
        return False
    return True


def validate_per_query(path: str | Path, cfg: ValidateSimConfig) -> dict[str, Any]:
    """A per-query table's joint statistics against the simulator's on the same design
    (``parasim.validation.per_query``); the pool is ``cfg.pool`` or one fitted to the same table (in-sample)."""
    from parasim.calibration import fitted_pool
    from parasim.calibration.per_query import read_per_query
    from parasim.calibration.per_query_fit import benchmark_domains, calibrate_per_query, select_models
    from parasim.validation.per_query import TOLERANCES, compare_per_query, simulated_table

    table = select_models(read_per_query(path), cfg.models.split(",") if cfg.models else None)
    given = dict(item.split("=", 1) for item in cfg.domain.split(",")) if cfg.domain else {}
    domains = benchmark_domains(table, given)
    if cfg.pool:
        pool, info = load_pool(cfg.pool), {"source": "loaded", "pool": cfg.pool}
    else:
        cal = calibrate_per_query(table, cfg.base, domains=domains, nodes=cfg.nodes)
        raw, clipped = fitted_pool(cal, source="fit:validate-sim")
        pool = parse_pool(raw, name=raw["name"])
        info = {"source": "fitted", "base": cfg.base, "log_likelihood": float(cal.loglik), "clipped": clipped,
                "note": "fitted to the same table it is compared on (in-sample): accuracies agree by construction; "
                        "the joint statistics are not fitted by that fit"}
    sim = simulated_table(table, pool, domains, seed=cfg.seed)
    result = compare_per_query(table, sim)
    judged = [i for i in result["items"] if i["within"] is not None]
    return {"input": str(path), "kind": "per_query", "rows": len(table), "models": table.models(),
            "benchmarks": table.benchmarks(), "seed": cfg.seed, "tolerances": TOLERANCES,
            "pool": {"name": pool.name, **info}, **result,
            "totals": {"items": len(judged), "within": sum(i["within"] for i in judged)}}


__all__ = ["LogError", "ValidateSimConfig", "is_per_query_input", "validate_per_query", "validate_sim"]
