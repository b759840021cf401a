"""Parse a manager's turn in the Hermes / Qwen3 tool-call format into calls, never raising.

A turn holds one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block per call; several
blocks are parallel calls and ``final_answer`` is a call too. Models trained on other templates write
almost-JSON: prose around blocks, code fences, single quotes, Python literals, trailing commas, raw
newlines in strings, a missing closing tag or brace. Those are repaired, and every repair is reported so
that a trainer can penalize or count it. What cannot be read becomes a ``BlockError`` with status
FORMAT_ERR (unreadable) or INVALID_TOOL (readable, but an unknown tool or model) and a reason the manager
sees in its feedback. No input string makes ``parse_tool_calls`` raise, and its time is linear in the
text whatever its shape (a manager turn must not stall a rollout worker): the character loops step over
runs of ordinary characters with regular expressions, and the search for untagged calls reads each
stretch of text a bounded number of times.
"""
from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from parasim.protocol.schema import Status, Tool, ToolCall
from parasim.protocol.tool_schema import INTEGER_LIMIT, Argument, tool_table
from parasim.tools.spec import SpecTool, ToolSpec

_OPEN = re.compile(r"<\s*tool_call\s*>", re.IGNORECASE)
_CLOSE = re.compile(r"<\s*/\s*tool_call\s*>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^```[A-Za-z0-9_+-]*[ \t]*\n?")
_NAME_KEY = re.compile(r"""["']name["']\s*:""")
_STRUCTURE = re.compile(r"""["'{}\[\]]""")
_IN_DOUBLE = re.compile(r'[\\"]')
_IN_SINGLE = re.compile(r"[\\']")
_BRACES_TRIED = 8  # braces before a ``name`` key tried as the start of its object
_DEFAULT_TABLE = tool_table()
ToolTable = dict[str, tuple["Tool | SpecTool", tuple[Argument, ...]]]
_SNIPPET = 200
_DECIMAL = re.compile(r"\s*[-+]?\d{1,16}\s*")


@dataclass(frozen=True)
class BlockError:
    """A block that produced no call: which block, the status it gets, why, and its text (truncated)."""

    block: int
    status: Status
    reason: str
    text: str = ""


@dataclass
class ParsedRound:
    """One manager turn: tool calls in block order, the final answer if any, errors and repairs.

    ``blocks[i]`` is the block index of ``calls[i]``, so feedback can follow the order the manager
    wrote. ``final_answer`` is None unless a valid ``final_answer`` call was read.
    """

    calls: list[ToolCall] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    final_answer: str | None = None
    errors: list[BlockError] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    num_blocks: int = 0
    bodies: list[str] = field(default_factory=list)  # each block's text as written (``block_call`` reads one)

    @property
    def is_final(self) -> bool:
        return self.final_answer is not None

    @property
    def has_protocol_error(self) -> bool:
        """True when this turn counts as a format violation (a FORMAT_ERR or INVALID_TOOL block)."""
        return bool(self.errors)


class _Unreadable(Exception):
    """Internal: a block's JSON could not be read; carries the reason."""


class _InvalidTool(Exception):
    """Internal: a readable call names an unknown tool or model."""



def parse_tool_calls(text: Any, models: Collection[str] | None = None, tools: ToolSpec | None = None) -> ParsedRound:
    """Parse one manager turn. ``models`` (the pool's model ids) enables model validation; ``tools`` is the tool
    spec whose tools the manager may call (default: the default spec), each call's ``ToolCall.tool`` its
    ``ToolSpec.call_tool`` value.

    Never raises: a non-string, or any failure inside the parser, becomes a FORMAT_ERR block.
    """
    if not isinstance(text, str):
        return ParsedRound(errors=[BlockError(0, Status.FORMAT_ERR, f"expected text, got {type(text).__name__}")])
    table = _DEFAULT_TABLE if tools is None else tool_table(tools)
    try:
        return _parse(text, models, table)
    except Exception as err:  # noqa: BLE001 -- a parser bug must not crash a rollout; tests assert it never fires
        return ParsedRound(errors=[BlockError(0, Status.FORMAT_ERR, f"internal parser error: {type(err).__name__}",
                                              text[:_SNIPPET])])


def _parse(text: str, models: Collection[str] | None, table: ToolTable) -> ParsedRound:
    result = ParsedRound()
    bodies = _split_blocks(text, result.repairs, table)
    result.num_blocks, result.bodies = len(bodies), bodies
    if not bodies:
        reason = ("no <tool_call> block found; write each call as "
                  "<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>")
        result.errors.append(BlockError(0, Status.FORMAT_ERR, reason, text[:_SNIPPET]))
        return result
    finals: list[int] = []
    for index, body in enumerate(bodies):
        try:
            obj = _load_object(body, result.repairs)
            tool, spec, args = _tool_and_arguments(obj, table, result.repairs)
            call = _build_call(tool, spec, args, models, result.repairs)
        except _Unreadable as err:
            result.errors.append(BlockError(index, Status.FORMAT_ERR, str(err), body.strip()[:_SNIPPET]))
            continue
        except _InvalidTool as err:
            result.errors.append(BlockError(index, Status.INVALID_TOOL, str(err), body.strip()[:_SNIPPET]))
            continue
        if isinstance(call, str):
            if result.final_answer is None:
                result.final_answer = call
                finals.append(index)
            else:
                result.errors.append(BlockError(index, Status.FORMAT_ERR, "final_answer given more than once; "
                                                "the first one counts", body.strip()[:_SNIPPET]))
            continue
        result.calls.append(call)
        result.blocks.append(index)
    if result.final_answer is not None and result.calls:
        for index in result.blocks:
            result.errors.append(BlockError(index, Status.FORMAT_ERR, "tool call alongside final_answer was not run: "
                                            "final_answer ends the episode and must be called alone",
                                            bodies[index].strip()[:_SNIPPET]))
        result.calls, result.blocks = [], []
    result.repairs = list(dict.fromkeys(result.repairs))
    return result


def block_call(body: str) -> tuple[str | None, str]:
    """A block as an OpenAI-style function call: the name it gives (None when unreadable) and its arguments as
    JSON text (the block's own text when it has no readable ``arguments`` object; OpenAI's ``arguments`` is the
    model's text, not necessarily valid JSON)."""
    try:
        obj = _load_object(body, [])
    except (_Unreadable, RecursionError):
        return None, body.strip()
    if not isinstance(obj, dict):
        return None, body.strip()
    name = obj.get("name") if isinstance(obj.get("name"), str) else None
    args = obj.get("arguments", obj.get("parameters"))
    return name, json.dumps(args, ensure_ascii=False) if isinstance(args, dict) else body.strip()


def text_outside_calls(text: str, bodies: Sequence[str]) -> str:
    """``text`` without its tool-call blocks (tags and bodies; the bare JSON calls of an untagged turn), trimmed:
    an assistant message's ``content`` beside its ``tool_calls``."""
    if _OPEN.search(text):
        kept, pos = [], 0
        opens = list(_OPEN.finditer(text))
        for i, match in enumerate(opens):
            kept.append(text[pos:match.start()])
            end = opens[i + 1].start() if i + 1 < len(opens) else len(text)
            close = _CLOSE.search(text, match.end(), end)
            pos = close.end() if close is not None else end
        kept.append(text[pos:])
        return "".join(kept).strip()
    for body in bodies:
        text = text.replace(body, "", 1)
    return text.strip()


def _split_blocks(text: str, repairs: list[str], names: Collection[str]) -> list[str]:
    """The bodies of the turn's ``<tool_call>`` blocks, or of bare JSON calls when there are no tags."""
    opens = list(_OPEN.finditer(text))
    if not opens:
        bare = _bare_calls(text, names)
        if bare:
            repairs.append("call written without <tool_call> tags")
        return bare
    bodies = []
    for i, match in enumerate(opens):
        end = opens[i + 1].start() if i + 1 < len(opens) else len(text)
        close = _CLOSE.search(text, match.end(), end)
        if close is None:
            repairs.append("missing </tool_call> closing tag")
            bodies.append(text[match.end():end])
        else:
            bodies.append(text[match.end():close.start()])
    return bodies


def _bare_calls(text: str, names: Collection[str]) -> list[str]:
    """JSON objects in untagged text that look like calls: they hold a ``name`` key and a tool name (``names``).

    For each ``"name":`` key, tries the (at most 8) nearest braces before it, newest first, and takes
    the first whose object encloses the key. Linear in the text whatever its shape: each stretch of text
    is searched for braces once, each tried brace's object is measured once, and after a key that no
    brace encloses the search skips to the next brace (until one appears, every key finds the same
    braces, all of them closed before it).
    """
    bodies: list[str] = []
    scanned = 0  # the braces before it that a key may still try are in ``recent``
    recent: deque[list[int]] = deque(maxlen=_BRACES_TRIED)  # [position, object end or -1], newest last
    key = _NAME_KEY.search(text)
    while key is not None:
        start = key.start()
        found, pos = [], start
        while len(found) < _BRACES_TRIED and (pos := text.rfind("{", scanned, pos)) != -1:
            found.append(pos)
        recent.extend([brace, -1] for brace in reversed(found))
        scanned = start
        for brace in reversed(recent):
            if brace[1] == -1:
                brace[1] = _object_end(text, brace[0])
            if brace[1] > start:
                candidate = text[brace[0]:brace[1]]
                if any(name in candidate for name in names):
                    bodies.append(candidate)
                scanned = brace[1]  # keys and braces inside a read object cannot start another call
                recent.clear()
                key = _NAME_KEY.search(text, scanned)
                break
        else:
            pos = text.find("{", key.end())
            key = None if pos == -1 else _NAME_KEY.search(text, pos)
    return bodies


def _object_end(text: str, start: int) -> int:
    """Index just past the object opened at ``start`` (quote-aware), or ``len(text)`` if never closed.

    Jumps from one bracket or quote to the next with a regular expression instead of stepping through
    every character: a long argument or answer costs one C-level search, not a Python loop per character.
    """
    depth, i, n = 0, start, len(text)
    while True:
        mark = _STRUCTURE.search(text, i)
        if mark is None:
            return n
        c, i = mark.group(), mark.end()
        if c in "\"'":
            inside = _IN_DOUBLE if c == '"' else _IN_SINGLE
            while True:
                mark = inside.search(text, i)
                if mark is None:
                    return n
                i = mark.end()
                if mark.group() == c:
                    break
                i += 1  # a backslash: the next character is escaped
        elif c in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i


def _load_object(body: str, repairs: list[str]) -> Any:
    """Read the block's JSON object, strict first, then through the lenient normalizer."""
    stripped = body.strip()
    fence = _FENCE_OPEN.match(stripped)
    if fence:  # only a fence around the whole block: fences inside argument strings are content
        stripped = stripped[fence.end():]
        stripped = (stripped[:-3] if stripped.rstrip().endswith("```") else stripped).strip()
        repairs.append("removed code fence")
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    start = stripped.find("{")
    if start == -1:
        raise _Unreadable("no JSON object in the <tool_call> block")
    if stripped[:start].strip():
        repairs.append("ignored text before the JSON object")
    normalized, end, fixes = _normalize(stripped, start)
    if stripped[end:].strip():
        repairs.append("ignored text after the JSON object")
    try:
        obj = json.loads(normalized)
    except (ValueError, RecursionError) as err:
        raise _Unreadable(f"invalid JSON: {err}") from None
    repairs.extend(fixes)
    return obj


_ESCAPES = set('"\\/bfnrtu')
_LITERALS = {"True": "true", "False": "false", "None": "null"}
_HEX = set("0123456789abcdefABCDEF")
# Runs of characters that the loops below copy unchanged, matched in one step instead of one character at a
# time: outside strings, anything but structure and letters (a letter may start a Python literal); inside a
# string, anything but a backslash, a quote or a control character. ``\w`` is exactly ``isalnum() or "_"``.
_INERT = re.compile(r"""[^"'{}\[\],\w]+|[\d_]+""")
_PLAIN = {'"': re.compile(r'[^\\"\x00-\x1f]+'), "'": re.compile(r"""[^\\'"\x00-\x1f]+""")}
_WORD = re.compile(r"\w+")
_SPACES = re.compile(r"\s*")  # ``\s`` is exactly ``isspace()``


def _normalize(src: str, start: int) -> tuple[str, int, list[str]]:
    """Rewrite almost-JSON from ``start`` to its closing brace as strict JSON.

    Returns the JSON text, the index where the object ended in ``src``, and the repairs applied:
    single-quoted strings, invalid escapes, raw control characters, Python literals, trailing
    commas, an unterminated string, unclosed brackets.
    """
    out: list[str] = []
    fixes: list[str] = []
    stack: list[str] = []
    i, n = start, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            text, i = _read_string(src, i, fixes)
            out.append(text)
            continue
        if c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if stack and stack[-1] == c:
                stack.pop()
            out.append(c)
            i += 1
            if not stack:
                break
            continue
        elif c == ",":
            j = _SPACES.match(src, i + 1).end()  # never None: it matches the empty string
            if j < n and src[j] in "}]":
                fixes.append("removed trailing comma")
                i += 1
                continue
        elif c.isalpha():
            j = _WORD.match(src, i).end()  # never None: c, a letter, is a word character
            word = src[i:j]
            if word in _LITERALS:
                fixes.append("converted Python literal")
                word = _LITERALS[word]
            out.append(word)
            i = j
            continue
        elif inert := _INERT.match(src, i):
            out.append(inert.group())
            i = inert.end()
            continue
        out.append(c)
        i += 1
    if stack:
        fixes.append(f"closed {len(stack)} unclosed bracket(s)")
        out.extend(reversed(stack))
    return "".join(out), i, fixes


def _read_string(src: str, i: int, fixes: list[str]) -> tuple[str, int]:
    """Read a quoted string at ``src[i]`` and return it as a JSON string literal and the next index."""
    quote = src[i]
    if quote == "'":
        fixes.append("converted single quotes")
    buf: list[str] = []
    plain = _PLAIN[quote]
    j, n = i + 1, len(src)
    while j < n:
        d = src[j]
        if d == "\\":
            e = src[j + 1] if j + 1 < n else ""
            if e == "u" and len(src) >= j + 6 and set(src[j + 2:j + 6]) <= _HEX:
                buf.append(src[j:j + 6])
                j += 6
                continue
            if e and e in _ESCAPES and e != "u":
                buf.append("\\" + e)
            elif e == "'":
                buf.append("'")
            else:
                fixes.append("escaped a stray backslash")
                buf.append("\\\\" + _json_char(e) if e else "\\\\")
            j += 2
            continue
        if d == quote:
            return '"' + "".join(buf) + '"', j + 1
        if d == '"':
            buf.append('\\"')
        elif ord(d) < 0x20:
            fixes.append("escaped a raw control character in a string")
            buf.append(_json_char(d))
        else:
            run = plain.match(src, j)  # never None: d is an ordinary character
            buf.append(run.group())
            j = run.end()
            continue
        j += 1
    fixes.append("closed an unterminated string")
    return '"' + "".join(buf) + '"', n


def _json_char(c: str) -> str:
    """``c`` as it may appear inside a JSON string."""
    if c == '"':
        return '\\"'
    if c and ord(c) < 0x20:
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, f"\\u{ord(c):04x}")
    return c


def _tool_and_arguments(obj: Any, table: ToolTable, repairs: list[str]) -> tuple[Tool | SpecTool,
                                                                                tuple[Argument, ...], dict[str, Any]]:
    """The tool, its arguments' spec and the argument dict of a call object, unwrapping the OpenAI ``function``
    shape."""
    if not isinstance(obj, dict):
        raise _Unreadable(f"a call must be a JSON object, got {type(obj).__name__}")
    if "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]
        repairs.append("unwrapped OpenAI-style 'function' object")
    name = obj.get("name")
    if not isinstance(name, str):
        raise _Unreadable("missing 'name' (a string naming the tool)")
    wire = re.sub(r"[\s\-]+", "_", name.strip().lower())
    if wire not in table:
        raise _InvalidTool(f"unknown tool {name[:60]!r}; tools: {', '.join(table)}")
    tool, spec = table[wire]
    if wire != name:
        repairs.append("normalized tool name")
    args: Any = None
    for key in ("arguments", "parameters", "args", "input"):
        if key in obj:
            args = obj[key]
            if key != "arguments":
                repairs.append(f"read arguments from {key!r}")
            break
    else:
        args = {k: v for k, v in obj.items() if k not in ("name", "type", "id")}
        if args:
            repairs.append("arguments written at the top level")
    if isinstance(args, str):
        args = _string_arguments(args, spec, repairs)
    if not isinstance(args, dict):
        raise _Unreadable(f"'arguments' must be a JSON object, got {type(args).__name__}")
    return tool, spec, args


def _string_arguments(raw: str, spec: tuple[Argument, ...], repairs: list[str]) -> Any:
    """Arguments given as a string: JSON-encoded (OpenAI style), or the bare value of a one-argument tool."""
    if raw.strip().startswith("{"):
        repairs.append("decoded string-encoded arguments")
        return _load_object(raw, repairs)
    required = [a for a in spec if a.required]
    if len(required) == 1:
        repairs.append(f"read a bare string as {required[0].name!r}")
        return {required[0].name: raw}
    raise _Unreadable("'arguments' must be a JSON object")


def _build_call(tool: Tool | SpecTool, spec: tuple[Argument, ...], args: dict[str, Any],
                models: Collection[str] | None, repairs: list[str]) -> ToolCall | str:
    """Validate arguments against the tool's (``tool_table``); returns the ToolCall, or the answer of
    final_answer."""
    values = {a.name: _argument(a, args, repairs) for a in spec}
    known = {a.name for a in spec} | {alias for a in spec for alias in a.aliases}
    if set(args) - known:
        repairs.append("ignored unknown argument(s)")
    if tool is Tool.FINAL_ANSWER:
        return values["answer"]
    context = values.get("context_from")
    target = -1 if context is None else context
    if not tool.is_agent:
        value = values[spec[0].name]
        return ToolCall(tool=tool, subtask=str(value), target=target, argument=value)
    model = values["model"] or ""
    if models is not None:
        model = _resolve_model(model, models, repairs)
    elif not model.strip():
        raise _Unreadable("missing required argument 'model'")
    return ToolCall(tool=tool, model=model, subtask=values["subtask"], target=target)


def _argument(spec: Argument, args: dict[str, Any], repairs: list[str]) -> Any:
    """The value of one argument (found under its name or an alias), coerced to its JSON type."""
    for key in (spec.name, *spec.aliases):
        if key in args:
            value = args[key]
            if key != spec.name:
                repairs.append(f"read {spec.name!r} from {key!r}")
            break
    else:
        if spec.required and spec.name != "model":
            raise _Unreadable(f"missing required argument {spec.name!r}")
        return None
    if spec.call_id:
        return _call_id(value, spec.name)
    if spec.json_type == "integer":
        return _integer(value, spec.name, repairs)
    if not isinstance(value, str):
        if value is None:
            raise _Unreadable(f"argument {spec.name!r} is null")
        value = json.dumps(value, ensure_ascii=False)
        repairs.append(f"converted {spec.name!r} to a string")
    if spec.required and spec.name != "model" and not value.strip():
        raise _Unreadable(f"argument {spec.name!r} is empty")
    return value


def _integer(value: Any, name: str, repairs: list[str]) -> int:
    """An ``integer`` argument as a Python int in [-INTEGER_LIMIT, INTEGER_LIMIT]: a JSON integer, an integral
    float (7.0) or a decimal string ("7"), the last two reported as repairs; anything else (null, true, "#7", 7.5,
    1e300) is unreadable, with the reason."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer() and abs(value) <= INTEGER_LIMIT:
        number = int(value)
        repairs.append(f"read {name!r} from a float")
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = int(value)
        repairs.append(f"read {name!r} from a string")
    if number is None or abs(number) > INTEGER_LIMIT:
        shown = json.dumps(value, ensure_ascii=False)[:40]  # a JSON value: null, true, "#7", 1e+300, [1]
        raise _Unreadable(f"argument {name!r} must be an integer in [{-INTEGER_LIMIT}, {INTEGER_LIMIT}], got {shown}")
    return number


def _call_id(value: Any, name: str) -> int | None:
    """An earlier call's id written as 3, "3", "#3" or "call_3"; None when absent or negative (-1 = none)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise _Unreadable(f"argument {name!r} must be a call id (an integer)")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        match = re.fullmatch(r"\s*(?:#|call[_\s#-]*)?(\d{1,9})\s*", str(value), re.IGNORECASE)
        if match is None:
            raise _Unreadable(f"argument {name!r} must be a call id (an integer), got {str(value)[:40]!r}")
        number = int(match.group(1))
    return number if number >= 0 else None


def _resolve_model(model: str, models: Collection[str], repairs: list[str]) -> str:
    """The pool model id meant by ``model``: exact, case-insensitive, or the only model of the pool."""
    if model in models:
        return model
    if not model.strip():
        if len(models) == 1:
            repairs.append("filled the missing 'model' with the pool's only model")
            return next(iter(models))
        raise _Unreadable(f"missing required argument 'model'; models: {', '.join(models)}")
    folded = {m.lower(): m for m in models}
    if model.strip().lower() in folded:
        repairs.append("normalized model id")
        return folded[model.strip().lower()]
    raise _InvalidTool(f"unknown model {model[:60]!r}; models: {', '.join(models)}")
