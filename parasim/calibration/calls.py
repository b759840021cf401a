"""The call-log JSONL schema that ``parasim calibrate`` reads and ``parasim simulate-log`` writes.

One JSON object a line, one line a tool call (docs/calibration.md lists the fields). Real harnesses log
what they see: the task (id, benchmark, domain, difficulty when known), the call (tool, model, round,
the earlier call whose output it carried) and the result (status, correctness, tokens, latency). The
real-tools engine (``parasim.real.calllog``) and ``parasim simulate-log`` both write it. Reading turns
the log into a ``CallTable`` of integer-coded arrays, because the likelihood is evaluated over 10^4-10^6
calls hundreds of times per fit. Bad lines are errors naming the line and the field: a fit on silently
dropped records would be wrong without saying so.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from parasim.config.env_options import PRICE_LIMIT, SLOT_LIMIT
from parasim.config.jsonl import MISSING, iter_json_objects, number_field, show_value
from parasim.protocol.schema import Domain, Status, Tool

REQUIRED = ("task_id", "benchmark", "domain", "tool", "model", "status", "tokens_in", "tokens_out", "latency_s")
OPTIONAL = ("correct", "difficulty", "flagged", "carried_correct", "context_tokens", "target", "episode",
            "call_index", "round", "cost_units", "usd", "answer")
TOOLS = {t.wire_name: t for t in Tool if t is not Tool.FINAL_ANSWER}
MAX_INDEX = 2**53 - 1  # the largest integer every JSON reader holds exactly: episode numbers, call indices, rounds
MAX_TOKENS = 10**9  # a call's token counts (the real-tools client refuses usage counts past it)
MAX_LATENCY_S = 86_400.0  # one day: no logged call runs longer (a 1e300 s latency would move the fitted medians)
MAX_DIFFICULTY = 10.0  # task difficulty in logits, as task files and the simulator take it
# The numeric fields of a call record: (lo, hi, integer). The episode-log reader (``parasim.validation.logs``)
# checks the fields it reads by the same table, so both readers refuse the same values.
FIELD_RANGES: dict[str, tuple[float, float, bool]] = {
    "tokens_in": (0, MAX_TOKENS, False), "tokens_out": (0, MAX_TOKENS, False),
    "context_tokens": (0, MAX_TOKENS, False), "latency_s": (0, MAX_LATENCY_S, False),
    "difficulty": (-MAX_DIFFICULTY, MAX_DIFFICULTY, False), "episode": (0, MAX_INDEX, True),
    "call_index": (0, MAX_INDEX, True), "round": (-1, MAX_INDEX, True), "target": (-1, MAX_INDEX, True),
    "cost_units": (0, 1e9, False), "usd": (0, PRICE_LIMIT, False), "slot": (0, SLOT_LIMIT - 1, True),
    "options": (0, 10**6, True),
}
_INT_COLUMNS = ("task", "bench", "domain", "tool", "model", "status", "correct", "flagged", "carried", "answer",
                "episode", "round")
_FLOAT_COLUMNS = ("tokens_in", "tokens_out", "latency", "difficulty", "context")


@dataclass(frozen=True)
class CallTable:
    """A call log as arrays over N calls; categorical fields are indices into the name tuples.

    ``answer`` numbers the distinct answers of each task (compared as stripped, lower-cased strings).
    ``correct``, ``flagged`` and ``carried`` are 1, 0 or -1 (unknown / not applicable): ``carried`` is the
    correctness of the answer a call carried (or reviewed), from ``carried_correct`` or from the ``target``
    call's ``correct``. ``difficulty`` is NaN where unknown; ``context`` the carried context tokens.
    """

    task: np.ndarray  # int64[N] index into task_ids
    bench: np.ndarray  # int64[N] index into benchmarks
    domain: np.ndarray  # int64[N] Domain value
    tool: np.ndarray  # int64[N] Tool value
    model: np.ndarray  # int64[N] index into models
    status: np.ndarray  # int64[N] Status value
    correct: np.ndarray  # int64[N]
    flagged: np.ndarray  # int64[N]
    carried: np.ndarray  # int64[N]
    answer: np.ndarray  # int64[N] id of the call's answer within its task (equal answers, equal ids), -1 none
    episode: np.ndarray  # int64[N] logged episode (0 where none)
    round: np.ndarray  # int64[N] round index within the episode, -1 where not logged (calls of one round run together)
    tokens_in: np.ndarray  # float64[N]
    tokens_out: np.ndarray  # float64[N]
    latency: np.ndarray  # float64[N]
    difficulty: np.ndarray  # float64[N]
    context: np.ndarray  # float64[N]
    task_ids: tuple[str, ...]
    benchmarks: tuple[str, ...]
    bench_domain: tuple[int, ...]
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.task)

    @property
    def task_bench(self) -> np.ndarray:
        """int64[T]: each task's benchmark (a task never spans benchmarks; checked on read)."""
        out = np.zeros(len(self.task_ids), np.int64)
        out[self.task] = self.bench
        return out

    @property
    def task_difficulty(self) -> np.ndarray:
        """float64[T]: each task's logged difficulty, NaN where none was logged."""
        out = np.full(len(self.task_ids), np.nan)
        known = np.isfinite(self.difficulty)
        out[self.task[known]] = self.difficulty[known]
        return out


def _field(rec: dict[str, Any], key: str, where: str, kind: str, default: Any = None) -> Any:
    """A validated field; ``kind`` is str, bool or num (a number in its ``FIELD_RANGES`` range, by the one
    numeric-field rule of ``parasim.config.jsonl.number_field``)."""
    if kind == "num":
        lo, hi, integer = FIELD_RANGES[key]
        return number_field(rec, key, where, lo, hi, integer=integer,
                            default=default if key not in REQUIRED else MISSING)
    value = rec.get(key)
    if value is None:
        if key in REQUIRED:
            raise ValueError(f"{where}.{key}: required field is missing")
        return default
    if kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"{where}.{key}: expected a string, got {show_value(value)}")
        return value
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{where}.{key}: expected true, false or null, got {show_value(value)}")


def _choice(rec: dict[str, Any], key: str, where: str, names: dict[str, Any]) -> Any:
    value = _field(rec, key, where, "str")
    found = names.get(value.strip().lower())
    if found is None:
        raise ValueError(f"{where}.{key}: expected one of {sorted(names)}, got {show_value(value)}")
    return found


def read_calls(path: str | Path) -> CallTable:
    """Read and validate a JSONL call log."""
    return calls_from_records(iter_json_objects(path))


def calls_from_records(records: Iterable[tuple[str, dict[str, Any]] | dict[str, Any]]) -> CallTable:
    """Build a ``CallTable`` from records (or ``(where, record)`` pairs, for error messages)."""
    ints: dict[str, list[int]] = {k: [] for k in _INT_COLUMNS}
    floats: dict[str, list[float]] = {k: [] for k in _FLOAT_COLUMNS}
    tasks: dict[str, int] = {}
    benches: dict[str, int] = {}
    bench_domain: list[int] = []
    models: dict[str, int] = {}
    task_bench: dict[int, int] = {}
    row_of: dict[tuple[int, int], int] = {}
    targets: list[tuple[int, int, str]] = []
    answer_ids: dict[tuple[int, str], int] = {}
    domains = {d.name.lower(): d for d in Domain}
    statuses = {s.name.lower(): s for s in Status}
    for n, item in enumerate(records):
        where, rec = item if isinstance(item, tuple) else (f"record {n}", item)
        tool = _choice(rec, "tool", where, TOOLS)
        domain = _choice(rec, "domain", where, domains)
        status = _choice(rec, "status", where, statuses)
        model = _field(rec, "model", where, "str")
        if tool.is_agent and not model.strip():
            raise ValueError(f"{where}.model: agent tool {tool.wire_name} needs a model id")
        task_id = _field(rec, "task_id", where, "str")
        bench_name = _field(rec, "benchmark", where, "str")
        if bench_name not in benches:
            benches[bench_name] = len(benches)
            bench_domain.append(int(domain))
        bench = benches[bench_name]
        if bench_domain[bench] != int(domain):
            raise ValueError(f"{where}.domain: benchmark {bench_name!r} was logged with domain "
                             f"{Domain(bench_domain[bench]).name.lower()} before")
        task = tasks.setdefault(task_id, len(tasks))
        if task_bench.setdefault(task, bench) != bench:
            raise ValueError(f"{where}.benchmark: task {task_id!r} was logged under another benchmark before")
        row = {"task": task, "bench": bench, "domain": int(domain), "tool": int(tool),
               "model": models.setdefault(model.strip() or "(manager)", len(models)), "status": int(status)}
        for key in ("correct", "flagged", "carried_correct"):
            value = _field(rec, key, where, "bool")
            row["carried" if key == "carried_correct" else key] = -1 if value is None else int(value)
        for key, column in (("tokens_in", "tokens_in"), ("tokens_out", "tokens_out"), ("latency_s", "latency"),
                            ("context_tokens", "context")):
            floats[column].append(_field(rec, key, where, "num", 0.0))
        floats["difficulty"].append(_field(rec, "difficulty", where, "num", math.nan))
        answer = rec.get("answer")
        if answer is not None and not isinstance(answer, (str, int, float)):
            raise ValueError(f"{where}.answer: expected a string, a number or null, got {show_value(answer)}")
        row["answer"] = -1 if answer is None else answer_ids.setdefault((task, str(answer).strip().lower()),
                                                                          len(answer_ids))
        episode = _field(rec, "episode", where, "num", 0)
        row["episode"], row["round"] = episode, _field(rec, "round", where, "num", -1)
        for key, value in row.items():
            ints[key].append(value)
        row_of[(episode, _field(rec, "call_index", where, "num", n))] = n
        targets.append((episode, _field(rec, "target", where, "num", -1), where))
    if not ints["task"]:
        raise ValueError("call log: no records")
    for n, (episode, target, where) in enumerate(targets):
        if target < 0 or ints["carried"][n] >= 0:
            continue
        source = row_of.get((episode, target))
        if source is None or source >= n:
            raise ValueError(f"{where}.target: no earlier call {target} in episode {episode}")
        ints["carried"][n] = ints["correct"][source]
    return CallTable(**{k: np.asarray(v, np.int64) for k, v in ints.items()},
                     **{k: np.asarray(v, np.float64) for k, v in floats.items()},
                     task_ids=tuple(tasks), benchmarks=tuple(benches), bench_domain=tuple(bench_domain),
                     models=tuple(models))
