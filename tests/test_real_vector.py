"""RealVectorEnv: real-tools ParaOrch-v0 lanes stepped at once, over the scripted OpenAI-compatible server.

Checks that a lane plays what a single env reset the same way plays (whatever the other lanes do), that a finished
lane is frozen (no further calls reach the server or the call log), that the terminal infos have the compiled vector
env's layout, and that ``training.evaluate.evaluate_on`` measures a policy on real tools with the code that measures
it in simulation (same tasks drawn, same metrics).
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_real_backend import _exact, _task

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch import ParaOrchEnv
from envs.real_vector import RealVectorEnv
from parasim.pools.pool import pool_file
from parasim.real.calllog import CallLogger
from parasim.real.engine import RealEpisodeEngine
from training.config import TrainConfig
from training.evaluate import evaluate_on
from training.expert import ExpertConfig, ScriptedExpert
from training.population import build_policy
from training.rollout import Block, collect_blocks, make_envs

# not the episode's play: wall-clock latency is measured (it differs between two plays), group ids are the collection's
MEASURED = ("latency_s", "group_id")
TASKS = [_task(id=f"t{i}", question=f"What is six times seven? (#{i})") for i in range(5)]


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> str:
    """paramanager's pool with its three agent models named as the scripted server's (descriptors read the pool)."""
    raw = json.loads(pool_file("paramanager").read_text())
    for entry, name in zip(raw["models"], ("good", "other", "split")):
        entry["name"] = name
    path = tmp_path_factory.mktemp("pool") / "pool.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _engines(backend, n: int, logger: CallLogger | None = None) -> list[RealEpisodeEngine]:
    return [RealEpisodeEngine(backend, TASKS, verifier=_exact, logger=logger, use_termination_model=False)
            for _ in range(n)]


def _expert(envs, seed: int) -> ScriptedExpert:
    nvec = [int(v) for v in envs.single_action_space.nvec]
    return ScriptedExpert(envs.num_envs, nvec, ExpertConfig(explore=0.5), np.random.default_rng(seed))


def test_each_lane_plays_what_a_single_env_plays(backend, pool):
    envs = RealVectorEnv.from_engines(_engines(backend, 4), pool=pool)
    assert envs.num_tasks == len(TASKS) and envs.model_names == ("good", "other", "split")
    ro = collect_blocks(_expert(envs, 3), envs, [Block(4, seed=11, group_size=2)])
    lanes = ro.lane.numpy()
    assert len(ro.batch) == 4 and set(lanes) == {0, 1, 2, 3}
    seeds = [int(s) for s in np.random.SeedSequence([11, 1]).generate_state(4, np.uint32)]
    rng = np.random.default_rng(np.random.SeedSequence([11, 0]))
    task_index = np.repeat(rng.choice(len(TASKS), size=2), 2)
    task_seed = np.repeat(rng.integers(2**62, size=2), 2)
    for lane in range(4):  # replay the lane's actions alone, in a fresh env over a fresh engine
        single = ParaOrchEnv(tools="real", engine=_engines(backend, 1)[0], pool=pool)
        obs, _ = single.reset(seed=seeds[lane], options={"task_index": task_index[lane], "task_seed": task_seed[lane]})
        for action in ro.actions.numpy()[lanes == lane]:
            obs, reward, term, trunc, info = single.step(action)
        assert term or trunc
        for key, value in info["trajectory"].items():  # the compiled rules' record of the same episode
            if key in MEASURED:
                continue
            assert np.array_equal(getattr(ro.batch, key)[lane], value), key
    envs.close()


def test_a_finished_lane_is_frozen_and_its_info_has_the_vector_layout(backend, pool, tmp_path):
    logger = CallLogger(tmp_path / "calls.jsonl")
    envs = RealVectorEnv.from_engines(_engines(backend, 2, logger), pool=pool)
    envs.reset(seed=[1, 2], options={"task_index": np.array([0, 1])})
    width = len(envs.single_action_space.nvec)
    stop = np.zeros((2, width), np.int64)
    stop[0, 0] = 1  # lane 0 answers at once; lane 1 calls the standard reasoner on model 0
    stop[1, 1:4] = [0, 0, 0]
    stop[1, 4::3] = 7  # its other slots empty
    obs, reward, term, trunc, info = envs.step(stop)
    assert term.tolist() == [True, False] and info["_trajectory"].tolist() == [True, False]
    assert set(info) >= {"reward_components", "trajectory", "task_index", "benchmark", "correct"}
    assert info["task_index"][0] == 0 and info["trajectory"]["rounds"].shape == (2,)
    before = obs["round"][0].copy()
    calls_before = len((tmp_path / "calls.jsonl").read_text().splitlines())
    again = stop.copy()
    again[0] = stop[1]  # a call for the frozen lane: ignored
    obs, reward, term, trunc, info = envs.step(again)
    assert np.array_equal(obs["round"][0], before) and reward[0] == 0 and not term[0]
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == calls_before + 1  # lane 1's call only
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.zeros((3, width), np.int64))
    with pytest.raises(ValueError, match="one per lane"):
        envs.reset(seed=[1, 2, 3])
    envs.close()
    logger.close()
    episodes = [json.loads(x) for x in (tmp_path / "calls.episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 1  # lane 1 has not finished; lane 0 finished once


def test_evaluate_on_real_and_simulated_envs_draws_the_same_tasks(backend, pool, tmp_path):
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(json.dumps({"id": t.task_id, "domain": "math"}) + "\n" for t in TASKS))
    cfg = TrainConfig()
    cfg = replace(cfg, env=replace(cfg.env, pool=pool, suite=str(tasks_file)), eval=replace(cfg.eval, tasks=3, k=2))
    policy = build_policy(cfg)
    real_envs = RealVectorEnv.from_engines(_engines(backend, 6), pool=pool, suite=str(tasks_file))
    real = evaluate_on(policy, real_envs, cfg, seed=5)
    sim = evaluate_on(policy, make_envs(cfg.env, 6, cfg.reward), cfg, seed=5)
    for result in (real, sim):
        assert 0.0 <= result["metrics"]["accuracy"] <= 1.0 and len(result["trajectories"]) == 6
        assert set(result["metrics"]) >= {"tokens", "usd", "latency_s", "tool_dist", "model_dist"}
    # the good model answers 42, the gold answer: real accuracy is what the policy's model choices make of it
    assert real["metrics"]["model_dist"].keys() == sim["metrics"]["model_dist"].keys()
