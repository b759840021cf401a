"""Calibration: fit a pool to logged tool calls by maximum likelihood (docs/calibration.md).

``read_calls`` reads the JSONL call-log schema, ``calibrate`` fits every parameter the log identifies
(standard errors from the inverse observed information), ``fitted_pool`` writes the pool file that
``parasim.pools.pool.load_pool`` accepts, ``format_report`` / ``report_dict`` give the goodness of fit, and
``simulated_records`` makes logs with known parameters from the simulator's per-call model. ``read_per_query``
reads per-query evaluation outcomes (plain tables, lm-evaluation-harness samples, lighteval details) into
a ``PerQueryTable``.
"""
from __future__ import annotations

from typing import Any

from parasim.calibration.calls import CallTable, calls_from_records, read_calls
from parasim.calibration.fit import Calibration, calibrate
from parasim.calibration.per_query import PerQueryError, PerQueryTable, read_per_query
from parasim.calibration.poolfile import write_pool
from parasim.calibration.report import format_report, report_dict
from parasim.calibration.simulate import simulated_records, true_parameters


def fitted_pool(cal: Calibration, source: str = "fit") -> tuple[dict[str, Any], list[str]]:
    """The base pool with every fitted group replaced (``source`` names the log); and what was clipped."""
    fitted = {"models": cal.models, "free": cal.free, "groups": cal.groups,
              "values": {**cal.values, "rates": {**{r.label: r.value for r in cal.rates},
                                                 **{label: value for label, value, _ in cal.moments}}}}
    return write_pool(cal.raw, fitted, source)


__all__ = [
    "Calibration",
    "CallTable",
    "PerQueryError",
    "PerQueryTable",
    "calibrate",
    "calls_from_records",
    "fitted_pool",
    "format_report",
    "read_calls",
    "read_per_query",
    "report_dict",
    "simulated_records",
    "true_parameters",
]
