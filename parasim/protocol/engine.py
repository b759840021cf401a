"""The episode engine interface shared by simulated and real tools.

Both environments, ParaOrch-v0 and ParaOrchText-v0, run real tools through the same call source
(``envs.real_source.RealSource``), which keeps the episode under the compiled rules (``parasim.sim.rules``:
validation, evidence and the vote, accounting, the round limit) and hands an engine only what the rules let run.
So an engine runs calls and answers, nothing more: ``reset`` draws a task, ``run_round`` runs calls, ``finish``
writes and verifies the final answer; it keeps no trajectory and does no accounting of its own.

``EpisodeEngine`` names every member the envs read: ``reset``, ``run_round``, ``finish`` and ``model_names``, which
each engine writes, and the members an engine without a task list or a tool spec can leave to
``EpisodeEngineBase``'s defaults (``tasks``, ``task``, ``num_tasks``, ``task_weights``, ``task_info``, ``tools``).
The envs check an engine once, at construction (``check_engine``), so a missing member is a ``TypeError`` naming it
rather than a default guessed at each use.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    """The end of an episode: the termination model's answer, the verifier's verdict, and what the termination call
    itself cost (the call source adds it to the episode's accounting: 0 for an engine without one)."""

    answer: str
    correct: bool
    termination_usd: float = 0.0
    termination_latency_s: float = 0.0


class EpisodeEngine(Protocol):
    """Runs one episode's tool rounds; failures come back as statuses, never exceptions."""

    model_names: tuple[str, ...]  # the pool model ids the manager may name (a real engine may know them after reset)
    tasks: Sequence[Any]  # the task list an engine draws from and ``task_index`` indexes; () without one
    task: Any  # the current episode's task object (None when the engine has none): ``task_info`` finds it in tasks

    @property
    def num_tasks(self) -> int:
        """Valid ``task_index`` reset options are ``0 .. num_tasks - 1``; 0 without a task list."""
        ...

    @property
    def tools(self) -> ToolSpec | None:
        """The tools the manager may call (the pool's tool spec), None to leave them to the env's ``pool`` option."""
        ...

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        """Start a new episode and return the task as the manager sees it."""
        ...

    def run_round(self, calls: Sequence[ToolCall], *, action: Sequence[int] | None = None,
                  slots: Sequence[int] | None = None) -> list[CallResult]:
        """Execute one round of parallel calls (already validated by the rules: only calls that run reach an
        engine). The call source also passes the round's ``action`` and each call's ``slot`` in it, for an
        engine's episode log (``parasim validate-sim`` replays them); an engine without a log ignores them. An
        episode with its own tool prices (the task option ``tool_prices``) also passes ``prices`` (tool index ->
        USD per call), which the engine charges for those tools' calls instead of its own figures; only an engine
        whose ``run_round`` takes ``prices`` can play such episodes (``RealEpisodeEngine`` does)."""
        ...

    def finish(self, manager_answer: str | None = None, lead: str | None = None) -> EpisodeOutcome:
        """Write the final answer from the episode's calls and verify it. ``manager_answer`` is the manager's own
        ``final_answer`` text (the text env's; None from the structured env or at the round limit); ``lead`` is the
        answer the rules' vote leads with (``parasim.sim.rules.lane_lead`` over the evidence, None when no call gave
        an answer): the answer when the engine writes none itself, as the simulated termination model's."""
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
ENGINE_ATTRIBUTES = ("model_names", "tasks", "task", "num_tasks", "tools")


class EpisodeEngineBase:
    """The defaults of ``EpisodeEngine``'s optional members, for engines without a task list or a tool spec of
    their own. A subclass writes ``reset``, ``run_round``, ``finish`` and ``model_names`` and
    overrides what it knows better (a task list: ``tasks`` and ``task``; the simulator's suite weights)."""

    tasks: Sequence[Any] = ()
    task: Any = None

    @property
    def num_tasks(self) -> int:
        """The length of the task list (0 without one)."""
        return len(self.tasks)

    @property
    def tools(self) -> ToolSpec | None:
        """None: the env's ``pool`` option gives the tool spec."""
        return None

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
