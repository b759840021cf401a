"""ParaOrch-v0 unmodified in standard consumers: Stable-Baselines3 PPO, Gymnasium wrappers and vector envs.

Why: the env's value is that off-the-shelf RL code takes it as is (a Dict observation, a MultiDiscrete
action). These tests use only public APIs of those libraries, no adapters.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FlattenObservation, RecordEpisodeStatistics, TimeLimit

import parasim  # noqa: F401  (registers the envs)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.mark.slow
def test_sb3_ppo_multi_input_policy_trains_on_the_env():
    sb3 = pytest.importorskip("stable_baselines3")
    import torch
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    torch.set_num_threads(1)
    env = gym.make("ParaOrch-v0")
    sb3_check_env(env.unwrapped, warn=False)
    model = sb3.PPO("MultiInputPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [32]})
    model.learn(total_timesteps=512)
    assert model.num_timesteps >= 512
    obs, _ = env.reset(seed=1)
    for _ in range(8):
        action, _ = model.predict(obs, deterministic=True)
        assert action in env.action_space
        obs, reward, term, trunc, _ = env.step(action)
        assert obs in env.observation_space and np.isfinite(reward)
        if term or trunc:
            obs, _ = env.reset()


def test_flatten_record_statistics_and_time_limit():
    env = RecordEpisodeStatistics(TimeLimit(FlattenObservation(gym.make("ParaOrch-v0")), max_episode_steps=3))
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    assert obs.ndim == 1 and obs in env.observation_space
    ends, steps, total = 0, 0, 0.0
    while ends < 5:
        a = env.action_space.sample()
        a[0] = 0  # never stop: every episode runs into the time limit
        obs, reward, term, trunc, info = env.step(a)
        steps += 1
        total += reward
        assert obs in env.observation_space and not term
        if trunc:
            assert steps == 3 and info["episode"]["l"] == 3 and info["episode"]["r"] == pytest.approx(total)
            ends, steps, total = ends + 1, 0, 0.0
            env.reset()


@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_gymnasium_vector_envs_match_single_envs(vector_cls):
    """Each sub-env of a Gymnasium vector env runs the episode a single env seeded alike runs."""
    n, steps = 2, 12
    venv = vector_cls([lambda: gym.make("ParaOrch-v0", max_rounds=3) for _ in range(n)])
    singles = [gym.make("ParaOrch-v0", max_rounds=3) for _ in range(n)]
    rng = np.random.default_rng(0)
    actions = np.stack([np.stack([singles[0].action_space.sample() for _ in range(n)]) for _ in range(steps)])
    actions[..., 0] = rng.random((steps, n)) < 0.2
    try:
        obs, _ = venv.reset(seed=[10, 11])
        single_obs = [e.reset(seed=10 + i)[0] for i, e in enumerate(singles)]
        ended, pending = 0, [False] * n
        for t in range(steps):
            assert obs in venv.observation_space
            for i in range(n):
                assert all(np.array_equal(obs[k][i], single_obs[i][k]) for k in obs)
            obs, reward, term, trunc, _ = venv.step(actions[t])
            for i, e in enumerate(singles):
                if pending[i]:  # gymnasium's NEXT_STEP autoreset: the step after the end resets the sub-env
                    single_obs[i], _ = e.reset()
                    pending[i] = False
                    assert reward[i] == 0 and not term[i]
                    continue
                single_obs[i], r, d, _, _ = e.step(actions[t, i])
                assert reward[i] == pytest.approx(r) and term[i] == d and not trunc[i]
                ended += d
                pending[i] = d
        assert ended > 0
    finally:
        venv.close()


def test_gymnasium_render_collection_gathers_one_board_per_step():
    """``render_mode="rgb_array_list"``: gym.make wraps the env's rgb_array mode in RenderCollection, whose frames
    (one per reset and step) must share a shape for video writers."""
    env = gym.make("ParaOrch-v0", render_mode="rgb_array_list", max_rounds=3)
    env.reset(seed=0)
    for _ in range(3):
        env.step(np.array([0] + [0, 0, 0] + [7, 0, 0] * 3, np.int64))
    frames = env.render()
    assert isinstance(frames, list) and len(frames) == 4
    assert len({f.shape for f in frames}) == 1 and all(f.dtype == np.uint8 for f in frames)
    assert not np.array_equal(frames[0], frames[-1])
