"""Write simulated tool calls in the calibration JSONL schema, so that fits can be checked on known parameters."""
from __future__ import annotations

import argparse

from parasim.commands import CommandError, check_output, write_output


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``simulate-log`` parser."""
    p = subparsers.add_parser("simulate-log", help="write simulated calls as a JSONL call log", description=__doc__)
    p.add_argument("--pool", default="paramanager", help="pool: shipped name or JSON path (default paramanager)")
    p.add_argument("--suite", default="paramanager", help="task suite: name, benchmark or JSONL task file")
    p.add_argument("--calls", type=int, default=50_000, help="number of calls (default 50,000)")
    p.add_argument("--calls-per-task", type=int, default=8, help="calls on each task (default 8)")
    p.add_argument("--carry-prob", type=float, default=0.3,
                   help="share of calls that carry an earlier answer of their task (default 0.3)")
    p.add_argument("--with-difficulty", action="store_true", help="log each task's difficulty (real logs rarely can)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated calls, an integer >= 0 (default 0)")
    p.add_argument("-o", "--output", required=True, help="JSONL file to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate and write one JSON object per line."""
    import json

    from parasim.calibration.simulate import simulated_records

    output = check_output(args.output, "-o")
    try:
        records = simulated_records(args.pool, args.suite, args.calls, calls_per_task=args.calls_per_task,
                                    carry_prob=args.carry_prob, with_difficulty=args.with_difficulty, seed=args.seed)
    except (TypeError, ValueError) as err:
        raise CommandError(f"--{str(err)}" if str(err).startswith("seed:") else str(err)) from None
    write_output(output, "".join(json.dumps(rec, separators=(",", ":")) + "\n" for rec in records).encode(), "-o")
    print(f"wrote {len(records)} calls to {args.output}")
    return 0
