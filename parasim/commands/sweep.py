"""``parasim sweep``: train and evaluate a grid of configs; with no arguments, the default C_tar sweep.

The default is the project's main job: ``c_tar=4,8,12,16`` over the paramanager pool, three seeds each,
on local processes, writing the table, CSV/JSON and plots to ``./parasim_out/sweep``.
"""
from __future__ import annotations

import argparse
import os
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` parser."""
    p = subparsers.add_parser("sweep", help="reward / budget sweep: train and evaluate a grid of configs",
                              description=__doc__)
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2,...",
                   help="a grid axis over any option (repeatable); default: c_tar=4,8,12,16")
    p.add_argument("--seeds", type=int, default=None, help="seeds per grid point, 0..N-1 (default 3)")
    p.add_argument("--preset", default="default",
                   help="ablation preset every point starts from (default, serial, mono, no_diversity, sft_only, "
                        "rl_from_base)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="fixed option for every point")
    p.add_argument("--backend", choices=("local", "ray"), default="local")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel points (default: CPU count); with --backend ray and no address, the CPUs of the "
                        "local Ray instance it starts")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: what ray.init finds)")
    p.add_argument("--out", default=os.path.join("parasim_out", "sweep"), help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list-options", action="store_true", help="print every option name a grid axis may use")
    p.set_defaults(func=run)


def _error(message: str) -> None:
    print(f"parasim sweep: error: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Parse the grid, run the unfinished points, then print and write the report.

    Exit codes: 0 done, 1 failed points or an output folder that cannot hold the results (one line on
    stderr naming the path and the reason), 2 a bad grid, 130 interrupted (finished points are kept).
    """
    from parasim.training import sweep
    from parasim.training.report import write_report
    from parasim.training.store import StoreError

    if args.list_options:
        print("\n".join(sweep.option_names()))
        return 0
    try:
        axes = sweep.parse_grid(args.grid or list(sweep.DEFAULT_GRID))
        fixed = dict(kv.split("=", 1) for kv in args.set if "=" in kv)
        if len(fixed) != len(args.set):
            raise ValueError("--set expects NAME=VALUE")
        seeds = range(args.seeds if args.seeds is not None else sweep.DEFAULT_SEEDS)
        if not seeds:
            raise ValueError("--seeds must be >= 1")
        points = sweep.expand(axes, seeds, args.preset, fixed)
    except ValueError as err:
        _error(str(err))
        return 2
    workers = args.workers or min(os.cpu_count() or 1, len(points))
    print(f"parasim sweep: {len(points)} runs ({len(points) // len(seeds)} points x {len(seeds)} seeds), "
          f"backend {args.backend}, {workers} workers, out {args.out}")
    try:
        results = sweep.run_sweep(points, args.out, args.backend, workers, progress=not args.no_progress,
                                  ray_address=args.ray_address)
        paths = write_report(results, args.out)
    except sweep.SweepError as err:
        _error(str(err))
        return 1
    except StoreError as err:
        _error(str(err))
        return 1
    except KeyboardInterrupt:
        _error("interrupted; the finished points are stored, rerun the same command to go on")
        return 130
    print("report: " + ", ".join(str(p) for p in paths))
    return 0
