"""Reading JSONL files of records (tasks, call logs, corpora) with errors that name the line.

One reader for every JSONL input, so that each gives the same streaming behaviour and the same
``file:line: ...`` messages for a line that is not JSON or not an object.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_json_objects(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` for each non-blank line, ``where`` being ``"path:lineno"``; streams the file."""
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")  # noqa: TRY004
            yield where, rec
