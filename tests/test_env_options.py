"""Env options and reset arguments are checked, never cast: each bad value raises naming the field and its range.

Regressions: ``max_rounds=2.5`` ran 3 rounds and reported -0.5 rounds left, ``max_parallel=2.7`` became 2, the vector
env took ``seed=[-5] * N`` that the single env refuses, ``reset(seed=1.5)`` said ``'float' object is not iterable``,
and unknown reset option keys were ignored.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch import ParaOrchEnv
from parasim.config.env_options import check_episode_options
from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView
from parasim.sim import Simulator


class _TaskListEngine(EpisodeEngineBase):
    """An engine with a task list and one model that is never run: what the real env's options and task API need."""

    model_names = ("m",)

    def __init__(self, tasks: tuple[str, ...]) -> None:
        self._tasks = tasks

    @property
    def tasks(self) -> tuple[str, ...]:
        return self._tasks

    def reset(self, seed: Any = None, options: Any = None) -> TaskView:
        raise AssertionError("not reached")

    def run_round(self, calls: Any, **_: Any) -> list:
        raise AssertionError("not reached")

    def finish(self, manager_answer: Any = None, lead: str | None = None) -> EpisodeOutcome:
        raise AssertionError("not reached")


@pytest.mark.parametrize(("options", "error", "words"), [
    ({"max_rounds": 2.5}, TypeError, "max_rounds: expected an integer in [1, 1000], got float 2.5"),
    ({"max_rounds": 3.0}, TypeError, "max_rounds"),
    ({"max_rounds": True}, TypeError, "max_rounds"),
    ({"max_rounds": 0}, ValueError, "max_rounds: expected an integer in [1, 1000], got 0"),
    ({"max_parallel": 2.7}, TypeError, "max_parallel: expected an integer in [1, 16], got float 2.7"),
    ({"max_parallel": 17}, ValueError, "max_parallel"),
    ({"serial": 1}, TypeError, "serial: expected True or False"),
    ({"serial": "no"}, TypeError, "serial"),
    ({"token_budget": float("nan")}, ValueError, "token_budget"),
    ({"token_budget": -1}, ValueError, "token_budget"),
    ({"token_budget": "100"}, TypeError, "token_budget"),
])
def test_bad_episode_options_are_refused_by_every_env(options, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        gym.make("ParaOrch-v0", **options)
    with pytest.raises(error, match=words.split(":")[0]):
        gym.make_vec("ParaOrch-v0", num_envs=2, vectorization_mode="vector_entry_point", **options)
    with pytest.raises(error, match=words.split(":")[0]):
        Simulator(**{"max_rounds": 12, "max_parallel": 4, "serial": False, "token_budget": None, **options})
    engine = _TaskListEngine(())
    with pytest.raises(error, match=words.split(":")[0]):
        ParaOrchEnv(tools="real", engine=engine, **options)


def test_numpy_integers_are_integers():
    opts = check_episode_options(np.int64(5), np.int32(2), np.bool_(True), np.float32(100.0))
    assert opts == (5, 2, True, 100.0) and type(opts.max_rounds) is int and type(opts.serial) is bool


def test_rounds_left_stays_in_the_observation_space():
    env = gym.make("ParaOrch-v0", max_rounds=3)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["round"].tolist() == [0.0, 3.0]


@pytest.mark.parametrize(("seed", "error", "words"), [
    (1.5, TypeError, "seed: expected an integer in \\[0, .*\\], got float 1.5"),
    (-1, ValueError, "seed: expected an integer in \\[0, "),
    ("7", TypeError, "seed"),
    (2**63, ValueError, "seed"),
])
def test_single_env_seeds(seed, error, words):
    env = gym.make("ParaOrch-v0")
    with pytest.raises(error, match=words):
        env.reset(seed=seed)


@pytest.mark.parametrize(("seed", "error", "words"), [
    ([-5] * 3, ValueError, r"seed\[0\]: expected an integer in \[0, "),
    ([0, 1, 2.5], TypeError, r"seed\[2\]"),
    (1.5, TypeError, "seed: expected None, an int or 3 ints, got float 1.5"),
    ([0, 1], ValueError, "seed: expected an int or 3 seeds"),
    (-2, ValueError, "seed"),
])
def test_vector_env_seeds_follow_the_single_env(seed, error, words):
    envs = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    with pytest.raises(error, match=words):
        envs.reset(seed=seed)


@pytest.mark.parametrize(("seed", "error", "words"), [
    (np.array([0, -5, 2]), ValueError, r"seed\[1\]: expected an integer in \[0, "),
    (np.array([0, 1, 2**63], np.uint64), ValueError, r"seed\[2\]"),
    (np.array([0, 1]), ValueError, "seed: expected an int or 3 seeds"),
    (np.array([0.0, 1.0, 2.0]), TypeError, r"seed\[0\]"),
])
def test_vector_env_seed_arrays_are_checked_like_lists(seed, error, words):
    envs = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    with pytest.raises(error, match=words):
        envs.reset(seed=seed)


def test_vector_env_seed_array_equals_seed_list():
    a = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    b = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    oa, _ = a.reset(seed=[7, 2**62, 3])
    ob, _ = b.reset(seed=np.array([7, 2**62, 3], np.uint64))
    for _ in range(3):
        for k in oa:
            np.testing.assert_array_equal(oa[k], ob[k])
        act = a.action_space.sample()
        oa, *_ = a.step(act)
        ob, *_ = b.step(act)


def test_vector_env_seed_list_equals_int_seed():
    a = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    b = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point")
    oa, _ = a.reset(seed=10)
    ob, _ = b.reset(seed=[np.int64(10), 11, 12])
    for k in oa:
        np.testing.assert_array_equal(oa[k], ob[k])


def test_unknown_reset_options_are_refused():
    env = gym.make("ParaOrch-v0")
    with pytest.raises(ValueError, match="unknown key.*task_idx"):
        env.reset(seed=0, options={"task_idx": 3})
    envs = gym.make_vec("ParaOrch-v0", num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="unknown key.*reset_msk"):
        envs.reset(seed=0, options={"reset_msk": np.ones(2, bool)})
    with pytest.raises(TypeError, match="options: expected a dict"):
        env.reset(seed=0, options=[("task_index", 1)])


def test_real_env_exposes_the_task_api_of_the_sim_env():
    """``num_tasks`` and ``task_weights()`` (trainers call both) work on the real-tools env too."""
    env = ParaOrchEnv(tools="real", engine=_TaskListEngine(("a", "b", "c", "d")))
    assert env.num_tasks == 4
    np.testing.assert_allclose(env.task_weights(), [0.25] * 4)
    with pytest.raises(ValueError, match="unknown key.*tsk"):
        env.reset(options={"tsk": 1})
