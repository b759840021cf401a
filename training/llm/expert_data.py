"""SFT data from the simulator: a scripted manager that writes tool-call text in ParaOrchText-v0.

Why a text expert of its own: SFT must teach the exact token stream GRPO later samples, so the data are recorded
as the environment renders it (ChatML prompt, the manager's ``<tool_call>`` blocks, ``<tool_response>`` feedback),
one ``segments`` row per episode (``data.py``). The policy is what the papers' managers learn to do: solve in
parallel with different models and tools (code tools for math and code, knowledge tools for knowledge), **repair
failed calls** in the next round (a recoverable failure: the row keeps the failure and the repair), review the
leading answer, ask an ensemble when the reviewer objects, then answer. Episodes that end wrong are dropped by
default, as in ToolOrchestra's and ParaManager's SFT filtering.

    python -m training.llm.expert_data --out sft.jsonl --episodes 500 --seed 0
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from parasim.protocol.schema import Domain
from training.llm.data import write_jsonl

_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
_FAILED = ("EXEC_ERR", "TIMEOUT")
END = "<|im_end|>"


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def solvers(domain: int) -> tuple[str, ...]:
    if domain in (Domain.MATH, Domain.CODE):
        return ("code_reasoner", "standard_reasoner", "ensemble_solver")
    if domain == Domain.KNOWLEDGE:
        return ("knowledge_searcher", "standard_reasoner", "ensemble_solver")
    return ("standard_reasoner", "knowledge_searcher", "ensemble_solver")


class TextExpert:
    """The scripted policy for one episode; ``act(feedback)`` returns the next turn's text."""

    def __init__(self, question: str, domain: int, models: tuple[str, ...], rng: np.random.Generator,
                 max_rounds: int) -> None:
        self.question, self.domain, self.models, self.rng = question, domain, models, rng
        self.rounds_left = max_rounds
        self.answers: dict[int, str] = {}  # call id -> answer
        self.pending_review = False
        self.reviewed = False
        self.repaired = 0

    def act(self, feedback: list[dict[str, Any]]) -> str:
        failed = [f for f in feedback if f.get("status") in _FAILED]
        for f in feedback:
            out = str(f.get("output", ""))
            if f.get("status") == "OK" and out.startswith("answer: "):
                self.answers[int(f["id"])] = out.removeprefix("answer: ")
            if f.get("tool") == "critical_reviewer" and f.get("status") == "OK":
                self.pending_review = out.endswith("looks wrong")
                self.reviewed = True
        self.rounds_left -= 1 if feedback else 0
        subtask = f"Solve this task and state the final answer: {self.question}"
        if not feedback:
            tools = solvers(self.domain)[: 2 + int(self.rng.random() < 0.5)]
            order = self.rng.permutation(len(self.models))
            return "\n".join(call(t, model=self.models[order[k % len(order)]], subtask=subtask)
                             for k, t in enumerate(tools))
        leader = self._leader()
        turn = []
        if failed and self.rounds_left > 2:  # repair: same tool, another model
            for f in failed[:2]:
                others = [m for m in self.models if m != f.get("model")] or list(self.models)
                retry = f"{subtask} (retry: the previous attempt ended with {f['status']})"
                if f["tool"] in ("python", "search"):
                    continue
                turn.append(call(f["tool"], model=others[int(self.rng.integers(len(others)))], subtask=retry))
                self.repaired += 1
        if leader is None:
            if not turn:
                turn.append(call("ensemble_solver", model=self.models[0], subtask=subtask))
            return "\n".join(turn)
        if self.pending_review and self.rounds_left > 1:
            self.pending_review = False
            turn.append(call("ensemble_solver", model=self.models[int(self.rng.integers(len(self.models)))],
                             subtask=f"{subtask} A reviewer doubts the answer {leader[1]}; solve independently."))
            return "\n".join(turn)
        if not self.reviewed and self.rounds_left > 1:
            turn.append(call("critical_reviewer", model=self.models[-1],
                             subtask=f"Check whether {leader[1]} answers: {self.question}", context_from=leader[0]))
            return "\n".join(turn)
        if turn and self.rounds_left > 1:
            return "\n".join(turn)
        return call("final_answer", answer=leader[1])

    def _leader(self) -> tuple[int, str] | None:
        """(a call id holding it, the majority answer), the latest call breaking ties."""
        if not self.answers:
            return None
        counts = Counter(self.answers.values())
        best = max(counts.values())
        cid = max(i for i, a in self.answers.items() if counts[a] == best)
        return cid, self.answers[cid]


def play(env: Any, seed: int) -> tuple[list[dict[str, str]], dict[str, Any], int]:
    """One episode: the segments of its token stream, the terminal info, and the number of repairs."""
    obs, info = env.reset(seed=seed)
    task = info["task"]
    base = env.unwrapped
    expert = TextExpert(task.question, task.domain, tuple(base.model_names), np.random.default_rng(seed),
                        base.max_rounds)
    segments = [{"role": "env", "text": obs}]
    feedback: list[dict[str, Any]] = []
    while True:
        action = expert.act(feedback)
        nxt, _r, terminated, truncated, info = env.step(action)
        segments.append({"role": "manager", "text": action + END})
        if terminated or truncated:
            return segments, info, expert.repaired
        done = obs + action + END
        if not nxt.startswith(done):
            raise ValueError("ParaOrchText-v0's conversation does not extend the previous one with the turn")
        new = nxt[len(done):]
        segments.append({"role": "env", "text": new})
        feedback = [json.loads(x) for x in _RESPONSE.findall(new)]
        obs = nxt


def generate(out: str | Path, episodes: int, seed: int = 0, env_kwargs: dict[str, Any] | None = None,
             keep_incorrect: bool = False) -> dict[str, float]:
    """Write up to ``episodes`` expert trajectories as JSONL; returns counts for the log."""
    import gymnasium as gym

    import parasim  # noqa: F401  (registers the environments)

    env = gym.make("ParaOrchText-v0", **(env_kwargs or {}))
    rows, correct, repaired = [], 0, 0
    for k in range(episodes):
        segments, info, repairs = play(env, seed * 1_000_003 + k)
        correct += bool(info["correct"])
        if info["correct"] or keep_incorrect:
            repaired += repairs > 0
            record = {key: np.asarray(v).tolist() for key, v in info["trajectory"].items()}
            rows.append({"segments": segments, "record": record, "group_id": k})
    write_jsonl(out, rows)
    return {"episodes": episodes, "written": len(rows), "accuracy": correct / max(episodes, 1),
            "with_repair": repaired / max(len(rows), 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Scripted-expert SFT trajectories from ParaOrchText-v0.")
    parser.add_argument("--out", required=True)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env_kwargs", default="{}",
                        help="JSON passed to gym.make, e.g. '{\"pool\": \"toolorchestra\"}'")
    parser.add_argument("--keep_incorrect", action="store_true")
    ns = parser.parse_args()
    print(json.dumps(generate(ns.out, ns.episodes, ns.seed, json.loads(ns.env_kwargs), ns.keep_incorrect)))
