"""Subcommands of the ``parasim`` CLI, one module each (see ``parasim.cli``), and their error convention.

One exit-code convention for every command: 0 done, 1 the run failed, 2 a usage or config error (as argparse's
own), 130 interrupted. Errors are one line on stderr, ``parasim COMMAND: error: ...``: a command raises
:class:`CommandError`, which ``parasim.cli.main`` prints and turns into the exit code.
"""
from __future__ import annotations

import sys

USAGE_ERROR, RUN_FAILED = 2, 1


class CommandError(Exception):
    """A command's one-line error; ``code`` follows the convention (2 usage / config, 1 run failed)."""

    def __init__(self, message: str, code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.code = code


def error(command: str, message: str) -> None:
    """Print a command's error line on stderr."""
    print(f"parasim {command}: error: {message}", file=sys.stderr, flush=True)
