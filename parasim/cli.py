"""The ``parasim`` command line: one subcommand per module in ``parasim.commands``.

Each command module exposes ``register(subparsers)`` and sets ``func`` on its parser, so adding a
command is adding one module and one line here. Modules load lazily: ``parasim --help`` stays fast
and a command's heavy imports (torch, ray, scipy) happen only when it runs.
Exit codes and error lines follow one convention (``parasim.commands``): 0 done, 1 the run failed,
2 a usage or config error, 130 interrupted; errors are one line on stderr.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence

from parasim.commands import INTERRUPTED, RUN_FAILED, USAGE_ERROR, CommandError, error

BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a writer whose reader went away (``parasim ... | head``)

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
    parser.set_defaults(_commands=sub.choices)
    return parser


def _unknown_options(parser: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """The error for arguments a (sub)command does not take, with the closest option of that command."""
    known = [o for action in parser._actions for o in action.option_strings]  # noqa: SLF001 -- argparse has no API
    hints = []
    for arg in extra:
        close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1) if arg.startswith("-") else []
        if close:
            hints.append(f"{arg.split('=', 1)[0]} (did you mean {close[0]}?)")
    return f"unrecognized arguments: {' '.join(extra)}" + (f"; {', '.join(hints)}" if hints else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``parasim`` script; returns the process exit code.

    The one error path of every command: a ``CommandError`` is its line and code; an ``OSError`` that escapes a
    command (a full disk, an output folder removed mid-run) is one line naming the file, exit 1; Ctrl-C is the
    ``interrupted`` line, exit 130; a closed stdout (``| head``) ends the command quietly."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    command = getattr(args, "command", None)
    if extra:  # the command's own usage and its closest option, not the top level's
        target = args._commands.get(command, parser) if command else parser
        target.error(_unknown_options(target, extra))
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return int(args.func(args) or 0)
    except CommandError as err:
        error(command, str(err))
        return err.code
    except KeyboardInterrupt:
        error(command, "interrupted (rerun the same command to resume where it can)")
        return INTERRUPTED
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # the reader is gone: no flush error at exit either
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        error(command, f"{where}{err.strerror or err}")
        return RUN_FAILED


if __name__ == "__main__":
    sys.exit(main())
