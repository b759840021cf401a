"""A tool spec with two user tools on top of the default seven, and the user's functions, for the tests of tools
as data (import it as ``from user_tools import ...``; pytest puts tests/ on the path, so ``real.callable`` can name
``user_tools:<function>``).

``verifier`` is an agent tool with the reviewer behaviour (its verdicts enter the vote as critical_reviewer's do);
``unit_converter`` a basic solver whose real-mode function converts a length; ``exploder`` and ``sleeper`` are
basic tools whose functions raise and hang; ``repeater`` takes an ``integer`` argument and says what it received.
"""
from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any

from parasim.tools.spec import TOOL_SPEC_DIR

POOL = Path(__file__).resolve().parents[1] / "parasim" / "pools" / "files" / "paramanager.json"
_ASSUMED = {"source": "assumed"}
_AGENT_MODEL = {
    "bonus": {"math": 0.0, "science": 0.0, "knowledge": 0.0, "code": 0.0, **_ASSUMED},
    "cost": {"units": 1.5, "usd_per_call": 0.0, "usd_per_s": 0.0, **_ASSUMED},
    "runtime": {"overhead_s": 0.05, "timeout_s": 600.0, "tokens_scale": 0.4, "feedback_frac": 0.1, **_ASSUMED}}
_BASIC_MODEL = {
    "bonus": {"math": 0.5, "science": 0.5, "knowledge": 0.0, "code": 0.0, **_ASSUMED},
    "cost": {"units": 0.1, "usd_per_call": 0.0, "usd_per_s": 0.0, **_ASSUMED},
    "runtime": {"overhead_s": 0.01, "timeout_s": 10.0, "tokens_scale": 1.0, "feedback_frac": 1.0, **_ASSUMED},
    "output": {"log_median_tokens": 2.0, "log_sd": 0.2, "latency_log_median_s": -3.0, "latency_log_sd": 0.3,
               **_ASSUMED}}
VERIFIER = {
    "name": "verifier", "kind": "agent", "behaviour": "reviewer",
    "description": "Checks the leading answer against the question and says whether it holds.",
    "call_model": _AGENT_MODEL,
    "real": {"system_prompt": "You verify answers. Write 'Verdict: CORRECT' or 'Verdict: WRONG' on its own line, "
                              "then 'Final answer: <answer>'."}}
UNIT_CONVERTER = {
    "name": "unit_converter", "kind": "basic", "behaviour": "solver",
    "description": "Converts a length between units and returns the number.",
    "argument": {"name": "quantity", "type": "string", "description": "e.g. '3 mi in km'.", "aliases": ["input"]},
    "call_model": _BASIC_MODEL, "real": {"callable": "user_tools:convert"}}
EXPLODER = dict(UNIT_CONVERTER, name="exploder", real={"callable": "user_tools:explode"})
SLEEPER = dict(UNIT_CONVERTER, name="sleeper", real={"callable": "user_tools:sleep_long"})
REPEATER = dict(UNIT_CONVERTER, name="repeater", description="Repeats 'ab' the given number of times.",
                argument={"name": "count", "type": "integer", "description": "How many times.", "aliases": ["n"]},
                real={"callable": "user_tools:repeat"})
_METRES = {"m": 1.0, "km": 1000.0, "mi": 1609.344, "ft": 0.3048}


def convert(quantity: str) -> str:
    """'<number> <unit> in <unit>' -> the converted number, 4 decimals (the README's example function)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-z]+)\s+in\s+([a-z]+)\s*", quantity)
    if match is None:
        raise ValueError(f"expected '<number> <unit> in <unit>', got {quantity!r}")
    value, src, dst = float(match.group(1)), match.group(2), match.group(3)
    return f"{value * _METRES[src] / _METRES[dst]:.4f}"


def repeat(count: int) -> str:
    """'ab' ``count`` times, after its argument's type and value: what the function received."""
    return f"{type(count).__name__} {count}: " + "ab" * max(0, min(count, 8))


def explode(quantity: str) -> str:
    raise RuntimeError(f"cannot handle {quantity!r}")


def sleep_long(quantity: str) -> str:
    time.sleep(3.0)  # past the tests' 0.2 s limit; the daemon thread ends on its own
    return quantity


def spec_dict(*extra: dict[str, Any], name: str = "user") -> dict[str, Any]:
    """The default spec's tools followed by ``extra``."""
    raw = json.loads((TOOL_SPEC_DIR / "default.json").read_text())
    raw["name"] = name
    raw["tools"] += [copy.deepcopy(t) for t in extra]
    return raw


def pool_with(tmp_path: Path, *extra: dict[str, Any]) -> Path:
    """The paramanager pool file with a tool spec file of the default tools and ``extra``, written to ``tmp_path``."""
    spec_path = tmp_path / "user_tools.json"
    spec_path.write_text(json.dumps(spec_dict(*extra)))
    raw = json.loads(POOL.read_text())
    raw["tool_spec"] = str(spec_path)
    pool_path = tmp_path / "user_pool.json"
    pool_path.write_text(json.dumps(raw))
    return pool_path
