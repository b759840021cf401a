"""``parasim train``: scripted expert, SFT, GRPO and evaluation of one config (a preset or a file).

``--out DIR`` keeps the SFT weights and GRPO checkpoints there: rerunning the same command after a
crash resumes from the last checkpoint and ends with the same weights. Writes ``metrics.json`` and
the evaluation trajectories as ``trajectories.parquet`` (input for ``parasim rescore``).
"""
from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``train`` parser."""
    p = subparsers.add_parser("train", help="train and evaluate one manager policy", description=__doc__)
    p.add_argument("--config", default="default",
                   help="ablation preset (default, serial, mono, no_diversity, sft_only, rl_from_base) or a "
                        "JSON / TOML file of option overrides")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override one option")
    p.add_argument("--out", default=os.path.join("parasim_out", "train"), help="checkpoints and outputs")
    p.add_argument("--list-options", action="store_true", help="print every option name and exit")
    p.add_argument("--quiet", action="store_true", help="no per-step log")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the config, run the pipeline with checkpoints under ``--out``, write the outputs."""
    import json
    from pathlib import Path

    from parasim.training import config as config_mod

    if args.list_options:
        print("\n".join(sorted(config_mod.addressable_names())))
        return 0
    try:
        cfg = config_mod.load_config(args.config)
        overrides = dict(kv.split("=", 1) for kv in args.set if "=" in kv)
        if len(overrides) != len(args.set):
            raise ValueError("--set expects NAME=VALUE")
        cfg = config_mod.apply_overrides(cfg, overrides).validate()
    except ValueError as err:
        print(f"parasim train: error: {err}")
        return 2
    import torch

    from parasim.training.pipeline import run_pipeline
    from parasim.training.rescore import write_parquet

    torch.set_num_threads(1)  # bitwise-deterministic CPU reductions: resume and sweeps match this run
    out = Path(args.out)

    def log(row: dict) -> None:
        print(f"step {row['step']:4d}  reward {row['reward']:+.4f}  acc {row['accuracy']:.3f}  "
              f"tokens {row['tokens']:.0f}  cost {row['cost_units']:.2f}  entropy {row['entropy']:.3f}  "
              f"kl {row['kl']:.4f}  clip {row['clip_frac']:.3f}  {row['step_s']:.2f}s")

    result = run_pipeline(cfg, out / "ckpt", None if args.quiet else log, keep_trajectories=True)
    write_parquet(result.pop("trajectories"), out / "trajectories.parquet")
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"accuracy SFT {result['sft_accuracy']:.4f} -> {result['accuracy']:.4f}  reward SFT "
          f"{result['sft_reward']:+.4f} -> {result['reward']:+.4f}  tokens {result['tokens']:.0f}  "
          f"cost {result['cost_units']:.2f}  usd {result['usd']:.5f}  latency {result['latency_s']:.1f}s")
    print(f"wrote {out / 'metrics.json'}, {out / 'trajectories.parquet'}")
    return 0
