"""SB3's view of ParaOrch-v0: the compiled vector env behind ``parasim.integrations.sb3.ParaOrchSB3VecEnv`` against
``make_vec_env("ParaOrch-v0", n_envs=N)`` (SB3's DummyVecEnv of single envs), in the same run (pytest-benchmark).

- group ``SB3 VecEnv step, 64 envs``: both VecEnvs step the same pre-sampled actions (``bench_policy``), SB3's
  ``step`` (``step_async`` + ``step_wait``: observations, rewards, dones, per-env infos with the terminal
  observations of finished envs); the rows' time ratio is the bridge's speedup for an SB3 rollout's env side.
- group ``SB3 VecEnv step with masks, 64 envs``: the same plus sb3-contrib's ``get_action_masks`` per step (what
  MaskablePPO calls before every action), both with the joint encoding (whose masks the compiled rule computes on
  each call: all lanes in one call for the bridge, one env per call for DummyVecEnv).

Each row's ``extra_info`` holds the envs, steps per round and best env-steps/s. Run: ``pytest
benchmarks/bench_sb3.py --benchmark-only``.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
from bench_policy import STOP_P, policy_actions

import parasim  # noqa: F401  (registers the envs)

pytest.importorskip("stable_baselines3")
from sb3_contrib.common.maskable.utils import get_action_masks  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

from parasim.integrations.sb3 import ParaOrchSB3VecEnv  # noqa: E402

ENVS = 64
STEPS = 40  # steps per round (DummyVecEnv: ~0.1 s)
ROUNDS = 5


def _venv(impl: str, encoding: str = "factored") -> tuple[object, np.ndarray]:
    """The VecEnv of ``impl`` reset with seed 0, and its pre-sampled actions [STEPS, ENVS, D]."""
    if impl == "parasim_sb3":
        venv = ParaOrchSB3VecEnv(num_envs=ENVS, action_encoding=encoding)
    else:
        venv = make_vec_env("ParaOrch-v0", n_envs=ENVS, env_kwargs={"action_encoding": encoding})
    venv.seed(0)
    venv.reset()
    nvec = venv.action_space.nvec
    if encoding == "factored":
        return venv, policy_actions(nvec, ENVS, STEPS)
    # joint rows: a random call per slot, slot 0's entry 0 (the stop) with the benchmark policy's stop rate
    rng = np.random.default_rng(0)
    actions = rng.integers(0, nvec, size=(STEPS, ENVS, len(nvec)))
    actions[..., 0] = np.where(rng.random((STEPS, ENVS)) < STOP_P, 0, rng.integers(1, nvec[0], (STEPS, ENVS)))
    return venv, actions


def _rounder(step: Callable[[np.ndarray], object], actions: np.ndarray, best: list[float]) -> Callable[[], None]:
    """One round: ``step`` over all of ``actions``; ``best[0]`` keeps the best env-steps per second."""
    def round_() -> None:
        t0 = time.perf_counter()
        for a in actions:
            step(a)
        best[0] = max(best[0], actions.shape[0] * actions.shape[1] / (time.perf_counter() - t0))

    return round_


@pytest.mark.benchmark(group=f"SB3 VecEnv step, {ENVS} envs")
@pytest.mark.parametrize("impl", ["parasim_sb3", "dummy_vec_env"])
def test_sb3_vec_env_step(benchmark, impl: str) -> None:
    venv, actions = _venv(impl)
    best = [0.0]
    benchmark.pedantic(_rounder(venv.step, actions, best), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(envs=ENVS, steps_per_round=STEPS, best_env_steps_per_s=best[0])


@pytest.mark.benchmark(group=f"SB3 VecEnv step with masks, {ENVS} envs")
@pytest.mark.parametrize("impl", ["parasim_sb3", "dummy_vec_env"])
def test_sb3_vec_env_step_with_masks(benchmark, impl: str) -> None:
    venv, actions = _venv(impl, "joint")

    def step(a: np.ndarray) -> None:
        get_action_masks(venv)
        venv.step(a)

    best = [0.0]
    benchmark.pedantic(_rounder(step, actions, best), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(envs=ENVS, steps_per_round=STEPS, best_env_steps_per_s=best[0])
