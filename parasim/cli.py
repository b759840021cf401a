"""The ``parasim`` command line: one subcommand per module in ``parasim.commands``.

Each command module exposes ``register(subparsers)`` and sets ``func`` on its parser, so adding a
command is adding one module and one line here. Modules load lazily: ``parasim --help`` stays fast
and a command's heavy imports (torch, ray, scipy) happen only when it runs.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = ("sweep", "train", "rescore", "calibrate", "simulate_log", "serve_pool")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="parasim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"parasim.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parasim`` script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
