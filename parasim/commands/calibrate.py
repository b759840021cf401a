"""Fit a pool by maximum likelihood to a JSONL call log or to per-query eval results, and write it as a pool file.

INPUT is a call log (one tool call a line, docs/calibration.md), or per-query outcomes: a plain table (CSV, CSV.gz
or Parquet: model, question_id, benchmark, correct or answer + gold, ...), an lm-evaluation-harness
``--output_path`` folder written with ``--log_samples``, or a lighteval ``--output-dir`` written with
``--save-details``. Per-query outcomes fit each model's skills per domain, the difficulty spread, the interaction sd
(where samples repeat) and the wrong-answer agreement (where answers are known); the rest stays at --base.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from parasim.commands import RUN_FAILED, CommandError, check_output, write_output

FORMATS = ("calls", "table", "lm_eval", "lighteval")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``calibrate`` parser."""
    p = subparsers.add_parser("calibrate", help="fit a pool to a JSONL call log or to per-query eval results "
                              "(maximum likelihood, scipy)", description=__doc__)
    p.add_argument("calls", metavar="INPUT", help="JSONL call log (schema: docs/calibration.md), per-query table, "
                   "lm-eval samples folder or lighteval details folder")
    p.add_argument("-o", "--output", required=True, help="path of the fitted pool JSON to write")
    p.add_argument("--base", default="paramanager",
                   help="pool (shipped name or JSON path) that supplies what the input cannot identify")
    p.add_argument("--nodes", type=int, default=8, help="adaptive Gauss-Hermite nodes per task (default 8)")
    p.add_argument("--report", default=None, help="also write the fit report as JSON here")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="what INPUT is (default: from its name: a .jsonl other than samples_*.jsonl is a call log)")
    p.add_argument("--metric", default=None, help="eval logs: the correctness metric (default: exact_match, acc, ...)")
    p.add_argument("--filter", dest="filter_name", default=None,
                   help="lm-eval logs: the filter to read (default: each task's first)")
    p.add_argument("--models", default=None, metavar="A,B,...",
                   help="per-query input: fit only these models (a pool holds at most 16 with the base's)")
    p.add_argument("--domain", action="append", default=[], metavar="BENCHMARK=DOMAIN",
                   help="per-query input: the domain (math, science, knowledge, code) of a benchmark the task "
                        "catalogue does not hold; repeatable")
    p.set_defaults(func=run)


def input_format(path: Path, fmt: str | None) -> str:
    """``calls`` for a call log, else the per-query format (``None``: sniffed by the per-query reader)."""
    if fmt is not None:
        return fmt
    name = path.name.lower()
    if name.endswith(".jsonl") and not name.startswith("samples_"):
        return "calls"
    from parasim.calibration.per_query import sniff_format

    return sniff_format(path) if path.exists() else "calls"


def parse_domains(items: list[str]) -> dict[str, str]:
    """``--domain NAME=DOMAIN`` items as a mapping (a malformed or repeated item is a CommandError)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, dom = item.rpartition("=")
        if not sep or not name or not dom:
            raise CommandError(f"--domain {item!r}: expected BENCHMARK=DOMAIN")
        if name in out:
            raise CommandError(f"--domain {item!r}: {name!r} was given a domain already")
        out[name] = dom
    return out


def run(args: argparse.Namespace) -> int:
    """Read, fit, write the pool (and report), print the goodness-of-fit report."""
    import json

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
    path = Path(args.calls)
    domains = parse_domains(args.domain)
    try:
        fmt = input_format(path, args.format)
        if fmt == "calls":
            for flag, value in (("--metric", args.metric), ("--filter", args.filter_name),
                                ("--domain", args.domain or None), ("--models", args.models)):
                if value is not None:
                    raise CommandError(f"{flag}: a per-query input's setting; {path} reads as a call log")
            cal = calibrate(read_calls(path), args.base, nodes=args.nodes)
        else:
            from parasim.calibration.per_query import read_per_query
            from parasim.calibration.per_query_fit import calibrate_per_query, select_models

            table = read_per_query(path, fmt=fmt, metric=args.metric, filter_name=args.filter_name)
            table = select_models(table, None if args.models is None else args.models.split(","))
            print(f"read {len(table)} per-query rows ({fmt}): {len(table.models())} models, "
                  f"{len(table.benchmarks())} benchmarks")
            cal = calibrate_per_query(table, args.base, domains=domains, nodes=args.nodes)
    except FitError as err:
        raise CommandError(str(err), RUN_FAILED) from None
    except (OSError, ValueError) as err:
        raise CommandError(str(err)) from None
    pool, clipped = fitted_pool(cal, source=f"fit:{path.name}")
    write_output(output, (json.dumps(pool, indent=1) + "\n").encode(), "-o")
    if report is not None:
        write_output(report, (json.dumps(report_dict(cal, clipped), indent=1, default=float) + "\n").encode(),
                     "--report")
    print(format_report(cal, clipped))
    print(f"\nwrote {args.output}")
    return 0
