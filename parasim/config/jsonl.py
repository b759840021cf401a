"""Reading JSON inputs: JSONL files of records (tasks, call logs, corpora) and strict single JSON files.

One reader for every JSONL input, so that each gives the same streaming behaviour and the same
``file:line: ...`` messages for a line that is not JSON or not an object.

``read_json_file`` is the strict reader for configuration files (pool files): Python's ``json`` accepts
duplicate keys (the last silently wins), ``NaN`` / ``Infinity``, integers of thousands of digits (which
later overflow a float) and any nesting depth (a ``RecursionError``), and the file's encoding decides
whether it reads at all. Here each of those is a ``JSONInputError`` naming the file, the field path
(``models[2].name``), the value and the limit.
"""
from __future__ import annotations

import codecs
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 32
MAX_INT_DIGITS = 300  # below float's 309-digit range, so a valid integer always converts to a finite float

_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "UTF-32 LE"), (codecs.BOM_UTF32_BE, "UTF-32 BE"), (codecs.BOM_UTF8, "UTF-8 with a BOM"),
    (codecs.BOM_UTF16_LE, "UTF-16 LE"), (codecs.BOM_UTF16_BE, "UTF-16 BE"))
_FLOAT_MAX_INT = int(sys.float_info.max)
MISSING = object()  # number_field: no default, the field is required
_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


class JSONInputError(ValueError):
    """A JSON input that is not valid JSON or breaks a limit; the message names the file and the field."""


def iter_json_objects(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(where, record)`` for each non-blank line, ``where`` being ``"path:lineno"``; streams the file.

    Each line is read as ``loads_strict`` reads (no duplicate keys, finite numbers, integers of at most
    ``MAX_INT_DIGITS`` digits, at most ``MAX_DEPTH`` levels), and a line that is not UTF-8 is an error naming the
    file and the line: every JSONL reader (call logs, episode logs, task files, corpora) refuses the same inputs."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 -- closed below; bytes, so that a bad line can be named
    except OSError as err:
        raise JSONInputError(f"{path}: cannot read ({err.strerror or err})") from None
    with handle:
        for lineno, raw in enumerate(handle, 1):
            where = f"{path}:{lineno}"
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise JSONInputError(f"{where}: not UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1} is "
                                     "invalid); a JSONL file must be UTF-8") from None
            if not line.strip():
                continue
            rec = loads_strict(line, where)
            if not isinstance(rec, dict):
                raise JSONInputError(f"{where}: expected a JSON object, got {type(rec).__name__}")
            yield where, rec


def number_field(rec: dict[str, Any], key: str, where: str, lo: float, hi: float, *, integer: bool = False,
                 default: Any = MISSING) -> Any:
    """The numeric field ``key`` of a record, the one rule every reader of logged numbers applies: a JSON number
    (not a bool), finite, ``lo <= value <= hi`` (compared before any float conversion, so a 300-digit integer is
    out of range, never an ``OverflowError``), an integral value where ``integer``. Absent or null: ``default``
    (an error when there is none). Errors are ``JSONInputError``s ``file:line.field: expected ..., got ...``."""
    value = rec.get(key)
    if value is None:
        if default is MISSING:
            raise JSONInputError(f"{where}.{key}: required field is missing (expected {_number_text(lo, hi, integer)})")
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not finite_in(value, lo, hi)
            or (integer and isinstance(value, float) and not value.is_integer())):
        raise JSONInputError(f"{where}.{key}: expected {_number_text(lo, hi, integer)}, got {show_value(value)}")
    return int(value) if integer else float(value)


def _number_text(lo: float, hi: float, integer: bool) -> str:
    def bound(x: float) -> str:  # whole bounds in full (2^53 - 1, 10^9), others as %g
        return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"

    return f"{'an integer' if integer else 'a finite number'} in [{bound(lo)}, {bound(hi)}]"


def finite_in(value: float, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False) -> bool:
    """Whether a real number is finite and in ``[lo, hi]`` (``(lo, hi]`` where ``lo_open``), without converting it:
    an integer past float's range is not finite (``math.isfinite`` would raise ``OverflowError`` on it)."""
    if isinstance(value, int):
        if abs(value) > _FLOAT_MAX_INT:
            return False
    elif not math.isfinite(value):
        return False
    if value < lo or (lo_open and value == lo):
        return False
    return value <= hi


def show_value(value: Any) -> str:
    """A value for an error message: strings and numbers as written (cut to 80 characters), a huge integer by its
    size (its repr is slow, and refused past 4300 digits), anything else by its type."""
    if not isinstance(value, (str, int, float)):
        return type(value).__name__
    if isinstance(value, int) and value.bit_length() > 1000:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def read_json_file(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The parsed JSON of a UTF-8 file of at most ``max_bytes`` bytes, read as ``loads_strict`` reads."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as err:
        raise JSONInputError(f"{path}: cannot read ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise JSONInputError(f"{path}: larger than the {max_bytes}-byte limit for a JSON file")
    return loads_strict(decode_utf8(data, str(path)), str(path), max_depth=max_depth)


def decode_utf8(data: bytes, where: str, fmt: str = "JSON") -> str:
    """``data`` as UTF-8 text; a byte-order mark or another encoding is an error that says what was found and
    where (the line of the first invalid byte)."""
    for bom, found in _BOMS:
        if data.startswith(bom):
            raise JSONInputError(f"{where}: encoded as {found} (it starts with a byte-order mark); a {fmt} file must "
                                 "be UTF-8 without a byte-order mark")
    if b"\x00" in data[:4]:  # JSON text starts with ASCII, so a NUL among the first bytes means UTF-16 / UTF-32
        raise JSONInputError(f"{where}: looks like UTF-16 or UTF-32 (NUL bytes at the start); a {fmt} file must be "
                             "UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise JSONInputError(f"{where}: line {line}: not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start} "
                             f"is invalid); a {fmt} file must be UTF-8") from None


class _Rejected:
    """A value a parse hook refused; the tree is walked afterwards to name its field path."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Object(dict):
    """A JSON object that repeated a key (kept as the first key's value, the repeated key remembered)."""

    duplicate: str = ""


def loads_strict(text: str, where: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` refusing duplicate keys, NaN / Infinity, non-finite floats, integers of more than
    ``MAX_INT_DIGITS`` digits and nesting deeper than ``max_depth``; errors are ``JSONInputError``s
    prefixed with ``where`` and naming the field path."""
    _check_depth(text, where, max_depth)
    flagged: list[bool] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in items:
            if key in obj:
                flagged.append(True)
                dup = _Object(obj)
                dup.duplicate = key
                return dup
            obj[key] = value
        return obj

    def integer(digits: str) -> int | _Rejected:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            flagged.append(True)
            return _Rejected(f"integer {digits[:20]}... has {len(digits.lstrip('-'))} digits; at most "
                             f"{MAX_INT_DIGITS} are allowed")
        return int(digits)

    def real(literal: str) -> float | _Rejected:
        value = float(literal)
        if not math.isfinite(value):
            flagged.append(True)
            return _Rejected(f"number {literal[:40]} is outside the finite float range (about +-1.8e308)")
        return value

    def constant(name: str) -> _Rejected:
        flagged.append(True)
        return _Rejected(f"{name} is not allowed; JSON numbers must be finite")

    try:
        parsed = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=real,
                            parse_constant=constant)
    except json.JSONDecodeError as err:
        raise JSONInputError(f"{where}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None
    if flagged:
        _raise_first_rejected(parsed, where)
    return parsed


def _check_depth(text: str, where: str, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` before parsing, so that no input reaches the recursion limit."""
    depth = 0
    for match in _BRACKETS.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, match.start()) + 1
                raise JSONInputError(f"{where}: nesting deeper than {max_depth} levels (line {line}); at most "
                                     f"{max_depth} nested objects / arrays are allowed")
        elif char in "]}":
            depth -= 1


def _raise_first_rejected(parsed: Any, where: str) -> None:
    """Raise for the first refused value or repeated key in document order, naming its field path."""
    stack: list[tuple[str, Any]] = [("", parsed)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Rejected):
            raise JSONInputError(f"{where}: {path or '(top level)'}: {node.reason}")
        if isinstance(node, _Object):
            key = _join(path, node.duplicate)
            raise JSONInputError(f"{where}: {key}: duplicate key {node.duplicate!r}; each key may appear once in "
                                 "an object")
        if isinstance(node, dict):
            stack.extend(reversed([(_join(path, k), v) for k, v in node.items()]))
        elif isinstance(node, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node)]))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
