"""The orchestration protocol: tools, call statuses, calls and their results.

These enumerations are the contract between every layer (simulator, environments, real tools, the
C++ core's per-tool count columns), so their integer values are fixed: never reorder, only append.
Tool names follow ParaManager's agent tools plus the basic tools of ToolOrchestra.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

MAX_ROUNDS = 12
MAX_PARALLEL = 4


class Tool(enum.IntEnum):
    """Callable tools; ``FINAL_ANSWER`` ends the episode and is not a tool round."""

    STANDARD_REASONER = 0
    CRITICAL_REVIEWER = 1
    CODE_REASONER = 2
    KNOWLEDGE_SEARCHER = 3
    ENSEMBLE_SOLVER = 4
    PYTHON = 5
    SEARCH = 6
    FINAL_ANSWER = 7

    @property
    def wire_name(self) -> str:
        """The name the manager writes in a ``<tool_call>`` block."""
        return self.name.lower()

    @property
    def is_agent(self) -> bool:
        """Agent tools take a model id and a subtask; basic tools (python, search) take an input."""
        return self <= Tool.ENSEMBLE_SOLVER

    @classmethod
    def from_wire(cls, name: str) -> Tool:
        """Parse a tool name as written by a manager; raises ``KeyError`` for unknown names."""
        return cls[name.strip().upper()]


NUM_TOOLS = 7  # callable tools, FINAL_ANSWER excluded: the width of per-tool count arrays
# The most callable tools a tool spec may declare: the C++ core's per-trajectory feature capacity
# (``parasim._core.max_tools``; a test checks that they agree).
MAX_TOOLS = 64
AGENT_TOOLS = tuple(t for t in Tool if t.is_agent)
BASIC_TOOLS = (Tool.PYTHON, Tool.SEARCH)


class Status(enum.IntEnum):
    """Outcome of one call. Failures are data, never exceptions."""

    OK = 0
    EXEC_ERR = 1
    TIMEOUT = 2
    FORMAT_ERR = 3
    INVALID_TOOL = 4
    BUDGET_EXCEEDED = 5
    TRUNCATED = 6  # the output reached the harness's generation cap: no answer (a tool failure, not a protocol one)


NUM_STATUSES = len(Status)
PROTOCOL_FAILURES = (Status.FORMAT_ERR, Status.INVALID_TOOL)
# a call with one of these statuses ran (it occupied its tool, and its tokens, time and USD count); the others are
# the rules' verdicts, given without a call
RAN_STATUSES = (Status.OK, Status.EXEC_ERR, Status.TIMEOUT, Status.TRUNCATED)


class Domain(enum.IntEnum):
    """Task domains; tool bonuses and model skills are indexed by these."""

    MATH = 0
    SCIENCE = 1
    KNOWLEDGE = 2
    CODE = 3


NUM_DOMAINS = len(Domain)


@dataclass(frozen=True)
class ToolCall:
    """One call of a round: ``model`` is a pool model id (agent tools) or empty (basic tools). ``tool`` is a ``Tool``
    for the default spec's tools, else the spec's ``parasim.tools.spec.SpecTool`` (an int index with ``wire_name``
    and ``is_agent``): ``ToolSpec.call_tool`` gives it. ``subtask`` is the call's text (a basic tool's argument as
    text); ``argument`` a basic tool's argument as the parser typed it by the tool's declared JSON type (an ``int``
    for ``integer``, a ``str`` for ``string``), what a user's function receives; None where the call was not parsed
    from text (a structured action's slot), whose text is its argument."""

    tool: Tool  # or a SpecTool (see above)
    model: str = ""
    subtask: str = ""
    target: int = -1  # index of an earlier call whose output the subtask carries, -1 for none
    argument: str | int | None = None


@dataclass
class CallResult:
    """What a call returns, simulated or real; the fields of the calibration JSONL log."""

    status: Status
    output: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_units: float = 0.0
    usd: float = 0.0
    latency_s: float = 0.0
    detail: str = ""  # why a failure happened (parser reason, server error), for the manager's feedback
    extra: dict[str, object] = field(default_factory=dict)
