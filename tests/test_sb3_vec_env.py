"""parasim.integrations.sb3: the compiled vector env as an SB3 VecEnv (API, equality with DummyVecEnv, PPO and
MaskablePPO, VecNormalize)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
import torch
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv, VecMonitor, VecNormalize

import parasim  # noqa: F401  (registers the envs)
from parasim.integrations.sb3 import NORMALIZE_KEYS, OBSERVATION_SCALES, ParaOrchSB3VecEnv

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(120)]
N = 4


def _actions(space, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        a = np.stack([rng.integers(0, space.nvec) for _ in range(N)])
        a[:, 0] = rng.random(N) < 0.3
        out.append(a)
    return out


def test_lane_i_is_dummy_vec_env_i_step_for_step_with_terminal_observations():
    """Same seed, same actions: the bridge and make_vec_env's DummyVecEnv give equal observations, rewards, dones and
    infos (terminal_observation, reward components, trajectory), autoresets included."""
    ours = ParaOrchSB3VecEnv(num_envs=N, max_rounds=3)
    ref = make_vec_env("ParaOrch-v0", n_envs=N, env_kwargs={"max_rounds": 3})
    assert isinstance(ours, VecEnv) and ours.observation_space == ref.observation_space
    assert ours.action_space == ref.action_space
    ours.seed(11)
    ref.seed(11)
    o1, o2 = ours.reset(), ref.reset()
    for k in o2:
        np.testing.assert_array_equal(o1[k], o2[k], err_msg=k)
    finished = 0
    for a in _actions(ours.action_space, 30, 0):
        (o1, r1, d1, i1), (o2, r2, d2, i2) = ours.step(a), ref.step(a)
        for k in o2:
            np.testing.assert_array_equal(o1[k], o2[k], err_msg=k)
        assert r1.dtype == np.float32 and np.array_equal(r1, r2) and np.array_equal(d1, d2)
        for i in np.flatnonzero(d2):
            finished += 1
            for k in o2:
                np.testing.assert_array_equal(i1[i]["terminal_observation"][k], i2[i]["terminal_observation"][k])
            assert i1[i]["reward_components"]["total"] == pytest.approx(r2[i])
            assert i1[i]["reward_components"].keys() == i2[i]["reward_components"].keys()
            for k, v in i2[i]["trajectory"].items():
                np.testing.assert_array_equal(i1[i]["trajectory"][k], v, err_msg=k)
            assert i1[i]["task_index"] == i2[i]["task_index"] and i1[i]["TimeLimit.truncated"] is False
        for i in np.flatnonzero(~d2):
            assert "terminal_observation" not in i1[i]
    assert finished > N


def test_vec_env_api_attrs_methods_options_and_errors():
    venv = ParaOrchSB3VecEnv(num_envs=N, seed=0, action_encoding="joint")
    venv.reset()
    assert venv.get_attr("num_tasks") == [venv.venv.num_tasks] * N and venv.get_attr("render_mode", [1]) == [None]
    assert venv.has_attr("action_masks") and not venv.has_attr("no_such_thing")
    masks = venv.env_method("action_masks", indices=[0, 2])
    assert len(masks) == 2 and np.array_equal(masks[1], venv.venv.action_masks()[2]) and masks[0].dtype == np.bool_
    assert venv.env_method("task_weights", indices=1)[0].sum() == pytest.approx(1.0)
    assert venv.env_is_wrapped(Monitor) == [False] * N
    venv.set_attr("reward_config", venv.venv.reward_config)
    with pytest.raises(ValueError, match="set_attr\\('reward_config'\\): the lanes share one compiled env"):
        venv.set_attr("reward_config", None, indices=[0])
    with pytest.raises(ValueError, match="autoreset_mode: fixed to SAME_STEP"):
        ParaOrchSB3VecEnv(num_envs=2, autoreset_mode="next_step")
    # options apply at the next reset, one dict per lane: task_index per lane
    venv.set_options([{"task_index": i} for i in range(N)])
    venv.reset()
    assert venv.venv.sim.tasks()["task_index"].tolist() == list(range(N))
    venv.set_options([{"task_index": 0}, {}, {}, {}])
    with pytest.raises(ValueError, match="set_options: every lane must give the same option keys"):
        venv.reset()
    venv.set_options(None)  # the refused options stay set until replaced, as DummyVecEnv keeps them
    # seeds: lane i seeded seed + i, as the single env seeded seed + i
    venv.seed(5)
    obs = venv.reset()
    single = gym.make("ParaOrch-v0", action_encoding="joint")
    o, _ = single.reset(seed=7)
    for k in o:
        np.testing.assert_array_equal(o[k], obs[k][2], err_msg=k)
    with pytest.raises(RuntimeError, match="step_async"):
        venv.step_wait()


def test_rgb_images_come_from_the_lanes_boards():
    venv = ParaOrchSB3VecEnv(num_envs=2, seed=0, render_mode="rgb_array")
    venv.reset()
    frames = venv.get_images()
    assert len(frames) == 2 and frames[0].dtype == np.uint8 and frames[0].ndim == 3
    assert venv.render().shape[2] == 3  # SB3's tiled image of every lane


def test_ppo_and_maskable_ppo_learn_on_the_bridge():
    contrib = pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.maskable.utils import is_masking_supported
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    ppo = PPO("MultiInputPolicy", VecMonitor(ParaOrchSB3VecEnv(num_envs=8, seed=0)), n_steps=32, batch_size=64,
              n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    ppo.learn(total_timesteps=512)
    assert ppo.num_timesteps >= 512 and len(ppo.ep_info_buffer) > 0  # VecMonitor saw finished episodes
    venv = VecMonitor(ParaOrchSB3VecEnv(num_envs=8, seed=0, action_encoding="joint"))
    assert is_masking_supported(venv)
    model = contrib.MaskablePPO("MultiInputPolicy", venv, n_steps=32, batch_size=64, n_epochs=1, seed=0,
                                device="cpu", policy_kwargs={"net_arch": [16]})
    model.learn(total_timesteps=512)
    buf = model.rollout_buffer
    width = int(venv.action_space.nvec[0])
    masks = buf.action_masks.reshape(-1, venv.action_space.nvec.size, width)
    assert np.array_equal(buf.action_masks.reshape(-1, masks.shape[1] * width),
                          buf.observations["action_mask"].reshape(-1, masks.shape[1] * width))
    actions = buf.actions.reshape(-1, masks.shape[1]).astype(np.int64)
    assert np.take_along_axis(masks, actions[..., None], -1).all()  # every collected action was allowed


def test_vec_normalize_recipe_normalizes_the_unbounded_keys_only():
    contrib = pytest.importorskip("sb3_contrib")
    torch.set_num_threads(1)
    assert set(NORMALIZE_KEYS) <= set(OBSERVATION_SCALES)
    assert "action_mask" not in NORMALIZE_KEYS and "last_status" not in NORMALIZE_KEYS
    venv = VecNormalize(ParaOrchSB3VecEnv(num_envs=8, seed=0, action_encoding="joint"),
                        norm_obs_keys=list(NORMALIZE_KEYS), norm_reward=False)
    model = contrib.MaskablePPO("MultiInputPolicy", venv, n_steps=16, batch_size=64, n_epochs=1, seed=0,
                                device="cpu", policy_kwargs={"net_arch": [16]})
    model.learn(total_timesteps=256)
    obs = venv.reset()
    assert set(np.unique(obs["action_mask"])) <= {0, 1}  # the mask passes through unchanged
    assert venv.obs_rms["budget"].count > 100 and np.abs(obs["budget"]).max() <= venv.clip_obs
