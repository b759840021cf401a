"""The trajectory schema: every field of a finished episode's record, declared once.

A trajectory row is what every producer writes (the simulator's compiled gather, the real-tools engine and
envs) and every consumer reads (``TrajectoryBatch``, the C++ reward core, the advantages). Each field's name,
dtype, shape, range and meaning live in ``TRAJECTORY_FIELDS`` only: ``TrajectoryBatch`` takes its fields,
validation and defaults from it, :func:`new_rows` allocates producers' arrays from it, and the compiled core
exports the fields it reads (``parasim._core.trajectory_fields()``), which a test compares with this table.

The per-tool field ``tool_counts`` has one column per tool of the tool spec (``num_tools``, 7 for the
default spec), in the spec's order; ``distinct_tools`` is bounded by the same count.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from parasim.protocol.schema import NUM_TOOLS

_I32_MAX = int(np.iinfo(np.int32).max)
_I64 = np.iinfo(np.int64)
NUM_TOOLS_BOUND = "num_tools"  # an upper bound that is the tool count of the batch


@dataclass(frozen=True)
class TrajectoryField:
    """One field of a trajectory row.

    ``kind``: "float" accepts real arrays (integers only up to 2**53 in magnitude, where float64 holds them
    exactly), "int" accepts integer arrays or floats that are exactly integral, "flag" accepts bool / 0 / 1 (only
    "flag" accepts bool). ``hi`` may be ``NUM_TOOLS_BOUND``: the batch's tool count. ``per_tool``: shape
    (N, num_tools), else (N,). ``core``: read by the compiled reward core (role ids reach the core as their own
    argument of the advantages, not in the batch dict).
    """

    name: str
    dtype: type
    kind: str
    lo: float
    hi: float | str
    doc: str
    per_tool: bool = False
    core: bool = True

    @property
    def ndim(self) -> int:
        return 2 if self.per_tool else 1

    def bounds(self, num_tools: int) -> tuple[float, float]:
        """The inclusive range of a value for a batch with ``num_tools`` tools."""
        return self.lo, num_tools if self.hi == NUM_TOOLS_BOUND else self.hi  # type: ignore[return-value]

    def shape(self, n: int, num_tools: int) -> tuple[int, ...]:
        return (n, num_tools) if self.per_tool else (n,)


TRAJECTORY_FIELDS: tuple[TrajectoryField, ...] = (
    TrajectoryField("outcome", np.float64, "float", 0.0, 1.0, "the verifier's score of the final answer (1 = correct)"),
    TrajectoryField("format_violations", np.int32, "int", 0, _I32_MAX,
                    "rounds the manager broke the protocol (malformed or invalid calls)"),
    TrajectoryField("ended_with_final", np.uint8, "flag", 0, 1, "the manager ended with final_answer"),
    TrajectoryField("rounds", np.int32, "int", 0, _I32_MAX, "tool rounds played"),
    TrajectoryField("tool_calls", np.int32, "int", 0, _I32_MAX, "calls issued over all rounds"),
    TrajectoryField("distinct_tools", np.int32, "int", 0, NUM_TOOLS_BOUND, "tools called at least once"),
    TrajectoryField("tool_counts", np.int32, "int", 0, _I32_MAX, "calls per tool, in the tool spec's order",
                    per_tool=True),
    TrajectoryField("tokens", np.float64, "float", 0.0, np.inf, "trajectory length in tokens"),
    TrajectoryField("cost_units", np.float64, "float", 0.0, np.inf, "the pool's cost units spent"),
    TrajectoryField("usd", np.float64, "float", 0.0, np.inf, "money spent in USD"),
    TrajectoryField("latency_s", np.float64, "float", 0.0, np.inf, "wall-clock seconds (critical path or serial)"),
    TrajectoryField("group_id", np.int64, "int", int(_I64.min), int(_I64.max),
                    "rollouts with equal ids share a task (group-relative rewards and advantages)"),
    TrajectoryField("role_id", np.int32, "int", 0, _I32_MAX, "the agent role of a multi-role rollout", core=False),
)
FIELDS: tuple[str, ...] = tuple(f.name for f in TRAJECTORY_FIELDS)
FIELD: dict[str, TrajectoryField] = {f.name: f for f in TRAJECTORY_FIELDS}
CORE_FIELDS: tuple[str, ...] = tuple(f.name for f in TRAJECTORY_FIELDS if f.core)


def new_rows(n: int, num_tools: int = NUM_TOOLS, *, fill: bool = True) -> dict[str, np.ndarray]:
    """Arrays for ``n`` trajectory rows, every field in its contract dtype and shape, in schema order.

    ``fill``: the defaults of an unset field (0, and ``group_id`` = 0..n-1: each row its own group), as
    ``TrajectoryBatch.from_arrays`` gives them; ``fill=False`` leaves them uninitialized for a producer that
    writes every field (the compiled gather).
    """
    if fill:
        out = {f.name: np.zeros(f.shape(n, num_tools), f.dtype) for f in TRAJECTORY_FIELDS}
        out["group_id"] = np.arange(n, dtype=np.int64)
        return out
    return {f.name: np.empty(f.shape(n, num_tools), f.dtype) for f in TRAJECTORY_FIELDS}


def count_tools(tools: Iterable[int], num_tools: int = NUM_TOOLS) -> np.ndarray:
    """``tool_counts`` of one episode from the tool index of each call (int32[num_tools]); an index outside
    [0, num_tools) is an error, not a dropped call."""
    counts = np.zeros(num_tools, np.int32)
    for t in tools:
        t = int(t)
        if not 0 <= t < num_tools:
            raise ValueError(f"tool_counts: tool index {t} is outside [0, {num_tools - 1}] (the tool spec's tools)")
        counts[t] += 1
    return counts
