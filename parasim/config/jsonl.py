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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 32
MAX_INT_DIGITS = 300  # below float's 309-digit range, so a valid integer always converts to a finite float

_BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "UTF-32 LE"), (codecs.BOM_UTF32_BE, "UTF-32 BE"), (codecs.BOM_UTF8, "UTF-8 with a BOM"),
    (codecs.BOM_UTF16_LE, "UTF-16 LE"), (codecs.BOM_UTF16_BE, "UTF-16 BE"))
_BRACKETS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


class JSONInputError(ValueError):
    """A JSON input that is not valid JSON or breaks a limit; the message names the file and the field."""


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


def read_json_file(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The parsed JSON of a UTF-8 file of at most ``max_bytes`` bytes, read as ``loads_strict`` reads."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as err:
        raise JSONInputError(f"{path}: cannot read ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise JSONInputError(f"{path}: larger than the {max_bytes}-byte limit for a JSON file")
    return loads_strict(_decode_utf8(data, str(path)), str(path), max_depth=max_depth)


def _decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; a byte-order mark or another encoding is an error that says what was found."""
    for bom, found in _BOMS:
        if data.startswith(bom):
            raise JSONInputError(f"{where}: encoded as {found} (it starts with a byte-order mark); a JSON file must "
                                 "be UTF-8 without a byte-order mark")
    if b"\x00" in data[:4]:  # JSON text starts with ASCII, so a NUL among the first bytes means UTF-16 / UTF-32
        raise JSONInputError(f"{where}: looks like UTF-16 or UTF-32 (NUL bytes at the start); a JSON file must be "
                             "UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JSONInputError(f"{where}: not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start} is "
                             "invalid); a JSON file must be UTF-8") from None


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
