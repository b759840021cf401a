"""Tool specs: the default spec is today's tool set, a pool can reference a spec with more tools, and a bad spec
is refused with the field and the allowed values."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from parasim.pools.pool import PoolError, load_pool, reliability, shipped_pools
from parasim.protocol.schema import NUM_TOOLS, Tool
from parasim.protocol.tool_schema import TOOL_ARGUMENTS, render_system_prompt, tool_list
from parasim.real.prompts import SYSTEM_PROMPTS
from parasim.sim.tables import B_ENSEMBLE, B_REVIEWER, TT_AGENT, TT_BEHAVIOUR, build_tables
from parasim.tasks.suites import load_suite
from parasim.tools.spec import (
    BEHAVIOURS,
    KINDS,
    TOOL_SPEC_DIR,
    ToolSpecError,
    default_tool_spec,
    load_tool_spec,
    parse_tool_spec,
    resolve_callable,
)

POOL = Path(__file__).resolve().parents[1] / "parasim" / "pools" / "files" / "paramanager.json"

VERIFIER = {
    "name": "verifier", "kind": "agent", "behaviour": "reviewer",
    "description": "Checks the leading answer against the question and says whether it holds.",
    "call_model": {
        "bonus": {"math": 0.0, "science": 0.0, "knowledge": 0.0, "code": 0.0, "source": "assumed"},
        "cost": {"units": 1.5, "usd_per_call": 0.0, "usd_per_s": 0.0, "source": "assumed"},
        "runtime": {"overhead_s": 0.05, "timeout_s": 600.0, "tokens_scale": 0.4, "feedback_frac": 0.1,
                    "source": "assumed"}},
    "real": {"system_prompt": "You verify answers. Write 'Verdict: CORRECT' or 'Verdict: WRONG'."},
}
UNIT_CONVERTER = {
    "name": "unit_converter", "kind": "basic", "behaviour": "solver",
    "description": "Converts a quantity between units and returns the number.",
    "argument": {"name": "quantity", "type": "string", "description": "e.g. '3 miles in km'.", "aliases": ["input"]},
    "call_model": {
        "bonus": {"math": 0.5, "science": 0.5, "knowledge": 0.0, "code": 0.0, "source": "assumed"},
        "cost": {"units": 0.1, "usd_per_call": 0.0, "usd_per_s": 0.0, "source": "assumed"},
        "runtime": {"overhead_s": 0.01, "timeout_s": 10.0, "tokens_scale": 1.0, "feedback_frac": 1.0,
                    "source": "assumed"},
        "output": {"log_median_tokens": 2.0, "log_sd": 0.2, "latency_log_median_s": -3.0, "latency_log_sd": 0.3,
                   "source": "assumed"}},
    "real": {"callable": "json:dumps"},
}


def _spec(*extra: dict) -> dict:
    raw = json.loads((TOOL_SPEC_DIR / "default.json").read_text())
    raw["name"] = "nine"
    raw["tools"] += [copy.deepcopy(t) for t in extra]
    return raw


def test_default_spec_is_the_tool_enum_with_todays_roles() -> None:
    spec = default_tool_spec()
    assert spec.names == tuple(Tool(t).wire_name for t in range(NUM_TOOLS)) and spec.num_tools == NUM_TOOLS
    assert [t.is_agent for t in spec.tools] == [Tool(t).is_agent for t in range(NUM_TOOLS)]
    # the compiled kernel's special tools are the spec's behaviours, as the tool table's columns hold them
    tt = build_tables(load_pool("paramanager"), load_suite("paramanager")).tt
    assert np.flatnonzero(tt[TT_BEHAVIOUR] == B_REVIEWER).tolist() == [Tool.CRITICAL_REVIEWER]
    assert np.flatnonzero(tt[TT_BEHAVIOUR] == B_ENSEMBLE).tolist() == [Tool.ENSEMBLE_SOLVER]
    assert np.flatnonzero(tt[TT_AGENT] == 0).tolist() == [Tool.PYTHON, Tool.SEARCH]
    assert spec.with_behaviour("reviewer") == (Tool.CRITICAL_REVIEWER,)
    assert spec.with_behaviour("ensemble") == (Tool.ENSEMBLE_SOLVER,)
    assert spec.with_behaviour("code_exec") == (Tool.CODE_REASONER, Tool.PYTHON)
    assert [t.callable for t in spec.tools] == [None] * NUM_TOOLS  # python and search run on sandbox / retriever
    assert set(SYSTEM_PROMPTS) == {t for t in Tool if t.is_agent}
    assert TOOL_ARGUMENTS[Tool.PYTHON][0].name == "code" and TOOL_ARGUMENTS[Tool.SEARCH][0].name == "query"
    assert load_tool_spec() is spec and load_tool_spec("default") is spec


def test_shipped_pools_use_the_default_spec() -> None:
    for name in shipped_pools():
        pool = load_pool(name)
        assert pool.tools is default_tool_spec() and pool.bonus.shape[0] == NUM_TOOLS


def test_a_pool_referencing_a_nine_tool_spec(tmp_path: Path) -> None:
    spec_path = tmp_path / "nine.json"
    spec_path.write_text(json.dumps(_spec(VERIFIER, UNIT_CONVERTER)))
    raw = json.loads(POOL.read_text())
    raw["tool_spec"] = str(spec_path)
    pool = load_pool(raw)
    assert pool.tools.num_tools == 9 and pool.tools.names[7:] == ("verifier", "unit_converter")
    base = load_pool("paramanager")
    np.testing.assert_array_equal(pool.bonus[:7], base.bonus)  # the pool's own entries for the seven
    np.testing.assert_array_equal(pool.cost_units, [*base.cost_units, 1.5, 0.1])  # the spec's defaults for two
    assert pool.tok_mu.shape == (9, base.tok_mu.shape[1], base.tok_mu.shape[2])
    assert pool.lat_per_tok[8].max() == 0.0 and pool.lat_per_tok[7].min() > 0  # basic: no model; agent: a model
    assert "tool_spec(nine).tools.verifier.call_model.cost" in pool.sources
    assert reliability(pool).shape[1] == 9
    names = [t["function"]["name"] for t in tool_list(["m"], pool.tools)]
    assert names == [*pool.tools.names, "final_answer"]
    converter = tool_list(["m"], pool.tools)[8]["function"]
    assert converter["parameters"]["required"] == ["quantity"]
    assert '"name": "verifier"' in render_system_prompt({"m": ""}, tools=pool.tools)
    assert resolve_callable(pool.tools.tools[8]) is json.dumps


def test_a_pool_entry_overrides_the_spec_default_and_unknown_tools_are_refused() -> None:
    raw = json.loads(POOL.read_text())
    raw["tool_spec"] = "default"
    raw["tools"]["hammer"] = raw["tools"]["python"]
    with pytest.raises(PoolError, match=r"tools.hammer: unknown tool; known: \['standard_reasoner'"):
        load_pool(raw)
    raw = json.loads(POOL.read_text())
    raw["tool_spec"] = "nonesuch"
    with pytest.raises(PoolError, match=r"tool_spec: expected one of \['default'\] or a path"):
        load_pool(raw)


def _tool_error(tool: dict, message: str) -> None:
    with pytest.raises(ToolSpecError, match=message):
        parse_tool_spec(_spec(tool))


@pytest.mark.parametrize(("change", "message"), [
    ({"kind": "robot"}, r"tools\[7\] \(verifier\).kind: expected one of \['agent', 'basic'\], got 'robot'"),
    ({"behaviour": "oracle"}, r"tools\[7\] \(verifier\).behaviour: expected one of \['solver', 'reviewer', "
                              r"'ensemble', 'code_exec', 'search'\], got 'oracle'"),
    ({"behaviour": "reviewr"}, r"got 'reviewr'; did you mean 'reviewer'\?"),
    ({"name": "Verifier!"}, r"tools\[7\].name: expected a lower-case identifier"),
    ({"name": "final_answer"}, r"not 'final_answer'"),
    ({"colour": "red"}, r"tools\[7\].colour: unknown key 'colour'; allowed: \['name', 'kind'"),
    ({"real": {}}, r"real.system_prompt"),
    ({"real": {"system_prompt": "x", "callable": "a:b"}}, r"real.callable: an agent tool runs on a pool model"),
    ({"argument": UNIT_CONVERTER["argument"]}, r"argument: an agent tool takes 'model', 'subtask'"),
])
def test_bad_agent_tools_name_the_field_and_allowed_values(change: dict, message: str) -> None:
    _tool_error({**VERIFIER, **change}, message)


def test_bad_cost_names_the_field_and_range() -> None:
    tool = copy.deepcopy(VERIFIER)
    tool["call_model"]["cost"]["units"] = -1
    _tool_error(tool, r"tools\[7\] \(verifier\).call_model.cost.units: expected a number in \[0, 1000\], got -1")
    tool["call_model"]["cost"]["units"] = "cheap"
    _tool_error(tool, r"call_model.cost.units: expected a number in \[0, 1000\], got 'cheap'")
    del tool["call_model"]["cost"]
    _tool_error(tool, r"call_model.cost: missing")
    tool = copy.deepcopy(VERIFIER)
    tool["call_model"]["output"] = UNIT_CONVERTER["call_model"]["output"]  # an agent's output is its model's
    _tool_error(tool, r"call_model.output: unknown key 'output'; allowed: \['bonus', 'cost', 'runtime'\]")


@pytest.mark.parametrize(("change", "message"), [
    ({"behaviour": "reviewer"}, r"behaviour: 'reviewer' needs kind 'agent'.*allowed for a basic tool: \['solver', "
                                r"'code_exec', 'search'\]"),
    ({"argument": None}, r"argument: expected an object with keys \['name', 'type', 'description', 'aliases'\]"),
    ({"argument": {**UNIT_CONVERTER["argument"], "type": "float"}}, r"argument.type: expected one of \['string', "
                                                                     r"'integer'\], got 'float'"),
    ({"argument": {**UNIT_CONVERTER["argument"], "name": "model"}}, r"argument.name: expected a lower-case "
                                                                     r"identifier other than 'model'"),
    ({"real": {}}, r"real.callable: missing \(a basic solver tool runs a Python function"),
    ({"real": {"callable": "not a path"}}, r"real.callable: expected 'package.module:function', got 'not a path'"),
    ({"real": {"system_prompt": "x", "callable": "a:b"}}, r"real.system_prompt: a basic tool runs no model"),
])
def test_bad_basic_tools_name_the_field_and_allowed_values(change: dict, message: str) -> None:
    tool = {**UNIT_CONVERTER, **change}
    if change.get("argument", 0) is None:
        tool.pop("argument")
        message = r"argument: missing"
    _tool_error(tool, message)


def test_spec_level_errors() -> None:
    with pytest.raises(ToolSpecError, match=r"tools\[8\].name: duplicate tool name 'verifier' \(also tools\[7\]\)"):
        parse_tool_spec(_spec(VERIFIER, VERIFIER))
    with pytest.raises(ToolSpecError, match=r"tools: expected a list of 1..64 tools"):
        parse_tool_spec({"name": "none", "tools": []})
    with pytest.raises(ToolSpecError, match=r"tools_: unknown key"):
        parse_tool_spec({"name": "x", "tools_": []})
    basic = dict(UNIT_CONVERTER, real={"callable": "parasim_no_such_module:f"})
    spec = parse_tool_spec(_spec(basic))
    with pytest.raises(ToolSpecError, match=r"cannot import 'parasim_no_such_module'"):
        resolve_callable(spec.tools[7])
    with pytest.raises(ToolSpecError, match=r"has no real.callable \(it runs on the backend's sandbox\)"):
        resolve_callable(spec.tools[int(Tool.PYTHON)])
    assert set(KINDS) == {"agent", "basic"} and "ensemble" in BEHAVIOURS


def test_a_bad_spec_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "bad", "tools": [dict(VERIFIER, kind="robot")]}))
    with pytest.raises(ToolSpecError, match=rf"{path}: tools\[0\] \(verifier\).kind: expected one of"):
        load_tool_spec(path)
    path.write_text('{"name": "bad", "name": "twice", "tools": []}')
    with pytest.raises(ToolSpecError, match="duplicate"):
        load_tool_spec(path)
