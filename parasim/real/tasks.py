"""Tasks for real-tool episodes: question text and gold answer, which simulated suites do not carry.

JSONL, one task a line: ``id`` (str), ``question`` (str), ``answer`` (str, the gold answer; for multiple
choice the option letter or the option text), ``domain`` (math|science|knowledge|code), optional
``benchmark`` (a catalogue name from ``parasim.tasks.suites``, default ``generic_<domain>``: it is what the call
log records for ``parasim calibrate``), optional ``options`` (list of option texts), optional
``difficulty`` (logits, when known). Errors name the line and the field.

Text fields must be encodable as UTF-8: JSON allows a lone UTF-16 surrogate escape (``"\\ud800"``), which decodes to
a ``str`` that every prompt with the task would fail to send (request bodies are strict UTF-8), so such a task is
refused at load instead of failing every episode that draws it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parasim.config.jsonl import iter_json_objects
from parasim.protocol.engine import TaskView
from parasim.protocol.schema import Domain
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS


@dataclass(frozen=True)
class RealTask:
    """A task with its gold answer (never shown to the manager: see ``view``)."""

    task_id: str
    question: str
    answer: str
    domain: Domain
    benchmark: str
    options: tuple[str, ...] = ()
    difficulty: float | None = None

    def view(self) -> TaskView:
        return TaskView(task_id=self.task_id, question=self.question, domain=int(self.domain), options=self.options)

    def log_fields(self) -> dict[str, Any]:
        """The task part of a call-log record."""
        return {"task_id": self.task_id, "benchmark": self.benchmark, "domain": int(self.domain),
                "difficulty": self.difficulty}


def _check_utf8(text: str, field: str) -> None:
    """Raise naming ``field`` when ``text`` cannot be encoded as UTF-8 (in a ``str``, only lone surrogates cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{field}: expected text that encodes as UTF-8, got a lone surrogate "
                         f"U+{ord(text[err.start]):04X} at character {err.start} of {text[:60]!r}") from None


def parse_task(rec: Any, where: str = "task") -> RealTask:
    """Validate one task record."""
    if not isinstance(rec, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    for key in ("id", "question", "answer"):
        value = rec.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "answer":
            continue
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}.{key}: expected a non-empty string, got {value!r}")
        _check_utf8(value, f"{where}.{key}")
    dom_name = rec.get("domain")
    if not isinstance(dom_name, str) or dom_name.upper() not in Domain.__members__:
        raise ValueError(f"{where}.domain: expected one of {[d.name.lower() for d in Domain]}, got {dom_name!r}")
    domain = Domain[dom_name.upper()]
    bench = rec.get("benchmark", f"generic_{domain.name.lower()}")
    if bench not in BENCHMARK_INDEX:
        raise ValueError(f"{where}.benchmark: expected one of {sorted(BENCHMARK_INDEX)}, got {bench!r}")
    bench_domain = BENCHMARKS[BENCHMARK_INDEX[bench]].domain
    if bench_domain != domain:
        raise ValueError(f"{where}.domain: benchmark {bench} is {bench_domain.name.lower()}, got {dom_name!r}")
    options = rec.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options) or len(options) == 1:
        raise ValueError(f"{where}.options: expected a list of 2+ option strings (or none), got {options!r}")
    for i, option in enumerate(options):
        _check_utf8(option, f"{where}.options[{i}]")
    difficulty = rec.get("difficulty")
    if difficulty is not None and (isinstance(difficulty, bool) or not isinstance(difficulty, (int, float))
                                   or not math.isfinite(difficulty) or abs(difficulty) > 10):
        raise ValueError(f"{where}.difficulty: expected a number in [-10, 10], got {difficulty!r}")
    return RealTask(task_id=rec["id"], question=rec["question"], answer=str(rec["answer"]), domain=domain,
                    benchmark=bench, options=tuple(options),
                    difficulty=None if difficulty is None else float(difficulty))


def load_real_tasks(path: str | Path) -> list[RealTask]:
    """Read a JSONL task file (see the module docstring)."""
    tasks = []
    for where, rec in iter_json_objects(path):
        tasks.append(parse_task(rec, where))
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks
