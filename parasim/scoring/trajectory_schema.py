"""The trajectory schema: every field of a finished episode's record, declared once.

A trajectory row is what every producer writes (the simulator's compiled gather, the real-tools engine and
envs) and every consumer reads (``TrajectoryBatch``, the C++ reward core, the advantages). Each field's name,
dtype, shape, range and meaning live in ``TRAJECTORY_FIELDS`` only: ``TrajectoryBatch`` takes its fields,
validation and defaults from it, :func:`new_rows` allocates producers' arrays from it, and the compiled core
exports the fields it reads (``parasim._core.trajectory_fields()``), which a test compares with this table.

The per-tool field ``tool_counts`` has one column per tool of the tool spec (``num_tools``, 7 for the
default spec), in the spec's order; ``distinct_tools`` is bounded by the same count. ``preference`` has one column
per feature of the ``toolorchestra`` reward (the tools in spec order, then outcome, cost, latency: ``num_tools + 3``):
the episode's own preference vector where ``has_preference`` is 1; where it is 0 (the default: "none") the row holds
zeros and the reward config's vector applies, so batches that never set it score as they always did. The flag, not
a NaN row, is the stored "none", so that every field compares equal to itself (Gymnasium's env checker compares the
terminal infos); a NaN row given to ``TrajectoryBatch`` still means none (``has_preference`` 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parasim.protocol.schema import NUM_TOOLS

_I32_MAX = int(np.iinfo(np.int32).max)
_I64 = np.iinfo(np.int64)
NUM_TOOLS_BOUND = "num_tools"  # an upper bound that is the tool count of the batch
# The largest reward magnitude a config or a preference vector may produce: the sum of the absolute weights a
# formula reads (each component is a weight times a value in [-1, 1]) must stay at or below it, so that a total, a
# batch's sum of totals (scaled) and every advantage stays finite. 2**1000 (~1.07e301) leaves 2**23 of headroom.
MAX_REWARD_MAGNITUDE = 2.0**1000


@dataclass(frozen=True)
class TrajectoryField:
    """One field of a trajectory row.

    ``kind``: "float" accepts real arrays (integers only up to 2**53 in magnitude, where float64 holds them
    exactly), "int" accepts integer arrays or floats that are exactly integral, "flag" accepts bool / 0 / 1 (only
    "flag" accepts bool), "vector" accepts real rows that are either all finite or, on input, all NaN (none).
    ``hi`` may be ``NUM_TOOLS_BOUND``: the batch's tool count. ``per_tool``: shape (N, num_tools + extra_columns),
    else (N,). ``core``: read by the compiled reward core (role ids reach the core as their own argument of the
    advantages, not in the batch dict).
    """

    name: str
    dtype: type
    kind: str
    lo: float
    hi: float | str
    doc: str
    per_tool: bool = False
    core: bool = True
    extra_columns: int = 0  # a per-tool field's columns past the tools (``preference``: outcome, cost, latency)

    @property
    def ndim(self) -> int:
        return 2 if self.per_tool else 1

    @property
    def optional_rows(self) -> bool:
        """Whether a row may be given as all NaN, meaning none (kind "vector": ``preference``)."""
        return self.kind == "vector"

    def columns(self, num_tools: int) -> int:
        """A per-tool field's width for a batch of ``num_tools`` tools."""
        return num_tools + self.extra_columns

    def bounds(self, num_tools: int) -> tuple[float, float]:
        """The inclusive range of a value for a batch with ``num_tools`` tools."""
        return self.lo, num_tools if self.hi == NUM_TOOLS_BOUND else self.hi  # type: ignore[return-value]

    def shape(self, n: int, num_tools: int) -> tuple[int, ...]:
        return (n, self.columns(num_tools)) if self.per_tool else (n,)


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
    TrajectoryField("preference", np.float64, "vector", -np.inf, np.inf,
                    "the episode's toolorchestra preference vector (tools in spec order, outcome, cost, latency); "
                    "0 where has_preference is 0", per_tool=True, extra_columns=3),
    TrajectoryField("has_preference", np.uint8, "flag", 0, 1,
                    "the row's preference is the episode's own (0: none, the reward config's vector applies)"),
    TrajectoryField("role_id", np.int32, "int", 0, _I32_MAX, "the agent role of a multi-role rollout", core=False),
)
FIELDS: tuple[str, ...] = tuple(f.name for f in TRAJECTORY_FIELDS)
FIELD: dict[str, TrajectoryField] = {f.name: f for f in TRAJECTORY_FIELDS}
CORE_FIELDS: tuple[str, ...] = tuple(f.name for f in TRAJECTORY_FIELDS if f.core)


def new_rows(n: int, num_tools: int = NUM_TOOLS, *, fill: bool = True) -> dict[str, np.ndarray]:
    """Arrays for ``n`` trajectory rows, every field in its contract dtype and shape, in schema order.

    ``fill``: the defaults of an unset field (0, so ``has_preference`` none, and ``group_id`` = 0..n-1: each row its
    own group), as
    ``TrajectoryBatch.from_arrays`` gives them; ``fill=False`` leaves them uninitialized for a producer that
    writes every field (the compiled gather).
    """
    if fill:
        out = {f.name: np.zeros(f.shape(n, num_tools), f.dtype) for f in TRAJECTORY_FIELDS}
        out["group_id"] = np.arange(n, dtype=np.int64)
        return out
    return {f.name: np.empty(f.shape(n, num_tools), f.dtype) for f in TRAJECTORY_FIELDS}


PREFERENCE_TAIL: tuple[str, ...] = ("outcome", "cost", "latency")  # ``preference``'s columns after the tools
