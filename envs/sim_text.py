"""How ParaOrchText-v0 words a simulated episode: the task's text, its answers' labels and each call's output.

The simulator's answers are ids (0 is the gold answer); the manager reads them as labels under a random
permutation, so no label means "right". The permutation is part of the task: with a ``task_seed`` reset option it
is drawn from the task's own stream (seeded by ``task_seed`` and the task index played), so the lanes of a GRPO
group, which share ``task_index`` / ``task_seed`` but not their tool seeds, see the same question with the same
option letters; without one the task's draws come from the episode's stream, and so does the permutation.
The question the manager reads is the task's text from its suite row (``TaskSuite.question``: a real MMLU-Pro or
MATH question where the shipped banks have one, generated text otherwise), drawn from the same seeds as the labels
under a tag of its own; each option label is shown beside the text of the answer id it stands for, so the gold
option text sits under ``labels[0]``.
Nothing here decides an outcome: the call source and the compiled rules did (``parasim.sim.rules``); this module
only writes what they decided as text.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from parasim.protocol.engine import TaskView
from parasim.protocol.schema import Domain, Status
from parasim.sim import Simulator
from parasim.sim.kernel import I_DOMAIN, I_EPISODE, I_NANS
from parasim.sim.tables import TT_TIMEOUT
from parasim.tasks.questions import Question
from parasim.tasks.suites import BENCHMARKS, NUM_ANSWERS

LABELS_TAG = 0x6C6162656C73  # "labels": keeps the permutation's stream apart from other uses of a task seed
QUESTION_TAG = 0x7175657374  # "quest": the stream that picks the task's question text (``TaskSuite.question``)


def answer_labels(nans: int, rng: np.random.Generator) -> list[str]:
    """Answer-id -> label under a random permutation: option letters, or opaque tags for free-form answers."""
    letters = [chr(ord("A") + j) for j in range(nans)]
    names = letters if nans < NUM_ANSWERS else [f"ans-{c}" for c in letters]
    return [names[j] for j in rng.permutation(nans)]


class SimEpisodeText:
    """The words of lane 0's current simulated episode: its task view, labels and call outputs."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.labels: list[str] = []
        self.question: Question | None = None  # the current task's question (text, options by answer id, gold)

    def begin(self, options: dict[str, Any]) -> TaskView:
        """The task view of the episode just reset (``options``: the reset's, for ``task_seed``)."""
        st_i = self.sim.state.st_i[0]
        nans = int(st_i[I_NANS])
        task = {k: int(v[0]) for k, v in self.sim.tasks([0]).items()}
        task_seed = options.get("task_seed")
        if task_seed is not None:
            rng = np.random.default_rng([int(task_seed), task["task_index"], LABELS_TAG])
        else:  # the task came from the lane's stream: read its state after the task's draws, without advancing it
            rng = np.random.default_rng(int(self.sim.state.rng[0]))
        self.labels = answer_labels(nans, rng)
        bench = BENCHMARKS[task["benchmark"]]
        domain = Domain(int(st_i[I_DOMAIN]))
        episode = int(st_i[I_EPISODE])
        seed = [int(task_seed), task["task_index"]] if task_seed is not None else [int(self.sim.state.rng[0])]
        self.question = self.sim.suite.question(task["task_index"], np.random.default_rng([*seed, QUESTION_TAG]))
        options_view = tuple(sorted(self.labels)) if nans < NUM_ANSWERS else ()
        lines = [f"[{bench.name}] {self.question.text}"]
        if options_view:  # each label beside the text of the answer id it stands for (gold: id 0)
            lines += [f"{label}. {self.question.options[self.labels.index(label)]}" for label in options_view]
        fmt = f"one of the options {', '.join(options_view)}" if options_view else "a free-form answer"
        question = "\n".join(lines) + f"\nAnswer with {fmt}."
        return TaskView(task_id=f"{bench.name}-{episode}", question=question, domain=int(domain),
                        options=options_view)

    def label(self, answer: int) -> str:
        """The label of answer id ``answer`` ("" for none)."""
        return self.labels[answer] if answer >= 0 else ""

    def output(self, kind: str | None, answer: int) -> str:
        """A simulated call's output as the manager reads it."""
        if kind == "answer":
            return f"answer: {self.labels[answer]}"
        if kind == "flag":
            return f"review: the leading answer {self.labels[answer]} looks wrong"
        if kind == "confirm":
            return f"review: the leading answer {self.labels[answer]} looks right"
        return ""

    def failure(self, status: Status, tool: int) -> str:
        """Why a simulated call that ran gave no output."""
        if status is Status.EXEC_ERR:
            return "the code raised an error"
        if status is Status.TIMEOUT:
            return f"timed out after {self.sim.tables.tt[TT_TIMEOUT, tool]:g} s"
        if status is Status.TRUNCATED:
            return f"the output reached the {self.sim.pool.max_output_tokens:g}-token generation cap; no answer"
        return ""
