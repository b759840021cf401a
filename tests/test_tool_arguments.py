"""A basic tool's argument is typed by its declared JSON type, the same way in simulation and with real tools.

``repeater`` (``tests/user_tools.py``) declares an ``integer`` argument. Before typed arguments, the parser read
every ``integer`` as a call id: -3 and null became None and the call ran OK, "#7" became 7, 1e300 a 300-digit
int, and with real tools every call was EXEC_ERR ``'int' object has no attribute 'encode'`` (the user's function
never ran). Now an integer argument is a Python int in [-(2**53 - 1), 2**53 - 1] or a FORMAT_ERR saying why,
strings stay strings, and the user's function receives the int.
"""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from test_real_backend import _control, _emap
from user_tools import REPEATER, UNIT_CONVERTER, pool_with

import parasim  # noqa: F401  (registers the envs)
from parasim.pools.pool import load_pool
from parasim.protocol.parser import parse_tool_calls
from parasim.protocol.schema import Status
from parasim.real.backend import CallInput, RealToolBackend

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LIMIT = 2**53 - 1
GOOD = {"7": 7, "-3": -3, "0": 0, '"12"': 12, "7.0": 7, str(LIMIT): LIMIT, str(-LIMIT): -LIMIT}
BAD = ["null", '"#7"', "1e300", str(LIMIT + 1), "true", "7.5", '"seven"', "[1]", '""', "Infinity"]


@pytest.fixture(scope="module")
def pool_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pool_with(tmp_path_factory.mktemp("typed_args"), REPEATER, UNIT_CONVERTER)


def _turn(value: str, tool: str = "repeater", key: str = "count") -> str:
    return f'<tool_call>{{"name": "{tool}", "arguments": {{"{key}": {value}}}}}</tool_call>'


@pytest.mark.parametrize("value", sorted(GOOD))
def test_an_integer_argument_is_a_python_int(pool_path: Path, value: str) -> None:
    parsed = parse_tool_calls(_turn(value), tools=load_pool(pool_path).tools)
    assert parsed.errors == []
    (call,) = parsed.calls
    assert type(call.argument) is int and call.argument == GOOD[value]
    assert call.subtask == str(GOOD[value])


@pytest.mark.parametrize("value", BAD)
def test_anything_else_is_a_format_error_with_the_reason(pool_path: Path, value: str) -> None:
    parsed = parse_tool_calls(_turn(value), tools=load_pool(pool_path).tools)
    assert parsed.calls == []
    (error,) = parsed.errors
    assert error.status is Status.FORMAT_ERR
    assert f"argument 'count' must be an integer in [{-LIMIT}, {LIMIT}]" in error.reason or (
        value == "null" and "'count' is null" in error.reason), error.reason


def test_the_tool_list_states_the_range_the_parser_accepts(pool_path: Path) -> None:
    from parasim.protocol.tool_schema import tool_list

    functions = {f["function"]["name"]: f["function"]["parameters"]["properties"]
                 for f in tool_list(["m"], load_pool(pool_path).tools)}
    assert functions["repeater"]["count"] == {"type": "integer", "description": "How many times.",
                                              "minimum": -LIMIT, "maximum": LIMIT}
    assert "minimum" not in functions["repeater"]["context_from"]  # a call id, not a number to range over


def test_string_arguments_stay_strings_and_call_ids_stay_call_ids(pool_path: Path) -> None:
    spec = load_pool(pool_path).tools
    (call,) = parse_tool_calls(_turn('"3 mi in km"', "unit_converter", "quantity"), tools=spec).calls
    assert call.argument == "3 mi in km" and call.subtask == "3 mi in km"
    text = '<tool_call>{"name": "repeater", "arguments": {"count": 2, "context_from": "#1"}}</tool_call>'
    (call,) = parse_tool_calls(text, tools=spec).calls
    assert call.argument == 2 and call.target == 1


@pytest.mark.slow
def test_sim_and_real_agree_and_the_function_receives_the_int(pool_path: Path, server: str) -> None:
    """Each turn gets the same statuses in the simulator's text env and through the real backend, and a valid
    call's function receives the int."""
    _control(server)
    env = gym.make("ParaOrchText-v0", pool=str(pool_path))
    spec = load_pool(pool_path).tools
    with RealToolBackend(_emap(server), pool_path) as backend:
        for value in [*sorted(GOOD), *BAD]:
            env.reset(seed=0)  # one round per episode: the turn is all that differs
            _, _, _, _, info = env.step(_turn(value))
            sim = [e.status for e in info["parsed"].errors] + [r.status for r in info["results"]]
            parsed = parse_tool_calls(_turn(value), tools=spec)
            real = [e.status for e in parsed.errors] + [
                r.status for r in backend.run_round(parsed.calls, [CallInput("q")] * len(parsed.calls))]
            assert sim == real, value
            if value in GOOD:
                (result,) = backend.run_round(parsed.calls, [CallInput("q")])
                assert result.status is Status.OK and result.output.startswith(f"int {GOOD[value]}: ")
