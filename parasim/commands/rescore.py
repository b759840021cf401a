"""``parasim rescore``: score stored trajectories under a grid of reward configs in one batched call."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``rescore`` parser."""
    p = subparsers.add_parser("rescore", help="re-score Parquet trajectories under a grid of reward configs",
                              description=__doc__)
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

    from parasim.training import rescore

    try:
        batch = rescore.read_parquet(args.trajectories)
        configs = rescore.reward_grid(rescore.parse_axes(args.grid), args.preset)
    except (ValueError, OSError) as err:
        print(f"parasim rescore: error: {err}")
        return 2
    rows = rescore.rescore(batch, configs, args.top_k)
    rescore.print_rescore(rows, len(batch.outcome))
    if args.out:
        out = Path(args.out)
        if out.suffix == ".csv":
            import pandas as pd

            pd.DataFrame([{k: v for k, v in r.items() if k != "reward_config"} for r in rows]).to_csv(out, index=False)
        else:
            out.write_text(json.dumps(rows, indent=1))
        print(f"wrote {out}")
    return 0
