"""The parser on hostile manager turns: no exception, a well-formed round, and time linear in the text.

Time is guarded only by generous ``timeout`` marks (hang guards, no timing asserts): each regression
input below took tens of seconds in the quadratic parser and takes milliseconds in a linear one.
"""
from __future__ import annotations

import pytest
from hostile_corpus import MAX_CHARS, SHAPES, hostile_texts, shape_text
from hypothesis import given, settings
from hypothesis import strategies as st

from parasim.protocol.parser import ParsedRound, parse_tool_calls
from parasim.protocol.schema import PROTOCOL_FAILURES, Status, Tool

MODELS = ("qwen3-30b-a3b-instruct", "qwen3-coder-30b-a3b", "gpt-oss-20b")
NO_BLOCK = "no <tool_call> block found"
CALL = '{"name": "search", "arguments": {"query": "q"}}'


def assert_well_formed(parsed: ParsedRound, text: str, models: tuple[str, ...] | None, name: str = "") -> None:
    """Every block accounted for exactly once (a call, an error or the final answer), with protocol statuses."""
    where = f"{name}: {parsed.errors[:2]}"
    assert isinstance(parsed, ParsedRound), where
    assert all("internal parser error" not in e.reason for e in parsed.errors), where
    assert 0 <= parsed.num_blocks <= max(1, len(text) // 7), where  # a block needs a tag or a "name": key
    assert len(parsed.calls) == len(parsed.blocks), where
    assert parsed.blocks == sorted(set(parsed.blocks)), where
    for error in parsed.errors:
        assert error.status in PROTOCOL_FAILURES and isinstance(error.status, Status), where
        assert error.reason and isinstance(error.reason, str) and len(error.text) <= 200, where
    if parsed.num_blocks == 0:
        assert parsed.calls == [] and parsed.final_answer is None, where
        assert [(e.block, e.status) for e in parsed.errors] == [(0, Status.FORMAT_ERR)], where
        assert NO_BLOCK in parsed.errors[0].reason, where
        return
    accounted = parsed.blocks + [e.block for e in parsed.errors]
    assert len(set(accounted)) == len(accounted) and set(accounted) <= set(range(parsed.num_blocks)), where
    assert len(accounted) + (parsed.final_answer is not None) == parsed.num_blocks, where
    if parsed.final_answer is not None:
        assert isinstance(parsed.final_answer, str) and parsed.calls == [], where
    for call in parsed.calls:
        assert isinstance(call.tool, Tool) and call.tool is not Tool.FINAL_ANSWER, where
        assert isinstance(call.subtask, str) and call.subtask.strip(), where
        assert isinstance(call.target, int) and call.target >= -1, where
        if call.tool.is_agent and models is not None:
            assert call.model in models, where
        elif not call.tool.is_agent:
            assert call.model == "", where
    assert len(set(parsed.repairs)) == len(parsed.repairs), where


def test_corpus_is_deterministic_bounded_and_named() -> None:
    from envs.paraorch_text import ACTION_MAX_CHARS

    corpus = hostile_texts()
    assert MAX_CHARS == ACTION_MAX_CHARS  # the corpus exercises exactly what the text env accepts
    assert corpus == hostile_texts(0)
    assert len({name for name, _ in corpus}) == len(corpus)
    assert all(isinstance(text, str) and len(text) <= MAX_CHARS for _, text in corpus)
    assert {f"{shape}@{MAX_CHARS}" for shape in SHAPES} <= {name for name, _ in corpus}
    assert dict(hostile_texts(1))["random_latin1@1024"] != dict(corpus)["random_latin1@1024"]
    with pytest.raises(ValueError, match="name: unknown shape 'nope'"):
        shape_text("nope", 1024)
    with pytest.raises(ValueError, match="size: at least 64 characters, got 3"):
        shape_text("name_keys", 3)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("models", [None, MODELS], ids=["no_pool", "pool"])
def test_every_corpus_text_parses_to_a_well_formed_round(models: tuple[str, ...] | None) -> None:
    for name, text in hostile_texts():
        assert_well_formed(parse_tool_calls(text, models), text, models, name)


def test_corpus_calls_are_still_found() -> None:
    """Hostile padding around real calls does not hide them: the parser reads, it does not just survive."""
    corpus = dict(hostile_texts())
    many = parse_tool_calls(corpus[f"many_blocks@{MAX_CHARS}"], MODELS)
    assert len(many.calls) == MAX_CHARS // len("<tool_call>" + CALL + "</tool_call>\n") and not many.errors
    bare = parse_tool_calls(corpus["bare_calls_many"], MODELS)
    assert len(bare.calls) == 1000 and bare.repairs == ["call written without <tool_call> tags"]
    tokens = parse_tool_calls(corpus["im_tokens_around_call"], MODELS)
    assert [c.tool for c in tokens.calls] == [Tool.SEARCH, Tool.SEARCH] and not tokens.errors
    numbers = parse_tool_calls(corpus["float_1e400"], MODELS)
    assert numbers.errors[0].status is Status.FORMAT_ERR
    assert "'context_from' must be a call id" in numbers.errors[0].reason


@pytest.mark.timeout(5)
def test_regression_long_object_then_name_keys_64k() -> None:
    """The finding: 64 KiB of ``{aaa...}`` then ``"name":`` keys took 14 s to minutes (each key re-read the object)."""
    text = "{" + "a" * 32_000 + "}" + '"name":' * 4_600
    assert len(text) <= MAX_CHARS
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.num_blocks == 0 and NO_BLOCK in parsed.errors[0].reason
    found = parse_tool_calls(text + CALL, MODELS)
    assert [c.tool for c in found.calls] == [Tool.SEARCH] and found.calls[0].subtask == "q"


@pytest.mark.timeout(5)
def test_regression_two_mib_of_name_keys() -> None:
    """The finding's second path: each key searched back over the whole prefix for a brace (2 MiB: 12 s before)."""
    text = '"name":' * (2 * 2**20 // 7)
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.num_blocks == 0 and NO_BLOCK in parsed.errors[0].reason
    found = parse_tool_calls(text + CALL, MODELS)
    assert [c.tool for c in found.calls] == [Tool.SEARCH]


@pytest.mark.timeout(10)
def test_regression_closed_objects_then_name_keys_above_the_action_limit() -> None:
    """Eight long closed objects, each tried by every key; 256 KiB, beyond the env's limit (minutes before)."""
    text = shape_text("closed_objects_then_name_keys", 4 * MAX_CHARS)
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.num_blocks == 0 and NO_BLOCK in parsed.errors[0].reason


_HOSTILE_UNITS = st.sampled_from([
    "{", "}", "[", "]", '"', "'", "\\", ",", ":", " ", "\n", "\x00", "\ud800", "a", "9" * 40, "1e400",
    '"name":', "'name':", '"search"', '"final_answer"', '"arguments":', "<tool_call>", "</tool_call>",
    "<|im_start|>", "<|im_end|>", "```", "True", "None", CALL,
])


@pytest.mark.timeout(60)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_HOSTILE_UNITS, st.integers(1, 3_000)), min_size=1, max_size=8),
       st.sampled_from([None, MODELS]))
def test_repeated_hostile_units_stay_well_formed(runs: list[tuple[str, int]], models: tuple[str, ...] | None) -> None:
    """Long runs of one unit each (the shape of every quadratic input found), in any order and combination."""
    text = "".join(unit * count for unit, count in runs)[: 4 * MAX_CHARS]
    assert_well_formed(parse_tool_calls(text, models), text, models)
