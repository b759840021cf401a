"""One episode definition, two call sources, two managers: the same episode through the simulator and real tools.

Each episode is first played on the simulated env (random actions, malformed ones included, budgets, serial and
parallel rounds). The real-tools env then plays the same actions on a ``RealEpisodeEngine`` whose backend is
scripted to return, call for call, what the simulator drew (``Simulator.last_round``: status, answer, tokens,
latency, USD, cost units; answer ids become texts, a review becomes a verdict), and whose termination model writes
the simulator's final answer. Every observation, every status, the accounting and the trajectory row (outcome
included, which the engine's verifier gives) and the reward must be identical, since both run the same compiled
rules (``parasim.sim.rules``) and only the source of the calls differs. The last test adds the text manager
(ParaOrchText-v0) on both sources: the same turns said as text give the same episode in all four combinations.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import parasim  # noqa: F401  (registers the envs)
from parasim.protocol.schema import CallResult, Status, Tool, ToolCall
from parasim.real.backend import CallInput
from parasim.real.client import Completion
from parasim.real.engine import RealEpisodeEngine
from parasim.sim import NUM_TARGETS, TARGET_CARRY, TARGET_QUESTION, TARGET_VERIFY
from parasim.sim.kernel import F_QTOK, I_BENCH, I_NANS
from parasim.sim.rules import MALFORMED_ROUND, STOP
from parasim.tasks.suites import BENCHMARKS, NUM_ANSWERS

_RAN = (Status.OK, Status.EXEC_ERR, Status.TIMEOUT, Status.TRUNCATED)


def _label(answer: int, nans: int) -> str:
    """An answer id as text: an option letter for multiple choice, a number otherwise (0 is the gold answer)."""
    return chr(ord("A") + answer) if nans < NUM_ANSWERS else str(100 + answer)


class _ScriptedChat:
    """The termination endpoint: writes the answer it is told to."""

    def __init__(self) -> None:
        self.answer = ""

    async def chat(self, model: str, messages: Any, **_: Any) -> Completion:
        return Completion(Status.OK, [f"Final answer: {self.answer}"], 0, 0, 0.0, 1)


class ScriptedBackend:
    """A ``RealToolBackend`` stand-in that returns the next scripted round's results, checking that the env sent
    one call per scripted result with the tool the simulator ran."""

    def __init__(self, model_ids: Sequence[str]) -> None:
        self.endpoints = SimpleNamespace(model_ids=tuple(model_ids), termination=SimpleNamespace(
            model="termination", max_tokens=64, temperature=0.0))
        self.chat = _ScriptedChat()
        self.rounds: list[list[tuple[Tool, CallResult]]] = []

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    def run_round(self, calls: Sequence[ToolCall], inputs: Sequence[CallInput]) -> list[CallResult]:
        script = self.rounds.pop(0)
        assert [c.tool for c in calls] == [tool for tool, _ in script]
        return [res for _, res in script]

    def termination_usd(self, synthesis: Any) -> float:
        return 0.0


def _script(records: list[dict[str, Any]], action: np.ndarray, nans: int) -> list[tuple[Tool, CallResult]]:
    """The simulator's calls of a round as the results real tools would return."""
    out = []
    for rec in records:
        if rec["status"] not in _RAN:
            continue
        tool = Tool(int(action[1 + 3 * rec["slot"]]))
        extra: dict[str, Any] = {}
        if rec["kind"] == "answer":
            extra["answer"] = _label(rec["answer"], nans)
        elif rec["kind"] in ("flag", "confirm"):
            extra["flagged"] = rec["kind"] == "flag"
        out.append((tool, CallResult(rec["status"], output="", tokens_in=rec["tokens_in"],
                                     tokens_out=rec["tokens_out"], cost_units=rec["cost_units"], usd=rec["usd"],
                                     latency_s=rec["latency_s"], extra=extra)))
    return out


def _random_action(rng: np.random.Generator, nvec: np.ndarray, slots: int) -> np.ndarray:
    """Mostly well-formed rounds, with stops, odd stop flags, empty slots and malformed parts."""
    a = np.zeros(len(nvec), np.int64)
    a[0] = rng.choice([0] * 8 + [1, 2])
    for k in range(slots):
        if rng.random() < 0.8:
            tool, model, target = rng.integers(0, 7), rng.integers(0, nvec[2]), rng.choice([0, 0, 0, 1, 2])
            if tool == Tool.CRITICAL_REVIEWER:
                target = 2
        else:
            tool, model, target = rng.integers(-1, 10), rng.integers(-1, nvec[2] + 1), rng.integers(-1, 4)
        a[1 + 3 * k: 4 + 3 * k] = tool, model, target
    return a


def _same(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    assert got.keys() == want.keys(), where
    for key in want:
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]), err_msg=f"{where}: {key}")


@pytest.mark.parametrize("options", [
    {"max_rounds": 4, "max_parallel": 4},
    {"max_rounds": 3, "max_parallel": 3, "serial": True},
    {"max_rounds": 5, "max_parallel": 2, "token_budget": 2500.0},
    {"max_rounds": 2, "max_parallel": 4, "serial": True, "token_budget": 1500.0},
])
def test_sim_and_real_call_sources_give_the_same_episodes(options):
    sim_env = gym.make("ParaOrch-v0", **options).unwrapped
    rng = np.random.default_rng(len(options) + options["max_parallel"])
    models = sim_env.model_names
    played = 0
    for episode in range(6):
        obs_sim, _ = sim_env.reset(seed=100 + episode)
        st = sim_env.sim.state
        nans, bench = int(st.st_i[0, I_NANS]), BENCHMARKS[int(st.st_i[0, I_BENCH])]
        qtok = float(st.st_f[0, F_QTOK])
        assert qtok == int(qtok)  # so that a question of 4 * qtok ASCII characters has qtok tokens
        task = {"id": f"t{episode}", "question": "q" * (4 * int(qtok)), "answer": _label(0, nans),
                "domain": bench.domain.name.lower(), "benchmark": bench.name}
        if nans < NUM_ANSWERS:
            task["options"] = [f"option {j}" for j in range(nans)]
        backend = ScriptedBackend(models)
        engine = RealEpisodeEngine(backend, [task], seed=0)
        real_env = gym.make("ParaOrch-v0", tools="real", engine=engine, **options).unwrapped
        obs_real, _ = real_env.reset(seed=100 + episode)
        _same(obs_real, obs_sim, f"episode {episode} reset")
        for turn in range(options["max_rounds"] + 1):
            a = _random_action(rng, sim_env.action_space.nvec, options["max_parallel"])
            obs_sim, r_sim, term_sim, _, info_sim = sim_env.step(a)
            if a[0] != 1:
                backend.rounds.append(_script(sim_env.sim.last_round(0), a, nans))
            if term_sim:
                backend.chat.answer = _label(int(sim_env.sim.final_answers()[0]), nans)
            obs_real, r_real, term_real, _, info_real = real_env.step(a)
            where = f"episode {episode} turn {turn}"
            _same(obs_real, obs_sim, where)
            assert (r_real, term_real) == (r_sim, term_sim), where
            played += 1
            if term_sim:
                _same(info_real["trajectory"], info_sim["trajectory"], where)
                _same(info_real["reward_components"], info_sim["reward_components"], where)
                assert info_real["correct"] == (info_sim["trajectory"]["outcome"] == 1.0)
                assert not backend.rounds
                break
    assert played > 6  # episodes of several turns were compared


# ---- all four combinations: structured / text manager x simulated / real tools ----

def _call_text(tool: Tool, model: str, context: int | None) -> str:
    """One ``<tool_call>`` block of a default tool."""
    if tool is Tool.PYTHON:
        args: dict[str, Any] = {"code": "print(6 * 7)"}
    elif tool is Tool.SEARCH:
        args = {"query": "the question"}
    else:
        args = {"model": model, "subtask": "solve the question"}
        if context is not None:
            args["context_from"] = context
    return "<tool_call>" + json.dumps({"name": tool.wire_name, "arguments": args}) + "</tool_call>"


def _random_turn(rng: np.random.Generator, nvec: np.ndarray, slots: int, models: Sequence[str],
                 next_id: int) -> tuple[np.ndarray, str]:
    """A random turn both managers can say: the structured action and the same turn as text. Calls fill the slots
    in order; a reviewer verifies, another agent call takes the question, carries an earlier call (``context_from``
    an earlier id) or names none (a later id: FORMAT_ERR); an unreadable block or an agent call on an unknown model
    makes the round malformed (stop flag ``MALFORMED_ROUND``); a stop is a clean ``final_answer``."""
    action = np.zeros(len(nvec), np.int64)
    action[1::3] = nvec[1] - 1  # every slot empty
    if rng.random() < 0.12:
        action[0] = STOP
        return action, '<tool_call>{"name": "final_answer", "arguments": {"answer": "A"}}</tool_call>'
    blocks, k = [], 0
    for _ in range(int(rng.integers(0, slots + 1))):
        tool = Tool(int(rng.integers(0, 7)))
        model = int(rng.integers(0, len(models)))
        if tool.is_agent and rng.random() < 0.1:  # an unknown model: the parser's INVALID_TOOL, no slot
            blocks.append(_call_text(tool, "no-such-model", None))
            action[0] = MALFORMED_ROUND
            continue
        target, context = TARGET_QUESTION, None
        if tool is Tool.CRITICAL_REVIEWER:
            target = TARGET_VERIFY
        elif tool.is_agent:
            pick = rng.random()
            if pick < 0.3 and next_id > 0:
                target, context = TARGET_CARRY, int(rng.integers(0, next_id))
            elif pick < 0.4:
                target, context = NUM_TARGETS, next_id + 50
        action[1 + 3 * k: 4 + 3 * k] = int(tool), model if tool.is_agent else 0, target
        blocks.append(_call_text(tool, models[model], context))
        k += 1
    if rng.random() < 0.15:
        blocks.insert(int(rng.integers(0, len(blocks) + 1)), "<tool_call>{not json</tool_call>")
        action[0] = MALFORMED_ROUND
    return action, "Let me call tools.\n" + "\n".join(blocks)


@pytest.mark.parametrize("options", [
    {"max_rounds": 4, "max_parallel": 4},
    {"max_rounds": 3, "max_parallel": 2, "serial": True, "token_budget": 2500.0},
])
def test_structured_and_text_managers_on_sim_and_real_tools_play_one_episode(options):
    """The same turns, said as actions and as text, on simulated and on scripted real tools: the four envs hold the
    same observation (as data), statuses, accounting, trajectory row and reward at every turn."""
    sim_env = gym.make("ParaOrch-v0", **options).unwrapped
    text_sim = gym.make("ParaOrchText-v0", **options).unwrapped
    rng = np.random.default_rng(7 + options["max_parallel"])
    models = sim_env.model_names
    compared = 0
    for episode in range(8):
        seed = 300 + episode
        sim_env.reset(seed=seed)
        text_sim.reset(seed=seed)
        st = sim_env.sim.state
        nans, bench = int(st.st_i[0, I_NANS]), BENCHMARKS[int(st.st_i[0, I_BENCH])]
        task = {"id": f"t{episode}", "question": "q" * (4 * int(st.st_f[0, F_QTOK])), "answer": _label(0, nans),
                "domain": bench.domain.name.lower(), "benchmark": bench.name}
        if nans < NUM_ANSWERS:
            task["options"] = [f"option {j}" for j in range(nans)]
        backends = [ScriptedBackend(models), ScriptedBackend(models)]
        real_env = gym.make("ParaOrch-v0", tools="real", engine=RealEpisodeEngine(backends[0], [task], seed=0),
                            **options).unwrapped
        text_real = gym.make("ParaOrchText-v0", tools="real",
                             engine=RealEpisodeEngine(backends[1], [task], seed=0), **options).unwrapped
        real_env.reset(seed=seed)
        text_real.reset(seed=seed)
        next_id = 0
        for turn in range(options["max_rounds"] + 1):
            action, text = _random_turn(rng, sim_env.action_space.nvec, options["max_parallel"], models, next_id)
            obs, reward, term, _, info = sim_env.step(action)
            records = sim_env.sim.last_round(0)
            if action[0] != STOP:
                for backend in backends:
                    backend.rounds.append(_script(records, action, nans))
                next_id += int(np.sum(action[1::3] != sim_env.action_space.nvec[1] - 1))
            if term:
                for backend in backends:
                    backend.chat.answer = _label(int(sim_env.sim.final_answers()[0]), nans)
            steps = {"real": real_env.step(action), "text-sim": text_sim.step(text), "text-real": text_real.step(text)}
            where = f"episode {episode} turn {turn}"
            text_envs = {"text-sim": text_sim, "text-real": text_real}
            for name, (got_obs, got_reward, got_term, _, got_info) in steps.items():
                data = got_obs if name == "real" else text_envs[name].core._observation()
                _same(data, obs, f"{where} {name}")
                assert (got_reward, got_term) == (reward, term), f"{where} {name}"
                if name != "real" and action[0] != STOP and not term:
                    assert [r.status for r in got_info["results"]] == [r["status"] for r in records], where
                if term:
                    _same(got_info["trajectory"], info["trajectory"], f"{where} {name}")
                    _same(got_info["reward_components"], info["reward_components"], f"{where} {name}")
            compared += 1
            if term:
                assert not backends[0].rounds and not backends[1].rounds
                break
    assert compared > 12
