"""What one sweep point's result must hold, defined once for its writer and its readers.

``run_point`` checks the result it is about to hand back (a failing check makes a failed point, not a stored
one), and the results store checks every point file it reads (a failing file is quarantined and its point
redone), so a result the report cannot use, or would publish wrong (a missing field, a string for a number,
an accuracy of 7.5, a NaN reward), is neither stored nor published. The fields are what ``run_point`` writes:
``run_pipeline``'s metrics (``evaluate.summarize`` and the training record) plus the point's identity. Extra
fields pass, so a new metric needs no change here; dropping or retyping a listed one fails the point at once.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parasim.protocol.schema import NUM_TOOLS

_SHOWN = 60  # characters of a bad value quoted in a message


@dataclass(frozen=True)
class Field:
    """One field: its ``kind`` (a key of ``_CHECKS``), the range of its numbers, a list's length, JSON null."""

    kind: str
    lo: float = -math.inf
    hi: float = math.inf
    length: int | None = None
    nullable: bool = False

    def allowed(self) -> str:
        """The allowed numbers in words, as in the config's messages: ``range [0.0, 1.0]``, ``range >= 0.0``."""
        if math.isinf(self.lo) and math.isinf(self.hi):
            return "any finite number"
        if math.isinf(self.hi):
            return f"range >= {self.lo}"
        return f"range [{self.lo}, {self.hi}]"


_UNIT = Field("number", 0.0, 1.0)  # accuracies and rates
_SPEND = Field("number", 0.0)  # tokens, costs, counts and durations


RESULT_FIELDS: dict[str, Field] = {
    # identity of the point (``run_point``)
    "key": Field("str"), "label": Field("str"), "preset": Field("str"), "overrides": Field("str_map"),
    "seed": Field("int", 0, 2**31 - 1), "wall_s": _SPEND,
    # final evaluation (``evaluate.summarize`` and ``evaluate.evaluate``)
    "accuracy": _UNIT, "reward": Field("number"), "tokens": _SPEND, "cost_units": _SPEND, "usd": _SPEND,
    "latency_s": _SPEND, "rounds": _SPEND, "calls_per_round": _SPEND, "distinct_tools": _SPEND,
    "format_failure_rate": _UNIT, "no_final_rate": _UNIT,
    "tool_dist": Field("numbers", 0.0, 1.0, length=NUM_TOOLS), "model_dist": Field("number_map", 0.0, 1.0),
    "acc_by_benchmark": Field("number_map", 0.0, 1.0), "acc_by_suite": Field("number_map", 0.0, 1.0),
    "tool_names": Field("strs", length=NUM_TOOLS),
    # evaluation of the warm start before GRPO, and the training record (``pipeline.run_pipeline``)
    "sft_accuracy": _UNIT, "sft_reward": Field("number"), "sft_tokens": _SPEND, "sft_cost_units": _SPEND,
    "sft_latency_s": _SPEND,
    "train_reward_start": Field("number", nullable=True), "train_reward_end": Field("number", nullable=True),
    "reward_curve": Field("numbers"), "accuracy_curve": Field("numbers", 0.0, 1.0), "entropy_curve": Field("numbers"),
    "env_steps_per_s": Field("number", 0.0, nullable=True), "sft_s": _SPEND, "grpo_s": _SPEND, "eval_s": _SPEND,
    "config": Field("object"), "sft_losses": Field("numbers"), "expert": Field("object"),
    # every GRPO step's row, as ``parasim train`` logs it (``sweep.run_point`` / ``run_chunk``)
    "history": Field("records"),
}


# measured durations and rates: they differ from run to run of the same point, at the top level and in each row of
# ``history`` (what two runs of a point must agree on is the rest: ``untimed``)
TIMINGS = frozenset({"wall_s", "sft_s", "grpo_s", "eval_s", "env_steps_per_s", "step_s"})


def untimed(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` without its timings (``TIMINGS``), in its ``history`` rows too."""
    out = {k: v for k, v in result.items() if k not in TIMINGS}
    if isinstance(out.get("history"), list):
        out["history"] = [{k: v for k, v in row.items() if k not in TIMINGS} for row in out["history"]]
    return out


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _number(name: str, value: Any, f: Field) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name}={_show(value)}: expected a number, allowed {f.allowed()}"
    if not (math.isfinite(value) and f.lo <= value <= f.hi):
        return f"{name}={value!r}: allowed {f.allowed()}"
    return None


def _length(name: str, value: list, f: Field) -> str | None:
    if f.length is not None and len(value) != f.length:
        return f"{name}: {len(value)} entries, expected {f.length}"
    return None


def _check_str(name: str, value: Any, f: Field) -> str | None:
    return None if isinstance(value, str) else f"{name}={_show(value)}: expected a string"


def _check_int(name: str, value: Any, f: Field) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{name}={_show(value)}: expected an integer in {f.allowed()}"
    return None if f.lo <= value <= f.hi else f"{name}={value!r}: allowed {f.allowed()}"


def _check_numbers(name: str, value: Any, f: Field) -> str | None:
    if not isinstance(value, list):
        return f"{name}={_show(value)}: expected a list of numbers"
    return _length(name, value, f) or next(
        (p for i, v in enumerate(value) if (p := _number(f"{name}[{i}]", v, f))), None)


def _check_strs(name: str, value: Any, f: Field) -> str | None:
    if not isinstance(value, list):
        return f"{name}={_show(value)}: expected a list of strings"
    return _length(name, value, f) or next(
        (f"{name}[{i}]={_show(v)}: expected a string" for i, v in enumerate(value) if not isinstance(v, str)), None)


def _check_number_map(name: str, value: Any, f: Field) -> str | None:
    if not isinstance(value, dict):
        return f"{name}={_show(value)}: expected an object of numbers"
    return next((p for k, v in value.items() if (p := _number(f"{name}[{k!r}]", v, f))), None)


def _check_str_map(name: str, value: Any, f: Field) -> str | None:
    if not isinstance(value, dict):
        return f"{name}={_show(value)}: expected an object of strings"
    return next((f"{name}[{k!r}]={_show(v)}: expected a string" for k, v in value.items() if not isinstance(v, str)),
                None)


def _check_object(name: str, value: Any, f: Field) -> str | None:
    return None if isinstance(value, dict) else f"{name}={_show(value)}: expected an object"


def _check_records(name: str, value: Any, f: Field) -> str | None:
    """A list of per-step rows: each an object with an integer ``step`` and numbers (the trainer's own record,
    NaN included: a logger shows what the trainer measured)."""
    if not isinstance(value, list):
        return f"{name}={_show(value)}: expected a list of per-step objects"
    for i, row in enumerate(value):
        if not isinstance(row, dict) or isinstance(row.get("step"), bool) or not isinstance(row.get("step"), int):
            return f"{name}[{i}]={_show(row)}: expected an object with an integer step"
        bad = next((k for k, v in row.items() if isinstance(v, bool) or not isinstance(v, (int, float))), None)
        if bad is not None:
            return f"{name}[{i}][{bad!r}]={_show(row[bad])}: expected a number"
    return None


_CHECKS: dict[str, Callable[[str, Any, Field], str | None]] = {
    "str": _check_str, "int": _check_int, "number": _number, "numbers": _check_numbers, "strs": _check_strs,
    "number_map": _check_number_map, "str_map": _check_str_map, "object": _check_object, "records": _check_records,
}


def problems(result: Any) -> list[str]:
    """Every field of ``result`` that breaks the schema, one message each naming the field, the value and what
    is allowed (the first bad entry of a list or map); empty when the result fits."""
    if not isinstance(result, dict):
        return [f"expected a JSON object, got {type(result).__name__} {_show(result)}"]
    found = []
    for name, f in RESULT_FIELDS.items():
        if name not in result:
            found.append(f"{name}: missing")
        elif not (result[name] is None and f.nullable) and (problem := _CHECKS[f.kind](name, result[name], f)):
            found.append(problem)
    return found
