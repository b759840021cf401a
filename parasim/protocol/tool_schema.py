"""The manager's tool list (OpenAI / Hermes function schema) and the system prompt that shows it.

One table per tool spec (``tool_table``: each wire name's ``ToolCall.tool`` value and arguments; ``TOOL_ARGUMENTS``
is the default spec's, by ``Tool``) names every tool's arguments; the parser validates against it and the JSON schema
is rendered from the same ``tool_arguments``, so what the manager is told and what the parser accepts cannot drift.
Tools, their descriptions and basic tools' inputs come from the tool spec (``parasim.tools.spec``; the tables here
are the default spec's); only ``final_answer``, which ends the episode and is no tool of a spec, is declared here.
The ``model`` argument of agent tools is an enum of the pool's model ids, which is how a Qwen3 chat
template or vLLM's ``hermes`` tool parser expects choices to be written.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parasim.protocol.schema import MAX_PARALLEL, MAX_ROUNDS, Tool
from parasim.tools.spec import SpecTool, ToolDef, ToolSpec, default_tool_spec


@dataclass(frozen=True)
class Argument:
    """One argument of a tool: its JSON type, whether it is required, and the names models also use."""

    name: str
    json_type: str  # "string" or "integer"
    description: str
    required: bool = True
    aliases: tuple[str, ...] = ()
    call_id: bool = False  # an earlier call's id ("context_from"): 3, "3", "#3" or "call_3"; negative is none


INTEGER_LIMIT = 2**53 - 1  # an integer argument's bound: what every JSON reader holds exactly (a double's integers)
_MODEL = Argument("model", "string", "Id of the pool model that runs this call.")
_SUBTASK = Argument(
    "subtask", "string", "Self-contained instruction for this call; include any earlier output it needs.",
    aliases=("task", "input", "prompt", "question", "query", "instruction"),
)
_CONTEXT = Argument(
    "context_from", "integer",
    "Optional id of an earlier call (as shown in its result, e.g. 3 for call #3) whose output this call receives.",
    required=False, aliases=("target", "context", "use_output_of"), call_id=True,
)

_FINAL = Argument("answer", "string", "The final answer to the question.",
                  aliases=("final_answer", "text", "content", "result", "response"))
FINAL_ANSWER_DESCRIPTION = "Ends the episode with your final answer. Call it alone, not together with other tools."


def tool_arguments(tool: ToolDef) -> tuple[Argument, ...]:
    """A spec tool's arguments: agent tools a model, a subtask and a context; basic tools their input and a context."""
    if tool.is_agent:
        return (_MODEL, _SUBTASK, _CONTEXT)
    arg = tool.argument
    assert arg is not None  # the spec loader requires a basic tool's argument
    return (Argument(arg.name, arg.json_type, arg.description, aliases=arg.aliases), _CONTEXT)


TOOL_ARGUMENTS: dict[Tool, tuple[Argument, ...]] = {
    **{Tool(t.index): tool_arguments(t) for t in default_tool_spec().tools}, Tool.FINAL_ANSWER: (_FINAL,)}
TOOL_DESCRIPTIONS: dict[Tool, str] = {
    **{Tool(t.index): t.description for t in default_tool_spec().tools}, Tool.FINAL_ANSWER: FINAL_ANSWER_DESCRIPTION}


def tool_table(spec: ToolSpec | None = None) -> dict[str, tuple[Tool | SpecTool, tuple[Argument, ...]]]:
    """Each wire name of a tool spec (default: the default spec) and ``final_answer``: the ``ToolCall.tool`` value
    its calls carry (``ToolSpec.call_tool``) and its arguments; what the parser reads calls with."""
    spec = spec or default_tool_spec()
    table = {t.name: (spec.call_tool(t.index), tool_arguments(t)) for t in spec.tools}
    table[Tool.FINAL_ANSWER.wire_name] = (Tool.FINAL_ANSWER, (_FINAL,))
    return table


def _function(name: str, description: str, args: Sequence[Argument], models: Sequence[str]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for arg in args:
        prop: dict[str, Any] = {"type": arg.json_type, "description": arg.description}
        if arg.json_type == "integer" and not arg.call_id:  # the range the parser accepts
            prop["minimum"], prop["maximum"] = -INTEGER_LIMIT, INTEGER_LIMIT
        if arg.name == "model":
            prop["enum"] = list(models)
        properties[arg.name] = prop
    parameters = {"type": "object", "properties": properties, "required": [a.name for a in args if a.required]}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def tool_list(models: Sequence[str], tools: ToolSpec | None = None) -> list[dict[str, Any]]:
    """The JSON tool list ``[{"type": "function", "function": {name, description, parameters}}]`` of a tool spec
    (default: the default spec), then ``final_answer``.

    ``models`` becomes the enum of every agent tool's ``model`` argument; an empty pool is an error
    because agent tools could then never be called validly.
    """
    if not models:
        raise ValueError("models: need at least one pool model id for the agent tools' 'model' enum")
    spec = tools or default_tool_spec()
    out = [_function(t.name, t.description, tool_arguments(t), models) for t in spec.tools]
    out.append(_function(Tool.FINAL_ANSWER.wire_name, FINAL_ANSWER_DESCRIPTION, (_FINAL,), models))
    return out


_PROMPT = """You are the manager of a pool of models and tools. Solve the user's question by calling tools, then give the answer.

# Rules
- Each turn, either call up to {max_parallel} tools in parallel, or call final_answer alone.
- Calls in one turn run in parallel and cannot see each other; later turns see every earlier result.
- You have at most {max_rounds} tool turns. Tokens, cost and latency count against you.
- Every result has an id (#n); pass "context_from": n to give a call that result.

# Models
{models}

# Tools
You may call one or more functions. Function signatures are inside <tools></tools>:
<tools>
{tools}
</tools>

For each call, return a JSON object with the function name and arguments inside <tool_call></tool_call> tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def render_system_prompt(models: Mapping[str, str], *, max_parallel: int = MAX_PARALLEL,
                         max_rounds: int = MAX_ROUNDS, tools: ToolSpec | None = None) -> str:
    """The manager's system prompt: rules, the pool's models (id: description) and the tool list of ``tools``
    (a tool spec; default: the default spec).

    The tool block follows Qwen3's / Hermes' chat template wording so that a model trained on that
    template reads it as usual; one tool per line, as the template writes them.
    """
    model_lines = "\n".join(f"- {mid}: {desc}" if desc else f"- {mid}" for mid, desc in models.items())
    tools = "\n".join(json.dumps(t, ensure_ascii=False) for t in tool_list(list(models), tools))
    return _PROMPT.format(max_parallel=max_parallel, max_rounds=max_rounds, models=model_lines, tools=tools)
