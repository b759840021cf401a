"""A sweep's results store: one JSON file per finished grid point plus an index, crash-safe.

Every write goes to a temporary file in the same directory and is moved into place with
``os.replace`` (atomic on POSIX), so a crash leaves either the old file or the new one, never half a
file. The point files are the truth; ``index.json`` is a convenience rebuilt from them on open, so a
crash between writing a point and updating the index loses nothing. A rerun asks ``done(key)`` and
skips finished points.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any


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
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


class ResultsStore:
    """Finished grid points under ``root/points/<key>.json``; ``root/index.json`` lists them."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.points_dir = self.root / "points"
        self.points_dir.mkdir(parents=True, exist_ok=True)
        self._results: dict[str, dict[str, Any]] = {}
        for path in sorted(self.points_dir.glob("*.json")):
            try:
                result = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue  # cannot happen with atomic writes, but a hand-edited file must not stop a sweep
            self._results[result["key"]] = result
        self._write_index()

    def done(self, key: str) -> bool:
        """Whether the grid point ``key`` has a stored result."""
        return key in self._results

    def get(self, key: str) -> dict[str, Any]:
        """The stored result of a finished point."""
        return self._results[key]

    def put(self, result: dict[str, Any]) -> None:
        """Store one finished point (its ``key`` names the file), then refresh the index."""
        key = result["key"]
        atomic_write_json(self.points_dir / f"{key}.json", result)
        self._results[key] = result
        self._write_index()

    def results(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Stored results, in the order of ``keys`` (finished ones only) or sorted by key."""
        order = sorted(self._results) if keys is None else [k for k in keys if k in self._results]
        return [self._results[k] for k in order]

    def _write_index(self) -> None:
        index = {k: {"overrides": r.get("overrides", {}), "seed": r.get("seed")} for k, r in sorted(self._results.items())}
        atomic_write_json(self.root / "index.json", index)
