"""The goodness-of-fit report of a calibration: totals, parameters with standard errors, calibration table."""
from __future__ import annotations

from typing import Any

from parasim.calibration.fit import Calibration


def report_dict(cal: Calibration, pool_clipped: list[str] | None = None) -> dict[str, Any]:
    """Everything the text report shows, as JSON-ready data."""
    return {
        "calls": cal.num_calls, "loglik": cal.loglik, "num_params": cal.num_params, "aic": cal.aic,
        "parameters": [{"name": n, "estimate": v, "se": s} for n, v, s in cal.parameters()],
        "calibration": cal.calibration_rows,
        "converged": all(e.converged for e in cal.parts),
        "messages": {e.labels[0] if e.labels else "": e.message for e in cal.parts},
        "notes": cal.notes + list(pool_clipped or []),
    }


def format_report(cal: Calibration, pool_clipped: list[str] | None = None, max_rows: int = 40) -> str:
    """A terminal report: fit totals, every parameter (estimate +- SE), the worst calibration cells, notes."""
    lines = [(f"calls {cal.num_calls}   parameters {cal.num_params}   log-likelihood {cal.loglik:.2f}   "
              f"AIC {cal.aic:.2f}")]
    for e in cal.parts:
        if not e.converged or "no standard errors" in e.message:
            lines.append(f"warning: {e.message}")
    lines.append("")
    lines.append(f"{'parameter':58s} {'estimate':>12s} {'SE':>10s}")
    for name, value, se in cal.parameters():
        lines.append(f"{name:58s} {value:12.4f} {se:10.4f}")
    rows = sorted(cal.calibration_rows, key=lambda r: -abs(r["z"]))[:max_rows]
    if rows:
        lines += ["", ("accuracy of fresh OK answers, observed vs predicted under the fitted difficulty prior "
                       f"(worst {len(rows)} of {len(cal.calibration_rows)} cells by |z|):"),
                  f"{'tool':20s} {'model':30s} {'benchmark':14s} {'calls':>6s} {'obs':>6s} {'pred':>6s} {'z':>6s}"]
        for r in rows:
            lines.append(f"{r['tool']:20s} {r['model'][:30]:30s} {r['benchmark']:14s} {r['calls']:6d} "
                         f"{r['observed']:6.3f} {r['predicted']:6.3f} {r['z']:6.2f}")
        big = sum(abs(r["z"]) > 1.96 for r in cal.calibration_rows)
        lines.append(f"cells with |z| > 1.96: {big} of {len(cal.calibration_rows)} (about 5% expected)")
    notes = cal.notes + list(pool_clipped or [])
    if notes:
        lines += ["", "notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines)
