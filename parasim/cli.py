"""The ``parasim`` command line: one subcommand per module in ``parasim.commands``.

Each command module exposes ``register(subparsers)`` and sets ``func`` on its parser, so adding a
command is adding one module and one line here. Modules load lazily: ``parasim --help`` stays fast
and a command's heavy imports (torch, ray, scipy) happen only when it runs.
Exit codes and error lines follow one convention (``parasim.commands``): 0 done, 1 the run failed,
2 a usage or config error, 130 interrupted; errors are one line on stderr.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from parasim.commands import USAGE_ERROR, CommandError, error

COMMANDS = ("sweep", "train", "rescore", "calibrate", "simulate_log", "serve_pool", "validate_sim")

DESCRIPTION = """\
parasim: train LLM managers that orchestrate parallel agent and tool calls, on a calibrated simulator
of the tool pool (or on real tools), and study their rewards.

  parasim sweep                              the default C_tar reward sweep (train + evaluate a grid)
  parasim train --out runs/a                 one training run, resumable
  parasim rescore runs/a/trajectories.parquet --grid c_tar=4,8,16
                                             re-score stored trajectories under reward configs
  parasim calibrate calls.jsonl -o pool.json fit a simulated pool to a call log
  parasim validate-sim logs/                 replay logged real episodes in the simulator, compare

Run `parasim COMMAND --help` for a command's options; `parasim train --list-options` lists every
option a config, --set or --grid may name."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    from parasim import __version__

    parser = argparse.ArgumentParser(prog="parasim", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"parasim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"parasim.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parasim`` script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return int(args.func(args) or 0)
    except CommandError as err:
        error(args.command, str(err))
        return err.code


if __name__ == "__main__":
    sys.exit(main())
