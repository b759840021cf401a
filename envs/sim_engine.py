"""``SimEpisodeEngine``: ParaOrch-v0's simulator behind the ``EpisodeEngine`` interface of ParaOrchText-v0.

A round is stepped through the structured env itself (``ParaOrchEnv.step``), not through a second
implementation of the episode, so the same seed and the same calls give the same episode as ParaOrch-v0;
each call's own figures (status, answer, tokens, latency, USD, cost) come from the simulator's per-call
records of the last round (``Simulator.last_round``).

Answers in the simulator are ids (0 is the gold answer); the manager sees them as labels under a
random permutation, so no label means "right". The permutation is part of the task: with a ``task_seed``
reset option it is drawn from the task's own stream (seeded by ``task_seed`` and the task index played),
so the lanes of a GRPO group, which share ``task_index`` / ``task_seed`` but not their tool seeds, see the
same question with the same option letters; without one the task's draws come from the episode's stream,
and so does the permutation.

The question the manager reads is the task's text from its suite row (``TaskSuite.question``: a real MMLU-Pro or
MATH question where the shipped banks have one, generated text otherwise), drawn from the same seeds as the
labels under a tag of its own; each option label is shown beside the text of the answer id it stands for, so the
gold option text sits under ``labels[0]``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.paraorch import ParaOrchEnv
from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView
from parasim.protocol.schema import RAN_STATUSES, CallResult, Domain, Status, ToolCall
from parasim.sim import NUM_TARGETS, TARGET_CARRY, TARGET_QUESTION, TARGET_VERIFY
from parasim.sim.kernel import F_TOKENS, I_DOMAIN, I_EPISODE, I_NANS, leading_answer
from parasim.sim.rules import (
    RULE_BAD_TARGET,
    RULE_BUDGET,
    RULE_NOTHING_TO_CARRY,
    RULE_NOTHING_TO_REVIEW,
    RULE_REVIEWER_TARGET,
    RULE_SLOT_NOT_ALLOWED,
    RULE_UNKNOWN_MODEL,
    RULE_UNKNOWN_TOOL,
    slot_rule,
)
from parasim.sim.state import empty_action, set_action_slot
from parasim.sim.tables import E_SLOTS, E_TOKEN_BUDGET, TT_TIMEOUT
from parasim.tasks.questions import Question
from parasim.tasks.suites import BENCHMARKS, NUM_ANSWERS
from parasim.tools.spec import ToolSpec

# what the manager reads for each rule that rejects a call (the unknown-model reason also lists the models; {tool}:
# the call's tool, {reviewer}: the call's tool if it reviews, else the spec's first reviewer)
_REASONS = {
    RULE_UNKNOWN_TOOL: "tool not allowed in this slot",
    RULE_SLOT_NOT_ALLOWED: "tool not allowed in this slot",
    RULE_NOTHING_TO_REVIEW: "{tool} needs an answer to review; none exists yet",
    RULE_BAD_TARGET: "context_from names no earlier call",
    RULE_NOTHING_TO_CARRY: "context_from needs an earlier answer to carry; none exists yet",
    RULE_REVIEWER_TARGET: "{reviewer} verifies the leading answer; other tools take the question or carry",
    RULE_BUDGET: "the token budget is spent",
}
LABELS_TAG = 0x6C6162656C73  # "labels": keeps the permutation's stream apart from other uses of a task seed
QUESTION_TAG = 0x7175657374  # "quest": the stream that picks the task's question text (``TaskSuite.question``)


def _labels(nans: int, rng: np.random.Generator) -> list[str]:
    """Answer-id -> label under a random permutation: option letters, or opaque tags for free-form answers."""
    letters = [chr(ord("A") + j) for j in range(nans)]
    names = letters if nans < NUM_ANSWERS else [f"ans-{c}" for c in letters]
    return [names[j] for j in rng.permutation(nans)]


class SimEpisodeEngine(EpisodeEngineBase):
    """One simulated episode at a time, over ParaOrch-v0 (same options, same seeds, same episodes)."""

    counts_manager_tokens = True  # the simulator already adds the manager's per-round / per-call tokens

    def __init__(self, pool: Any = "paramanager", suite: Any = "paramanager", *, max_rounds: int = 12,
                 max_parallel: int = 4, serial: bool = False, reward: Any = "paramanager",
                 token_budget: float | None = None, seed: int | None = None,
                 harness: dict[str, Any] | None = None) -> None:
        self.env = ParaOrchEnv(pool=pool, suite=suite, max_rounds=max_rounds, max_parallel=max_parallel,
                               serial=serial, reward=reward, tools="sim", token_budget=token_budget, seed=seed,
                               harness=harness)
        self.sim = self.env.sim
        self.model_names: tuple[str, ...] = self.env.model_names
        self.labels: list[str] = []
        self.question: Question | None = None  # the current task's question (text, options by answer id, gold)
        self.calls_so_far = 0
        self._info: dict[str, Any] | None = None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        """Draw the next task exactly as ``ParaOrch-v0.reset(seed=seed, options=options)`` does (``task_index``,
        ``task_seed``: see ``ParaOrchEnv``)."""
        self.env.reset(seed=seed, options=options)
        st_i = self.sim.state.st_i[0]
        nans = int(st_i[I_NANS])
        task = self.task_info()
        task_seed = (options or {}).get("task_seed")
        if task_seed is not None:
            rng = np.random.default_rng([int(task_seed), task["task_index"], LABELS_TAG])
        else:  # the task came from the lane's stream: read its state after the task's draws, without advancing it
            rng = np.random.default_rng(int(self.sim.state.rng[0]))
        self.labels = _labels(nans, rng)
        self.calls_so_far = 0
        self._info = None
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

    @property
    def tools(self) -> ToolSpec:
        """The pool's tool spec: the tools the text env's parser reads."""
        return self.sim.pool.tools

    @property
    def num_tasks(self) -> int:
        """The suite's rows (valid ``task_index`` values are ``0 .. num_tasks - 1``)."""
        return self.env.num_tasks

    def task_info(self, view: TaskView | None = None) -> dict[str, int]:
        """The episode's ``task_index`` (suite row) and ``benchmark`` (index into
        ``parasim.tasks.suites.BENCHMARKS``): the simulator's own, so ``view`` is not needed."""
        del view
        return {k: int(v[0]) for k, v in self.sim.tasks([0]).items()}

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the env draws tasks itself (``ParaOrchEnv.task_weights``)."""
        return self.env.task_weights()

    def _slot(self, call: ToolCall, index: int) -> tuple[int, int, int]:
        names = self.model_names
        model = names.index(call.model) if call.model in names else (0 if not call.tool.is_agent else len(names))
        tool = self.tools.tool_def(call.tool)
        if tool is not None and tool.behaviour == "reviewer":
            target = TARGET_VERIFY
        elif call.target < 0:
            target = TARGET_QUESTION
        else:
            target = TARGET_CARRY if call.target < index else NUM_TARGETS  # no such earlier call: FORMAT_ERR
        return int(call.tool), model, target

    def run_round(self, calls: Sequence[ToolCall], *, action: Sequence[int] | None = None,
                  slots: Sequence[int] | None = None) -> list[CallResult]:
        """Step one round of ParaOrch-v0 with these calls (at most ``max_parallel``) and report each call (this engine
        keeps no episode log: ``action`` and ``slots`` are ignored, the round's action is built from the calls)."""
        del action, slots
        if self._info is not None:
            return [CallResult(Status.BUDGET_EXCEEDED, detail="the episode is over") for _ in calls]
        sim, slots = self.sim, self.sim.slots
        if len(calls) > slots:
            raise ValueError(f"calls: at most max_parallel={slots} per round, got {len(calls)}")
        action = empty_action(slots, sim.num_tools)
        slot_args = [self._slot(c, self.calls_so_far) for c in calls]
        for k, (tool, model, target) in enumerate(slot_args):
            set_action_slot(action, k, tool, model, target)
        state = sim.state
        # the round-start lead and trajectory length, which the rules' slot checks read (``slot_rule``)
        has_lead = int(leading_answer(state.ev, state.arrival, 0, int(state.st_i[0, I_NANS]))) >= 0
        tokens = float(state.st_f[0, F_TOKENS])
        _, _, terminated, _, info = self.env.step(action)
        self.calls_so_far += len(calls)
        if terminated:
            self._info = info
        results = []
        for (tool, model, target), rec in zip(slot_args, sim.last_round(0)):
            status = rec["status"]
            if status not in RAN_STATUSES:
                rule = slot_rule(sim.params[0]["tt"], tool, model, target, rec["slot"], int(sim.env[E_SLOTS]),
                                 len(self.model_names), has_lead, tokens, float(sim.env[E_TOKEN_BUDGET]))
                results.append(CallResult(status, detail=self._reason(rule, tool)))
                continue
            results.append(CallResult(
                status, output=self._output(rec["kind"], rec["answer"]), tokens_in=int(rec["tokens_in"] + 0.5),
                tokens_out=int(rec["tokens_out"] + 0.5), cost_units=rec["cost_units"], usd=rec["usd"],
                latency_s=rec["latency_s"], detail=self._failure(status, tool),
                extra={"answer_id": rec["answer"], "kind": rec["kind"]}))
        return results

    def _output(self, kind: str | None, answer: int) -> str:
        if kind == "answer":
            return f"answer: {self.labels[answer]}"
        if kind == "flag":
            return f"review: the leading answer {self.labels[answer]} looks wrong"
        if kind == "confirm":
            return f"review: the leading answer {self.labels[answer]} looks right"
        return ""

    def _failure(self, status: Status, tool: int) -> str:
        if status is Status.EXEC_ERR:
            return "the code raised an error"
        if status is Status.TIMEOUT:
            return f"timed out after {self.sim.tables.tt[TT_TIMEOUT, tool]:g} s"
        if status is Status.TRUNCATED:
            return f"the output reached the {self.sim.pool.max_output_tokens:g}-token generation cap; no answer"
        return ""

    def _reason(self, rule: int, tool: int) -> str:
        """Why the rules rejected a call of ``tool`` without running it (``parasim.sim.rules.slot_rule``), in the
        text protocol's words."""
        if rule == RULE_UNKNOWN_MODEL:
            return f"unknown model; models: {', '.join(self.model_names)}"
        spec = self.tools
        name = spec.names[tool] if 0 <= tool < spec.num_tools else f"tool #{tool}"
        reviewers = [spec.names[t] for t in spec.with_behaviour("reviewer")]
        reviewer = name if tool in spec.with_behaviour("reviewer") or not reviewers else reviewers[0]
        return _REASONS.get(rule, "").format(tool=name, reviewer=reviewer)

    @property
    def done(self) -> bool:
        return self._info is not None

    def finish(self, manager_answer: str | None = None) -> EpisodeOutcome:
        """Stop (``final_answer``) unless the round limit already ended the episode; the termination model answers.

        In simulation the answer is the termination model's vote, exactly as in ParaOrch-v0; the manager's
        own ``final_answer`` text is kept by the text env but does not change the outcome.
        """
        if self._info is None:
            action = empty_action(self.sim.slots, self.sim.num_tools, stop=True)
            _, _, _, _, self._info = self.env.step(action)
        answer = int(self.sim.final_answers()[0])
        trajectory = dict(self._info["trajectory"])
        return EpisodeOutcome(answer=self.labels[answer] if answer >= 0 else "",
                              correct=bool(trajectory["outcome"] >= 1.0), trajectory=trajectory)

