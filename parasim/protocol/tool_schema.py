"""The manager's tool list (OpenAI / Hermes function schema) and the system prompt that shows it.

One table, ``TOOL_ARGUMENTS``, names every tool's arguments; the parser validates against it and the
JSON schema is rendered from it, so what the manager is told and what the parser accepts cannot drift.
The ``model`` argument of agent tools is an enum of the pool's model ids, which is how a Qwen3 chat
template or vLLM's ``hermes`` tool parser expects choices to be written.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parasim.protocol.schema import MAX_PARALLEL, MAX_ROUNDS, Tool


@dataclass(frozen=True)
class Argument:
    """One argument of a tool: its JSON type, whether it is required, and the names models also use."""

    name: str
    json_type: str  # "string" or "integer"
    description: str
    required: bool = True
    aliases: tuple[str, ...] = ()


_MODEL = Argument("model", "string", "Id of the pool model that runs this call.")
_SUBTASK = Argument(
    "subtask", "string", "Self-contained instruction for this call; include any earlier output it needs.",
    aliases=("task", "input", "prompt", "question", "query", "instruction"),
)
_CONTEXT = Argument(
    "context_from", "integer",
    "Optional id of an earlier call (as shown in its result, e.g. 3 for call #3) whose output this call receives.",
    required=False, aliases=("target", "context", "use_output_of"),
)

TOOL_ARGUMENTS: dict[Tool, tuple[Argument, ...]] = {
    Tool.STANDARD_REASONER: (_MODEL, _SUBTASK, _CONTEXT),
    Tool.CRITICAL_REVIEWER: (_MODEL, _SUBTASK, _CONTEXT),
    Tool.CODE_REASONER: (_MODEL, _SUBTASK, _CONTEXT),
    Tool.KNOWLEDGE_SEARCHER: (_MODEL, _SUBTASK, _CONTEXT),
    Tool.ENSEMBLE_SOLVER: (_MODEL, _SUBTASK, _CONTEXT),
    Tool.PYTHON: (Argument("code", "string", "Python source to run; print what you need to see.",
                           aliases=("input", "subtask", "script", "source")), _CONTEXT),
    Tool.SEARCH: (Argument("query", "string", "Search query for the retriever.",
                           aliases=("input", "subtask", "q", "question")), _CONTEXT),
    Tool.FINAL_ANSWER: (Argument("answer", "string", "The final answer to the question.",
                                 aliases=("final_answer", "text", "content", "result", "response")),),
}

TOOL_DESCRIPTIONS: dict[Tool, str] = {
    Tool.STANDARD_REASONER: "Solves a (sub)task step by step with the chosen model and returns its answer.",
    Tool.CRITICAL_REVIEWER: "Checks a candidate answer given in the subtask and reports whether it is wrong, with reasons.",
    Tool.CODE_REASONER: "Solves a (sub)task by writing and running code with the chosen model; strong in math and code.",
    Tool.KNOWLEDGE_SEARCHER: "Answers with retrieved evidence using the chosen model; strong on knowledge questions.",
    Tool.ENSEMBLE_SOLVER: "Samples several solutions from the chosen model and returns the majority answer; costs more.",
    Tool.PYTHON: "Runs Python code in a sandbox and returns stdout, or the error.",
    Tool.SEARCH: "Retrieves the top passages for a query.",
    Tool.FINAL_ANSWER: "Ends the episode with your final answer. Call it alone, not together with other tools.",
}


def tool_list(models: Sequence[str]) -> list[dict[str, Any]]:
    """The JSON tool list ``[{"type": "function", "function": {name, description, parameters}}]``.

    ``models`` becomes the enum of every agent tool's ``model`` argument; an empty pool is an error
    because agent tools could then never be called validly.
    """
    if not models:
        raise ValueError("models: need at least one pool model id for the agent tools' 'model' enum")
    tools = []
    for tool, args in TOOL_ARGUMENTS.items():
        properties: dict[str, Any] = {}
        for arg in args:
            prop: dict[str, Any] = {"type": arg.json_type, "description": arg.description}
            if arg.name == "model":
                prop["enum"] = list(models)
            properties[arg.name] = prop
        parameters = {"type": "object", "properties": properties,
                      "required": [a.name for a in args if a.required]}
        tools.append({"type": "function", "function": {
            "name": tool.wire_name, "description": TOOL_DESCRIPTIONS[tool], "parameters": parameters}})
    return tools


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
                         max_rounds: int = MAX_ROUNDS) -> str:
    """The manager's system prompt: rules, the pool's models (id: description) and the tool list.

    The tool block follows Qwen3's / Hermes' chat template wording so that a model trained on that
    template reads it as usual; one tool per line, as the template writes them.
    """
    model_lines = "\n".join(f"- {mid}: {desc}" if desc else f"- {mid}" for mid, desc in models.items())
    tools = "\n".join(json.dumps(t, ensure_ascii=False) for t in tool_list(list(models)))
    return _PROMPT.format(max_parallel=max_parallel, max_rounds=max_rounds, models=model_lines, tools=tools)
