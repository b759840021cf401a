"""Read the real-tools logs that ``parasim validate-sim`` replays: call logs and their episode logs.

The real-tools engine (``parasim.real.engine``) writes two JSONL files through one ``CallLogger``: the call log
(``calls.jsonl``, the calibration schema of docs/calibration.md, one line per call) and its episode log
(``calls.episodes.jsonl``, ``parasim.real.calllog.episodes_path``, one line per finished episode: the task, the
calls of each round, the round's action where the caller passed it, the final answer's verdict). A log directory
may hold several such pairs (one per process); episodes are keyed by (file, episode) so their numbers may repeat
across files.

Every call line is validated by the calibration reader (``calls_from_records``), so a log that ``parasim
calibrate`` accepts is read here the same way; the episode lines and the fields only validate-sim reads (``round``,
``slot``, ``cost_units``, ``usd``) are checked here. Errors are one line naming the file, the line and the field.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parasim.calibration.calls import FIELD_RANGES, TOOLS, CallTable, calls_from_records
from parasim.config.env_options import ROUND_LIMIT, SLOT_LIMIT
from parasim.config.jsonl import MISSING, iter_json_objects, number_field, show_value
from parasim.protocol.schema import Domain
from parasim.real.calllog import EPISODES_SUFFIX, episodes_path
from parasim.tasks.suites import NUM_ANSWERS


class LogError(ValueError):
    """A log is missing, empty or malformed; the message names the file, the line and the field."""


@dataclass(frozen=True)
class LoggedCall:
    """One call as the call log records it (categorical fields as the calibration reader codes them)."""

    where: str  # "file:line" of its call record
    tool: int  # Tool value
    model: str  # pool model id ("" for python and search)
    target: int  # call_index of the call whose output it carried, -1 for none
    slot: int | None  # its slot in the round's action, where logged
    status: int  # Status value
    correct: int  # 1, 0, -1 (no answer to check)
    tokens_out: float
    latency_s: float
    cost_units: float
    usd: float


@dataclass(frozen=True)
class LoggedRound:
    calls: tuple[LoggedCall, ...]
    action: tuple[int, ...] | None  # the round's MultiDiscrete action, where the caller passed it


@dataclass(frozen=True)
class LoggedEpisode:
    where: str  # "file:line" of its episode record
    task_id: str
    benchmark: str
    domain: int
    options: int  # FREE_FORM or the number of answer options
    difficulty: float  # NaN where unknown
    models: tuple[str, ...]  # the ids the action's model dimension indexes
    rounds: tuple[LoggedRound, ...]
    correct: bool
    tool_prices: tuple[tuple[int, float], ...] = ()  # (tool, USD per call) of the tools the episode priced itself


@dataclass(frozen=True)
class Logs:
    """The episodes of every log pair, the calls of all call logs as one calibration table (episode numbers made
    unique across files, so ``target`` references resolve within their file), and the files read."""

    episodes: tuple[LoggedEpisode, ...]
    calls: CallTable
    files: tuple[Path, ...]
    notes: tuple[str, ...]


def log_pairs(path: str | Path) -> list[tuple[Path, Path]]:
    """(call log, episode log) pairs under ``path``: a directory (every ``*.episodes.jsonl`` in it with its call
    log), a call log, or an episode log."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob(f"*{EPISODES_SUFFIX}"))
        if not found:
            raise LogError(f"{path}: no episode logs (*{EPISODES_SUFFIX}) in this directory; the real-tools engine "
                           "writes one beside its call log when it is given a CallLogger")
        pairs = [(p.with_name(p.name.removesuffix(EPISODES_SUFFIX) + ".jsonl"), p) for p in found]
    elif path.is_file():
        if path.name.endswith(EPISODES_SUFFIX):
            pairs = [(path.with_name(path.name.removesuffix(EPISODES_SUFFIX) + ".jsonl"), path)]
        else:
            pairs = [(path, episodes_path(path))]
    else:
        raise LogError(f"{path}: no such file or directory (expected a log directory, a call log or an episode log)")
    for calls, episodes in pairs:
        for p, what in ((calls, "call log"), (episodes, "episode log")):
            if not p.is_file():
                raise LogError(f"{p}: the {what} of this log pair is missing")
    return pairs


def _number(rec: dict[str, Any], key: str, where: str, *, default: Any = MISSING, field: str | None = None) -> Any:
    """A numeric field by the call log's one rule (``FIELD_RANGES``, ``parasim.config.jsonl.number_field``);
    ``field`` names the range to use where the key is not the field's name (a tool price)."""
    lo, hi, integer = FIELD_RANGES[field or key]
    try:
        return number_field(rec, key, where, lo, hi, integer=integer, default=default)
    except ValueError as err:
        raise LogError(str(err)) from None


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        yield from iter_json_objects(path)
    except ValueError as err:
        raise LogError(str(err)) from None


def _read_pair(calls_path: Path, episodes_path_: Path, offset: int, raw: list[tuple[str, dict[str, Any]]],
               notes: list[str]) -> list[tuple[str, dict[str, Any], dict[int, tuple[str, int]]]]:
    """Append the call log's records to ``raw`` (episodes shifted by ``offset``); return the episode records with
    each one's calls ({call_index: (where, position in raw)})."""
    by_episode: dict[int, dict[int, tuple[str, int]]] = {}
    for where, rec in _records(calls_path):
        episode = _number(rec, "episode", where)
        index = _number(rec, "call_index", where)
        if index in by_episode.setdefault(episode, {}):
            raise LogError(f"{where}.call_index: call {index} of episode {episode} was logged before")
        by_episode[episode][index] = (where, len(raw))
        raw.append((where, {**rec, "episode": episode + offset}))
    episodes = []
    seen: set[int] = set()
    for where, rec in _records(episodes_path_):
        episode = _number(rec, "episode", where)
        if episode in seen:
            raise LogError(f"{where}.episode: episode {episode} was logged before")
        seen.add(episode)
        episodes.append((where, rec, by_episode.get(episode, {})))
    if not episodes:
        raise LogError(f"{episodes_path_}: no episodes")
    unfinished = len(set(by_episode) - seen)
    if unfinished:
        notes.append(f"{calls_path}: {unfinished} episode(s) with calls but no episode line (unfinished) left out")
    return episodes


def _episode(where: str, rec: dict[str, Any], calls: dict[int, tuple[str, int]], raw: list[tuple[str, dict]],
             table: CallTable, notes: list[str]) -> LoggedEpisode:
    for key in ("task_id", "benchmark"):
        if not isinstance(rec.get(key), str) or not rec[key]:
            raise LogError(f"{where}.{key}: expected a non-empty string, got {rec.get(key)!r}")
    domain = rec.get("domain")
    if not isinstance(domain, str) or domain.upper() not in Domain.__members__:
        raise LogError(f"{where}.domain: expected one of {[d.name.lower() for d in Domain]}, got {domain!r}")
    options = _number(rec, "options", where)
    if options == 1:
        raise LogError(f"{where}.options: expected 0 (free-form) or 2 or more options, got 1")
    if options > NUM_ANSWERS:
        notes.append(f"{where}.options: {options} options simulated as {NUM_ANSWERS} (the simulator's answer space)")
        options = NUM_ANSWERS
    difficulty = rec.get("difficulty")
    if difficulty is not None:
        difficulty = _number(rec, "difficulty", where)
    if not isinstance(rec.get("correct"), bool):
        raise LogError(f"{where}.correct: expected true or false, got {rec.get('correct')!r}")
    models = rec.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise LogError(f"{where}.models: expected a list of model ids, got {models!r}")
    rounds_raw = rec.get("rounds")
    if not isinstance(rounds_raw, list):
        raise LogError(f"{where}.rounds: expected a list of rounds, got {rounds_raw!r}")
    if len(rounds_raw) > ROUND_LIMIT:
        raise LogError(f"{where}.rounds: {len(rounds_raw)} rounds; an episode has at most {ROUND_LIMIT} (the "
                       "simulator's round limit)")
    rounds = []
    listed: dict[int, str] = {}  # call index -> where the episode listed it (each call belongs to one slot)
    for r, rnd in enumerate(rounds_raw):
        at = f"{where}.rounds[{r}]"
        if not isinstance(rnd, dict) or not isinstance(rnd.get("calls"), list):
            raise LogError(f"{at}.calls: expected a list of call indices, got {rnd!r}")
        action = rnd.get("action")
        if action is not None:
            if not isinstance(action, list) or len(action) < 4 or (len(action) - 1) % 3 or not all(
                    isinstance(x, int) and not isinstance(x, bool) and _INT64[0] <= x <= _INT64[1] for x in action):
                raise LogError(f"{at}.action: expected 1 + 3k integers of the env's int64 action (stop, then tool, "
                               f"model, target per slot), got {_show_list(action)}")
            if (len(action) - 1) // 3 > SLOT_LIMIT:
                raise LogError(f"{at}.action: {(len(action) - 1) // 3} slots; an action has at most {SLOT_LIMIT}")
            if not models:
                raise LogError(f"{at}.action: the episode names no models (its ``models`` list) for the action's "
                               "model dimension")
            action = tuple(action)
        slots = (len(action) - 1) // 3 if action is not None else SLOT_LIMIT
        if len(rnd["calls"]) > slots:
            raise LogError(f"{at}.calls: {len(rnd['calls'])} calls in a round whose action has {slots} slots"
                           if action is not None else
                           f"{at}.calls: {len(rnd['calls'])} calls in one round; a round has at most {SLOT_LIMIT}")
        logged = []
        used: dict[int, str] = {}  # slot -> the call that took it
        for c, index in enumerate(rnd["calls"]):
            if isinstance(index, bool) or not isinstance(index, int) or index not in calls:
                raise LogError(f"{at}.calls[{c}]: no call {show_value(index)} of episode {rec['episode']} in the "
                               "call log")
            if index in listed:
                raise LogError(f"{at}.calls[{c}]: call {index} is listed twice in the episode (first at "
                               f"{listed[index]})")
            listed[index] = f"{at}.calls[{c}]"
            call_where, n = calls[index]
            call = raw[n][1]
            for key in ("task_id", "benchmark"):
                if call[key] != rec[key]:
                    raise LogError(f"{call_where}.{key}: call {index} of episode {rec['episode']} is logged with "
                                   f"{key} {show_value(call[key])}, its episode ({where}) with "
                                   f"{show_value(rec[key])}")
            slot = call.get("slot")
            if slot is not None:
                slot = _number(call, "slot", call_where)
                if slot >= slots:
                    raise LogError(f"{call_where}.slot: slot {slot} of a round whose action has {slots} slots "
                                   f"({at})")
                if slot in used:
                    raise LogError(f"{call_where}.slot: slot {slot} is taken by another call of the round "
                                   f"({used[slot]})")
                used[slot] = call_where
            model = table.models[table.model[n]] if call.get("model", "").strip() else ""
            logged.append(LoggedCall(
                where=call_where, tool=int(table.tool[n]), model=model,
                target=-1 if call.get("target") is None else int(call["target"]), slot=slot,
                status=int(table.status[n]),
                correct=int(table.correct[n]), tokens_out=float(table.tokens_out[n]),
                latency_s=float(table.latency[n]), cost_units=_number(call, "cost_units", call_where, default=0.0),
                usd=_number(call, "usd", call_where, default=0.0)))
        rounds.append(LoggedRound(tuple(logged), action))
    return LoggedEpisode(where, rec["task_id"], rec["benchmark"], int(Domain[domain.upper()]), options,
                         math.nan if difficulty is None else float(difficulty), tuple(models), tuple(rounds),
                         rec["correct"], _tool_prices(rec, where))


_INT64 = (-2**63, 2**63 - 1)


def _show_list(value: Any) -> str:
    """A logged list for a message, each huge integer by its size."""
    if not isinstance(value, list):
        return show_value(value)
    text = "[" + ", ".join(show_value(x) for x in value[:8]) + (", ..." if len(value) > 8 else "") + "]"
    return text


def _tool_prices(rec: dict[str, Any], where: str) -> tuple[tuple[int, float], ...]:
    """The episode's own tool prices (``tool_prices``: tool name -> USD per call, absent: none), by tool index."""
    given = rec.get("tool_prices", {})
    if not isinstance(given, dict):
        raise LogError(f"{where}.tool_prices: expected an object of tool name -> USD per call, got {given!r}")
    out = []
    for name in given:
        if name not in TOOLS:
            raise LogError(f"{where}.tool_prices: unknown tool {name!r}; expected one of {sorted(TOOLS)}")
        usd = _number(given, name, f"{where}.tool_prices", field="usd")
        out.append((int(TOOLS[name]), usd))
    return tuple(sorted(out))


def read_logs(path: str | Path) -> Logs:
    """Every episode and call under ``path`` (see ``log_pairs``), validated; raises ``LogError``."""
    raw: list[tuple[str, dict[str, Any]]] = []
    notes: list[str] = []
    pending = []
    files: list[Path] = []
    offset = 0
    for calls_path, ep_path in log_pairs(path):
        start = len(raw)
        pending.append(_read_pair(calls_path, ep_path, offset, raw, notes))
        files += [calls_path, ep_path]
        offset = 1 + max((rec["episode"] for _, rec in raw[start:]), default=offset - 1)
    if not raw:
        raise LogError(f"{', '.join(map(str, files[::2]))}: no calls logged (validate-sim needs calls to fit or to "
                       "compare a pool against)")
    try:
        table = calls_from_records(raw)
    except ValueError as err:
        raise LogError(str(err)) from None
    episodes = [_episode(where, rec, calls, raw, table, notes) for group in pending for where, rec, calls in group]
    return Logs(tuple(episodes), table, tuple(files), tuple(notes))


def slot_count(episodes: tuple[LoggedEpisode, ...]) -> int:
    """The parallel slots K of the replayed actions: the logged actions' (which must agree), else the most calls
    and highest logged slot of any round."""
    sizes = {(len(r.action) - 1) // 3 for e in episodes for r in e.rounds if r.action is not None}
    if len(sizes) > 1:
        where = next(e.where for e in episodes for r in e.rounds if r.action is not None
                     and (len(r.action) - 1) // 3 != min(sizes))
        raise LogError(f"{where}.rounds: actions of {sorted(sizes)} slots in one log; replay needs one slot count")
    widest = max((max(len(r.calls), 1 + max((c.slot for c in r.calls if c.slot is not None), default=-1))
                  for e in episodes for r in e.rounds), default=1)
    return max(sizes.pop() if sizes else 1, widest)


__all__ = ["LogError", "LoggedCall", "LoggedEpisode", "LoggedRound", "Logs", "log_pairs", "read_logs",
           "slot_count"]
