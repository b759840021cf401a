"""The call sources of ParaOrch-v0: who answers a round's calls, behind one small interface.

``ParaOrchEnv`` and ``ParaOrchTextEnv`` each hold one ``CallSource`` (the text env translates the manager's text into
the same actions, plus the calls it wrote). Both sources keep the episode in a lane record and write the observation
with the same compiled rules (``parasim.sim.rules``: slot validation, evidence and the vote, accounting, the
round limit, the observation encoding), so the env itself only checks actions, scores the trajectory row (gathered
from the lane record by ``parasim.sim.gather.trajectory_fields``) and renders:

  - ``SimSource`` (``tools="sim"``): a one-lane ``Simulator``, whose one compiled step runs plan -> simulated
    calls -> apply, exactly as each lane of the vector env does.
  - ``RealSource`` (``tools="real"``, ``envs.real_source``): the same plan and apply, with the calls run
    on a ``RealEpisodeEngine`` in between.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from envs.render import RoundRecord, SimRound, sim_round
from parasim.config.env_options import TASK_OPTIONS, check_task_options
from parasim.protocol.schema import ToolCall
from parasim.sim import Simulator
from parasim.sim.kernel import I_ROUND
from parasim.sim.rules import STOP
from parasim.sim.state import ObsBuffers
from parasim.tools.spec import ToolSpec

# the simulated env's reset options (the vector env adds reset_mask): the task, then the episode's task options
# (``parasim.config.env_options.TASK_OPTIONS``: preference vector, tool subset, tool prices; docs/task_options.md)
RESET_OPTIONS = ("task_index", "task_seed", *TASK_OPTIONS)


class ResetTask(NamedTuple):
    """A reset's validated task and task options, in ``Simulator.reset``'s argument order after the mask:
    ``sim.reset(mask, *task)``."""

    task_index: np.ndarray | None
    task_seed: np.ndarray | None
    preference: np.ndarray | None
    tools_available: np.ndarray | None
    tool_prices: np.ndarray | None


def reset_task(options: dict[str, Any] | None, num_tasks: int, lanes: int | None,
                 tool_names: tuple[str, ...] = ()) -> ResetTask:
    """``options["task_index"]`` and ``options["task_seed"]`` validated (None where absent): int arrays of shape [1]
    for a single env (``lanes`` None), [lanes] for a vector env; and the task options of the pool's tools
    ``tool_names`` (``parasim.config.env_options.check_task_options``: one row per lane, one for a single env). Bad
    values are caller bugs and raise."""
    out = []
    for key, high in (("task_index", num_tasks), ("task_seed", 2**63)):
        value = (options or {}).get(key)
        if value is None:
            out.append(None)
            continue
        arr = np.asarray(value)
        shape = () if lanes is None else (lanes,)
        what = "an integer" if lanes is None else f"an integer array of shape ({lanes},)"
        if arr.shape != shape or arr.dtype.kind not in "iu" or (arr.size and not (0 <= arr.min() and arr.max() < high)):
            raise ValueError(f"options[{key!r}]: expected {what} with values in [0, {high}), got {value!r}")
        out.append(arr.reshape(-1).astype(np.int64))
    given = {k: v for k, v in (options or {}).items() if k in TASK_OPTIONS and v is not None}
    if given and not tool_names:
        raise ValueError(f"options: {', '.join(sorted(given))} need the pool's tool names (reset_task(..., "
                         "tool_names=sim.pool.tools.names))")
    return ResetTask(out[0], out[1], *check_task_options(given, tool_names, lanes))


class CallSource(Protocol):
    """What ``ParaOrchEnv`` calls; ``obs`` and ``lanes`` are lane 0's observation buffers and lane records, written
    in place by the compiled rules."""

    tools: str  # "sim" or "real"
    nondeterministic: bool  # real latencies and sampling are not reproducible
    reset_options: tuple[str, ...]
    model_names: tuple[str, ...]
    tool_spec: ToolSpec  # the tools the action's tool dimension indexes
    nvec: np.ndarray
    slots: int
    max_rounds: int
    obs: ObsBuffers
    lanes: np.ndarray
    params: np.ndarray  # the compiled rules' parameter record (``parasim.sim.tables.kernel_params``)

    @property
    def num_tasks(self) -> int:
        """Valid ``task_index`` values are ``0 .. num_tasks - 1``."""
        ...

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the source draws a task itself (float64[num_tasks])."""
        ...

    def reset(self, seed: int | None, options: dict[str, Any]) -> dict[str, Any]:
        """Begin an episode (``seed``: restart the source's streams; None continues them); returns the reset info."""
        ...

    def play(self, action: np.ndarray, record: bool, calls: dict[int, ToolCall] | None = None,
             manager_answer: str | None = None) -> tuple[bool, dict[str, Any], Any]:
        """One manager turn (stop, or a round); returns (episode over, step info, the round's board record or None;
        a record only when ``record``). A text manager also gives the calls it wrote per slot (``calls``) and, with a
        stop, its own answer (``manager_answer``): real tools run and read those; simulated tools sample the slot's
        outcome whatever its text says."""
        ...

    def cut(self) -> None:
        """End the running episode now, as one that never answered: the termination model answers from the
        evidence so far, with no round and no format violation added."""
        ...

    def task_info(self) -> dict[str, int]:
        """The episode's ``task_index`` (suite row or engine task) and ``benchmark`` (index into
        ``parasim.tasks.suites.BENCHMARKS``)."""
        ...

    def terminal_info(self) -> dict[str, Any]:
        """What the terminal step's info adds besides reward and trajectory: ``task_index``, ``benchmark``, ..."""
        ...

    def answer_label(self) -> str:
        """The final answer as the board shows it."""
        ...

    def round_records(self) -> list[dict[str, Any]]:
        """The last round's per-slot records (``parasim.sim.state.slot_records``), as the rules and the calls left
        them."""
        ...

    def board_rounds(self, records: Sequence[Any]) -> tuple[RoundRecord, ...]:
        """The board's rounds from the records ``play`` returned."""
        ...

    def board_extras(self) -> dict[str, Any]:
        """What only this source can show on the board (``Board`` fields: question, candidate labels)."""
        ...


class SimSource:
    """Simulated tools: one lane of the compiled simulator."""

    tools = "sim"
    nondeterministic = False
    reset_options = RESET_OPTIONS

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.model_names: tuple[str, ...] = tuple(sim.pool.model_names[:-1])
        self.tool_spec = sim.pool.tools
        self.nvec, self.slots, self.max_rounds = sim.nvec, sim.slots, int(sim.env[0])
        self.obs, self.lanes, self.params = sim.obs, sim.lane_records, sim.params
        self._act = np.zeros((1, len(sim.nvec)), np.int64)
        self._keep = np.zeros(1, np.uint8)

    @property
    def num_tasks(self) -> int:
        return self.sim.num_tasks

    def task_weights(self) -> np.ndarray:
        return self.sim.task_weights()

    def reset(self, seed: int | None, options: dict[str, Any]) -> dict[str, Any]:
        task = reset_task(options, self.num_tasks, None, self.sim.pool.tools.names)
        if seed is not None:
            self.sim.seed([seed])
        self.sim.reset(None, *task)
        return {}

    def play(self, action: np.ndarray, record: bool, calls: dict[int, ToolCall] | None = None,
             manager_answer: str | None = None) -> tuple[bool, dict[str, Any], SimRound | None]:
        del calls, manager_answer  # a simulated call's outcome is sampled from its slot, whatever its text
        self._act[0] = action
        done = bool(self.sim.step(self._act, self._keep)[0])
        ran = record and action[0] != STOP  # a stop runs no round
        return done, {}, (int(self.sim.state.st_i[0, I_ROUND]), action.copy(), self.sim.last_round(0)) if ran else None

    def cut(self) -> None:
        self.sim.cut(np.ones(1, np.uint8))

    def task_info(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.sim.tasks(0).items()}

    def terminal_info(self) -> dict[str, Any]:
        return self.task_info()

    def answer_label(self) -> str:
        return f"#{int(self.sim.final_answers()[0])}"

    def round_records(self) -> list[dict[str, Any]]:
        return self.sim.last_round(0)

    def board_rounds(self, records: Sequence[SimRound]) -> tuple[RoundRecord, ...]:
        return tuple(sim_round(*r, self.model_names, self.tool_spec) for r in records)

    def board_extras(self) -> dict[str, Any]:
        return {"tool_spec": self.tool_spec}
