"""The episode engine interface shared by simulated and real tools.

``ParaOrchText-v0`` drives an engine: the simulator-backed engine (structured env underneath) or the
real-tools engine (vLLM endpoints, sandbox, retriever). Keeping one small interface lets the same
text environment, rewards and trainers run against either without branches.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from parasim.protocol.schema import CallResult, ToolCall


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

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        """Start a new episode and return the task as the manager sees it."""
        ...

    def run_round(self, calls: Sequence[ToolCall], *, action: Sequence[int] | None = None,
                  slots: Sequence[int] | None = None) -> list[CallResult]:
        """Execute one round of parallel calls (already parsed and validated). The structured env also passes the
        round's ``action`` and each call's ``slot`` in it, for an engine's episode log (``parasim validate-sim``
        replays them); an engine without a log ignores them."""
        ...

    def finish(self) -> EpisodeOutcome:
        """Synthesize the final answer from the trajectory and verify it."""
        ...
