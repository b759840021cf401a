"""Atomic file writes for everything parasim writes: a reader sees the old file or the new one, never a torn one.

Every write goes to a temporary file in the same directory and is moved into place with ``os.replace`` (atomic on
POSIX); ``publish`` rewrites a file only when its content changes, so rerunning a finished job writes nothing (and
works on a read-only copy). The sweep's results store (``training.store``), the reports of ``validate-sim`` and the
sweep, the CLI's outputs and the trainers' checkpoints all write through here.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class StoreError(RuntimeError):
    """A store or report file cannot be read or written; the message names the path and the reason."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new content, never a torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    """``atomic_write_bytes`` of pretty, key-sorted JSON (stable diffs between runs)."""
    atomic_write_bytes(path, _json_bytes(obj))


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def publish(path: Path, data: bytes) -> bool:
    """``atomic_write_bytes`` unless ``path`` already holds exactly ``data``; returns whether it wrote.

    Raises ``StoreError`` naming the path and the reason when the file cannot be written.
    """
    try:
        if path.is_file() and path.read_bytes() == data:
            return False
        atomic_write_bytes(path, data)
    except OSError as err:
        raise StoreError(f"cannot write {path}: {err.strerror or err}") from err
    return True


def publish_json(path: Path, obj: Any) -> bool:
    """``publish`` of pretty, key-sorted JSON."""
    return publish(path, _json_bytes(obj))
