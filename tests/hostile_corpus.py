"""Hostile manager texts: a deterministic corpus for the tool-call parser and the text environment.

``hostile_texts(seed)`` returns ``(name, text)`` pairs, each text at most ``MAX_CHARS`` characters (the
action limit of ParaOrchText-v0): random bytes, deep nesting, huge numbers, unbalanced tags, thousands of
blocks, chat-template control tokens, NUL and lone surrogates, very long lines, and the shapes that made
the parser quadratic. ``shape_text(name, size)`` builds one scalable shape at any size, for benchmarks
and for regression tests above the action limit. Texts may hold characters outside the text env's
action charset (NUL, lone surrogates): the parser takes any ``str``; an env test maps them with
``to_charset`` first if it goes through the action space.

Import it from a test as ``from hostile_corpus import hostile_texts`` (pytest puts tests/ on the path).
"""
from __future__ import annotations

import json
import random
from collections.abc import Callable

MAX_CHARS = 65_536
SIZES = (1_024, 16_384, MAX_CHARS)  # each scalable shape enters the corpus at these sizes

_CALL = '{"name": "search", "arguments": {"query": "q"}}'
_BLOCK = "<tool_call>" + _CALL + "</tool_call>"
_CONTROL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<tool_response>",
            "</tool_response>", "<think>", "</think>", "assistant\n", "user\n", '{"name": ', '"final_answer"',
            '"arguments": {', "}", "\n", " ")
_FRAGMENTS = ("<tool_call>", "</tool_call>", "< tool_call >", "</ TOOL_CALL>", "{", "}", "[", "]", '"', "'", "\\",
              ",", ":", "\n", "```json\n", "```", '"name":', "'name':", '"arguments":', '"search"', '"python"',
              '"final_answer"', '"standard_reasoner"', '"model"', '"subtask"', '"query"', '"code"', '"answer"',
              '"context_from"', "True", "None", "NaN", "Infinity", "-1", "1e400", "9" * 400, "\\u12", "\\ud800",
              "\ud800", "\udfff", "\x00", "\ufeff", "\u2028", "#3", "call_7", " ", "x", _CALL, "<|im_end|>")


def _block(name: str, arguments: str) -> str:
    """A ``<tool_call>`` block calling ``name`` with ``arguments`` written verbatim (any text, valid JSON or not)."""
    return '<tool_call>{"name": "' + name + '", "arguments": ' + arguments + "}</tool_call>"


def _repeat(unit: str, size: int) -> str:
    """``unit`` repeated to fill at most ``size`` characters (at least once)."""
    return unit * max(1, size // len(unit))


def _brace_then_name_keys(size: int, rng: random.Random) -> str:
    """The finding's shape: one long closed object, then ``"name":`` keys, each of which re-measured it."""
    half = size // 2 - 2
    return "{" + "a" * half + "}" + _repeat('"name":', size - half - 2)


def _name_keys(size: int, rng: random.Random) -> str:
    """Only ``"name":`` keys: the old parser searched back over the whole prefix for a brace at every key."""
    return _repeat('"name":', size)


def _closed_objects_then_name_keys(size: int, rng: random.Random) -> str:
    """Eight long closed objects (every brace a key may try), then keys."""
    objects = "".join("{" + "b" * (size // 20) + "}" for _ in range(8))
    return objects + _repeat('"name":', size - len(objects))


def _many_blocks(size: int, rng: random.Random) -> str:
    """Valid blocks, thousands of them at 64 KiB (far above MAX_PARALLEL: the env rejects the extras)."""
    return _repeat(_BLOCK + "\n", size)


def _open_tags(size: int, rng: random.Random) -> str:
    """Open tags that never close: one empty block each."""
    return _repeat("<tool_call>", size)


def _open_tags_partial_json(size: int, rng: random.Random) -> str:
    """Open tags, each with a call cut off inside a string: every block goes through the repairing reader."""
    return _repeat('<tool_call>{"name": "search", "arguments": {"query": "q', size)


def _deep_nesting(size: int, rng: random.Random) -> str:
    """One block whose argument nests brackets and objects tens of thousands deep, never closed."""
    head = '<tool_call>{"name": "search", "arguments": {"query": '
    return head + _repeat('[{"a": ', size - len(head))


def _deep_brackets_bare(size: int, rng: random.Random) -> str:
    """Untagged ``[[[[...`` with a call key at the end: one unclosed object around everything."""
    tail = '{"name": "search", "arguments": {"query": "q"}}'
    return "{" + "[" * (size - len(tail) - 1) + tail


def _escaped_strings(size: int, rng: random.Random) -> str:
    """One python call whose code is a long string of escapes, valid and stray (``\\q``), and quotes."""
    head, tail = '<tool_call>{"name": "python", "arguments": {"code": "', '"}}</tool_call>'
    return head + _repeat('\\n\\t\\"\\\\ \\q \\u00e9 \\ud800 \'x\' ', size - len(head) - len(tail)) + tail


def _single_quoted_strings(size: int, rng: random.Random) -> str:
    """Python-literal style: single quotes, escaped quotes, raw newlines and tabs, then no closing quote."""
    head = "<tool_call>{'name': 'python', 'arguments': {'code': '"
    return head + _repeat("it\\'s \"q\"\n\t\\x ", size - len(head))


def _draws(pieces: tuple[str, ...], size: int, margin: int, rng: random.Random) -> str:
    """Random ``pieces`` joined until within ``margin`` characters of ``size`` (the longest piece fits the margin)."""
    parts: list[str] = []
    length = 0
    while length < size - margin:
        parts.append(rng.choice(pieces))
        length += len(parts[-1])
    return "".join(parts)


def _control_tokens(size: int, rng: random.Random) -> str:
    """Chat-template control tokens, tags and call fragments in random order."""
    return _draws(_CONTROL, size, 32, rng)


def _random_latin1(size: int, rng: random.Random) -> str:
    """Random bytes decoded as latin-1: every code point below 256, NUL and controls included."""
    return rng.randbytes(size).decode("latin-1")


def _huge_numbers(size: int, rng: random.Random) -> str:
    """Blocks with 400-digit integers and out-of-range floats as arguments and call ids."""
    units = [
        _block("search", '{"query": ' + "9" * 400 + "}"),
        _block("search", '{"query": 1e400, "context_from": -1e400}'),
        _block("python", '{"code": "x", "context_from": ' + "7" * 400 + "}"),
        _block("search", '{"query": [NaN, Infinity, -Infinity]}'),
    ]
    return _repeat("".join(units), size)


def _fragment_soup(size: int, rng: random.Random) -> str:
    """Random parser-relevant fragments: tags, brackets, quotes, keys, tool names, escapes, odd characters."""
    return _draws(_FRAGMENTS, size, 400, rng)


SHAPES: dict[str, Callable[[int, random.Random], str]] = {
    "brace_then_name_keys": _brace_then_name_keys,
    "name_keys": _name_keys,
    "closed_objects_then_name_keys": _closed_objects_then_name_keys,
    "many_blocks": _many_blocks,
    "open_tags": _open_tags,
    "open_tags_partial_json": _open_tags_partial_json,
    "deep_nesting": _deep_nesting,
    "deep_brackets_bare": _deep_brackets_bare,
    "escaped_strings": _escaped_strings,
    "single_quoted_strings": _single_quoted_strings,
    "control_tokens": _control_tokens,
    "random_latin1": _random_latin1,
    "huge_numbers": _huge_numbers,
    "fragment_soup": _fragment_soup,
}


def shape_text(name: str, size: int, seed: int = 0) -> str:
    """The scalable shape ``name`` at about ``size`` characters (never more); random shapes draw from ``seed``."""
    if name not in SHAPES:
        raise ValueError(f"name: unknown shape {name!r}; shapes: {', '.join(SHAPES)}")
    if size < 64:
        raise ValueError(f"size: at least 64 characters, got {size}")
    return SHAPES[name](size, random.Random(f"{name}/{size}/{seed}"))[:size]


def _fixed_texts() -> list[tuple[str, str]]:
    """Single hostile turns that are not a scalable shape: each probes one failure of a reader."""
    deep_string_args = _CALL
    for _ in range(11):  # arguments string-encoded inside string-encoded arguments; each level doubles the escapes
        deep_string_args = json.dumps({"name": "search", "arguments": deep_string_args})
    return [
        ("empty", ""),
        ("nul_only", "\x00" * 4096),
        ("nul_inside_call", _block("search\x00", '{"query": "a\x00b"}')),
        ("lone_surrogates", "\ud800\udfff\udbff" * 1000 + _BLOCK.replace('"q"', '"\ud800"')),
        ("escaped_surrogates", _block("search", '{"query": "\\ud800\\udc00\\udfff"}')),
        ("bom_and_separators", "\ufeff\u2028\u2029" + _BLOCK + "\u2028"),
        ("int_400_digits_call_id", _block("search", '{"query": "q", "context_from": ' + "9" * 400 + "}")),
        ("int_5000_digits", _block("search", '{"query": ' + "9" * 5000 + "}")),
        ("float_1e400", _block("search", '{"query": "q", "context_from": 1e400}')),
        ("long_line_prose", "word " * (MAX_CHARS // 5)),
        ("long_line_no_spaces", "x" * MAX_CHARS),
        ("long_whitespace_runs", "<tool_call>{" + " " * 30_000 + ",\n" * 1_000 + " " * 30_000 + "</tool_call>"),
        ("crlf_and_tabs", _BLOCK.replace(" ", "\r\n\t") * 200),
        ("unclosed_fence", "<tool_call>```json\n" + _CALL + "\n" + "`" * 5000),
        ("final_answer_repeated", "".join(_block("final_answer", f'{{"answer": "{i}"}}') for i in range(1_000))),
        ("final_answer_with_calls", _block("final_answer", '{"answer": "1"}') + _BLOCK * 1_000),
        ("string_encoded_arguments_deep", "<tool_call>" + deep_string_args + "</tool_call>"),
        ("openai_function_wrapped", '<tool_call>{"type": "function", "function": {"name": "python", "arguments": '
                                    '"{\\"code\\": \\"print(1)\\"}"}}</tool_call>' * 300),
        ("unknown_tools", "".join(_block(f"tool_{i}", "{}") for i in range(1_500))),
        ("close_tags_only", "</tool_call>" * 5_000),
        ("nested_open_tags", "<tool_call>" * 2_000 + _CALL + "</tool_call>" * 2_000),
        ("name_keys_in_strings", '{"x": "' + '\\"name\\": \\"search\\", ' * 2_500 + '"}'),
        ("quote_parity_tricks", "{'\"{'\"}" * 6_000 + '"name": "search"'),
        ("bare_calls_many", (_CALL + " and ") * 1_000),
        ("im_tokens_around_call", "<|im_start|>assistant\n<think>\n</think>\n" + _BLOCK + "<|im_end|>\n"
                                  "<|im_start|>user\n" + _BLOCK + "<|im_end|>" * 1_000),
    ]


def hostile_texts(seed: int = 0) -> list[tuple[str, str]]:
    """The corpus: every shape at every size of ``SIZES``, then the fixed texts; deterministic in ``seed``.

    Names are unique (``shape@size`` for the shapes) and every text is at most ``MAX_CHARS`` characters.
    """
    items = [(f"{name}@{size}", shape_text(name, size, seed)) for name in SHAPES for size in SIZES]
    items += [(name, text[:MAX_CHARS]) for name, text in _fixed_texts()]
    return items
