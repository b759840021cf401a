"""parasim train: scripted expert, SFT, GRPO and evaluation of one config (a preset or a file).

--out DIR keeps the SFT weights and GRPO checkpoints there: rerunning the same command after a
crash resumes from the last checkpoint and ends with the same weights. With --set eval.pool=POOL the trained policy
is also evaluated on that pool (metrics.json's eval_pool, and a line of its own). Writes metrics.json and
the evaluation trajectories as trajectories.parquet (input for `parasim rescore`). A progress bar
shows each phase (expert, sft, eval sft, grpo, eval) with its ETA.
"""
from __future__ import annotations

import argparse
import os

from parasim.commands import RUN_FAILED, CommandError
from parasim.config.fields import FORMATS_TEXT


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``train`` parser."""
    p = subparsers.add_parser("train", help="train and evaluate one manager policy", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="default",
                   help="ablation preset (default, serial, mono, no_diversity, sft_only, rl_from_base) or a file of "
                        f"option overrides, {FORMATS_TEXT}")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override one option")
    p.add_argument("--out", default=os.path.join("parasim_out", "train"), help="checkpoints and outputs")
    p.add_argument("--loggers", default="jsonl", metavar="LIST",
                   help="metric loggers, comma-separated: jsonl (OUT/train_metrics.jsonl), tensorboard "
                        "(OUT/tensorboard), wandb (OUT/wandb; offline unless WANDB_MODE says otherwise); the names "
                        "are in docs/metrics.md; empty: none (default: jsonl)")
    p.add_argument("--list-options", action="store_true",
                   help="print every option (type, default, allowed values, help) and exit")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as TOML (a file --config reads) and exit")
    p.add_argument("--quiet", action="store_true", help="no per-step log")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the config, run the pipeline with checkpoints under ``--out``, write the outputs."""
    import json
    from pathlib import Path

    from training import config as config_mod
    from training.loggers import parse_loggers

    if args.list_options:
        print(config_mod.options_table())
        return 0
    try:
        cfg = config_mod.load_config(args.config)
        cfg = config_mod.apply_overrides(cfg, config_mod.parse_sets(args.set)).validate()
        kinds = parse_loggers(args.loggers)
    except ValueError as err:
        raise CommandError(str(err)) from None
    if args.print_config:
        print(config_mod.config_toml(cfg), end="")
        return 0
    import torch

    from training.loggers import MetricLoggers, Progress, final_metrics
    from training.pipeline import claim_workdir, grpo_resume_step, run_pipeline
    from training.rescore import write_parquet
    from training.rollout import set_env_threads, threads_per_worker

    torch.set_num_threads(1)  # bitwise-deterministic CPU reductions: resume and sweeps match this run
    out = Path(args.out)
    try:
        claim_workdir(out / "ckpt", cfg)
        metrics = MetricLoggers(out, "train_metrics", kinds, resume_step=grpo_resume_step(out / "ckpt"),
                                config=cfg.to_dict())
    except (ValueError, ImportError) as err:
        raise CommandError(str(err)) from None
    except OSError as err:
        raise CommandError(f"--out {str(out)!r}: {err}") from None

    with Progress(enabled=not args.no_progress) as bar, metrics:
        def log(row: dict) -> None:
            metrics.log(row, row["step"] + 1)
            if not args.quiet:
                bar.print(f"step {row['step']:4d}  reward {row['reward']:+.4f}  acc {row['accuracy']:.3f}  "
                          f"tokens {row['tokens']:.0f}  cost {row['cost_units']:.2f}  entropy {row['entropy']:.3f}  "
                          f"kl {row['kl']:.4f}  clip {row['clip_frac']:.3f}  {row['step_s']:.2f}s")

        set_env_threads(threads_per_worker(1))  # one run on this machine: its env steps on every core
        try:
            result = run_pipeline(cfg, out / "ckpt", log, keep_trajectories=True, progress=bar.update)
        except OSError as err:
            raise CommandError(f"the run failed: {err}", RUN_FAILED) from None
        metrics.log_final(result["sft_losses"], final_metrics(result), cfg.grpo.steps)
    write_parquet(result.pop("trajectories"), out / "trajectories.parquet")
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"accuracy SFT {result['sft_accuracy']:.4f} -> {result['accuracy']:.4f}  reward SFT "
          f"{result['sft_reward']:+.4f} -> {result['reward']:+.4f}  tokens {result['tokens']:.0f}  "
          f"cost {result['cost_units']:.2f}  usd {result['usd']:.5f}  latency {result['latency_s']:.1f}s")
    if "eval_pool" in result:  # eval.pool: the same evaluation on another pool
        shifted = result["eval_pool"]
        print(f"on eval.pool {shifted['pool']}: accuracy {shifted['accuracy']:.4f}  reward {shifted['reward']:+.4f}  "
              f"tokens {shifted['tokens']:.0f}  cost {shifted['cost_units']:.2f}  usd {shifted['usd']:.5f}  "
              f"latency {shifted['latency_s']:.1f}s")
    print(f"wrote {out / 'metrics.json'}, {out / 'trajectories.parquet'}")
    return 0
