"""ParaOrch-v0 on real tools: ``gym.make("ParaOrch-v0", tools="real", engine=RealEpisodeEngine(...))``.

The same Dict observation and MultiDiscrete action spaces as the simulated env (``parasim.envs.paraorch``),
so a structured policy trained in simulation runs unchanged on real models. The model dimension indexes
the engine's ``model_names`` (its endpoint ids). Each round's slots become ``ToolCall``s that the engine
runs concurrently (failures come back as statuses):
  - target 0: the question, fresh context;
  - target 1: the question with the leading candidate's answer, and the output of the call that first
    gave it as carried context (the call may copy it, as in the simulator);
  - target 2 (critical_reviewer only): "verify this answer", the leading answer with the same context;
  - ``python`` runs the last program in the trajectory (the carried call's with target 1), else the question
    text, which fails as code: a structured manager cannot write programs; ``search`` queries the question
    (with the leading answer for target 1).
Every call of a round sees the leading candidate as it was when the round began, as in the simulator.
Protocol errors get the simulator's statuses by the simulator's rules (``slot_status``), without a call.

Candidates, evidence and tallies come from the real answers (``parasim.envs.real_evidence``). Budgets come
from the ``CallResult``s: cost units and USD as returned, latency the slowest call of a round (the sum
with ``serial=True``), and the trajectory length L the manager's tokens at the pool's protocol rates
(``manager_tokens_round`` / ``_call``) plus every call's output tokens and ``status_tokens`` for each failed
call, as the simulator counts them. A round whose trajectory already holds ``token_budget`` tokens gets
BUDGET_EXCEEDED for its calls. On stop or after ``max_rounds`` rounds the engine's ``finish()`` writes and
verifies the final answer, and the reward is ``compute_rewards`` of the episode's TrajectoryBatch row,
through the same function as the simulated env.

Terminal info, as the simulated env's: ``reward_components``, ``trajectory``, ``answer``, ``correct``, and
``task_index`` / ``benchmark`` (``real_task_info``): the task's position in the engine's task list (-1 for a task
passed in ``reset(options={"task": ...})`` that is not in it) and its benchmark as an index into
``parasim.tasks.BENCHMARKS`` (a real task names its catalogue benchmark, ``generic_<domain>`` by default).

Render (``render_mode`` "ansi" / "rgb_array") and ``action_masks()`` as in the simulated env; the board also shows
the question, the candidates' answers and each call's answer (or a failure's detail).

Real latencies and sampling are not reproducible, so the env's spec says ``nondeterministic=True``
(Gymnasium's checker then skips its step-determinism check); a seeded reset still draws the same task.
``pool`` here is the prior behind the candidates' scores (and the manager's token rates); ``suite`` is
unused (the engine holds the tasks).
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from parasim.env_options import check_episode_options, check_option_keys, check_seed
from parasim.envs.paraorch import (
    REAL_TOOLS_HINT,
    ParaOrchEnv,
    check_action,
    dict_observation_space,
    resolve_reward,
    score_trajectories,
    terminal_step_info,
)
from parasim.envs.real_evidence import (
    CallWeights,
    Candidate,
    EvidenceBoard,
    answer_kind,
)
from parasim.envs.render import (
    Board,
    CallRecord,
    RoundRecord,
    check_render_mode,
    ending_text,
    model_label,
    new_history,
)
from parasim.pools import load_pool
from parasim.protocol.engine import TaskView
from parasim.protocol.schema import (
    NUM_STATUSES,
    NUM_TOOLS,
    PROTOCOL_FAILURES,
    CallResult,
    Domain,
    Status,
    Tool,
    ToolCall,
)
from parasim.real import prompts
from parasim.real.backend import approx_tokens
from parasim.sim import (
    NUM_TARGETS,
    TARGET_CARRY,
    TARGET_QUESTION,
    TARGET_VERIFY,
    action_nvec,
)
from parasim.sim.kernel import CAND_FEATURES, EMPTY_SLOT, NO_CALL, NUM_CANDIDATES
from parasim.sim.state import TASK_FEATURES, static_action_mask
from parasim.tasks import BENCHMARK_INDEX, GENERIC, NUM_ANSWERS

# reset options: a task (or its dict) to play, or an index into the engine's list; ``task_seed`` is taken for parity
# with the simulated env (GRPO groups pass it), and a real task has no hidden draws for it to key
REAL_RESET_OPTIONS = ("task", "task_index", "task_seed")


def slot_status(tool: int, model: int, target: int, slot: int, *, allowed: int, num_models: int, has_lead: bool,
                tokens: float, token_budget: float) -> Status | None:
    """The simulator's protocol rules for one non-empty slot (``parasim.sim.kernel.step_lane``): the status a
    malformed or over-budget call gets without running, or None for a call that runs."""
    valid_tool = 0 <= tool < NUM_TOOLS
    agent = valid_tool and Tool(tool).is_agent
    if not valid_tool or slot >= allowed or (agent and not 0 <= model < num_models) or (
            tool == Tool.CRITICAL_REVIEWER and not has_lead):
        return Status.INVALID_TOOL
    if not 0 <= target < NUM_TARGETS or (target != TARGET_QUESTION and not has_lead) or (
            (tool == Tool.CRITICAL_REVIEWER) != (target == TARGET_VERIFY)):
        return Status.FORMAT_ERR
    if tokens >= token_budget:
        return Status.BUDGET_EXCEEDED
    return None


def lead_dependent_mask_entries(slots: int, allowed: int, num_models: int) -> np.ndarray:
    """Indices in the action mask of the entries a leading answer unlocks (critical_reviewer of each allowed
    slot, and the carry / verify targets of every slot); the rest of the mask is static."""
    idx, j = [], 2
    for k in range(slots):
        if k < allowed:
            idx.append(j + Tool.CRITICAL_REVIEWER)
        jt = j + NUM_TOOLS + 1 + num_models
        idx += [jt + TARGET_CARRY, jt + TARGET_VERIFY]
        j = jt + NUM_TARGETS
    return np.array(idx, np.int64)


def real_task_info(engine: Any, view: TaskView) -> dict[str, int]:
    """``task_index`` and ``benchmark`` of a real-tools engine's current task, named as the simulated env's terminal
    info names them, so trainers read both envs alike: the index of ``engine.task`` in ``engine.tasks`` (-1 when
    the engine has no task list or the task is not in it) and the benchmark's index in ``parasim.tasks.BENCHMARKS``
    (the task's ``benchmark`` name; the generic benchmark of the view's domain for engines whose tasks carry none).
    """
    task = getattr(engine, "task", None)
    tasks = list(getattr(engine, "tasks", None) or ())
    index = next((i for i, t in enumerate(tasks) if t is task), -1)
    if index < 0 and task is not None and task in tasks:  # an equal task passed by value
        index = tasks.index(task)
    name = getattr(task, "benchmark", None)
    benchmark = BENCHMARK_INDEX[name] if name in BENCHMARK_INDEX else GENERIC[Domain(view.domain)]
    return {"task_index": index, "benchmark": benchmark}


class ParaOrchRealEnv(ParaOrchEnv):
    """ParaOrch-v0 with ``tools="real"`` (built by ``ParaOrchEnv``; see the module docstring)."""

    _spec: EnvSpec | None = None

    def __init__(self, pool: Any = "paramanager", suite: Any = "paramanager", max_rounds: int = 12,
                 max_parallel: int = 4, serial: bool = False, reward: Any = "paramanager", tools: str = "real",
                 token_budget: float | None = None, seed: int | None = None, render_mode: str | None = None,
                 engine: Any = None) -> None:
        self.render_mode = check_render_mode(render_mode)
        if tools != "real":
            raise ValueError(f"tools: ParaOrchRealEnv runs tools='real' only, got {tools!r}")
        if engine is None:
            raise NotImplementedError(f"ParaOrch-v0 with tools='real' needs engine=, the real-tools backend of "
                                      f"its episodes: {REAL_TOOLS_HINT}. Use tools='sim' for the simulator.")
        max_rounds, max_parallel, serial, token_budget = check_episode_options(max_rounds, max_parallel, serial,
                                                                               token_budget)
        self.engine = engine
        self.model_names: tuple[str, ...] = tuple(engine.model_names)
        if not self.model_names:
            raise ValueError("engine: its model_names is empty; the action's model dimension needs at least one")
        self.pool = load_pool(pool)
        self.max_rounds, self.slots, self.serial = max_rounds, max_parallel, serial
        self.token_budget = np.inf if token_budget is None else token_budget
        self.reward_config = resolve_reward(reward)
        self.nvec = action_nvec(self.slots, len(self.model_names))
        self.observation_space = dict_observation_space(self.slots, float(self.max_rounds), self.nvec)
        self.action_space = spaces.MultiDiscrete(self.nvec)
        self._static_mask = static_action_mask(self.slots, self.slots, len(self.model_names))
        self._lead_entries = lead_dependent_mask_entries(self.slots, self.slots, len(self.model_names))
        self._initial_seed = check_seed(seed)
        self._episode = 0
        self._done = True
        self._history: deque[RoundRecord] | None = None if render_mode is None else new_history()
        self._ending: str | None = None

    # ------------------------------------------------------------------------------------ gymnasium API
    @property
    def num_tasks(self) -> int:
        """Tasks in the engine's list: the valid ``task_index`` values are ``0 .. num_tasks - 1``."""
        return len(getattr(self.engine, "tasks", None) or ())

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the engine draws a task itself: uniform over its list (float64)."""
        n = self.num_tasks
        if n == 0:
            raise ValueError("task_weights: the engine has no task list (pass tasks, or reset with options['task'])")
        return np.full(n, 1.0 / n)

    @property
    def spec(self) -> EnvSpec | None:
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        """gym.make sets the registered spec; real tools make the env nondeterministic, and the spec says so."""
        self._spec = value if value is None else replace(value, nondeterministic=True)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        seed = check_seed(seed)
        options = check_option_keys(options, REAL_RESET_OPTIONS, "ParaOrch-v0 (tools='real')")
        super(ParaOrchEnv, self).reset(seed=seed)
        if seed is None and self._initial_seed is not None:
            seed, self._initial_seed = self._initial_seed, None
        self.task: TaskView = self.engine.reset(seed=seed, options=options)
        real_task = getattr(self.engine, "task", None)
        benchmark = getattr(real_task, "benchmark", None) or f"generic_{Domain(self.task.domain).name.lower()}"
        num_options = len(self.task.options)
        weights = CallWeights(self.pool, self.model_names, benchmark, self.task.domain, num_options)
        self.board = EvidenceBoard(answer_kind(self.task.domain, num_options), self.task.options, weights)
        self.calls: list[ToolCall] = []  # every call sent to the engine, in its order (targets index these)
        self.results: list[CallResult] = []
        self._rounds = self._issued = self._violations = 0
        self._tokens = self._cost = self._usd = self._latency = 0.0
        self._tool_counts = np.zeros(NUM_TOOLS, np.float32)
        self._status_counts = np.zeros(NUM_STATUSES, np.float32)
        self._last_status = np.full(self.slots, NO_CALL, np.int8)
        self._episode = 1 if seed is not None else self._episode + 1  # the sim's count: episodes since seeded
        self._done = False
        if self._history is not None:
            self._history.clear()
            self._ending = None
        return self._observation(), {"task": self.task}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        a = check_action(action, self.nvec)
        if self._done:
            raise RuntimeError("ParaOrch-v0: the episode is over; call reset() before step()")
        if a[0] == 1:
            return self._terminate(ended_with_final=True)
        calls, results = self._run_round(a)
        info = {"calls": calls, "results": results}
        if self._rounds >= self.max_rounds:
            return self._terminate(ended_with_final=False, info=info)
        return self._observation(), 0.0, False, False, info

    # ------------------------------------------------------------------------------------------ a round
    def _run_round(self, a: np.ndarray) -> tuple[list[ToolCall], list[CallResult]]:
        """Statuses for malformed slots, one concurrent engine round for the rest, then the evidence."""
        lead = self.board.lead()  # isolation: every call of the round sees the lead as the round began
        pool = self.pool
        round_tokens = pool.manager_tokens_round
        statuses = np.full(self.slots, NO_CALL, np.int8)
        runnable: list[tuple[int, ToolCall, int]] = []  # (slot, call, model index or -1)
        n_calls = 0
        for k in range(self.slots):
            tool, model, target = (int(x) for x in a[1 + 3 * k: 4 + 3 * k])
            if tool == EMPTY_SLOT:
                continue
            n_calls += 1
            round_tokens += pool.manager_tokens_call
            status = slot_status(tool, model, target, k, allowed=self.slots, num_models=len(self.model_names),
                                 has_lead=lead is not None, tokens=self._tokens, token_budget=self.token_budget)
            if status is None:
                agent = Tool(tool).is_agent
                runnable.append((k, self._tool_call(Tool(tool), model if agent else -1, target, lead),
                                 model if agent else -1))
            else:
                statuses[k] = status
                round_tokens += pool.status_tokens
        calls = [c for _, c, _ in runnable]
        first = len(self.calls)
        results = list(self.engine.run_round(calls))
        latencies = []
        for i, ((k, call, model), res) in enumerate(zip(runnable, results)):
            statuses[k] = res.status
            self._tool_counts[call.tool] += 1
            self._cost += res.cost_units
            self._usd += res.usd
            latencies.append(res.latency_s)
            round_tokens += res.tokens_out + (0.0 if res.status is Status.OK else pool.status_tokens)
            if res.status is Status.OK:
                self._add_evidence(call, res, model, first + i, lead)
        self.calls += calls
        self.results += results
        for k in range(self.slots):
            if statuses[k] != NO_CALL:
                self._status_counts[statuses[k]] += 1
        self._last_status = statuses
        if self._history is not None:
            self._history.append(self._round_record(a, statuses, runnable, results))
        bad = a[0] != 0 or n_calls == 0 or any(s in PROTOCOL_FAILURES for s in statuses.tolist() if s != NO_CALL)
        self._violations += int(bad)
        self._issued += n_calls
        self._rounds += 1
        self._tokens += round_tokens
        self._latency += sum(latencies) if self.serial else max(latencies, default=0.0)
        return calls, results

    def _tool_call(self, tool: Tool, model: int, target: int, lead: Candidate | None) -> ToolCall:
        """The ``ToolCall`` of a well-formed slot (see the module docstring for what each target means)."""
        question = self.task.question
        model_id = self.model_names[model] if model >= 0 else ""
        if tool is Tool.PYTHON:
            carried = self.results[lead.source].output if target == TARGET_CARRY and lead is not None else ""
            program = prompts.extract_code(carried) or self._last_program() or question
            return ToolCall(tool, "", program)
        if target == TARGET_QUESTION or lead is None:
            return ToolCall(tool, model_id, question)
        if tool is Tool.SEARCH:
            return ToolCall(tool, "", f"{question} {lead.answer}")
        if target == TARGET_VERIFY:
            return ToolCall(tool, model_id, f"Verify this answer: {lead.answer}", target=lead.source)
        return ToolCall(tool, model_id, f"An earlier call answered {lead.answer} (its work is below); solve the "
                        "question, using or correcting it.", target=lead.source)

    def _last_program(self) -> str | None:
        for res in reversed(self.results):
            code = prompts.extract_code(res.output) if res.status is Status.OK else None
            if code:
                return code
        return None

    def _add_evidence(self, call: ToolCall, res: CallResult, model: int, index: int, lead: Candidate | None) -> None:
        if call.tool is Tool.CRITICAL_REVIEWER:
            flagged = res.extra.get("flagged")
            if lead is not None and isinstance(flagged, bool):
                self.board.add_review(lead, flagged, model)
            return
        if call.tool is Tool.SEARCH:
            return  # passages are evidence for the termination model's prompt, not an answer
        answer = call_answer(call, res)
        if answer is not None:
            self.board.add_answer(answer, call.tool, model, index)

    def _round_record(self, a: np.ndarray, statuses: np.ndarray, runnable: list[tuple[int, ToolCall, int]],
                      results: list[CallResult]) -> RoundRecord:
        """The board's record of the round just run (``runnable`` and ``results`` pair up in slot order)."""
        ran = {k: (call, res) for (k, call, _), res in zip(runnable, results)}
        calls = []
        for k in np.flatnonzero(statuses != NO_CALL).tolist():
            tool, model, target = (int(x) for x in a[1 + 3 * k: 4 + 3 * k])
            label = model_label(tool, model, self.model_names)
            if k not in ran:  # a protocol status, given without a call
                calls.append(CallRecord(k, tool, label, target, int(statuses[k])))
                continue
            call, res = ran[k]
            calls.append(CallRecord(k, tool, label, target, int(res.status), call_result_text(call, res),
                                    float(res.tokens_out), float(res.latency_s)))
        return RoundRecord(self._rounds + 1, tuple(calls))

    # ------------------------------------------------------------------------------------- end, observe
    def _terminate(self, ended_with_final: bool, info: dict | None = None) -> tuple[dict, float, bool, bool, dict]:
        outcome = self.engine.finish()
        synthesis = getattr(self.engine, "last_synthesis", None)
        if ended_with_final:
            self._tokens += self.pool.manager_tokens_round
        traj = self._trajectory(outcome.trajectory, ended_with_final,
                                float(getattr(synthesis, "latency_s", 0.0)))
        total, comps = score_trajectories(traj, self.reward_config, validate=True)
        traj["group_id"] = np.array([self._episode], np.int64)
        self._done = True
        info = {**(info or {}), **terminal_step_info(comps, traj), "answer": outcome.answer,
                "correct": bool(outcome.correct), **real_task_info(self.engine, self.task)}
        if self._history is not None:
            self._ending = ending_text(ended_with_final, self._rounds, repr(outcome.answer), bool(outcome.correct),
                                       float(total[0]))
        return self._observation(), float(total[0]), True, False, info

    def _trajectory(self, engine_traj: dict[str, Any], ended_with_final: bool,
                    termination_latency: float) -> dict[str, np.ndarray]:
        """The TrajectoryBatch row: the engine's outcome, tool counts and USD (termination call included), this
        env's counts of issued calls, violations, tokens and (serial-aware) latency."""
        counts = np.zeros(NUM_TOOLS, np.int32)
        for call in self.calls:
            counts[call.tool] += 1
        row = {
            "outcome": float(engine_traj["outcome"]), "format_violations": self._violations,
            "ended_with_final": int(ended_with_final), "rounds": self._rounds, "tool_calls": self._issued,
            "distinct_tools": int((counts > 0).sum()), "tool_counts": counts, "tokens": self._tokens,
            "cost_units": self._cost, "usd": float(engine_traj.get("usd", self._usd)),
            "latency_s": self._latency + termination_latency, "role_id": 0,
        }
        dtypes = {"format_violations": np.int32, "ended_with_final": np.uint8, "rounds": np.int32,
                  "tool_calls": np.int32, "distinct_tools": np.int32, "tool_counts": np.int32, "role_id": np.int32}
        return {k: np.asarray([v], dtypes.get(k, np.float64)) for k, v in row.items()}

    def _observation(self) -> dict[str, np.ndarray]:
        task = np.zeros(TASK_FEATURES, np.float32)
        task[self.task.domain] = 1.0
        num_options = len(self.task.options)
        task[4], task[5] = float(num_options < 2), float(num_options >= 2)
        task[6] = min(num_options, NUM_ANSWERS) / NUM_ANSWERS if num_options >= 2 else 1.0
        task[7] = approx_tokens(self.task.question) / 1000.0
        cands = np.zeros((NUM_CANDIDATES, CAND_FEATURES), np.float32)
        ranked = self.board.ranked()
        for c, cand in enumerate(ranked[:NUM_CANDIDATES]):
            cands[c] = cand.features()
        return {
            "task": task,
            "round": np.array([self._rounds, self.max_rounds - self._rounds], np.float32),
            "budget": np.array([self._tokens, self._cost, self._usd, self._latency], np.float32),
            "candidates": cands,
            "evidence": np.array([self.board.ok_answers, len(ranked), float(not ranked)], np.float32),
            "tool_counts": self._tool_counts.copy(),
            "status_counts": self._status_counts.copy(),
            "last_status": self._last_status.copy(),
            "action_mask": self.action_masks().astype(np.int8),
        }

    def action_masks(self) -> np.ndarray:
        """The current ``action_mask`` as bool[sum(nvec)] (before the first reset: the mask with no lead yet, as the
        simulated env's)."""
        mask = self._static_mask.astype(bool)
        mask[self._lead_entries] = self._episode > 0 and bool(self.board.candidates)
        return mask

    def _board(self) -> Board:
        """What the board shows of the current episode: the simulated env's, with the texts real tools give."""
        if self._episode == 0:
            raise RuntimeError("ParaOrch-v0: call reset() before render()")
        labels = tuple(repr(c.answer) for c in self.board.ranked()[:NUM_CANDIDATES])
        return Board("real", self._observation(), tuple(self._history or ()), question=self.task.question,
                     candidate_labels=labels, ending=self._ending)


def call_answer(call: ToolCall, res: CallResult) -> str | None:
    """The answer an OK call gave: an agent's ``extra["answer"]``, the last output line of python; None for search
    (passages), the reviewer (a verdict) and an agent result without an answer."""
    if call.tool in (Tool.CRITICAL_REVIEWER, Tool.SEARCH):
        return None
    if call.tool is Tool.PYTHON:
        lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()]
        return lines[-1] if lines else ""
    answer = res.extra.get("answer")
    return answer if isinstance(answer, str) else None


def call_result_text(call: ToolCall, res: CallResult) -> str:
    """The board's result column of a call that ran: its answer or verdict, or why it failed."""
    if res.status is not Status.OK:
        return res.detail
    if call.tool is Tool.CRITICAL_REVIEWER:
        flagged = res.extra.get("flagged")
        return ("flag" if flagged else "confirm") if isinstance(flagged, bool) else ""
    if call.tool is Tool.SEARCH:
        return "passages"
    answer = call_answer(call, res)
    return "" if answer is None else repr(answer)
