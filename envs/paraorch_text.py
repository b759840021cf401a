"""ParaOrchText-v0: the ParaOrch-v0 episodes for an LLM manager that writes tool-call text.

Observation: the conversation so far as one string, rendered in the ChatML form Qwen3's chat template
writes (``<|im_start|>role ... <|im_end|>``) and ending with the assistant prompt, so it can be fed to a
Qwen3 / Hermes-format model as is: the system prompt (rules, the pool's models with their published
accuracies, prices and speeds, the JSON tool list; ``parasim.protocol.tool_schema``), the question, then
per turn the manager's text and one ``<tool_response>`` per call with its structured result
(id, tool, model, status, output, tokens, cost, latency, and the reason of a failure). ``info["messages"]``
holds the same conversation as chat messages for other templates. Each observation extends the previous
one by the turn's text, ``<|im_end|>``, and the feedback, so a trainer can tokenize it incrementally.
Characters outside the Basic Multilingual Plane and control characters are replaced by U+FFFD in the
observation (the Text space's character set) and a turn is shown truncated after ``max_turn_chars``;
parsing always sees the full text.

Action: the manager's text for one turn (Hermes / Qwen3 ``<tool_call>`` blocks; ``parasim.protocol.parser``).
Up to ``max_parallel`` calls run as one round; extra calls are rejected with INVALID_TOOL. Unreadable
blocks get FORMAT_ERR (or INVALID_TOOL for unknown tools or models) with the parser's reason; a turn with
no runnable call still uses up a round. Each round with such a status is one format violation, paid
through the reward config's protocol penalty. ``final_answer`` ends the episode; so does the round limit.

Reward: ``parasim.compute_rewards`` of the episode's trajectory (the engine's TrajectoryBatch fields with
this env's format-violation count) under ``reward`` (a RewardConfig or preset), on the terminal step, with
every component in ``info["reward_components"]``.

Reset options (``reset(options={...})``) go to the engine. With simulated tools they are ParaOrch-v0's:
``task_index`` (a suite row in ``[0, num_tasks)``) and ``task_seed`` (the task's own stream), so equal
``task_index`` / ``task_seed`` give the identical task, with the same question and the same option letters,
while each env's tool calls keep its own seed (GRPO groups; see ``ParaOrchEnv``). A real-tools engine
(``RealEpisodeEngine``) takes ``task_index`` (its task list) or ``task`` and ignores ``task_seed``.
NumPy integers are passed on as ints. ``num_tasks`` and ``task_weights()`` give the valid indices and the
probabilities the engine draws tasks with by itself (uniform over a real engine's task list).

Info: on the terminal step ``reward_components``, ``trajectory``, ``answer``, ``correct``,
``final_answer_text``, ``messages``, and ``task_index`` / ``benchmark`` as ParaOrch-v0 names them (the task
played and its index in ``parasim.tasks.BENCHMARKS``; for real engines see ``paraorch_real.real_task_info``).

Backends: ``tools="sim"`` (default) runs ``SimEpisodeEngine`` over ParaOrch-v0's simulator, so the same
seed and the same calls give the same episode, statuses and reward as ParaOrch-v0. A call maps to one
structured slot: tool, model, and target = verify for critical_reviewer, carry when ``context_from``
names an earlier call (the simulator carries the trajectory and its leading answer, so which earlier call
is named does not change the simulated outcome; a ``context_from`` with no such call is FORMAT_ERR), else
the fresh question. Answers appear as labels under a per-episode random permutation. In simulation the
final answer is the termination model's vote, as in ParaOrch-v0; the manager's ``final_answer`` text is
returned in ``info["final_answer_text"]``. ``tools="real"`` needs ``engine=`` (for example
``parasim.real.engine.RealEpisodeEngine``), which then also answers and verifies.
"""
from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from parasim.envs.paraorch import resolve_reward
from parasim.protocol.engine import EpisodeEngine, TaskView
from parasim.protocol.parser import ParsedRound, parse_tool_calls
from parasim.protocol.schema import (
    MAX_PARALLEL,
    MAX_ROUNDS,
    PROTOCOL_FAILURES,
    CallResult,
    Status,
    Tool,
    ToolCall,
)
from parasim.protocol.tool_schema import render_system_prompt

CHARSET = "\t\n\r" + "".join(map(chr, range(0x20, 0xD800))) + "".join(map(chr, range(0xE000, 0xFFFE)))
_ALLOWED = frozenset(CHARSET)
OBS_MAX_CHARS = 2_000_000
ACTION_MAX_CHARS = 65_536
MAX_ERRORS_SHOWN = 16


class ChatText(spaces.Text):
    """A Gymnasium Text space over ``CHARSET`` whose repr does not print its 63,000 characters."""

    def __repr__(self) -> str:
        return f"ChatText({self.min_length}, {self.max_length}, charset=BMP without surrogates and controls)"


def to_charset(text: str) -> str:
    """``text`` with every character outside ``CHARSET`` replaced by U+FFFD."""
    if all(c in _ALLOWED for c in text):
        return text
    return "".join(c if c in _ALLOWED else "\ufffd" for c in text)


def render_chatml(messages: Sequence[dict[str, str]]) -> str:
    """Messages in Qwen3's ChatML form, ending with the assistant generation prompt."""
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + "<|im_start|>assistant\n"


def describe_models(pool: Any) -> dict[str, str]:
    """One line per pool model for the system prompt: published accuracies, price and speed ({} if no pool)."""
    from parasim.pools import load_pool
    from parasim.tasks import BENCHMARKS

    try:
        spec = load_pool(pool)
    except ValueError:  # a real-tools engine may run models no pool file describes
        return {}
    out = {}
    for m, name in enumerate(spec.model_names[:-1]):
        acc = [f"{b.name} {100 * spec.accuracy_target[m, j]:.0f}%" for j, b in enumerate(BENCHMARKS)
               if np.isfinite(spec.accuracy_target[m, j])]
        sr = int(Tool.STANDARD_REASONER)
        price = f"${spec.price_in[sr, m] * 1e6:.2f}/${spec.price_out[sr, m] * 1e6:.2f} per M tokens in/out"
        speed = f"about {1.0 / spec.lat_per_tok[sr, m]:.0f} tokens/s" if spec.lat_per_tok[sr, m] > 0 else ""
        out[name] = "; ".join(x for x in (", ".join(acc), price, speed) if x)
    return out


def _finish(engine: EpisodeEngine, manager_answer: str | None) -> Any:
    """``engine.finish``, passing the manager's answer to engines whose ``finish`` accepts one."""
    try:
        takes_answer = "manager_answer" in inspect.signature(engine.finish).parameters
    except (TypeError, ValueError):
        takes_answer = False
    return engine.finish(manager_answer=manager_answer) if takes_answer else engine.finish()


def _plain_ints(options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``options`` with NumPy integer ``task_index`` / ``task_seed`` as Python ints (engines may check ``int``);
    anything else is passed on unchanged for the engine to accept or reject."""
    if not options:
        return options
    return {k: int(v) if k in ("task_index", "task_seed") and isinstance(v, np.integer) else v
            for k, v in options.items()}


class ParaOrchTextEnv(gym.Env[str, str]):
    """ParaOrchText-v0 (see the module docstring)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, pool: Any = "paramanager", suite: Any = "paramanager", max_rounds: int = MAX_ROUNDS,
                 max_parallel: int = MAX_PARALLEL, serial: bool = False, reward: Any = "paramanager",
                 tools: str = "sim", engine: EpisodeEngine | None = None, token_budget: float | None = None,
                 seed: int | None = None, max_turn_chars: int = 16_384, render_mode: str | None = None) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode: expected None or 'ansi', got {render_mode!r}")
        if not isinstance(max_turn_chars, int) or max_turn_chars < 1:
            raise ValueError(f"max_turn_chars: expected a positive integer, got {max_turn_chars!r}")
        if tools == "sim":
            if engine is not None:
                raise ValueError("engine: only with tools='real'; tools='sim' builds the simulator engine itself")
            from parasim.envs.sim_engine import SimEpisodeEngine

            engine = SimEpisodeEngine(pool, suite, max_rounds=max_rounds, max_parallel=max_parallel, serial=serial,
                                      reward=reward, token_budget=token_budget, seed=seed)
        elif tools == "real":
            if engine is None:
                raise NotImplementedError(
                    "ParaOrchText-v0 with tools='real' needs engine=: an EpisodeEngine over real tools, e.g. "
                    "parasim.real.engine.RealEpisodeEngine(backend, tasks) with an OpenAI-compatible endpoint per "
                    "pool model, the python sandbox and the search retriever. Use tools='sim' for the simulator.")
        else:
            raise ValueError(f"tools: expected 'sim' or 'real', got {tools!r}")
        if not 1 <= int(max_rounds) <= 1000 or not 1 <= int(max_parallel) <= 16:
            raise ValueError(f"max_rounds in [1, 1000] and max_parallel in [1, 16]; got {max_rounds}, {max_parallel}")
        self.engine = engine
        self.max_rounds, self.max_parallel = int(max_rounds), int(max_parallel)
        self.reward_config = resolve_reward(reward)
        self.render_mode = render_mode
        self.max_turn_chars = max_turn_chars
        self._descriptions = describe_models(pool) if pool is not None else {}
        self.model_names: tuple[str, ...] = ()
        self.system_prompt = ""
        self._build_prompt()
        self.observation_space = ChatText(OBS_MAX_CHARS, min_length=0, charset=CHARSET)
        self.action_space = ChatText(ACTION_MAX_CHARS, min_length=0, charset=CHARSET)
        self.messages: list[dict[str, str]] = []
        self._seed_next = seed
        self._task: TaskView | None = None
        self._rounds = 0
        self._violations = 0
        self._manager_chars = 0
        self._next_id = 0
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if seed is None and self._seed_next is not None:
            seed, self._seed_next = self._seed_next, None
        task = self.engine.reset(seed=seed, options=_plain_ints(options))
        self._task = task
        if not self.model_names:
            self._build_prompt()
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.messages.append({"role": "user", "content": to_charset(self._question(task))})
        self._rounds = self._violations = self._manager_chars = self._next_id = 0
        self._done = False
        return self._observation(), {"task": task, "messages": list(self.messages)}

    @property
    def num_tasks(self) -> int | None:
        """The engine's number of tasks (valid ``task_index`` values are ``0 .. num_tasks - 1``); None when the
        engine has neither ``num_tasks`` nor a task list."""
        n = getattr(self.engine, "num_tasks", None)
        if n is None and getattr(self.engine, "tasks", None) is not None:
            n = len(self.engine.tasks)
        return None if n is None else int(n)

    def task_weights(self) -> np.ndarray:
        """Each task index's probability when the engine draws tasks itself (float64[num_tasks]): the simulator's
        suite weights, uniform over a real engine's task list."""
        weights = getattr(self.engine, "task_weights", None)
        if weights is not None:
            return np.asarray(weights(), np.float64)
        if self.num_tasks is None:
            raise ValueError("task_weights: the engine has no task list (no num_tasks / tasks attribute)")
        return np.full(self.num_tasks, 1.0 / self.num_tasks)

    def _task_info(self) -> dict[str, int]:
        """``task_index`` and ``benchmark`` of the episode (the simulator's own, else from the real task)."""
        own = getattr(self.engine, "task_info", None)
        if own is not None:
            return dict(own())
        from parasim.envs.paraorch_real import real_task_info

        return real_task_info(self.engine, self._task)

    def _build_prompt(self) -> None:
        """System prompt from the engine's model ids (a real-tools engine may know them only after reset)."""
        self.model_names = tuple(getattr(self.engine, "model_names", ()))
        models = {m: self._descriptions.get(m, "") for m in self.model_names}
        self.system_prompt = render_system_prompt(models, max_parallel=self.max_parallel,
                                                  max_rounds=self.max_rounds) if models else ""

    @staticmethod
    def _question(task: TaskView) -> str:
        if task.options and not any(o in task.question for o in task.options):
            return task.question + "\nOptions: " + ", ".join(task.options)
        return task.question

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("ParaOrchText-v0: the episode is over; call reset() before step()")
        text = action if isinstance(action, str) else ""
        parsed = parse_tool_calls(action, self.model_names or None)
        self._manager_chars += len(text)
        shown = text if len(text) <= self.max_turn_chars else text[: self.max_turn_chars] + "\n[... truncated]"
        self.messages.append({"role": "assistant", "content": to_charset(shown)})
        if parsed.is_final:
            if parsed.errors:
                self._violations += 1
            return self._terminate(parsed, parsed.final_answer)
        run, extra = parsed.calls[: self.max_parallel], parsed.calls[self.max_parallel:]
        results = self.engine.run_round(run)
        first_id = self._next_id
        self._next_id = first_id + len(run)
        self._rounds += 1
        bad = (not run or bool(parsed.errors) or bool(extra)
               or any(r.status in PROTOCOL_FAILURES for r in results))
        self._violations += int(bad)
        self.messages.append({"role": "user", "content": to_charset(
            self._feedback(parsed, run, results, extra, first_id))})
        if self._rounds >= self.max_rounds:
            return self._terminate(parsed, None)
        return self._observation(), 0.0, False, False, {"parsed": parsed, "results": results}

    def _feedback(self, parsed: ParsedRound, run: list[ToolCall], results: list[CallResult], extra: list[ToolCall],
                  first_id: int) -> str:
        """One ``<tool_response>`` per block, in the order the manager wrote them."""
        entries: list[tuple[int, dict[str, Any]]] = []
        for j, (call, res) in enumerate(zip(run, results)):
            entry = {"id": first_id + j, "tool": call.tool.wire_name}
            if call.tool.is_agent:
                entry["model"] = call.model
            entry.update(status=res.status.name, output=res.output, tokens_in=res.tokens_in,
                         tokens_out=res.tokens_out, cost_units=round(res.cost_units, 4), usd=round(res.usd, 6),
                         latency_s=round(res.latency_s, 3))
            if res.detail:
                entry["reason"] = res.detail
            entries.append((parsed.blocks[j], entry))
        for j, call in enumerate(extra):
            entries.append((parsed.blocks[self.max_parallel + j], {
                "tool": call.tool.wire_name, "status": Status.INVALID_TOOL.name,
                "reason": f"more than max_parallel={self.max_parallel} calls in one turn; this call was not run"}))
        for err in parsed.errors[:MAX_ERRORS_SHOWN]:
            entries.append((err.block, {"block": err.block, "status": err.status.name, "reason": err.reason}))
        entries.sort(key=lambda e: e[0])
        body = "\n".join(f"<tool_response>\n{json.dumps(e, ensure_ascii=False)}\n</tool_response>" for _, e in entries)
        hidden = len(parsed.errors) - MAX_ERRORS_SHOWN
        if hidden > 0:
            body += f"\n({hidden} more unreadable blocks not shown)"
        rounds_left = self.max_rounds - self._rounds
        if parsed.repairs:
            body += "\nNote: repaired your tool-call format (" + "; ".join(parsed.repairs) + ")."
        return body + f"\nRounds left: {rounds_left}."

    def _terminate(self, parsed: ParsedRound, final_text: str | None) -> tuple[str, float, bool, bool, dict]:
        from parasim import TrajectoryBatch, compute_rewards

        outcome = _finish(self.engine, final_text)
        traj = dict(outcome.trajectory)
        traj["format_violations"] = self._violations
        if not getattr(self.engine, "counts_manager_tokens", False):
            traj["tokens"] = float(traj.get("tokens", 0.0)) + self._manager_chars / 4.0
        traj.setdefault("ended_with_final", int(final_text is not None))
        traj.setdefault("group_id", 0)
        traj.setdefault("role_id", 0)
        batch = TrajectoryBatch.from_arrays(**{k: np.asarray([v]) for k, v in traj.items()})
        result = compute_rewards(batch, self.reward_config)
        components = {k: float(np.asarray(v)[0]) for k, v in result.as_dict().items()}
        self._done = True
        info = {"parsed": parsed, "reward_components": components, "trajectory": traj,
                "answer": outcome.answer, "correct": outcome.correct, "final_answer_text": final_text,
                "messages": list(self.messages), **self._task_info()}
        return self._observation(), components["total"], True, False, info

    def _observation(self) -> str:
        obs = render_chatml(self.messages)
        return obs if len(obs) <= OBS_MAX_CHARS else obs[-OBS_MAX_CHARS:]

    def render(self) -> str | None:
        return render_chatml(self.messages) if self.render_mode == "ansi" else None
