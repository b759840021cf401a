"""Fit a pool to a JSONL call log by maximum likelihood and write it as a pool file (docs/calibration.md)."""
from __future__ import annotations

import argparse

from parasim.commands import RUN_FAILED, CommandError, check_output, write_output


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``calibrate`` parser."""
    p = subparsers.add_parser("calibrate", help="fit a pool to a JSONL call log (maximum likelihood, scipy)",
                              description=__doc__)
    p.add_argument("calls", help="JSONL call log, one call a line (schema: docs/calibration.md)")
    p.add_argument("-o", "--output", required=True, help="path of the fitted pool JSON to write")
    p.add_argument("--base", default="paramanager",
                   help="pool (shipped name or JSON path) that supplies what the log cannot identify")
    p.add_argument("--nodes", type=int, default=8, help="adaptive Gauss-Hermite nodes per task (default 8)")
    p.add_argument("--report", default=None, help="also write the fit report as JSON here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read, fit, write the pool (and report), print the goodness-of-fit report."""
    import json
    from pathlib import Path

    from parasim.calibration import (
        calibrate,
        fitted_pool,
        format_report,
        read_calls,
        report_dict,
    )
    from parasim.calibration.fit import FitError

    if not 2 <= args.nodes <= 64:
        raise CommandError(f"--nodes = {args.nodes}: must be an integer in [2, 64]")
    output = check_output(args.output, "-o")  # before the fit, which a failed write would lose
    report = check_output(args.report, "--report") if args.report else None
    try:
        table = read_calls(args.calls)
    except (OSError, ValueError) as err:
        raise CommandError(str(err)) from None
    try:
        cal = calibrate(table, args.base, nodes=args.nodes)
    except FitError as err:
        raise CommandError(str(err), RUN_FAILED) from None
    except (OSError, ValueError) as err:
        raise CommandError(str(err)) from None
    pool, clipped = fitted_pool(cal, source=f"fit:{Path(args.calls).name}")
    write_output(output, (json.dumps(pool, indent=1) + "\n").encode(), "-o")
    if report is not None:
        write_output(report, (json.dumps(report_dict(cal, clipped), indent=1, default=float) + "\n").encode(),
                     "--report")
    print(format_report(cal, clipped))
    print(f"\nwrote {args.output}")
    return 0
