"""``RealEpisodeEngine``: the ``EpisodeEngine`` of ParaOrchText-v0 with ``tools="real"``.

One engine runs one episode at a time over a list of ``RealTask``s; several engines (a GRPO group, a
vector of envs) share one ``RealToolBackend``, hence its per-endpoint concurrency limits and its loop.
Each round's calls run concurrently; a call that names an earlier one (``target``) gets that call's output
as context. Every finished call is verified (agent answers against the gold answer) and logged at once in
the calibration schema, so a crash loses only calls in flight. ``finish`` asks the termination model for
the final answer (the rules' vote lead when it gives none) and the verifier for the outcome, and returns them
with the termination call's own USD and latency. The engine keeps no trajectory and does no accounting: the call
source (``envs.real_source``) keeps the episode under the compiled rules, for ParaOrch-v0 and ParaOrchText-v0
alike. With a logger, ``finish`` also writes the episode's line of the episode log (``episode_record``), which
``parasim validate-sim`` replays in the simulator; the call source passes ``run_round`` the round's action and each
call's slot, so the replay is exact.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView
from parasim.protocol.schema import RAN_STATUSES, CallResult, Status, ToolCall
from parasim.real.backend import CallInput, RealToolBackend, approx_tokens
from parasim.real.calllog import CallLogger
from parasim.real.tasks import RealTask, parse_task
from parasim.real.termination import Synthesis, TerminationModel, fallback_answer
from parasim.tools.spec import ToolSpec

Verifier = Callable[[str, RealTask], bool]


def default_verifier(answer: str, task: RealTask) -> bool:
    """math-verify for math, option matching for multiple choice, normalized exact match otherwise (code tasks
    in a task file carry an expected output string, so they are matched exactly too)."""
    from parasim.tools.verify import AnswerKind, answer_kind, verify

    try:
        kind = answer_kind(task.domain, len(task.options))
    except ValueError:
        kind = AnswerKind.EXACT
    return verify(answer, task.answer, kind, options=task.options).correct


def _call_seed(episode_seed: int, index: int) -> int:
    """A per-call sampling seed that depends only on the episode seed and the call's index."""
    digest = hashlib.blake2b(f"{episode_seed}:{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


class RealEpisodeEngine(EpisodeEngineBase):
    """Runs episodes on real tools; failures are statuses, never exceptions."""

    def __init__(self, backend: RealToolBackend, tasks: Sequence[RealTask | dict[str, Any]], *,
                 logger: CallLogger | None = None, verifier: Verifier | None = None,
                 use_termination_model: bool = True, seed: int | None = None) -> None:
        if not tasks:
            raise ValueError("tasks: expected at least one task")
        self.backend = backend
        self.tasks = [t if isinstance(t, RealTask) else parse_task(t, f"tasks[{i}]") for i, t in enumerate(tasks)]
        self.logger = logger
        self.verifier = verifier or default_verifier
        self.termination = (TerminationModel(backend.chat, backend.endpoints.termination)
                            if use_termination_model else None)
        self._rng = np.random.default_rng(seed)
        self.task: RealTask | None = None
        self.calls: list[ToolCall] = []
        self.results: list[CallResult] = []
        self._rounds_log: list[dict[str, Any]] = []  # per round: its calls' indices and, if given, its action
        self._prices: dict[str, float] = {}
        self._episode = -1
        self.last_synthesis: Synthesis | None = None  # how the last final answer was reached, and its cost
        self._episode_seed = 0

    @property
    def model_names(self) -> tuple[str, ...]:
        """The pool model ids the manager may name: the endpoint map's (ParaOrchText-v0 shows and parses these)."""
        return self.backend.endpoints.model_ids

    @property
    def tools(self) -> ToolSpec | None:
        """The backend's tool spec (its pool's): the tools the text env's parser reads and the prompt lists; None for
        a stand-in backend without one (the env's ``pool`` option then gives them)."""
        spec = getattr(self.backend, "tools", None)
        return spec if isinstance(spec, ToolSpec) else None

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        """Start an episode on ``options["task"]`` (a task or its dict), ``options["task_index"]``, or a random task."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
            self.task = task if isinstance(task, RealTask) else parse_task(task, "options.task")
        elif "task_index" in options:
            index = options["task_index"]
            if not isinstance(index, int) or not 0 <= index < len(self.tasks):
                last = len(self.tasks) - 1
                raise ValueError(f"options.task_index: expected an integer in [0, {last}], got {index!r}")
            self.task = self.tasks[index]
        else:
            self.task = self.tasks[int(self._rng.integers(len(self.tasks)))]
        self._episode_seed = int(self._rng.integers(1 << 31))
        self._episode = self.logger.new_episode() if self.logger is not None else self._episode + 1
        self.calls, self.results = [], []
        self._rounds_log = []
        self._prices: dict[str, float] = {}  # the episode's own price of each tool it called (``run_round``)
        return self.task.view()

    def _input(self, call: ToolCall, index: int) -> CallInput:
        assert self.task is not None
        context = ""
        if 0 <= call.target < len(self.results) and self.results[call.target].status is Status.OK:
            carried = self.results[call.target].output
            context = "" if carried in call.subtask else carried
        return CallInput(self.task.question, self.task.options, context, _call_seed(self._episode_seed, index))

    def run_round(self, calls: Sequence[ToolCall], *, action: Sequence[int] | None = None,
                  slots: Sequence[int] | None = None, prices: Mapping[int, float] | None = None) -> list[CallResult]:
        """Run the calls concurrently; each is verified and logged as it is recorded. ``action`` (the round's
        MultiDiscrete action) and ``slots`` (each call's slot in it) are only logged, for ``parasim validate-sim``.
        ``prices`` (tool index -> USD per call) are the episode's own (its ``tool_prices`` task option): a call of
        such a tool that ran (``RAN_STATUSES``) costs that instead of the backend's figure, which its result keeps
        in ``extra["backend_usd"]``; the call log and the trajectory then show what the episode paid."""
        if self.task is None:
            raise RuntimeError("run_round before reset")
        if slots is not None and len(slots) != len(calls):
            raise ValueError(f"slots: expected one slot per call ({len(calls)}), got {len(slots)}")
        round_index = len(self._rounds_log)
        first = len(self.calls)
        self._rounds_log.append({"calls": list(range(first, first + len(calls)))}
                                | ({} if action is None else {"action": [int(x) for x in action]}))
        results = self.backend.run_round(calls, [self._input(c, first + i) for i, c in enumerate(calls)])
        for i, (call, result) in enumerate(zip(calls, results)):
            price = (prices or {}).get(int(call.tool))
            if price is not None:
                self._prices[call.tool.wire_name] = float(price)
            if price is not None and result.status in RAN_STATUSES:
                result.extra["backend_usd"] = result.usd
                result.usd = float(price)
            self._record(call, result, first + i, round_index, None if slots is None else int(slots[i]))
        return results

    def _record(self, call: ToolCall, result: CallResult, index: int, round_index: int, slot: int | None) -> None:
        assert self.task is not None
        answer = result.extra.get("answer")
        correct = None
        if result.status is Status.OK and call.tool.is_agent and isinstance(answer, str) and answer:
            correct = self._verify(answer)
            result.extra["correct"] = correct
        self.calls.append(call)
        self.results.append(result)
        if self.logger is not None:
            carried = 0 <= call.target < index and self.results[call.target].status is Status.OK
            context_tokens = approx_tokens(self.results[call.target].output) if carried else 0
            self.logger.log(episode=self._episode, call_index=index, round_index=round_index,
                            task=self.task.log_fields(), call=call, result=result, correct=correct,
                            flagged=result.extra.get("flagged"), context_tokens=context_tokens, slot=slot)

    def _verify(self, answer: str) -> bool:
        assert self.task is not None
        try:
            return self.verifier(answer, self.task)
        except Exception:  # a verifier crash on odd model output scores the answer wrong, never the run
            return False

    def finish(self, manager_answer: str | None = None, lead: str | None = None) -> EpisodeOutcome:
        """The termination model's answer (or, when it gives none, ``fallback_answer``: the rules' vote ``lead``,
        else the manager's), its verdict, and the termination call's USD and latency."""
        if self.task is None:
            raise RuntimeError("finish before reset")
        task = self.task
        synthesis = Synthesis(fallback_answer(lead, manager_answer), "vote")
        if self.termination is not None:
            try:
                synthesis = self.backend.run(self.termination.synthesize(
                    task.question, task.options, self.calls, self.results, manager_answer, lead,
                    seed=_call_seed(self._episode_seed, -1)))
            except Exception as err:  # a reply the client cannot digest must not end the episode: vote instead
                synthesis.status, synthesis.detail = Status.EXEC_ERR, f"{type(err).__name__}: {err}"[:300]
        correct = bool(synthesis.answer) and self._verify(synthesis.answer)
        self.last_synthesis = synthesis
        if self.logger is not None:
            self.logger.log_episode(self.episode_record(synthesis, correct, manager_answer is not None))
        return EpisodeOutcome(answer=synthesis.answer, correct=correct,
                              termination_usd=float(self.backend.termination_usd(synthesis)),
                              termination_latency_s=float(synthesis.latency_s))

    def episode_record(self, synthesis: Synthesis, correct: bool, manager_answered: bool) -> dict[str, Any]:
        """The episode log's line for the finished episode (schema: docs/validate_sim.md): the task, the models
        the actions' model dimension indexes, per round its calls (indices into the call log's ``call_index``)
        and action, the final answer, its verdict and the termination call's cost; and, for an episode with its own
        tool prices, the price of each tool it called (``tool_prices``, which the replay charges too)."""
        assert self.task is not None
        task = self.task
        return {
            "episode": self._episode, **task.log_fields(), "domain": task.domain.name.lower(),
            "options": len(task.options), "models": list(self.model_names), "rounds": self._rounds_log,
            "answer": synthesis.answer[:200], "correct": bool(correct), "synthesis": synthesis.method,
            "synthesis_status": synthesis.status.name, "manager_answer": manager_answered,
            "termination_latency_s": round(float(synthesis.latency_s), 6),
            "termination_usd": float(self.backend.termination_usd(synthesis)),
        } | ({"tool_prices": dict(self._prices)} if self._prices else {})
