"""Declared, validated hyperparameter fields shared by every training config section.

Each trainer keeps its hyperparameters in one dataclass at the top of its file (CleanRL style); the
allowed range of a field lives next to its default as metadata, so one validator can check any
section and name the offending field and its range, and the sweep grid can parse a string into the
field's type without a second table of types drifting out of date.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def opt(default: Any, *, lo: float | None = None, hi: float | None = None,
        choices: Sequence[Any] | None = None, help: str = "") -> Any:
    """A dataclass field with its allowed range (``lo <= v <= hi``) or set of ``choices``."""
    meta = {"lo": lo, "hi": hi, "choices": tuple(choices) if choices is not None else None, "help": help}
    return dataclasses.field(default=default, metadata=meta)


def allowed(f: dataclasses.Field) -> str:
    """Human-readable allowed range of a field, for error messages and ``--help``."""
    meta = f.metadata
    if meta.get("choices"):
        return "one of " + ", ".join(map(str, meta["choices"]))
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and hi is not None:
        return f"[{lo}, {hi}]"
    if lo is not None:
        return f">= {lo}"
    if hi is not None:
        return f"<= {hi}"
    return f"any {field_type(f).__name__}"


def field_type(f: dataclasses.Field) -> type:
    """The scalar type of a field (annotations are strings under ``from __future__ import annotations``)."""
    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "str")
    return _TYPES.get(name.split("|")[0].strip(), str)


def parse_value(f: dataclasses.Field, text: Any, where: str) -> Any:
    """Convert ``text`` (a grid or CLI string, or an already typed value) to the field's type."""
    kind = field_type(f)
    if not isinstance(text, str):
        if kind is float and isinstance(text, (int, float)) and not isinstance(text, bool):
            return float(text)
        return text
    try:
        if kind is bool:
            low = text.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(text)
            return low in ("1", "true", "yes")
        return kind(text.strip())
    except ValueError:
        raise ValueError(f"{where}: cannot parse {text!r} as {kind.__name__} (allowed: {allowed(f)})") from None


def validate_section(section: Any, prefix: str) -> None:
    """Check every field of a dataclass instance against its declared type and range."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        where = f"{prefix}.{f.name}"
        kind = field_type(f)
        ok_type = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok_type = True
        if not ok_type:
            raise ValueError(f"{where}={value!r}: expected {kind.__name__} ({allowed(f)})")
        meta = f.metadata
        if meta.get("choices") and value not in meta["choices"]:
            raise ValueError(f"{where}={value!r}: allowed {allowed(f)}")
        lo, hi = meta.get("lo"), meta.get("hi")
        if kind in (int, float) and (
            (isinstance(value, float) and not math.isfinite(value))
            or (lo is not None and value < lo) or (hi is not None and value > hi)
        ):
            raise ValueError(f"{where}={value!r}: allowed range {allowed(f)}")
