"""parasim rescore: score stored trajectories under a grid of reward configs in one batched call.

Crossing reward presets with a field (--grid c_tar=4,8,16 --grid reward=paramanager,xrouter) applies
the field to the formulas that read it; a formula that does not is scored once, its row saying so.
"""
from __future__ import annotations

import argparse
import csv
import io

from parasim.commands import CommandError, check_output, write_output

OUTPUT_FORMATS = (".json", ".csv")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``rescore`` parser."""
    p = subparsers.add_parser("rescore", help="re-score Parquet trajectories under a grid of reward configs",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trajectories", help="Parquet file, one row per trajectory (TrajectoryBatch fields)")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="a reward option axis (repeatable), e.g. c_tar=4,8,16 or reward=paramanager,xrouter")
    p.add_argument("--preset", default="paramanager", help="base reward preset, compared against")
    p.add_argument("--top-k", type=int, default=100, help="size of the top sets compared (default 100)")
    p.add_argument("--out", default=None, help="write the rows as JSON (.json) or CSV (.csv)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load, score once for every config, print the table and optionally write it."""
    import json
    from pathlib import Path

    from training import rescore

    out = Path(args.out) if args.out else None
    if out is not None and out.suffix.lower() not in OUTPUT_FORMATS:
        raise CommandError(f"--out {args.out!r}: unknown output format {out.suffix or '(no suffix)'!r}; "
                           f"writes {' or '.join(OUTPUT_FORMATS)}")
    if args.top_k < 1:
        raise CommandError(f"--top-k = {args.top_k}: must be an integer >= 1")
    if out is not None:
        check_output(out, "--out")
    try:
        configs = rescore.reward_grid(rescore.parse_axes(args.grid), args.preset)
        batch = rescore.read_parquet(args.trajectories)
    except (ValueError, OSError) as err:
        raise CommandError(str(err)) from None
    rows = rescore.rescore(batch, configs, args.top_k)
    rescore.print_rescore(rows, len(batch.outcome))
    if out is not None:
        if out.suffix.lower() == ".csv":
            table = [{k: v for k, v in r.items() if k != "reward_config"} for r in rows]
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(k for r in table for k in r)))
            writer.writeheader()
            writer.writerows(table)
            write_output(out, text.getvalue().encode(), "--out")
        else:
            write_output(out, json.dumps(rows, indent=1, allow_nan=False).encode(), "--out")  # strict JSON
        print(f"wrote {out}")
    return 0
