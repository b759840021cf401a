"""The episode engine interface shared by simulated and real tools.

``ParaOrchText-v0`` drives an engine: the simulator-backed engine (structured env underneath) or the
real-tools engine (vLLM endpoints, sandbox, retriever); ``ParaOrch-v0`` with ``tools="real"`` drives the latter.
Keeping one explicit interface lets the same envs, rewards and trainers run against either without branches.

``EpisodeEngine`` names every member the envs read: ``reset``, ``run_round``, ``finish`` and ``model_names``, which
each engine writes, and the members an engine without a task list, a tool spec or a termination call can leave to
``EpisodeEngineBase``'s defaults (``tasks``, ``task``, ``num_tasks``, ``task_weights``, ``task_info``, ``tools``,
``counts_manager_tokens``, ``termination_latency_s``). The envs check an engine once, at construction
(``check_engine``), so a missing member is a ``TypeError`` naming it rather than a default guessed at each use.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from parasim.protocol.schema import CallResult, Domain, ToolCall

if TYPE_CHECKING:
    from parasim.tools.spec import ToolSpec


@dataclass
class TaskView:
    """What the manager may see of a task (never the gold answer or the hidden difficulty)."""

    task_id: str
    question: str
    domain: int
    options: tuple[str, ...] = ()


@dataclass
class EpisodeOutcome:
    """The end of an episode: the termination model's answer and the verifier's verdict."""

    answer: str
    correct: bool
    trajectory: dict[str, Any] = field(default_factory=dict)  # the TrajectoryBatch fields of this episode


class EpisodeEngine(Protocol):
    """Runs one episode's tool rounds; failures come back as statuses, never exceptions."""

    model_names: tuple[str, ...]  # the pool model ids the manager may name (a real engine may know them after reset)
    tasks: Sequence[Any]  # the task list an engine draws from and ``task_index`` indexes; () without one
    task: Any  # the current episode's task object (None when the engine has none): ``task_info`` finds it in tasks
    counts_manager_tokens: bool  # the engine's trajectory already holds the manager's own tokens (the simulator's)

    @property
    def num_tasks(self) -> int:
        """Valid ``task_index`` reset options are ``0 .. num_tasks - 1``; 0 without a task list."""
        ...

    @property
    def tools(self) -> ToolSpec | None:
        """The tools the manager may call (the pool's tool spec), None to leave them to the env's ``pool`` option."""
        ...

    @property
    def termination_latency_s(self) -> float:
        """Seconds the last ``finish`` spent on its own call (the termination model's), beyond the tool calls."""
        ...

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        """Start a new episode and return the task as the manager sees it."""
        ...

    def run_round(self, calls: Sequence[ToolCall], *, action: Sequence[int] | None = None,
                  slots: Sequence[int] | None = None) -> list[CallResult]:
        """Execute one round of parallel calls (already parsed and validated). The structured env also passes the
        round's ``action`` and each call's ``slot`` in it, for an engine's episode log (``parasim validate-sim``
        replays them); an engine without a log ignores them. An episode with its own tool prices (the task option
        ``tool_prices``) also passes ``prices`` (tool index -> USD per call), which the engine charges for those
        tools' calls instead of its own figures; only an engine whose ``run_round`` takes ``prices`` can play
        such episodes (``RealEpisodeEngine`` does)."""
        ...

    def finish(self, manager_answer: str | None = None) -> EpisodeOutcome:
        """Synthesize the final answer from the trajectory and verify it (the text env passes the manager's answer
        to a ``finish`` that takes ``manager_answer``)."""
        ...

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the engine draws tasks itself (float64[num_tasks])."""
        ...

    def task_info(self, view: TaskView) -> dict[str, int]:
        """``task_index`` and ``benchmark`` of the episode whose task the manager sees as ``view``, named as the
        simulated env's terminal info names them, so trainers read every engine alike."""
        ...


# what check_engine asks of an engine: every member the envs read (EpisodeEngineBase supplies the optional ones)
ENGINE_METHODS = ("reset", "run_round", "finish", "task_weights", "task_info")
ENGINE_ATTRIBUTES = ("model_names", "tasks", "task", "num_tasks", "tools", "counts_manager_tokens",
                     "termination_latency_s")


class EpisodeEngineBase:
    """The defaults of ``EpisodeEngine``'s optional members, for engines without a task list, a tool spec of their
    own or a termination call. A subclass writes ``reset``, ``run_round``, ``finish`` and ``model_names`` and
    overrides what it knows better (a task list: ``tasks`` and ``task``; the simulator's suite weights)."""

    tasks: Sequence[Any] = ()
    task: Any = None
    counts_manager_tokens: bool = False

    @property
    def num_tasks(self) -> int:
        """The length of the task list (0 without one)."""
        return len(self.tasks)

    @property
    def tools(self) -> ToolSpec | None:
        """None: the env's ``pool`` option gives the tool spec."""
        return None

    @property
    def termination_latency_s(self) -> float:
        """0: no termination call beyond the tool calls."""
        return 0.0

    def task_weights(self) -> np.ndarray:
        """Uniform over the task list (float64[num_tasks]); a ValueError without one (nothing to draw from)."""
        n = self.num_tasks
        if n == 0:
            raise ValueError("task_weights: the engine has no task list (pass tasks, or reset with options['task'])")
        return np.full(n, 1.0 / n)

    def task_info(self, view: TaskView) -> dict[str, int]:
        """The index of ``task`` in ``tasks`` (by identity, else by value; -1 when the engine has no task list or the
        task is not in it) and the benchmark's index in ``parasim.tasks.suites.BENCHMARKS``: the task's ``benchmark``
        name, else the generic benchmark of ``view``'s domain (tasks that carry no catalogue benchmark)."""
        from parasim.tasks.suites import (  # parasim.tasks.suites imports parasim.protocol: load it late
            BENCHMARK_INDEX,
            GENERIC,
        )

        task, tasks = self.task, list(self.tasks)
        index = next((i for i, t in enumerate(tasks) if t is task), -1)
        if index < 0 and task is not None and task in tasks:  # an equal task passed by value
            index = tasks.index(task)
        name = getattr(task, "benchmark", None)  # a task object is the engine's own: it may carry no benchmark
        benchmark = BENCHMARK_INDEX[name] if name in BENCHMARK_INDEX else GENERIC[Domain(view.domain)]
        return {"task_index": index, "benchmark": benchmark}


def check_engine(engine: Any) -> EpisodeEngine:
    """``engine`` if it has every member of ``EpisodeEngine``, else a TypeError naming the first one it lacks (the
    envs call this at construction, so an incomplete engine fails there, not mid-episode)."""
    missing = next((f"method {n!r}" for n in ENGINE_METHODS if not callable(getattr(engine, n, None))), None)
    missing = missing or next((f"attribute {n!r}" for n in ENGINE_ATTRIBUTES if not hasattr(engine, n)), None)
    if missing is not None:
        raise TypeError(f"engine: {type(engine).__name__} has no {missing}; an EpisodeEngine needs "
                        f"{', '.join(ENGINE_METHODS)} and {', '.join(ENGINE_ATTRIBUTES)} (subclass "
                        "parasim.protocol.engine.EpisodeEngineBase for the defaults of the optional ones)")
    return engine
