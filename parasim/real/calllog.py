"""A JSONL log of every real tool call, in the schema ``parasim calibrate`` reads (docs/calibration.md).

Why it writes the way it does: real calls are expensive and the process that makes them (a GRPO job on
a cluster) can die at any moment, so every call is one ``os.write`` of one complete line to a file opened
with ``O_APPEND`` as soon as the call finishes: a crash loses at most calls still in flight, never half a
line, and concurrent writers (threads, episodes) never interleave within a line. ``fsync=True`` also
survives a machine crash, at a disk flush per call.

Episode numbers continue after the largest one already in the file, so that appending a new run to an old
log keeps ``(episode, call_index)`` unique, which is what ``target`` references resolve against. Use one
file per process when several processes log at once.
"""
from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from parasim.protocol.schema import CallResult, Domain, ToolCall


def _last_episode(path: Path) -> int:
    """Largest ``episode`` in an existing log, -1 for none; unreadable lines (a torn tail) are skipped."""
    if not path.is_file():
        return -1
    last = -1
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                episode = json.loads(line).get("episode", -1)
            except (ValueError, AttributeError):
                continue
            if isinstance(episode, int) and not isinstance(episode, bool):
                last = max(last, episode)
    return last


class CallLogger:
    """Append-only, line-atomic JSONL writer of real calls; thread-safe; usable as a context manager."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._next_episode = _last_episode(self.path) + 1
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def new_episode(self) -> int:
        """Reserve the number of a new episode."""
        with self._lock:
            episode = self._next_episode
            self._next_episode += 1
            return episode

    def log(self, *, episode: int, call_index: int, round_index: int, task: dict[str, Any], call: ToolCall,
            result: CallResult, correct: bool | None, flagged: bool | None = None, context_tokens: int = 0) -> None:
        """Write one call as one line. ``task`` has ``task_id``, ``benchmark``, ``domain`` and maybe
        ``difficulty``; ``correct`` is None where the call gives no answer to check (python, search, failures)."""
        record: dict[str, Any] = {
            "task_id": task["task_id"],
            "benchmark": task["benchmark"],
            "domain": Domain(task["domain"]).name.lower(),
            "tool": call.tool.wire_name,
            "model": call.model,
            "status": result.status.name,
            "correct": correct,
            "tokens_in": int(result.tokens_in),
            "tokens_out": int(result.tokens_out),
            "latency_s": round(float(result.latency_s), 6),
            "cost_units": float(result.cost_units),
            "usd": float(result.usd),
            "round": round_index,
            "target": call.target,
            "episode": episode,
            "call_index": call_index,
            "context_tokens": int(context_tokens),
        }
        difficulty = task.get("difficulty")  # null (not absent) when unknown: readers treat both as unknown
        record["difficulty"] = float(difficulty) if difficulty is not None and math.isfinite(difficulty) else None
        if flagged is not None:
            record["flagged"] = flagged
        answer = result.extra.get("answer")
        if isinstance(answer, str) and answer:
            record["answer"] = answer[:200]
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        # a lone surrogate (a task id or an answer decoded from JSON) has no UTF-8 form; written as its JSON
        # escape it reads back as the same string, where a strict encode would raise and lose the call
        line = text.encode("utf-8", errors="backslashreplace")
        with self._lock:
            if self._fd is None:
                raise ValueError(f"call log {self.path} is closed")
            written = os.write(self._fd, line)
            while written < len(line):  # a regular file takes it whole; loop only for exotic targets
                written += os.write(self._fd, line[written:])
            if self._fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> CallLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
