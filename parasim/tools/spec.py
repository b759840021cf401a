"""Tool specs: the callable tools a manager orchestrates, as data.

A tool spec file (JSON, read strictly by ``parasim.config.jsonl.read_json_file``) declares every callable tool once, in
the order of the per-tool arrays (``tool_counts``, the pool's tool tables, the reward's ``pref_tools``). Schema:

- ``name``, ``description``: strings. ``tools``: a list of 1..``MAX_TOOLS`` TOOLs.
- TOOL: ``name`` (the wire name the manager writes: lower case letters, digits and ``_``, unique, not
  ``final_answer``); ``kind``: ``agent`` (takes a pool model id and a subtask) or ``basic`` (takes one input);
  ``behaviour``, what the simulator's per-call model does with a call (``parasim.sim.kernel.call_outcome``):
  ``solver`` (answers; a basic solver answers with the manager's model row), ``reviewer`` (flags or confirms the
  leading answer; agent only), ``ensemble`` (majority of the pool's ``protocol.ensemble_k`` samples; agent only),
  ``code_exec`` (may end in EXEC_ERR: an agent tool at its model's ``code_exec_error`` rate, a basic tool at its
  own ``exec_error`` rate), ``search`` (answers from retrieved evidence; in real mode the retriever runs);
  ``description`` (shown to the manager); ``argument`` (basic tools: their one input, ``name``, ``type``
  ``string`` or ``integer``, ``description``, ``aliases``; agent tools take ``model``, ``subtask`` and every
  tool ``context_from``, see ``parasim.protocol.tool_schema``); ``call_model`` (optional: the simulator's default
  parameters of the tool, in a pool file's tool-entry format, see ``parasim.pools.pool``; a pool's own
  ``tools.<name>`` entry replaces it); ``real`` (real mode: ``system_prompt`` for an agent tool, required;
  ``callable``, ``"package.module:function"``, for a basic tool, required unless its behaviour is ``code_exec``
  or ``search``, which run on the backend's sandbox and retriever).

``parasim/tools/specs/default.json`` is the default spec: the seven tools of ``parasim.protocol.schema.Tool`` with
the values every shipped pool has. Errors are ``SpecError``s (``ToolSpecError``) naming the field and what is
allowed.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from parasim.config.jsonl import JSONInputError, read_json_file
from parasim.pools.param_groups import (
    DOMAINS,
    SpecError,
    did_you_mean,
    group,
    number,
    only_keys,
    prompt_text_field,
    shipped_names,
    shipped_or_path,
    show,
    skill_domain,
)
from parasim.protocol.schema import MAX_TOOLS, NUM_TOOLS, Tool

ToolSpecError = SpecError
TOOL_SPEC_DIR = Path(__file__).with_name("specs")
DEFAULT_TOOL_SPEC = "default"
KINDS = ("agent", "basic")
BEHAVIOURS = ("solver", "reviewer", "ensemble", "code_exec", "search")
AGENT_ONLY = ("reviewer", "ensemble")
ARGUMENT_TYPES = ("string", "integer")
TOP_KEYS = ("name", "description", "tools")
TOOL_KEYS = ("name", "kind", "behaviour", "description", "argument", "call_model", "real")
ARGUMENT_KEYS = ("name", "type", "description", "aliases")
REAL_KEYS = ("system_prompt", "callable")
# a call model's groups (a pool file's tool entry); ``call_model_groups`` says which a tool holds
TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    "bonus": DOMAINS, "cost": ("units", "usd_per_call", "usd_per_s"),
    "runtime": ("overhead_s", "timeout_s", "tokens_scale", "feedback_frac"),
    "output": ("log_median_tokens", "log_sd", "latency_log_median_s", "latency_log_sd"), "exec_error": ("rate",)}
MAX_TEXT_CHARS = 4096
_WIRE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_CALLABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ToolArgument:
    """The one input of a basic tool, as the manager's tool list shows it and the parser accepts it."""

    name: str
    json_type: str
    description: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolDef:
    """One callable tool of a spec; ``index`` is its column in every per-tool array."""

    index: int
    name: str
    kind: str
    behaviour: str
    description: str
    argument: ToolArgument | None  # basic tools only
    call_model: dict[str, Any] | None  # the raw default call-model groups (validated), or None
    system_prompt: str | None  # agent tools in real mode
    callable: str | None  # basic tools in real mode: "package.module:function"

    @property
    def is_agent(self) -> bool:
        return self.kind == "agent"


@dataclass(frozen=True)
class ToolSpec:
    """A validated tool spec: its tools in per-tool array order."""

    name: str
    description: str
    tools: tuple[ToolDef, ...]

    @property
    def num_tools(self) -> int:
        return len(self.tools)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tools)

    def index(self, name: str) -> int:
        """The column of the tool called ``name``; ``ToolSpecError`` naming the spec's tools otherwise."""
        for t in self.tools:
            if t.name == name:
                return t.index
        raise ToolSpecError(f"tool {show(name)}: not in tool spec {self.name!r}; tools: {list(self.names)}"
                            f"{did_you_mean(name, self.names)}")

    def with_behaviour(self, behaviour: str, *, agent: bool | None = None) -> tuple[int, ...]:
        """The indices of the tools with ``behaviour`` (of one kind when ``agent`` is given)."""
        return tuple(t.index for t in self.tools if t.behaviour == behaviour and (agent is None or t.is_agent == agent))

    def call_tool(self, index: int) -> Tool | SpecTool:
        """What ``ToolCall.tool`` carries for the tool at ``index``: the ``Tool`` member where the tool is the
        default spec's tool of that index (so the default tools stay the values every layer knows), else a
        ``SpecTool``."""
        tool = self.tools[index]
        default = default_tool_spec().tools
        return Tool(index) if index < len(default) and default[index] == tool else SpecTool(tool)

    def tool_def(self, tool: int) -> ToolDef | None:
        """The spec's tool of a ``ToolCall.tool`` (its index), None when the index is not one of this spec's."""
        return self.tools[int(tool)] if 0 <= int(tool) < self.num_tools else None


class SpecTool(int):
    """A spec's tool that is none of ``Tool``'s, as ``ToolCall.tool`` carries it: its index (an int: the column of
    its counts) with what callers read off a ``Tool`` (``wire_name``, ``is_agent``, ``name``) and its ``ToolDef``.
    Compare it by identity with ``Tool`` members (``call.tool is Tool.PYTHON``), never by value: a user tool at
    index 7 equals ``Tool.FINAL_ANSWER``'s value."""

    tool: ToolDef

    def __new__(cls, tool: ToolDef) -> SpecTool:
        self = super().__new__(cls, tool.index)
        self.tool = tool
        return self

    @property
    def wire_name(self) -> str:
        return self.tool.name

    @property
    def name(self) -> str:
        return self.tool.name.upper()

    @property
    def is_agent(self) -> bool:
        return self.tool.is_agent

    def __repr__(self) -> str:
        return f"SpecTool({self.tool.name!r}, index={int(self)})"


def call_model_groups(kind: str, behaviour: str) -> tuple[str, ...]:
    """The groups a tool's call model holds: every tool ``bonus``, ``cost`` and ``runtime``; basic tools their own
    ``output`` distribution too, and a basic ``code_exec`` tool its ``exec_error`` rate (an agent code_exec tool
    fails at its model's rate)."""
    keys = ("bonus", "cost", "runtime")
    if kind == "basic":
        keys += ("output",)
        if behaviour == "code_exec":
            keys += ("exec_error",)
    return keys


def parse_call_model(t: Any, path: str, kind: str, behaviour: str, sources: dict[str, str]) -> dict[str, Any]:
    """A tool's call-model parameters (a pool's ``tools.<name>`` entry or a spec's ``call_model``), checked and
    keyed as ``parasim.pools.pool.parse_pool`` builds its tables from them; each group's source goes to ``sources``."""
    if not isinstance(t, dict):
        raise SpecError(f"{path}: expected an object, got {show(t)}")
    keys = call_model_groups(kind, behaviour)
    only_keys(t, keys, path)

    def grp(key: str) -> dict:
        return group(t, key, path, sources, TOOL_GROUPS[key])

    out: dict[str, Any] = {"bonus": skill_domain(grp("bonus"), f"{path}.bonus")}
    g = grp("cost")
    out["units"] = number(g, "units", f"{path}.cost", 0, 1000)
    out["usd_call"] = number(g, "usd_per_call", f"{path}.cost", 0, 100)
    out["usd_s"] = number(g, "usd_per_s", f"{path}.cost", 0, 10)
    g = grp("runtime")
    out["overhead"] = number(g, "overhead_s", f"{path}.runtime", 0, 3600)
    out["timeout"] = number(g, "timeout_s", f"{path}.runtime", 0.1, 1e5)
    out["scale"] = number(g, "tokens_scale", f"{path}.runtime", 0.01, 100)
    out["feedback"] = number(g, "feedback_frac", f"{path}.runtime", 0, 1)
    if "output" in keys:
        g = grp("output")
        out["tok_mu"] = number(g, "log_median_tokens", f"{path}.output", 0, 12)
        out["tok_sd"] = number(g, "log_sd", f"{path}.output", 0, 3)
        out["lat_mu"] = number(g, "latency_log_median_s", f"{path}.output", -10, 10)
        out["lat_sd"] = number(g, "latency_log_sd", f"{path}.output", 0, 3)
    out["p_exec"] = number(grp("exec_error"), "rate", f"{path}.exec_error", 0, 1) if "exec_error" in keys else 0.0
    return out


def _choice(raw: dict, key: str, path: str, allowed: tuple[str, ...]) -> str:
    value = raw.get(key)
    if value not in allowed:
        got = "missing" if key not in raw else show(value)
        hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
        raise SpecError(f"{path}.{key}: expected one of {list(allowed)}, got {got}{hint}")
    return value  # type: ignore[return-value]


def _argument(raw: Any, path: str) -> ToolArgument:
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected an object with keys {list(ARGUMENT_KEYS)}, got {show(raw)}")
    only_keys(raw, ARGUMENT_KEYS, path)
    name = raw.get("name")
    if not isinstance(name, str) or not _WIRE_NAME.fullmatch(name) or name in ("model", "context_from"):
        raise SpecError(f"{path}.name: expected a lower-case identifier other than 'model' and 'context_from', "
                        f"got {show(name)}")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and _WIRE_NAME.fullmatch(a) for a in aliases):
        raise SpecError(f"{path}.aliases: expected a list of lower-case identifiers, got {show(aliases)}")
    return ToolArgument(name, _choice(raw, "type", path, ARGUMENT_TYPES),
                        prompt_text_field(raw.get("description"), f"{path}.description", MAX_TEXT_CHARS),
                        tuple(aliases))


def _tool(raw: Any, index: int, sources: dict[str, str]) -> ToolDef:
    path = f"tools[{index}]"
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected an object, got {show(raw)}")
    only_keys(raw, TOOL_KEYS, path)
    name = raw.get("name")
    if not isinstance(name, str) or not _WIRE_NAME.fullmatch(name) or name == Tool.FINAL_ANSWER.wire_name:
        raise SpecError(f"{path}.name: expected a lower-case identifier of at most 64 characters (letters, digits, "
                        f"'_'), not 'final_answer', got {show(name)}")
    path = f"tools[{index}] ({name})"
    kind = _choice(raw, "kind", path, KINDS)
    behaviour = _choice(raw, "behaviour", path, BEHAVIOURS)
    if behaviour in AGENT_ONLY and kind != "agent":
        raise SpecError(f"{path}.behaviour: {behaviour!r} needs kind 'agent' (a model reviews or samples); "
                        f"allowed for a basic tool: {[b for b in BEHAVIOURS if b not in AGENT_ONLY]}")
    description = prompt_text_field(raw.get("description"), f"{path}.description", MAX_TEXT_CHARS)
    argument = None
    if kind == "basic":
        if "argument" not in raw:
            raise SpecError(f"{path}.argument: missing (a basic tool declares its input: {list(ARGUMENT_KEYS)})")
        argument = _argument(raw["argument"], f"{path}.argument")
    elif "argument" in raw:
        raise SpecError(f"{path}.argument: an agent tool takes 'model', 'subtask' and 'context_from'; remove it")
    call_model = raw.get("call_model")
    if call_model is not None:
        parse_call_model(call_model, f"{path}.call_model", kind, behaviour, sources)
    real = raw.get("real", {})
    if not isinstance(real, dict):
        raise SpecError(f"{path}.real: expected an object with keys {list(REAL_KEYS)}, got {show(real)}")
    only_keys(real, REAL_KEYS, f"{path}.real")
    system_prompt = func = None
    if kind == "agent":
        if "callable" in real:
            raise SpecError(f"{path}.real.callable: an agent tool runs on a pool model; give real.system_prompt")
        system_prompt = prompt_text_field(real.get("system_prompt"), f"{path}.real.system_prompt", MAX_TEXT_CHARS)
    else:
        if "system_prompt" in real:
            raise SpecError(f"{path}.real.system_prompt: a basic tool runs no model; give real.callable")
        func = real.get("callable")
        if func is None and behaviour not in ("code_exec", "search"):
            raise SpecError(f"{path}.real.callable: missing (a basic {behaviour} tool runs a Python function in real "
                            "mode: 'package.module:function')")
        if func is not None and (not isinstance(func, str) or not _CALLABLE.fullmatch(func)):
            raise SpecError(f"{path}.real.callable: expected 'package.module:function', got {show(func)}")
    return ToolDef(index, name, kind, behaviour, description, argument, call_model, system_prompt, func)


def parse_tool_spec(raw: Any, name: str = "tool spec") -> ToolSpec:
    """Validate a parsed tool spec file; raises ``ToolSpecError`` naming the bad field."""
    if not isinstance(raw, dict):
        raise SpecError(f"(top level): expected a JSON object, got {show(raw)}")
    only_keys(raw, TOP_KEYS, "")
    tools_raw = raw.get("tools")
    if not isinstance(tools_raw, list) or not 1 <= len(tools_raw) <= MAX_TOOLS:
        raise SpecError(f"tools: expected a list of 1..{MAX_TOOLS} tools, got {show(tools_raw)}")
    sources: dict[str, str] = {}
    tools = tuple(_tool(t, i, sources) for i, t in enumerate(tools_raw))
    seen: dict[str, int] = {}
    for t in tools:
        if t.name in seen:
            raise SpecError(f"tools[{t.index}].name: duplicate tool name {t.name!r} (also tools[{seen[t.name]}]); "
                            "tool names must be unique")
        seen[t.name] = t.index
    spec_name = prompt_text_field(raw.get("name", name), "name", 128)
    description = prompt_text_field(raw["description"], "description", MAX_TEXT_CHARS) if "description" in raw else ""
    return ToolSpec(spec_name, description, tools)


def shipped_tool_specs() -> list[str]:
    """Names of the tool specs shipped in ``parasim/tools/specs``."""
    return shipped_names(TOOL_SPEC_DIR)


def tool_spec_file(name_or_path: str | Path) -> Path:
    """The path of a shipped tool spec (by name) or of a tool spec JSON file."""
    return shipped_or_path(name_or_path, TOOL_SPEC_DIR, "tool_spec")


def _load_file(path: Path) -> ToolSpec:
    try:
        raw = read_json_file(path)
    except JSONInputError as err:
        raise SpecError(str(err)) from None
    try:
        return parse_tool_spec(raw, name=path.stem)
    except SpecError as err:
        raise SpecError(f"{path}: {err}") from None


def load_tool_spec(spec: str | Path | dict | ToolSpec = DEFAULT_TOOL_SPEC) -> ToolSpec:
    """A shipped tool spec by name, a path to a tool spec file, a parsed spec dict, or a ToolSpec (as is)."""
    if isinstance(spec, ToolSpec):
        return spec
    if isinstance(spec, dict):
        return parse_tool_spec(spec)
    if spec == DEFAULT_TOOL_SPEC:
        return default_tool_spec()
    return _load_file(tool_spec_file(spec))


@cache
def default_tool_spec() -> ToolSpec:
    """The default spec: ``parasim.protocol.schema.Tool``'s callable tools, in enum order (checked here); read
    once per process."""
    spec = _load_file(TOOL_SPEC_DIR / f"{DEFAULT_TOOL_SPEC}.json")
    if spec.names != tuple(Tool(t).wire_name for t in range(NUM_TOOLS)):
        raise SpecError(f"{TOOL_SPEC_DIR / 'default.json'}: tools {list(spec.names)} must be the Tool enum's "
                        "callable tools in enum order")
    return spec


def resolve_callable(tool: ToolDef) -> Callable[..., Any]:
    """The Python function of a basic tool's ``real.callable`` (imported on first use, so loading a spec runs no
    user code)."""
    if tool.callable is None:
        raise SpecError(f"tool {tool.name!r}: has no real.callable (it runs on the backend's "
                        f"{'sandbox' if tool.behaviour == 'code_exec' else 'retriever'})")
    module_name, _, attr = tool.callable.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise SpecError(f"tool {tool.name!r}: real.callable {tool.callable!r}: cannot import {module_name!r} "
                        f"({err})") from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise SpecError(f"tool {tool.name!r}: real.callable {tool.callable!r}: {module_name!r} has no function "
                        f"{attr!r}")
    return func
