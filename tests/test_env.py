"""ParaOrch-v0: Gymnasium conformance, wrappers, action validation, rewards and info."""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import FlattenObservation, RecordEpisodeStatistics
from hypothesis import given, settings
from hypothesis import strategies as st

import parasim  # noqa: F401  (registers the envs)
from parasim.protocol.schema import NUM_TOOLS, Status, Tool
from parasim.scoring.batch import FIELDS as BATCH_FIELDS
from parasim.scoring.rewards import PRESETS
from parasim.tasks.suites import BENCHMARK_INDEX, load_suite

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _split_mask(env: gym.Env, mask: np.ndarray) -> tuple[np.ndarray, ...]:
    ends = np.cumsum(env.action_space.nvec)[:-1]
    return tuple(m.astype(np.int8) for m in np.split(mask, ends))


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"pool": "toolorchestra", "serial": True, "max_parallel": 2},
                                     {"pool": "paramanager_mono", "suite": "math", "max_rounds": 3}])
def test_check_env_passes(options):
    check_env(gym.make("ParaOrch-v0", **options).unwrapped, skip_render_check=True)


def test_standard_wrappers_run_episodes():
    env = RecordEpisodeStatistics(FlattenObservation(gym.make("ParaOrch-v0", suite="GPQA")))
    obs, _ = env.reset(seed=0)
    assert obs in env.observation_space
    episodes = 0
    for _ in range(60):
        a = env.action_space.sample()
        obs, r, term, trunc, info = env.step(a)
        assert obs in env.observation_space
        if term or trunc:
            assert "episode" in info and info["episode"]["r"] == pytest.approx(r)
            episodes += 1
            env.reset()
    assert episodes > 0


def test_masked_actions_never_hit_invalid_tool():
    env = gym.make("ParaOrch-v0", pool="toolorchestra", max_parallel=3)
    obs, _ = env.reset(seed=1)
    for _ in range(300):
        a = env.action_space.sample(mask=_split_mask(env, obs["action_mask"]))
        obs, r, term, trunc, info = env.step(a)
        if a[0] == 1:  # final_answer: no round was run
            obs, _ = env.reset()
            continue
        assert Status.INVALID_TOOL not in obs["last_status"]
        for k in range(3):  # with a valid mask, FORMAT_ERR comes only from a tool/target mismatch
            tool, target = a[1 + 3 * k], a[3 + 3 * k]
            if obs["last_status"][k] == Status.FORMAT_ERR:
                assert (tool == Tool.CRITICAL_REVIEWER) != (target == 2)
        if term:
            obs, _ = env.reset()


def test_bad_actions_raise_or_become_statuses():
    env = gym.make("ParaOrch-v0")
    env.reset(seed=0)
    n = len(env.action_space.nvec)
    with pytest.raises(ValueError, match="integer array of shape"):
        env.step(np.zeros(n, np.float32))
    with pytest.raises(ValueError, match="integer array of shape"):
        env.step(np.zeros(n + 1, np.int64))
    obs, r, term, trunc, info = env.step(np.full(n, 99))  # out of range: a status, not a crash
    assert not term and env.unwrapped.sim.trajectory(0)["format_violations"] == 1
    assert set(obs["last_status"].tolist()) == {Status.INVALID_TOOL}
    stop = np.zeros(n, np.int64)
    stop[0] = 1
    env.step(stop)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(stop)


def test_tools_option():
    with pytest.raises(NotImplementedError, match="real-tools backend"):
        gym.make("ParaOrch-v0", tools="real")
    with pytest.raises(ValueError, match="tools: expected 'sim' or 'real'"):
        gym.make("ParaOrch-v0", tools="magic")
    with pytest.raises(ValueError, match="unknown reward preset"):
        gym.make("ParaOrch-v0", reward="nope")


def _scripted_episode(env: gym.Env, seed: int, tools: list[int],
                      options: dict | None = None) -> tuple[list, float, dict]:
    obs, _ = env.reset(seed=seed, options=options)
    n = len(env.action_space.nvec)
    trace = [obs]
    a = np.zeros(n, np.int64)
    a[1::3] = NUM_TOOLS
    for k, t in enumerate(tools):
        a[1 + 3 * k] = t
    obs, r, term, _, info = env.step(a)
    trace.append(obs)
    stop = np.zeros(n, np.int64)
    stop[0] = 1
    obs, r, term, _, info = env.step(stop)
    assert term
    trace.append(obs)
    return trace, r, info


@pytest.mark.parametrize("reward", ["paramanager", "toolorchestra", "xrouter", "router_r1"])
def test_terminal_info_carries_every_component_and_the_trajectory(reward):
    env = gym.make("ParaOrch-v0", reward=reward)
    _, r, info = _scripted_episode(env, 3, [Tool.STANDARD_REASONER, Tool.PYTHON, Tool.SEARCH])
    comps = info["reward_components"]
    assert comps["total"] == pytest.approx(r)
    assert set(comps) >= {"total", "outcome"}
    assert set(info["trajectory"]) == set(BATCH_FIELDS)
    traj = info["trajectory"]
    assert traj["rounds"] == 1 and traj["tool_calls"] == 3 and traj["distinct_tools"] == 3
    assert traj["ended_with_final"] == 1 and traj["format_violations"] == 0
    assert traj["tool_counts"].shape == (NUM_TOOLS,) and traj["tool_counts"].sum() == 3
    assert reward in PRESETS
    suite = load_suite("paramanager")
    assert 0 <= info["task_index"] < env.unwrapped.num_tasks
    assert info["benchmark"] == suite.benchmark[info["task_index"]]


def test_task_options_pick_the_task_and_leave_the_tool_stream_alone():
    """Same task_index and task_seed under different seeds: the same question, different tool outcomes."""
    eps = [_scripted_episode(gym.make("ParaOrch-v0"), seed, [Tool.STANDARD_REASONER] * 4,
                             options={"task_index": 3, "task_seed": 77}) for seed in (1, 2)]
    np.testing.assert_array_equal(eps[0][0][0]["task"], eps[1][0][0]["task"])
    assert eps[0][2]["task_index"] == eps[1][2]["task_index"] == 3
    assert eps[0][2]["benchmark"] == BENCHMARK_INDEX["HMMT25"]  # row 3 of the paramanager suite
    assert eps[0][2]["trajectory"]["tokens"] != eps[1][2]["trajectory"]["tokens"]


def test_reward_accepts_a_config_object():
    env = gym.make("ParaOrch-v0", reward=PRESETS["xrouter"])
    _, r, info = _scripted_episode(env, 4, [Tool.STANDARD_REASONER])
    assert info["reward_components"]["total"] == pytest.approx(r)


def test_same_seed_same_trajectory_and_the_seed_option():
    a = _scripted_episode(gym.make("ParaOrch-v0"), 11, [0, 2, 4, 3])
    b = _scripted_episode(gym.make("ParaOrch-v0"), 11, [0, 2, 4, 3])
    for o1, o2 in zip(a[0], b[0], strict=False):
        for k in o1:
            np.testing.assert_array_equal(o1[k], o2[k])
    assert a[1] == b[1]
    e1, e2 = gym.make("ParaOrch-v0", seed=5), gym.make("ParaOrch-v0", seed=5)
    for k, v in e1.reset()[0].items():
        np.testing.assert_array_equal(v, e2.reset()[0][k])


@functools.cache
def _shared_env() -> gym.Env:
    return gym.make("ParaOrch-v0")


@given(st.lists(st.integers(-2**40, 2**40), min_size=13, max_size=13))
@settings(max_examples=60, deadline=None)
def test_any_integer_action_is_a_status_never_a_crash(values):
    env = _shared_env()
    if env.unwrapped._done:
        env.reset(seed=0)
    obs, r, term, trunc, info = env.step(np.array(values, np.int64))
    assert obs in env.observation_space
    assert np.isfinite(r)
    if not term:
        assert ((obs["last_status"] >= 0) & (obs["last_status"] <= len(Status))).all()

