"""The real-tools call source of ParaOrch-v0: ``gym.make("ParaOrch-v0", tools="real", engine=RealEpisodeEngine(...))``.

The episode's rules are the simulator's own compiled functions (``parasim.sim.rules`` through the one-lane entry
points of ``parasim.sim.step``) over a one-lane state, the parameter record of the engine's model ids and the row
record of the task (``envs.real_evidence``). A round: ``plan_one`` gives each slot its protocol status or
lets it run and returns the round-start leading answer; this module builds the ``ToolCall`` of each runnable slot,
the engine runs them concurrently, and each ``CallResult`` becomes the slot's outcome record (status, kind, answer
id, tokens, latency, USD, cost units); ``apply_one`` then scores the evidence, does the accounting and writes the
observation. The model dimension indexes the engine's ``model_names`` (its endpoint ids). What each slot becomes:
  - target 0: the question, fresh context;
  - target 1: the question with the leading candidate's answer, and the output of the call that first gave it as
    carried context (the call may copy it, as in the simulator);
  - target 2 (critical_reviewer only): "verify this answer", the leading answer with the same context;
  - ``python`` (a basic ``code_exec`` tool) runs the last program in the trajectory (the carried call's with
    target 1), else the question text, which fails as code: a structured manager cannot write programs; ``search``
    and any other basic tool (a user's function) get the question (with the leading answer for target 1).
Tools are the pool's tool spec's (``parasim.tools.spec``): what a slot becomes and what its result means depend on
the tool's kind and behaviour, so a user's verifier (behaviour ``reviewer``) flags or confirms as critical_reviewer
does.
A result's answer is the agent's ``extra["answer"]`` (also a basic tool's, when its tool gives one), else
python's last output line; texts that verify as equal share an id (``AnswerIds``); a reviewer's verdict
(``extra["flagged"]``) flags or confirms the round-start lead. Search passages are no answer.

A text manager's own calls (ParaOrchText-v0) come with the action as ``calls`` (slot -> ``ToolCall``): a runnable
slot then runs the call the manager wrote (its subtask and context) instead of the one built from the slot.

On stop or after ``max_rounds`` rounds the engine's ``finish()`` writes and verifies the final answer (the outcome),
given the rules' vote lead for when its termination model gives none; the trajectory row is the lane's (the same gather
as the simulator's), with the termination call's latency and USD added. Real latencies and sampling are not
reproducible, so the env's spec says ``nondeterministic=True``; a seeded reset still draws the same task. ``pool`` is
the prior behind the vote weights and the manager's token rates.
"""
from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.real_evidence import AnswerIds, answer_kind, real_params, task_row
from envs.render import CallRecord, RoundRecord, model_label
from parasim.config.env_options import TASK_OPTIONS, check_seed, check_task_option_mode, check_task_options
from parasim.pools.pool import load_pool
from parasim.protocol.engine import EpisodeEngine, TaskView, check_engine
from parasim.protocol.schema import CallResult, Status, ToolCall
from parasim.real import prompts
from parasim.sim import TARGET_CARRY, TARGET_QUESTION, TARGET_VERIFY
from parasim.sim.kernel import (
    I_EPISODE,
    I_NANS,
    I_ROUND,
    I_SEQ,
    NO_CALL,
    NUM_CANDIDATES,
    OUT_ANSWER,
    OUT_CONFIRM,
    OUT_FLAG,
    OUT_NONE,
    TASK_KEYED,
    leading_answer,
)
from parasim.sim.rng import seed_state
from parasim.sim.rules import PENDING, STOP
from parasim.sim.state import (
    action_nvec,
    action_slot,
    allocate_lanes,
    allocate_obs,
    lane_views,
    slot_records,
    write_slot_record,
)
from parasim.sim.step import apply_one, begin_one, end_one, plan_one
from parasim.sim.tables import build_tables, episode_params
from parasim.sim.task_options import option_stream, set_lane_options
from parasim.tasks.suites import load_suite
from parasim.tools.spec import ToolDef, ToolSpec

# reset options: a task (or its dict) to play, or an index into the engine's list; ``task_seed`` is taken for parity
# with the simulated env (GRPO groups pass it): a real task has no hidden draws for it to key, but it keys the drawn
# task options (``task_options="random"``) as in the simulator; then the episode's task options (docs/task_options.md)
REAL_RESET_OPTIONS = ("task", "task_index", "task_seed", *TASK_OPTIONS)


def call_answer(call: ToolCall, res: CallResult, spec: ToolSpec) -> str | None:
    """The answer an OK call gave: ``extra["answer"]`` when the tool gives one, else a basic code tool's (python's)
    last output line; None for a reviewer (a verdict), search passages and an agent result without an answer
    (tools looked up in the pool's tool spec ``spec``)."""
    tool = spec.tools[int(call.tool)]
    if tool.behaviour == "reviewer":
        return None
    answer = res.extra.get("answer")
    if isinstance(answer, str):
        return answer
    if tool.behaviour == "code_exec" and not tool.is_agent:
        lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()]
        return lines[-1] if lines else ""
    return None


def call_result_text(call: ToolCall, res: CallResult, spec: ToolSpec) -> str:
    """The board's result column of a call that ran: its answer or verdict, or why it failed."""
    if res.status is not Status.OK:
        return res.detail
    tool = spec.tools[int(call.tool)]
    if tool.behaviour == "reviewer":
        flagged = res.extra.get("flagged")
        return ("flag" if flagged else "confirm") if isinstance(flagged, bool) else ""
    answer = call_answer(call, res, spec)
    if answer is None:
        return "passages" if tool.behaviour == "search" and not tool.is_agent else ""
    return repr(answer)


class RealSource:
    """Real tools: the rules' one-lane state, the calls run on ``engine`` (see the module docstring)."""

    tools = "real"
    nondeterministic = True
    reset_options = REAL_RESET_OPTIONS

    def __init__(self, engine: EpisodeEngine, *, pool: Any, suite: Any, max_rounds: int, max_parallel: int,
                 serial: bool, token_budget: float | None, task_options: str | None = None) -> None:
        self.engine = engine = check_engine(engine)
        self.model_names: tuple[str, ...] = tuple(engine.model_names)
        if not self.model_names:
            raise ValueError("engine: its model_names is empty; the action's model dimension needs at least one")
        self.pool = load_pool(pool)
        self.slots, self.max_rounds = max_parallel, max_rounds
        env = episode_params(max_rounds, serial, token_budget)
        self.params = real_params(self.pool, build_tables(self.pool, load_suite(suite)), self.model_names, env,
                                  self.slots)
        self.params[0]["task_opts"] = check_task_option_mode(task_options)
        self.tool_spec = self.pool.tools
        self.nvec = action_nvec(self.slots, len(self.model_names), self.tool_spec.num_tools)
        self._state = allocate_lanes(1, self.slots, self.tool_spec.num_tools)
        self.lanes = self._state.lanes
        self._views = lane_views(self._state, len(self.model_names))
        self.obs = allocate_obs(1, self.slots, len(self.model_names), self.tool_spec)
        self._act = np.zeros((1, len(self.nvec)), np.int64)
        self.rows = task_row(TaskView("", "", 0), 0, None)
        self.task: TaskView | None = None
        self.ids = AnswerIds(answer_kind(0, 0), ())
        self.calls: list[ToolCall] = []  # every call sent to the engine, in its order (targets index these)
        self.results: list[CallResult] = []
        self.outcome: Any = None
        self._engine_takes_prices = "prices" in inspect.signature(engine.run_round).parameters

    @property
    def num_tasks(self) -> int:
        """Tasks in the engine's list: the valid ``task_index`` values are ``0 .. num_tasks - 1``."""
        return int(self.engine.num_tasks)

    def task_weights(self) -> np.ndarray:
        """The engine's own draw (float64[num_tasks]; uniform over a ``RealEpisodeEngine``'s task list)."""
        return np.asarray(self.engine.task_weights(), np.float64)

    def reset(self, seed: int | None, options: dict[str, Any]) -> dict[str, Any]:
        opts = check_task_options(options, self.tool_spec.names, None)
        # NumPy integers as ints: engines may check ``int`` (a trainer's task indices often are NumPy's)
        self.task = view = self.engine.reset(seed=seed, options={
            k: int(v) if k in ("task_index", "task_seed") and isinstance(v, np.integer) else v
            for k, v in options.items() if k not in TASK_OPTIONS})
        self.rows = task_row(view, self.engine.task_info(view)["benchmark"],
                             getattr(self.engine.task, "difficulty", None))  # a task object may carry none
        self.ids = AnswerIds(answer_kind(view.domain, len(view.options)), view.options)
        self.calls, self.results, self.outcome = [], [], None
        if seed is not None:
            self.lanes["st_i"][0, I_EPISODE] = 0  # episodes count from 1 after a seed, as the simulator's lanes
            self.lanes["opt_rng"][0] = option_stream(seed)
        task_seed = options.get("task_seed")
        if task_seed is not None:  # the drawn task options are the task's, as the simulator keys them
            self.lanes["task_rng"][0] = seed_state(check_seed(task_seed, "options['task_seed']"))
            self.lanes["task"][0, TASK_KEYED] = 1
        set_lane_options(self.lanes, self.params, np.zeros(1, np.int64), *opts)
        begin_one(*self._state, self.rows, self.params, 0, float(self.rows["z"][0]), *self.obs)
        self.lanes["task"][0, TASK_KEYED] = 0
        if self.lanes["priced"][0] and not self._engine_takes_prices:
            raise ValueError(f"engine: {type(self.engine).__name__}.run_round takes no prices=, so it cannot charge "
                             "this episode's tool prices (tool_prices or task_options='random'); give it a prices "
                             "keyword (parasim.protocol.engine.EpisodeEngine.run_round) or leave the prices out")
        return {"task": view}

    # ------------------------------------------------------------------------------------------ a turn
    def play(self, action: np.ndarray, record: bool, calls: dict[int, ToolCall] | None = None,
             manager_answer: str | None = None) -> tuple[bool, dict[str, Any], RoundRecord | None]:
        if action[0] == STOP:
            self._finish(ended_final=True, manager_answer=manager_answer)
            return True, {}, None
        self._act[0] = action
        lanes, last_status, call_i, call_f = self._state
        lead = int(plan_one(self._act, lanes, last_status, call_i, call_f, self.params))
        slots = np.flatnonzero(last_status[0] == PENDING).tolist()
        written = calls or {}
        calls = [written[k] if k in written else self._tool_call(*self._slot(action, k), lead) for k in slots]
        first = len(self.calls)
        prices = self._episode_prices(calls)
        results = list(self.engine.run_round(calls, action=[int(x) for x in action], slots=slots,
                                             **({"prices": prices} if prices else {})))
        if len(results) != len(calls):
            raise RuntimeError(f"engine.run_round: expected {len(calls)} results (one per call), got {len(results)}")
        for j, (k, call, res) in enumerate(zip(slots, calls, results)):
            self._outcome_record(k, call, res, lead, first + j)
        self.calls += calls
        self.results += results
        over = bool(apply_one(self._act, *self._state, self.rows, self.params, *self.obs))
        rec = self._round_record(action, dict(zip(slots, zip(calls, results)))) if record else None
        if over:
            self._finish(ended_final=False)
        return over, {"calls": calls, "results": results, "slots": slots}, rec

    def cut(self) -> None:
        """End the running episode now, as one that never answered (the engine answers from the calls so far)."""
        self._finish(ended_final=False)

    def _slot(self, action: np.ndarray, k: int) -> tuple[ToolDef, int, int]:
        tool, model, target = action_slot(action, k)
        found = self.tool_spec.tools[tool]  # a runnable slot's tool is one of the spec's (the rules checked it)
        return found, model if found.is_agent else -1, target

    def _outcome_record(self, k: int, call: ToolCall, res: CallResult, lead: int, index: int) -> None:
        """Slot ``k``'s outcome record from its ``CallResult`` (``index``: the call's place in the episode)."""
        kind, answer = OUT_NONE, -1
        if res.status is Status.OK:
            if self.tool_spec.tools[int(call.tool)].behaviour == "reviewer":
                flagged = res.extra.get("flagged")
                if isinstance(flagged, bool) and lead >= 0:
                    kind, answer = (OUT_FLAG if flagged else OUT_CONFIRM), lead
            else:
                text = call_answer(call, res, self.tool_spec)
                answer = -1 if text is None else self.ids.id_for(text, index)
                kind = OUT_ANSWER if answer >= 0 else OUT_NONE
        # an episode price is the engine's figure (run_round), so the record's USD is the result's
        write_slot_record(self._state, 0, k, int(res.status), kind, answer, res.tokens_in, res.tokens_out,
                          res.latency_s, res.usd, res.cost_units)

    def _episode_prices(self, calls: list[ToolCall]) -> dict[int, float]:
        """The episode's USD per call (task option ``tool_prices``) of the tools among ``calls`` it prices: the engine
        puts them in place of its backend's figures (``RealEpisodeEngine.run_round``), so the call log, the engine's
        trajectory and the lane's accounting carry one figure. Empty when the episode prices none of them."""
        priced = int(self.lanes["priced"][0])
        tools = {int(c.tool) for c in calls if (priced >> int(c.tool)) & 1}
        return {t: float(self.lanes["price"][0, t]) for t in sorted(tools)}

    def _tool_call(self, tool: ToolDef, model: int, target: int, lead: int) -> ToolCall:
        """The ``ToolCall`` of a well-formed slot (see the module docstring for what each target means): a basic
        code tool runs a program, any other basic tool (search, a user's function) gets the question (with the
        leading answer for target 1), an agent tool the question, the answer to verify or the one to improve."""
        assert self.task is not None
        value = self.tool_spec.call_tool(tool.index)
        question = self.task.question
        model_id = self.model_names[model] if model >= 0 else ""
        lead_text = self.ids.texts[lead] if lead >= 0 else ""
        source = self.ids.sources[lead] if lead >= 0 else -1
        if not tool.is_agent and tool.behaviour == "code_exec":
            carried = self.results[source].output if target == TARGET_CARRY and lead >= 0 else ""
            program = prompts.extract_code(carried) or self._last_program() or question
            return ToolCall(value, "", program)
        if target == TARGET_QUESTION or lead < 0:
            return ToolCall(value, model_id, question)
        if not tool.is_agent:
            return ToolCall(value, "", f"{question} {lead_text}")
        if target == TARGET_VERIFY:
            return ToolCall(value, model_id, f"Verify this answer: {lead_text}", target=source)
        return ToolCall(value, model_id, f"An earlier call answered {lead_text} (its work is below); solve the "
                        "question, using or correcting it.", target=source)

    def _last_program(self) -> str | None:
        for res in reversed(self.results):
            code = prompts.extract_code(res.output) if res.status is Status.OK else None
            if code:
                return code
        return None

    def _finish(self, ended_final: bool, manager_answer: str | None = None) -> None:
        """The engine's ``finish()`` answers and verifies, given the rules' vote lead (``rules.lane_lead``) for when
        its termination model gives no answer; its answer's id (-1 if no call gave it) and the termination call's own
        latency and USD end the lane."""
        lead = int(leading_answer(self._views.ev, self._views.arrival, 0, int(self.lanes["st_i"][0, I_NANS])))
        self.outcome = outcome = self.engine.finish(manager_answer=manager_answer,
                                                    lead=self.ids.texts[lead] if lead >= 0 else None)
        answer = self.ids.find(outcome.answer) if outcome.answer else -1
        end_one(self.lanes, self._state.last_status, self.params, int(ended_final), answer,
                1.0 if outcome.correct else 0.0, float(outcome.termination_usd),
                float(outcome.termination_latency_s), *self.obs)

    # --------------------------------------------------------------------------------------- info, board
    def task_info(self) -> dict[str, int]:
        """The episode's ``task_index`` and ``benchmark`` (``EpisodeEngine.task_info``)."""
        assert self.task is not None
        return dict(self.engine.task_info(self.task))

    def terminal_info(self) -> dict[str, Any]:
        return {"answer": self.outcome.answer, "correct": bool(self.outcome.correct), **self.task_info()}

    def answer_label(self) -> str:
        return repr(self.outcome.answer)

    def _round_record(self, action: np.ndarray, ran: dict[int, tuple[ToolCall, CallResult]]) -> RoundRecord:
        """The board's record of the round just run."""
        last_status = self._state.last_status[0]
        calls = []
        for k in np.flatnonzero(last_status != NO_CALL).tolist():
            tool, model, target = action_slot(action, k)
            label = model_label(tool, model, self.model_names, self.tool_spec)
            if k not in ran:  # a protocol status, given without a call
                calls.append(CallRecord(k, tool, label, target, int(last_status[k])))
                continue
            call, res = ran[k]
            text = call_result_text(call, res, self.tool_spec)
            calls.append(CallRecord(k, tool, label, target, int(res.status), text, float(res.tokens_out),
                                    float(res.latency_s)))
        return RoundRecord(int(self.lanes["st_i"][0, I_ROUND]), tuple(calls))

    def round_records(self) -> list[dict[str, Any]]:
        return slot_records(self._state.last_status, self._state.call_i, self._state.call_f)

    def board_rounds(self, records: Sequence[RoundRecord]) -> tuple[RoundRecord, ...]:
        return tuple(records)

    def board_extras(self) -> dict[str, Any]:
        """The question and the shown candidates' answers (their ids in rank order: ``write_obs`` leaves the
        candidates' positions in first-seen order in the lane's ``scratch``)."""
        shown = min(int(self.lanes["st_i"][0, I_SEQ]), NUM_CANDIDATES)
        ids = [int(self.lanes["order"][0, p]) for p in self.lanes["scratch"][0, :shown]]
        return {"question": self.task.question if self.task else None,
                "candidate_labels": tuple(repr(self.ids.texts[a]) for a in ids), "tool_spec": self.tool_spec}
