"""Declared, validated settings: one way to declare a setting, one checker, one file loader, one command line.

Every parasim configuration (the reward, the small trainer's sections, the sweep, the LLM trainers, ``serve-pool``
and the endpoint map) is a dataclass whose fields are declared with :func:`opt`: the type is the annotation, the
default, the allowed range or choices and the help text sit next to it. From that one declaration come

- the checks (:func:`validate` at construction, :func:`build` from a parsed file or flags): a wrong type is refused,
  never cast (``2.5`` for an integer, ``"8"`` for a number passed from Python), and every error names the setting,
  the value and what is allowed;
- the parsing of command-line and grid strings (:func:`check` with ``text=True``: ``"1e-3"``, ``"true"``,
  ``"none"``, ``a:b:c``);
- the file loader (:func:`load_file`: YAML, JSON or TOML by suffix);
- ``--help``, ``--list-options`` and ``--print-config`` (:func:`arg_parser`, :func:`describe`, :func:`to_toml`).

Supported annotations: ``int``, ``float``, ``bool``, ``str``, ``X | None``, ``tuple[X, ...]``, ``dict[str, X]``,
``Any`` and nested dataclasses (built from a mapping). Integers are Python integers (bools refused); a float
setting takes an integer and stores it as a float (a widening, not a cast); floats must be finite.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import numbers
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

FORMATS: dict[str, str] = {".yaml": "YAML", ".yml": "YAML", ".json": "JSON", ".toml": "TOML"}
FORMATS_TEXT = "YAML (.yaml, .yml), JSON (.json) or TOML (.toml)"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_META = "parasim"


class ConfigError(ValueError):
    """A setting's value is not allowed; the message names the setting, the value and what is allowed."""


class ConfigTypeError(ConfigError, TypeError):
    """A setting got a value of the wrong type from Python code (also a ``TypeError``, as Python's own are)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a setting allows besides its type: a range (numbers, or tuple elements), choices, a tuple length, a
    pattern for strings (``what`` says it in words), and the help text."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[Any, ...] | None = None
    length: int | None = None
    pattern: str | None = None
    what: str = ""
    help: str = ""


def opt(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
        lo: float | None = None, hi: float | None = None, lo_open: bool = False,
        choices: Sequence[Any] | None = None, length: int | None = None, pattern: str | None = None,
        what: str = "", help: str = "") -> Any:
    """A dataclass field with its allowed values: ``lo <= v <= hi`` (``lo < v`` when ``lo_open``), one of
    ``choices``, ``length`` elements for a tuple, a full match of ``pattern`` for a string. No default: required."""
    rule = Rule(lo, hi, lo_open, tuple(choices) if choices is not None else None, length, pattern, what, help)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={_META: rule})


@dataclasses.dataclass(frozen=True)
class Spec:
    """One declared setting of a config class."""

    name: str
    kind: Any  # the resolved annotation
    rule: Rule
    default: Any  # dataclasses.MISSING when required

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def type_name(self) -> str:
        return _type_name(self.kind)

    @property
    def allowed(self) -> str:
        """What the setting allows, in words (``--help``, ``--list-options``)."""
        return _allowed(self.kind, self.rule)

    @property
    def default_text(self) -> str:
        if self.required:
            return "(required)"
        if isinstance(self.default, bool) or self.default is None:
            return {True: "true", False: "false", None: "none"}[self.default]
        return _show(self.default)


@functools.cache
def specs(cls: type) -> tuple[Spec, ...]:
    """The declared settings of a dataclass (annotations resolved once per class)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append(Spec(f.name, hints[f.name], f.metadata.get(_META, Rule()), default))
    return tuple(out)


def spec_of(cls: type, name: str) -> Spec:
    """The declared setting ``name`` of ``cls``."""
    for s in specs(cls):
        if s.name == name:
            return s
    raise KeyError(name)


# ------------------------------------------------------------------------------------------------ checking
def check(spec: Spec, value: Any, where: str, *, text: bool = False) -> Any:
    """``value`` checked against the setting and normalized (int -> float for floats, lists -> tuples).

    ``text``: strings for non-string settings are parsed (command line, grid axes, YAML's ``1e-6``);
    otherwise a string there is a type error.
    """
    return _convert(spec.kind, value, where, spec.rule, text)


def validate(obj: Any, where: str | None = None) -> None:
    """Check every setting of a dataclass instance (its ``__post_init__`` calls this), storing the normalized
    values (also on frozen instances: normalization is part of construction)."""
    prefix = type(obj).__name__ if where is None else where
    for s in specs(type(obj)):
        value = getattr(obj, s.name)
        normal = check(s, value, _at(prefix, s.name))
        if normal is not value:
            object.__setattr__(obj, s.name, normal)


def build(cls: type[T], data: Any, where: str = "", *, fixed: Mapping[str, Any] | None = None,
          renamed: Mapping[str, str] | None = None) -> T:
    """An instance of ``cls`` from a parsed mapping (a file, flags): unknown keys are refused with the near
    names, a key in ``renamed`` says its new name, strings are parsed, missing required settings are named.
    ``fixed`` values are set by the caller and may not come from ``data``."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping of settings, got {type(data).__name__}")
    fixed = dict(fixed or {})
    known = {s.name: s for s in specs(cls) if s.name not in fixed}
    for key in data:
        if key not in known:
            raise ConfigError(_unknown_key(str(key), known, where, renamed))
    values: dict[str, Any] = {}
    for name, s in known.items():
        if name in data:
            values[name] = check(s, data[name], _at(where, name), text=True)
        elif s.required:
            raise ConfigError(f"{_at(where, name)}: required ({s.allowed})")
    return cls(**values, **fixed)


def _unknown_key(key: str, known: Mapping[str, Any] | Sequence[str], where: str = "",
                renamed: Mapping[str, str] | None = None) -> str:
    """The message for a key that is not a setting: its new name, or the near names and all names."""
    if renamed and key in renamed:
        return f"{_at(where, key)}: renamed to {renamed[key]!r}"
    names = sorted(known)
    near = [n for n in names if key in n or n in key] or [n for n in names if n[:3] == key[:3]]
    hint = f" (did you mean {', '.join(near[:4])}?)" if near else ""
    return f"{_at(where, key)}: unknown setting{hint}; allowed: {', '.join(names)}"


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


_origin = functools.cache(typing.get_origin)  # annotations are few and hashable; a RewardConfig checks 32 fields
_args = functools.cache(typing.get_args)
_is_dataclass = functools.cache(dataclasses.is_dataclass)


def _convert(kind: Any, value: Any, where: str, rule: Rule, text: bool) -> Any:
    if kind is float and type(value) is float or kind is int and type(value) is int:  # the common case, fast
        if rule.choices is None and _in_range(value, rule):
            return value
    origin = _origin(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None or (text and isinstance(value, str) and value.strip().lower() == "none"):
            return None
        inner = [a for a in _args(kind) if a is not type(None)]
        return _convert(inner[0], value, where, rule, text)
    if kind is Any:
        return value
    if origin is tuple:
        return _tuple(kind, value, where, rule, text)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigTypeError(f"{where} = {_show(value)}: must be {_allowed(kind, rule)}")
        val_kind = _args(kind)[1]
        return {str(k): _convert(val_kind, v, f"{where}.{k}", Rule(), text) for k, v in value.items()}
    if _is_dataclass(kind):
        return build(kind, value, where)
    return _scalar(kind, value, where, rule, text)


def _tuple(kind: Any, value: Any, where: str, rule: Rule, text: bool) -> tuple[Any, ...]:
    elem = _args(kind)[0]
    if text and isinstance(value, str):
        value = [v for v in value.split(":") if v.strip()] if value.strip() else []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ConfigTypeError(f"{where} = {_show(value)}: must be {_allowed(kind, rule)}")
    if rule.length is not None and len(value) != rule.length:
        raise ConfigError(f"{where} = {_show(value)}: must be {_allowed(kind, rule)}, got {len(value)}")
    elem_rule = _element_rule(rule)
    return tuple(_convert(elem, v, f"{where}[{i}]", elem_rule, text) for i, v in enumerate(value))


@functools.cache
def _element_rule(rule: Rule) -> Rule:
    return dataclasses.replace(rule, length=None, help="")


def _scalar(kind: type, value: Any, where: str, rule: Rule, text: bool) -> Any:
    if text and isinstance(value, str) and kind is not str:
        value = _parse(kind, value, where, rule)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigTypeError(f"{where} = {_show(value)}: must be true or false")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigTypeError(f"{where} = {_show(value)}: must be {_allowed(int, rule)}")
        value = int(value)
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ConfigTypeError(f"{where} = {_show(value)}: must be a real number, {_allowed(float, rule)}")
    elif kind is str:
        if not isinstance(value, str):
            raise ConfigTypeError(f"{where} = {_show(value)}: must be {_allowed(str, rule)}")
        if rule.pattern is not None and not re.fullmatch(rule.pattern, value):
            raise ConfigError(f"{where} = {_show(value)}: must be {_allowed(str, rule)}")
    if rule.choices is not None and value not in rule.choices:
        raise ConfigError(f"{where} = {_show(value)}: must be {_allowed(kind, rule)}")
    if kind in (int, float) and not _in_range(value, rule):
        raise ConfigError(f"{where} = {_show(value)}: must be {_allowed(kind, rule)}")
    return float(value) if kind is float else value


def _parse(kind: type, text: str, where: str, rule: Rule) -> Any:
    low = text.strip().lower()
    if kind is bool:
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise ConfigError(f"{where} = {text!r}: cannot parse {text!r} as bool; must be true or false")
    try:
        return kind(text.strip())
    except ValueError:
        if kind is float:
            raise ConfigError(f"{where} = {text!r}: not a number; must be {_allowed(float, rule)}") from None
        raise ConfigError(f"{where} = {text!r}: cannot parse {text!r} as {kind.__name__}; must be "
                          f"{_allowed(kind, rule)}") from None


def _in_range(value: float, rule: Rule) -> bool:
    if not math.isfinite(value):
        return False
    if rule.lo is not None and (value <= rule.lo if rule.lo_open else value < rule.lo):
        return False
    return rule.hi is None or value <= rule.hi


# ------------------------------------------------------------------------------------------------ words
def _range(kind: type, rule: Rule) -> str:
    if kind is int and rule.hi is None:
        return "" if rule.lo is None else f" >= {int(rule.lo)}"
    conv = int if kind is int else float
    lo = "-inf" if rule.lo is None else repr(conv(rule.lo))
    hi = "inf" if rule.hi is None else repr(conv(rule.hi))
    return f" in {'(' if rule.lo_open else '['}{lo}, {hi}]"


def _allowed(kind: Any, rule: Rule) -> str:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)][0]
        return f"{_allowed(inner, rule)}, or none"
    if rule.choices is not None:
        return "one of " + ", ".join(_show(c) for c in rule.choices)
    if origin is tuple:
        count = f"{rule.length} " if rule.length is not None else "a list of "
        elem = _allowed(typing.get_args(kind)[0], dataclasses.replace(rule, length=None))
        return f"{count}values, each {elem}"
    if origin is dict:
        return f"a mapping of names to {_allowed(typing.get_args(kind)[1], Rule())}"
    if dataclasses.is_dataclass(kind):
        return f"a mapping of {kind.__name__} settings"
    if kind is bool:
        return "true or false"
    if kind is int:
        return "an integer" + _range(int, rule)
    if kind is float:
        return "finite" + (" and" + _range(float, rule) if rule.lo is not None or rule.hi is not None else "")
    if kind is str:
        return rule.what or "a string"
    return "anything"


def _type_name(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("none" if a is type(None) else _type_name(a) for a in typing.get_args(kind))
    if origin is tuple:
        return f"list[{_type_name(typing.get_args(kind)[0])}]"
    if origin is dict:
        return "mapping"
    return getattr(kind, "__name__", str(kind)).lower() if kind is not Any else "any"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    return repr(value)


def describe(cls: type, prefix: str = "", shown: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """One row per setting: its name (``prefix.name``, or how ``shown`` spells it), type, default, allowed values,
    help."""
    rows = []
    for s in specs(cls):
        name = _at(prefix, s.name)
        rows.append(((shown or {}).get(name, name), s.type_name, s.default_text, s.allowed, s.rule.help))
    return rows


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """Rows as aligned plain-text columns (for pipes and terminals alike); the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for r in [header, *rows]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + str(r[-1]))
    return "\n".join(line.rstrip() for line in lines)


# ------------------------------------------------------------------------------------------------ files
def load_file(path: str | Path, what: str = "config") -> Any:
    """A YAML, JSON or TOML file's content, chosen by suffix; errors name the file, the problem and the formats."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"{what} {str(path)!r}: unknown format {path.suffix or '(no suffix)'!r}; "
                          f"reads {FORMATS_TEXT}")
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r}: no such file")
    from parasim.config.jsonl import JSONInputError, decode_utf8, loads_strict

    try:
        text = decode_utf8(path.read_bytes(), str(path), fmt)
        if fmt == "JSON":
            return loads_strict(text, str(path))
    except JSONInputError as err:
        raise ConfigError(str(err)) from None
    except OSError as err:
        raise ConfigError(f"{what} {str(path)!r}: cannot read ({err.strerror or err})") from None
    if fmt == "TOML":  # tomllib refuses duplicate keys and non-finite numbers itself
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: not valid TOML ({err})") from None
        except RecursionError:
            raise ConfigError(f"{path}: nested too deeply to read") from None
    return _load_yaml(text, path)


def _load_yaml(text: str, path: Path) -> Any:
    """YAML read as strictly as JSON config files are (``parasim.config.jsonl.loads_strict``): a key repeated in a
    mapping and nesting past ``MAX_DEPTH`` levels are errors naming the file and the line (PyYAML keeps the last
    value of a repeated key, and recurses without bound)."""
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{path}: reading YAML needs PyYAML (pip install pyyaml); or use JSON or TOML") from None
    from parasim.config.jsonl import MAX_DEPTH

    class StrictLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 -- PyYAML's own signature
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"{path}: nesting deeper than {MAX_DEPTH} levels (line {mark.line + 1}); at most "
                                  f"{MAX_DEPTH} nested mappings / lists are allowed")
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: ANN401
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, typing.Hashable) and key in seen:
                    raise ConfigError(f"{path}: line {key_node.start_mark.line + 1}: duplicate key {key!r}; each key "
                                      "may appear once in a mapping")
                seen.add(key) if isinstance(key, typing.Hashable) else None
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None


def load_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """:func:`load_file` of a file that must hold a mapping (an empty file is an empty mapping)."""
    data = load_file(path, what)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return dict(data)


def to_toml(data: Mapping[str, Any], comment: str = "") -> str:
    """``data`` (scalars, lists of scalars, nested mappings) as TOML that :func:`load_file` reads back; None values
    are left out (TOML has no null, and an absent key takes its default)."""
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    _toml_table(data, [], lines)
    return "\n".join(lines).strip("\n") + "\n"


def _toml_table(data: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if path and (len(tables) < len(data) or not data):
        lines += ["", "[" + ".".join(_toml_key(p) for p in path) + "]"]
    for key, value in data.items():
        if value is not None and not isinstance(value, Mapping):
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, value in tables.items():
        _toml_table(value, [*path, str(key)], lines)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) as TOML")


# ------------------------------------------------------------------------------------------------ command line
def arg_parser(cls: type, prog: str, description: str = "") -> argparse.ArgumentParser:
    """``--config FILE``, ``--print-config`` and one ``--NAME VALUE`` flag per setting, each with its type,
    allowed values, default and help; abbreviated flags are refused (``--learning_rat`` is not a flag)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, allow_abbrev=False,
                                     usage="%(prog)s [-h] [--config FILE] [--print-config] [--NAME VALUE ...]",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="FILE", default=None,
                        help=f"settings file, {FORMATS_TEXT}; flags override it, unknown keys are errors")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved settings as TOML (a file --config reads) and exit")
    for s in specs(cls):
        allowed = "" if s.allowed == "a string" else f", {s.allowed}"
        text = (f"{s.rule.help} " if s.rule.help else "") + f"({s.type_name}{allowed}; default: {s.default_text})"
        parser.add_argument(f"--{s.name}", default=None, metavar=s.type_name.split(" ")[0].upper(),
                            help=text.replace("%", "%%"))
    return parser


def parse_args(cls: type[T], argv: Sequence[str] | None, prog: str,
               description: str = "") -> tuple[T, argparse.Namespace]:
    """Defaults, then ``--config FILE``, then flags: the checked instance and the parsed namespace."""
    ns = arg_parser(cls, prog, description).parse_args(argv)
    values = load_mapping(ns.config) if ns.config else {}
    values.update({s.name: getattr(ns, s.name) for s in specs(cls) if getattr(ns, s.name) is not None})
    return build(cls, values, cls.__name__), ns
