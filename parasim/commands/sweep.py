"""parasim sweep: train and evaluate a grid of configs; with no arguments, the default C_tar sweep.

The default is the project's main job: c_tar=4,8,12,16 over the paramanager pool, three seeds each,
each worker process training its share of the points as one batched population, writing the table, CSV/JSON and
plots to ./parasim_out/sweep. Every point's config is checked before any worker starts. ``--backend local`` trains
each point in a process of its own instead: the same results, number for number, in more time.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from parasim.commands import RUN_FAILED, CommandError, error
from training.sweep_backends import BACKENDS, DEFAULT_BACKEND


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` parser."""
    p = subparsers.add_parser("sweep", help="reward / budget sweep: train and evaluate a grid of configs",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2,...",
                   help="a grid axis over any option (repeatable); default: c_tar=4,8,12,16")
    p.add_argument("--seeds", type=int, default=None, help="seeds per grid point, 0..N-1 (default 3)")
    p.add_argument("--preset", default="default",
                   help="ablation preset every point starts from (default, serial, mono, no_diversity, sft_only, "
                        "rl_from_base)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="fixed option for every point")
    p.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND,
                   help="population (default): each worker process trains a chunk of points as one batched "
                        "population (points checkpoint under OUT/work and a rerun resumes them there); local: one "
                        "process per point; ray: one Ray task per point; ray-population: one Ray task per chunk. "
                        "All give the same results")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel points, or populations (default: CPU count); with a Ray backend and no address, the "
                        "CPUs of the local Ray instance it starts")
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: what ray.init finds)")
    p.add_argument("--out", default=os.path.join("parasim_out", "sweep"), help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--loggers", default="", metavar="LIST",
                   help="also log every point's training record, one run per point under OUT/logs/POINT with "
                        "the tags of `parasim train` (docs/metrics.md): comma-separated jsonl, tensorboard, wandb "
                        "(offline unless WANDB_MODE says otherwise); default: none")
    p.add_argument("--list-options", action="store_true",
                   help="print every option a grid axis may name (type, default, allowed values, help) and exit")
    p.add_argument("--print-config", action="store_true",
                   help="print the base config of every point (TOML, as `parasim train --config` reads it) with "
                        "the grid, and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Parse the grid, run the unfinished points, then print and write the report.

    Exit codes: 0 done, 1 failed points or an output folder that cannot hold the results (one line on
    stderr naming the path and the reason), 2 a bad grid or option, 130 interrupted (finished points are kept).
    """
    from parasim.config.writes import StoreError
    from training import config, sweep
    from training.loggers import parse_loggers
    from training.report import write_report

    if args.list_options:
        print(sweep.options_table())
        return 0
    try:
        specs = args.grid or list(sweep.DEFAULT_GRID)
        axes = sweep.parse_grid(specs)
        fixed = config.parse_sets(args.set)
        gridded = {config.resolve(name) if name != "preset" else ("", "preset"): name for name, _ in axes}
        both = [name for name in fixed if config.resolve(name) in gridded]
        if both:
            raise ValueError(f"option {both[0]!r} is both a --grid axis and a --set value; use one")
        if args.seeds is not None and args.seeds < 1:
            raise ValueError(f"--seeds = {args.seeds}: must be an integer >= 1")
        axes, axis_seeds = sweep.seed_axis(axes, args.seeds)
        seeds = axis_seeds or range(args.seeds if args.seeds is not None else sweep.DEFAULT_SEEDS)
        if args.workers is not None and args.workers < 1:
            raise ValueError(f"--workers = {args.workers}: must be an integer >= 1")
        kinds = parse_loggers(args.loggers)
        points = sweep.expand(axes, seeds, args.preset, fixed)
        if args.print_config:
            grid = "\n".join(f"  --grid {s}" for s in specs)
            base = config.make_config(args.preset, fixed)
            print(config.config_toml(base, f"parasim sweep: {len(points)} runs ({len(points) // len(seeds)} points "
                                           f"x {len(seeds)} seeds) over\n{grid}\nbase config of every point:"))
            return 0
    except ValueError as err:
        raise CommandError(str(err)) from None
    workers = args.workers or min(os.cpu_count() or 1, len(points))
    print(f"parasim sweep: {len(points)} runs ({len(points) // len(seeds)} points x {len(seeds)} seeds), "
          f"backend {args.backend}, {workers} workers, out {args.out}")
    try:
        results = sweep.run_sweep(points, args.out, args.backend, workers, progress=not args.no_progress,
                                  ray_address=args.ray_address)
        paths = write_report(results, args.out)
        log_curves(results, Path(args.out) / "logs", kinds)
    except (sweep.SweepError, StoreError) as err:
        raise CommandError(str(err), RUN_FAILED) from None
    except KeyboardInterrupt:
        error("sweep", "interrupted; the finished points are stored, rerun the same command to go on")
        return 130
    print("report: " + ", ".join(str(p) for p in paths))
    return 0


def log_curves(results: Sequence[dict[str, Any]], root: Path, kinds: Sequence[str]) -> None:
    """Each point's training record as one logger run under ``root/<point key>``, with the tags ``parasim train``
    logs (every GRPO row of the point's ``history``, then its warm-start losses and final evaluation:
    ``MetricLoggers.log_final``), written whole from the stored result once: a rerun skips the points already
    written (``.done``) and rewrites a half-written one from scratch, so no step is logged twice."""
    import shutil

    from training.loggers import MetricLoggers, final_metrics

    for r in results if kinds else ():
        run = root / r["key"]
        if (run / ".done").exists():
            continue
        shutil.rmtree(run, ignore_errors=True)
        with MetricLoggers(run, "train_metrics", kinds, config={"label": r["label"], "seed": r["seed"],
                                                                **r.get("config", {})}) as log:
            for row in r["history"]:
                log.log(row, row["step"] + 1)
            log.log_final(r["sft_losses"], final_metrics(r), len(r["history"]))
        (run / ".done").write_text("")
