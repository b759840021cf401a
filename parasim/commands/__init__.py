"""Subcommands of the ``parasim`` CLI, one module each (see ``parasim.cli``), and their error convention.

One exit-code convention for every command: 0 done, 1 the run failed, 2 a usage or config error (as argparse's
own), 130 interrupted. Errors are one line on stderr, ``parasim COMMAND: error: ...``: a command raises
:class:`CommandError`, which ``parasim.cli.main`` prints and turns into the exit code; ``main`` also turns an
``OSError`` that escapes a command (a full disk, a vanished folder) into one such line, and Ctrl-C into the
``interrupted`` line. Every output path is checked with :func:`check_output` before the work that fills it, and
written with :func:`write_output`.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

USAGE_ERROR, RUN_FAILED, INTERRUPTED = 2, 1, 130


class CommandError(Exception):
    """A command's one-line error; ``code`` follows the convention (2 usage / config, 1 run failed)."""

    def __init__(self, message: str, code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.code = code


def error(command: str, message: str) -> None:
    """Print a command's error line on stderr."""
    print(f"parasim {command}: error: {message}", file=sys.stderr, flush=True)


def check_output(path: str | Path, flag: str) -> Path:
    """``path`` as a ``Path`` once its folder exists and takes a file (probed with a temporary file): a
    ``CommandError`` now, before the work whose result it would hold is done and lost."""
    path = Path(path)
    if path.is_dir():
        raise CommandError(f"{flag} {str(path)!r}: is a directory; expected a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise CommandError(f"{flag} {str(path)!r}: cannot write there ({err.strerror or err})") from None
    return path


def write_output(path: Path, data: bytes, flag: str) -> None:
    """Write a command's output file whole (atomically where it is a regular file: a full disk leaves the old
    file, never half a new one); a failure is a one-line ``CommandError`` (run failed)."""
    from parasim.config.writes import atomic_write_bytes

    try:
        if path.exists() and not path.is_file():  # a device or a pipe (/dev/stdout): written in place, never replaced
            with open(path, "wb") as handle:
                handle.write(data)
        else:
            atomic_write_bytes(path, data)
    except OSError as err:
        raise CommandError(f"{flag} {str(path)!r}: cannot write ({err.strerror or err})", RUN_FAILED) from None
