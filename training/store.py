"""A sweep's results store: one JSON file per finished grid point plus an index, crash-safe, and distrustful.

Every write goes to a temporary file in the same directory and is moved into place with
``os.replace`` (atomic on POSIX), so a crash leaves either the old file or the new one, never half a
file. The point files are the truth; ``index.json`` is a convenience rebuilt from them on open, so a
crash between writing a point and updating the index loses nothing. A rerun asks ``done(key)`` and
skips finished points.

The files are still read as untrusted: a hand edit, a copy from elsewhere or a disk error can leave a file
that is not JSON, not an object, not named after its ``key``, or (with a ``validate`` function) not a result
at all. Such a file is moved to ``quarantine/`` with a warning on stderr naming it and the reason, and its
point counts as not done, so the rerun redoes it. Files are only rewritten when their content changes, so
a rerun that has nothing to do writes nothing (and works on a read-only copy); whatever cannot be read or
written raises ``StoreError`` with the path and the reason.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from parasim.config.writes import StoreError, publish_json

_REASONS_SHOWN = 3  # problems of one file quoted in its warning


class ResultsStore:
    """Finished grid points under ``root/points/<key>.json``; ``root/index.json`` lists them.

    ``validate(result)`` returns the problems of one result (empty when it is fine); without it a point file
    need only be a JSON object whose ``key`` is its file name.
    """

    def __init__(self, root: str | os.PathLike[str], validate: Callable[[Any], Sequence[str]] | None = None) -> None:
        self.root = Path(root)
        self.points_dir = self.root / "points"
        self.quarantine_dir = self.root / "quarantine"
        self._validate = validate
        try:
            self.points_dir.mkdir(parents=True, exist_ok=True)
            paths = sorted(self.points_dir.glob("*.json"))
        except OSError as err:
            raise StoreError(f"cannot use {self.points_dir}: {err.strerror or err}") from err
        self._results: dict[str, dict[str, Any]] = {}
        for path in paths:
            result, reasons = self._load(path)
            if reasons:
                self._quarantine(path, reasons)
            else:
                self._results[path.stem] = result
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
        publish_json(self.points_dir / f"{key}.json", result)
        self._results[key] = result
        self._write_index()

    def check_writable(self) -> None:
        """Raise ``StoreError`` now, not after the first point has trained, if finished points cannot be stored."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=self.points_dir)
            os.close(fd)
            os.unlink(tmp)
        except OSError as err:
            raise StoreError(f"cannot write results to {self.points_dir}: {err.strerror or err}") from err

    def results(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Stored results, in the order of ``keys`` (finished ones only) or sorted by key."""
        order = sorted(self._results) if keys is None else [k for k in keys if k in self._results]
        return [self._results[k] for k in order]

    def _load(self, path: Path) -> tuple[dict[str, Any], list[str]]:
        """The result in ``path`` and the reasons not to trust it (empty when it is fine)."""
        try:
            data = path.read_bytes()
        except OSError as err:
            raise StoreError(f"cannot read {path}: {err.strerror or err}") from err
        try:
            result = json.loads(data)
        except ValueError as err:  # JSONDecodeError, or bytes that are not UTF-8
            return {}, [f"not valid JSON ({err})"]
        if not isinstance(result, dict):
            return {}, [f"expected a JSON object, got {type(result).__name__}"]
        reasons = list(self._validate(result)) if self._validate is not None else []
        if result.get("key") != path.stem:
            reasons.append(f"key={result.get('key')!r}: expected the file's name {path.stem!r}")
        return result, reasons

    def _quarantine(self, path: Path, reasons: Sequence[str]) -> None:
        """Move a bad point file to ``quarantine/<name>.bad-<UTC time>`` and say so on stderr."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        dest = self.quarantine_dir / f"{path.name}.bad-{stamp}"
        reason = "; ".join(reasons[:_REASONS_SHOWN])
        if len(reasons) > _REASONS_SHOWN:
            reason += f" (and {len(reasons) - _REASONS_SHOWN} more)"
        try:
            self.quarantine_dir.mkdir(exist_ok=True)
            os.replace(path, dest)
        except OSError as err:
            raise StoreError(f"cannot quarantine {path} ({reason}): {err.strerror or err}") from err
        print(f"warning: {path}: {reason}; moved to {dest}, its point will be redone", file=sys.stderr)

    def _write_index(self) -> None:
        index = {k: {"overrides": r.get("overrides", {}), "seed": r.get("seed")}
                 for k, r in sorted(self._results.items())}
        publish_json(self.root / "index.json", index)
