"""The manager-text parser: well-formed calls, the repairs it promises, clear errors, and no exception on any input."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parasim.protocol.parser import ParsedRound, parse_tool_calls
from parasim.protocol.schema import MAX_PARALLEL, Status, Tool
from parasim.protocol.tool_schema import TOOL_ARGUMENTS, render_system_prompt, tool_list

MODELS = ("qwen3-30b-a3b-instruct", "qwen3-coder-30b-a3b", "gpt-oss-20b")


def block(name: str, **arguments: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_parallel_blocks_become_calls_in_order() -> None:
    text = ("Let me split the work.\n"
            + block("standard_reasoner", model=MODELS[0], subtask="Solve 2+2")
            + "\n" + block("code_reasoner", model=MODELS[1], subtask="Check 2+2 in code", context_from=0)
            + "\n" + block("python", code="print(2+2)") + "\n" + block("search", query="2+2"))
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.errors == [] and parsed.repairs == [] and parsed.final_answer is None
    assert [c.tool for c in parsed.calls] == [Tool.STANDARD_REASONER, Tool.CODE_REASONER, Tool.PYTHON, Tool.SEARCH]
    assert parsed.calls[1].model == MODELS[1] and parsed.calls[1].target == 0 and parsed.calls[0].target == -1
    assert parsed.calls[2].subtask == "print(2+2)" and parsed.calls[2].model == ""
    assert parsed.blocks == [0, 1, 2, 3] and parsed.num_blocks == 4


def test_final_answer_is_a_call() -> None:
    parsed = parse_tool_calls("Done.\n" + block("final_answer", answer="\\boxed{4}"), MODELS)
    assert parsed.is_final and parsed.final_answer == "\\boxed{4}" and parsed.calls == []
    assert not parsed.has_protocol_error


@pytest.mark.parametrize(("text", "repair"), [
    ("<tool_call>{'name': 'search', 'arguments': {'query': 'x'}}</tool_call>", "converted single quotes"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x",},}</tool_call>', "removed trailing comma"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}}', "missing </tool_call> closing tag"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"</tool_call>', "closed 2 unclosed bracket(s)"),
    ('<tool_call>\n```json\n{"name": "search", "arguments": {"query": "x"}}\n```\n</tool_call>', "removed code fence"),
    ('```json\n{"name": "search", "arguments": {"query": "x"}}\n```', "call written without <tool_call> tags"),
    ('<tool_call>Sure: {"name": "search", "arguments": {"query": "x"}}</tool_call>',
     "ignored text before the JSON object"),
    ('<tool_call>{"name": "search", "arguments": {"query": "a\nb"}}</tool_call>',
     "escaped a raw control character in a string"),
    ('<tool_call>{"name": "Search", "arguments": {"query": "x"}}</tool_call>', "normalized tool name"),
    ('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>',
     "decoded string-encoded arguments"),
    ('<tool_call>{"name": "search", "query": "x"}</tool_call>', "arguments written at the top level"),
    ('<tool_call>{"name": "search", "arguments": {"input": "x"}}</tool_call>', "read 'query' from 'input'"),
])
def test_repairs_are_made_and_reported(text: str, repair: str) -> None:
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.errors == [], parsed.errors
    assert [c.tool for c in parsed.calls] == [Tool.SEARCH]
    assert parsed.calls[0].subtask.startswith(("x", "a"))
    assert repair in parsed.repairs


def test_python_code_with_backslashes_and_newlines_survives() -> None:
    code = 'import re\nprint(re.findall(r"\\d+", "a1b22"))'
    raw = '<tool_call>{"name": "python", "arguments": {"code": "' + code.replace('"', '\\"') + '"}}</tool_call>'
    parsed = parse_tool_calls(raw, MODELS)
    assert parsed.calls[0].subtask == code
    assert "escaped a stray backslash" in parsed.repairs


def test_fences_inside_arguments_are_content() -> None:
    answer = "```python\nprint(1)\n```"
    parsed = parse_tool_calls(block("final_answer", answer=answer))
    assert parsed.final_answer == answer and parsed.repairs == []
    fenced = parse_tool_calls("<tool_call>```json\n" + json.dumps({"name": "final_answer", "arguments": {
        "answer": answer}}) + "\n```</tool_call>")
    assert fenced.final_answer == answer and fenced.repairs == ["removed code fence"]


def test_model_resolution() -> None:
    upper = parse_tool_calls(block("standard_reasoner", model="GPT-OSS-20B", subtask="s"), MODELS)
    assert upper.calls[0].model == "gpt-oss-20b" and "normalized model id" in upper.repairs
    only = parse_tool_calls(block("standard_reasoner", subtask="s"), ["solo"])
    assert only.calls[0].model == "solo"
    missing = parse_tool_calls(block("standard_reasoner", subtask="s"), MODELS)
    assert missing.errors[0].status is Status.FORMAT_ERR and "'model'" in missing.errors[0].reason
    free = parse_tool_calls(block("standard_reasoner", model="anything", subtask="s"))
    assert free.calls[0].model == "anything"


@pytest.mark.parametrize(("text", "status", "needle"), [
    ("The answer is 42.", Status.FORMAT_ERR, "no <tool_call> block"),
    ("", Status.FORMAT_ERR, "no <tool_call> block"),
    ("<tool_call></tool_call>", Status.FORMAT_ERR, "no JSON object"),
    ("<tool_call>{\"name\": }</tool_call>", Status.FORMAT_ERR, "invalid JSON"),
    ("<tool_call>[1, 2]</tool_call>", Status.FORMAT_ERR, "must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', Status.FORMAT_ERR, "missing 'name'"),
    (block("teleport", x=1), Status.INVALID_TOOL, "unknown tool 'teleport'"),
    (block("standard_reasoner", model="llama-70b", subtask="s"), Status.INVALID_TOOL, "unknown model 'llama-70b'"),
    (block("standard_reasoner", model=MODELS[0]), Status.FORMAT_ERR, "missing required argument 'subtask'"),
    (block("python", code="   "), Status.FORMAT_ERR, "'code' is empty"),
    (block("search", query=None), Status.FORMAT_ERR, "'query' is null"),
    (block("standard_reasoner", model=MODELS[0], subtask="s", context_from="the last one"), Status.FORMAT_ERR,
     "must be a call id"),
    ('<tool_call>{"name": "search", "arguments": 7}</tool_call>', Status.FORMAT_ERR, "must be a JSON object"),
])
def test_unreadable_blocks_get_a_status_and_reason(text: str, status: Status, needle: str) -> None:
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.calls == [] and parsed.final_answer is None and parsed.has_protocol_error
    assert parsed.errors[0].status is status
    assert needle in parsed.errors[0].reason


def test_bad_blocks_do_not_hide_good_ones() -> None:
    text = block("search", query="a") + "<tool_call>{oops</tool_call>" + block("teleport") + block("python", code="1")
    parsed = parse_tool_calls(text, MODELS)
    assert [c.tool for c in parsed.calls] == [Tool.SEARCH, Tool.PYTHON] and parsed.blocks == [0, 3]
    assert [(e.block, e.status) for e in parsed.errors] == [(1, Status.FORMAT_ERR), (2, Status.INVALID_TOOL)]


def test_final_answer_must_be_alone() -> None:
    parsed = parse_tool_calls(block("final_answer", answer="1") + block("search", query="q")
                              + block("final_answer", answer="2"), MODELS)
    assert parsed.final_answer == "1" and parsed.calls == []
    assert sorted(e.block for e in parsed.errors) == [1, 2]
    assert all(e.status is Status.FORMAT_ERR for e in parsed.errors)


def test_parser_reports_every_block_even_beyond_max_parallel() -> None:
    """Capping at MAX_PARALLEL is the environment's rule (it rejects extras with a status), not the parser's."""
    parsed = parse_tool_calls("".join(block("search", query=str(i)) for i in range(MAX_PARALLEL + 2)), MODELS)
    assert len(parsed.calls) == MAX_PARALLEL + 2


def test_non_string_input_is_a_format_error() -> None:
    parsed = parse_tool_calls(None)  # type: ignore[arg-type]
    assert parsed.errors[0].status is Status.FORMAT_ERR and "expected text" in parsed.errors[0].reason


def test_deep_nesting_does_not_raise() -> None:
    parsed = parse_tool_calls("<tool_call>" + "[" * 100_000 + "</tool_call>")
    assert parsed.errors and "internal" not in parsed.errors[0].reason


def test_tool_list_matches_parser_arguments() -> None:
    tools = tool_list(MODELS)
    assert [t["function"]["name"] for t in tools] == [t.wire_name for t in Tool]
    for entry, tool in zip(tools, Tool):
        params = entry["function"]["parameters"]
        assert list(params["properties"]) == [a.name for a in TOOL_ARGUMENTS[tool]]
        if tool.is_agent:
            assert params["properties"]["model"]["enum"] == list(MODELS)
    prompt = render_system_prompt({m: "a model" for m in MODELS})
    assert "<tools>" in prompt and f"up to {MAX_PARALLEL}" in prompt and MODELS[2] in prompt
    with pytest.raises(ValueError, match="models"):
        tool_list([])


_FRAGMENTS = st.sampled_from([
    "<tool_call>", "</tool_call>", "{", "}", "[", "]", '"', "'", ",", ":", "\\", "\n", "```json", "```",
    '"name"', '"arguments"', "'name'", '"final_answer"', '"search"', '"python"', '"standard_reasoner"',
    '"model"', '"subtask"', '"query"', '"code"', '"answer"', '"context_from"', "True", "None", "null", "-1",
    "1e999", "\\u12", "\\ud800", "#3", '"gpt-oss-20b"', " ", "x",
])
_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(_FRAGMENTS, st.text(max_size=5)), max_size=60).map("".join),
)


@settings(max_examples=400, deadline=None)
@given(_TEXT, st.sampled_from([None, MODELS, ("solo",)]))
def test_never_raises_on_any_text(text: str, models: tuple[str, ...] | None) -> None:
    parsed = parse_tool_calls(text, models)
    assert isinstance(parsed, ParsedRound)
    assert all("internal parser error" not in e.reason for e in parsed.errors), parsed.errors
    assert parsed.calls or parsed.final_answer is not None or parsed.errors
    assert len(parsed.calls) == len(parsed.blocks)
    for call in parsed.calls:
        assert call.tool is not Tool.FINAL_ANSWER and call.subtask.strip()
        if call.tool.is_agent and models is not None:
            assert call.model in models


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([t for t in Tool if t is not Tool.FINAL_ANSWER]),
                          st.sampled_from(MODELS), st.text(min_size=1, max_size=40).filter(str.strip)),
                min_size=1, max_size=6),
       st.text(max_size=30).filter(lambda s: "<" not in s and "{" not in s))
def test_well_formed_calls_round_trip(calls: list[tuple[Tool, str, str]], prose: str) -> None:
    text = prose
    for tool, model, subtask in calls:
        arg = TOOL_ARGUMENTS[tool][0].name if not tool.is_agent else "subtask"
        args = {arg: subtask} if not tool.is_agent else {"model": model, "subtask": subtask}
        text += block(tool.wire_name, **args) + prose
    parsed = parse_tool_calls(text, MODELS)
    assert parsed.errors == [] and parsed.repairs == []
    assert [(c.tool, c.model or None, c.subtask) for c in parsed.calls] == [
        (t, m if t.is_agent else None, s) for t, m, s in calls]
