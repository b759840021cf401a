"""The batched vector env: Gymnasium vector API, autoreset modes, reset masks, equality with single envs."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from parasim.envs.paraorch_vector import ParaOrchVectorEnv

import parasim  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
N = 6


def _policy_actions(space: gym.Space, steps: int, seed: int, stop_p: float = 0.3) -> list[np.ndarray]:
    space.seed(seed)
    rng = np.random.default_rng(seed)
    acts = []
    for _ in range(steps):
        a = space.sample()
        a[..., 0] = rng.random(a.shape[:-1]) < stop_p
        acts.append(a)
    return acts


def _assert_tree_equal(x, y, where: str) -> None:
    if isinstance(x, dict):
        assert set(x) == set(y), where
        for k in x:
            _assert_tree_equal(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, np.ndarray) and x.dtype == object:
        for i, (a, b) in enumerate(zip(x, y, strict=False)):
            _assert_tree_equal(a, b, f"{where}[{i}]")
    elif x is None:
        assert y is None, where
    else:
        np.testing.assert_array_equal(x, y, err_msg=where)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_equal_to_sync_vector_env_over_single_envs(mode):
    kwargs = {"pool": "paramanager", "suite": "paramanager", "max_rounds": 4}
    vec = gym.make_vec("ParaOrch-v0", num_envs=N, vectorization_mode="vector_entry_point", autoreset_mode=mode,
                       **kwargs)
    ref = SyncVectorEnv([lambda: gym.make("ParaOrch-v0", **kwargs) for _ in range(N)], autoreset_mode=mode)
    assert vec.metadata["autoreset_mode"] == mode
    o1, _ = vec.reset(seed=42)
    o2, _ = ref.reset(seed=42)
    _assert_tree_equal(o1, o2, "reset")
    finished = 0
    for t, a in enumerate(_policy_actions(vec.action_space, 50, 0)):
        s1, s2 = vec.step(a), ref.step(a)
        for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), s1, s2, strict=False):
            _assert_tree_equal(x, y, f"step {t} {name}")
        finished += int(s1[2].sum())
    assert finished > N


def test_lane_i_replays_the_single_env_seeded_with_seed_plus_i():
    vec = ParaOrchVectorEnv(num_envs=N, suite="math")
    single = [gym.make("ParaOrch-v0", suite="math") for _ in range(N)]
    obs, _ = vec.reset(seed=100)
    for i, env in enumerate(single):
        o, _ = env.reset(seed=100 + i)
        for k in o:
            np.testing.assert_array_equal(o[k], obs[k][i])
    pending = np.zeros(N, bool)
    for a in _policy_actions(vec.action_space, 30, 1):
        obs, r, term, _, _ = vec.step(a)
        for i, env in enumerate(single):
            if pending[i]:  # NEXT_STEP: the vector lane resets now, the single env resets by hand
                o, ri, ti = env.reset()[0], 0.0, False
            else:
                o, ri, ti, _, _ = env.step(a[i])
            assert ri == r[i] and ti == term[i]
            for k in o:
                np.testing.assert_array_equal(o[k], obs[k][i])
        pending = term.copy()


def test_reset_mask_resets_only_masked_lanes():
    vec = ParaOrchVectorEnv(num_envs=N)
    vec.reset(seed=0)
    a = np.zeros((N, len(vec.sim.nvec)), np.int64)
    a[:, 1::3] = 7
    a[:, 1] = 0
    obs, *_ = vec.step(a)
    assert (obs["round"][:, 0] == 1).all()
    mask = np.array([True, False] * (N // 2))
    obs2, _ = vec.reset(options={"reset_mask": mask})
    assert (obs2["round"][mask, 0] == 0).all() and (obs2["round"][~mask, 0] == 1).all()
    np.testing.assert_array_equal(obs2["budget"][~mask], obs["budget"][~mask])
    obs3, _ = vec.reset(seed=7, options={"reset_mask": mask})
    fresh = ParaOrchVectorEnv(num_envs=N)
    ref, _ = fresh.reset(seed=7)
    np.testing.assert_array_equal(obs3["task"][mask], ref["task"][mask])
    with pytest.raises(ValueError, match="reset_mask"):
        vec.reset(options={"reset_mask": np.ones(N + 1, bool)})
    with pytest.raises(ValueError, match="actions: expected an integer array"):
        vec.step(np.zeros((N, 3), np.int64))
    with pytest.raises(ValueError, match="autoreset_mode"):
        ParaOrchVectorEnv(num_envs=2, autoreset_mode=AutoresetMode.DISABLED)


def test_vector_wrappers_and_spaces():
    vec = RecordEpisodeStatistics(gym.make_vec("ParaOrch-v0", num_envs=N))
    obs, _ = vec.reset(seed=0)
    assert obs in vec.observation_space
    assert vec.action_space.shape == (N, len(vec.unwrapped.sim.nvec))
    seen = 0
    for a in _policy_actions(vec.action_space, 20, 2, stop_p=0.5):
        obs, r, term, trunc, info = vec.step(a)
        assert obs in vec.observation_space
        if "episode" in info:
            seen += int(info["_episode"].sum())
            np.testing.assert_allclose(info["episode"]["r"][info["_episode"]], r[info["_episode"]])
            np.testing.assert_array_equal(info["_trajectory"], term)
    assert seen > 0
