"""A JSONL log of every real tool call, in the schema ``parasim calibrate`` reads (docs/calibration.md), and of
every finished episode, in the schema ``parasim validate-sim`` reads (docs/validate_sim.md).

Why it writes the way it does: real calls are expensive and the process that makes them (a GRPO job on
a cluster) can die at any moment, so every call is one ``os.write`` of one complete line to a file opened
with ``O_APPEND`` as soon as the call finishes: a crash loses at most calls still in flight, never half a
line, and concurrent writers (threads, episodes) never interleave within a line. ``fsync=True`` also
survives a machine crash, at a disk flush per call.

Episode numbers continue after the largest one already in either file, so that appending a new run to an old
log keeps ``(episode, call_index)`` unique, which is what ``target`` references resolve against. Use one
file per process when several processes log at once.

Episodes go to a sibling file, ``episodes_path(path)`` (``calls.jsonl`` -> ``calls.episodes.jsonl``), one line per
finished episode: its task, its rounds (the calls' indices per round, and the round's action where the caller
passed it), its final answer and whether it was right. It is opened at the first finished episode, so a logger
that only logs calls writes no second file.
"""
from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from parasim.protocol.schema import CallResult, Domain, ToolCall

EPISODES_SUFFIX = ".episodes.jsonl"


def episodes_path(calls_path: str | Path) -> Path:
    """The episode log that goes with a call log: ``calls.jsonl`` -> ``calls.episodes.jsonl`` (one rule, for the
    writer and for ``parasim validate-sim``, which finds the pairs)."""
    calls_path = Path(calls_path)
    return calls_path.with_name(calls_path.name.removesuffix(".jsonl") + EPISODES_SUFFIX)


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


def _encode(record: dict[str, Any]) -> bytes:
    """One record as one JSON line, as UTF-8 bytes."""
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    # a lone surrogate (a task id or an answer decoded from JSON) has no UTF-8 form; written as its JSON
    # escape it reads back as the same string, where a strict encode would raise and lose the record
    return text.encode("utf-8", errors="backslashreplace")


class CallLogger:
    """Append-only, line-atomic JSONL writer of real calls and episodes; thread-safe; usable as a context manager."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.episodes_path = episodes_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._next_episode = max(_last_episode(self.path), _last_episode(self.episodes_path)) + 1
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._episodes_fd: int | None = None
        self._closed = False

    def new_episode(self) -> int:
        """Reserve the number of a new episode."""
        with self._lock:
            episode = self._next_episode
            self._next_episode += 1
            return episode

    def log(self, *, episode: int, call_index: int, round_index: int, task: dict[str, Any], call: ToolCall,
            result: CallResult, correct: bool | None, flagged: bool | None = None, context_tokens: int = 0,
            slot: int | None = None) -> None:
        """Write one call as one line. ``task`` has ``task_id``, ``benchmark``, ``domain`` and maybe
        ``difficulty``; ``correct`` is None where the call gives no answer to check (python, search, failures);
        ``slot`` is the call's slot in its round's action, where the caller knows it."""
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
        if slot is not None:
            record["slot"] = int(slot)
        answer = result.extra.get("answer")
        if isinstance(answer, str) and answer:
            record["answer"] = answer[:200]
        with self._lock:
            if self._fd is None:
                raise ValueError(f"call log {self.path} is closed")
            self._write(self._fd, _encode(record))

    def log_episode(self, record: dict[str, Any]) -> None:
        """Write one finished episode as one line of the episode log (``episodes_path``); ``record`` holds
        ``episode`` and the fields ``parasim.validation.logs`` reads (``RealEpisodeEngine.finish`` builds it)."""
        line = _encode(record)
        with self._lock:
            if self._closed:
                raise ValueError(f"call log {self.path} is closed")
            if self._episodes_fd is None:
                self._episodes_fd = os.open(self.episodes_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._write(self._episodes_fd, line)

    def _write(self, fd: int, line: bytes) -> None:
        """One ``os.write`` of a whole line (under the lock), flushed to disk with ``fsync``."""
        written = os.write(fd, line)
        while written < len(line):  # a regular file takes it whole; loop only for exotic targets
            written += os.write(fd, line[written:])
        if self._fsync:
            os.fsync(fd)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for name in ("_fd", "_episodes_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    os.close(fd)
                    setattr(self, name, None)

    def __enter__(self) -> CallLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
