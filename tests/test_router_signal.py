"""The router signal (``parasim.sim.router_signal``): a pure function of the task's draws (deterministic single or
vectorized, identical for the identical task, constant over an episode, consuming no random numbers), correlated
with the standardized per-model effect by rho and with nothing else, and calibrated so that the router reading it
best captures ROUTER_CAPTURE of the per-query oracle's gain."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import parasim  # noqa: F401  (registers the envs)
from parasim.sim.router_signal import (
    ROUTER_CAPTURE,
    ROUTER_KEY,
    calibrated_rho,
    direct_calls,
    fit_rho,
    router_capture,
    task_noise,
)
from parasim.sim.tables import MM_TAU
from training.config import EnvConfig
from training.rollout import make_envs


def _vec(n: int, **options) -> gym.vector.VectorEnv:
    return gym.make_vec("ParaOrch-v0", num_envs=n, vectorization_mode="vector_entry_point", **options)


def _standard_effect(env: gym.vector.VectorEnv) -> np.ndarray:
    sim = env.unwrapped.sim
    m = sim.pool.num_models
    return sim.lane_records["effect"][:, :m] / sim.tables.mm[MM_TAU, :m]


def test_single_and_vector_envs_show_the_same_signal_constant_over_the_episode() -> None:
    single = gym.make("ParaOrch-v0", router_signal=0.5)
    vec = _vec(3, router_signal=0.5)
    obs, _ = vec.reset(seed=7)
    assert obs[ROUTER_KEY].shape == (3, single.unwrapped.sim.pool.num_models)
    assert obs[ROUTER_KEY].dtype == np.float32
    for lane in range(3):
        o, _ = single.reset(seed=7 + lane)
        assert single.observation_space.contains(o)
        np.testing.assert_array_equal(o[ROUTER_KEY], obs[ROUTER_KEY][lane])
        first = o[ROUTER_KEY].copy()
        stop = np.zeros(single.action_space.shape, np.int64)
        run = stop.copy()
        run[1:4] = (0, 0, 0)  # one standard_reasoner call of model 0 on the question, the other slots empty
        run[4::3] = single.action_space.nvec[4::3] - 1
        o, *_ = single.step(run)
        np.testing.assert_array_equal(o[ROUTER_KEY], first)


def test_the_identical_task_gets_the_identical_signal_and_other_tasks_others() -> None:
    env = _vec(4, router_signal=0.6)
    obs, _ = env.reset(seed=0, options={"task_index": np.zeros(4, np.int64), "task_seed": np.full(4, 11)})
    assert (obs[ROUTER_KEY] == obs[ROUTER_KEY][0]).all()
    obs, _ = env.reset(seed=0, options={"task_index": np.zeros(4, np.int64), "task_seed": np.arange(4)})
    assert len({tuple(r) for r in obs[ROUTER_KEY].tolist()}) == 4


def test_the_signal_consumes_no_random_numbers() -> None:
    runs = []
    for router in (None, 0.7):
        env = _vec(64, router_signal=router, max_rounds=3)
        env.reset(seed=3)
        env.action_space.seed(5)
        rewards = [env.step(env.action_space.sample())[1] for _ in range(8)]
        runs.append((np.array(rewards), env.unwrapped.sim.lane_records["effect"].copy()))
        assert (ROUTER_KEY in env.observation_space.spaces) == (router is not None)
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("rho", [0.0, 0.4, 0.9])
def test_the_signal_correlates_with_the_standardized_effect_by_rho(rho: float) -> None:
    env = _vec(6000, router_signal=rho)
    obs, _ = env.reset(seed=1)
    s, e = obs[ROUTER_KEY].astype(np.float64), _standard_effect(env)
    for m in range(s.shape[1]):
        assert abs(np.corrcoef(s[:, m], e[:, m])[0, 1] - rho) < 0.04
        assert abs(s[:, m].mean()) < 0.05 and abs(s[:, m].std() - 1.0) < 0.04
    noise = (s - rho * e) / np.sqrt(1 - rho ** 2)
    assert abs(np.corrcoef(noise[:, 0], e[:, 0])[0, 1]) < 0.04  # the noise is independent of the effect
    assert abs(np.corrcoef(noise[:, 0], noise[:, 1])[0, 1]) < 0.04  # and across models


def test_task_noise_is_standard_normal_and_a_function_of_its_inputs() -> None:
    rng = np.random.default_rng(0)
    z, effect = rng.normal(size=20_000), rng.normal(size=(20_000, 3))
    eps = task_noise(z, effect)
    np.testing.assert_array_equal(eps, task_noise(z.copy(), effect.copy()))
    assert abs(eps.mean()) < 0.03 and abs(eps.std() - 1.0) < 0.03
    assert abs(np.mean(eps < -1.96) - 0.025) < 0.005  # the normal's tail, not only its first two moments
    moved = effect.copy()
    moved[:, 2] += 1e-12
    assert (task_noise(z, moved) != eps).all()  # every model's draw enters every model's noise


def _unkeyed_direct_accuracy(pool: str, n: int) -> np.ndarray:
    """Each model's accuracy of one direct call on n tasks each lane draws from its own stream (no task seeds)."""
    from parasim.pools.descriptors import direct_tool
    from parasim.sim import Simulator
    from parasim.sim.kernel import C_ANSWER, TARGET_QUESTION

    sim = Simulator(pool, "paramanager", n * 3, max_rounds=1, max_parallel=1)
    sim.seed(np.arange(n * 3) + 77)
    sim.reset()
    actions = np.zeros((n * 3, len(sim.nvec)), np.int64)
    actions[:, 1], actions[:, 2], actions[:, 3] = direct_tool(sim.pool), np.repeat(np.arange(3), n), TARGET_QUESTION
    sim.step(actions, np.zeros(n * 3, np.uint8))
    right = (sim.state.call_i[:, 0, C_ANSWER] == 0) & (sim.state.last_status[:, 0] == 0)
    return right.reshape(3, n).mean(1)


def test_the_router_capture_rises_with_rho_and_the_fit_meets_the_target() -> None:
    calls = direct_calls("paramanager", "paramanager", 6000)
    # the calls' streams are not the tasks': a lane seeded like its task replayed the task's draws in its call
    # (model 0 came out 2.2 points high, about 5 SEs of this difference at 20,000 tasks)
    keyed = direct_calls("paramanager", "paramanager", 20_000, seed=1).right.mean(0)
    assert np.abs(keyed - _unkeyed_direct_accuracy("paramanager", 20_000)).max() < 0.012
    none, half, full = (router_capture(calls, r) for r in (0.0, 0.5, 1.0))
    assert none.router == none.per_benchmark  # without the signal the router is the per-benchmark one
    assert none.capture < half.capture < full.capture < 1.0
    assert none.single < none.oracle and full.router < full.oracle
    rho = fit_rho(calls)
    assert 0.0 < rho < 1.0
    assert abs(router_capture(calls, rho).capture - ROUTER_CAPTURE) < 0.005
    assert fit_rho(calls, 0.0) == 0.0 and fit_rho(calls, 0.99) == 1.0


def test_a_pool_whose_per_benchmark_router_already_captures_the_target_gets_no_signal() -> None:
    calls = direct_calls("toolorchestra", "paramanager", 6000)
    without = router_capture(calls, 0.0).capture
    assert 0.02 < without < ROUTER_CAPTURE and fit_rho(calls, without - 0.01) == 0.0 and fit_rho(calls) > 0.0
    one = direct_calls("paramanager_mono", "paramanager", 500)
    assert np.isnan(router_capture(one, 0.5).capture) and fit_rho(one) == 0.0


def test_calibrated_rho_is_cached_for_named_pools_and_used_by_the_env() -> None:
    from parasim.sim.router_signal import _calibrated

    rho = calibrated_rho("paramanager", "paramanager")
    hits = _calibrated.cache_info().hits
    assert rho == calibrated_rho("paramanager", "paramanager") and _calibrated.cache_info().hits == hits + 1
    assert gym.make("ParaOrch-v0", router_signal="calibrated").unwrapped.router.rho == rho
    assert _vec(2, router_signal=True).unwrapped.router.rho == rho


@pytest.mark.parametrize("bad", [1.5, -0.1, "sometimes", [0.5], float("nan")])
def test_a_bad_router_option_names_the_option(bad: object) -> None:
    with pytest.raises(ValueError, match="router_signal"):
        gym.make("ParaOrch-v0", router_signal=bad)
    with pytest.raises(ValueError, match="router_signal"):
        _vec(2, router_signal=bad)


def test_the_training_config_passes_the_option_to_the_env() -> None:
    from parasim.config.fields import ConfigError, build
    from parasim.scoring.rewards import resolve_config

    reward = resolve_config("paramanager")
    envs = make_envs(build(EnvConfig, {"router_signal": "0.5"}), 2, reward)
    obs, _ = envs.reset(seed=0)
    assert obs[ROUTER_KEY].shape[0] == 2 and envs.unwrapped.router.rho == 0.5
    assert ROUTER_KEY not in make_envs(EnvConfig(), 2, reward).reset(seed=0)[0]
    with pytest.raises(ConfigError, match="router_signal"):
        build(EnvConfig, {"router_signal": "sometimes"})


def test_the_policy_reads_the_signal_in_its_model_head_not_its_trunk() -> None:
    import torch

    from training.policy import ManagerPolicy, PolicyConfig, obs_to_tensor, trunk_keys

    obs = {"task": np.ones((2, 3), np.float32), ROUTER_KEY: np.array([[-2.0, 0.5, 3.0]] * 2, np.float32),
           "action_mask": np.ones((2, 4), np.int8), "budget": np.full((2, 1), 10.0, np.float32)}
    keys = trunk_keys(obs)
    assert keys == ("budget", "task", ROUTER_KEY)
    x = obs_to_tensor(obs, keys)
    assert x[0, -3:].tolist() == [-2.0, 0.5, 3.0]  # read as it is, not squashed
    nvec = [2] + [8, 3, 3] * 2
    torch.manual_seed(0)
    policy = ManagerPolicy(x.shape[1], nvec, keys, 5, PolicyConfig(hidden=8, layers=1, model_head="descriptor"))
    assert policy.trunk[0].in_features == x.shape[1] - 3 and not policy.router_model.any()
    models = torch.rand(3, 13)
    mask = torch.ones(2, sum(nvec), dtype=torch.bool)
    actions = torch.tensor([[0, 2, 0, 0, 7, 0, 0]] * 2)  # slot 0 runs tool 2; slot 1 is empty
    before = policy.logits(x, mask, actions, models)
    with torch.no_grad():
        policy.router_model[0, 2] = 0.5  # slot 0 with tool 2
        policy.router_model[1, 2] = 9.0  # slot 1 with tool 2: slot 1 holds no call of it here
    after = policy.logits(x, mask, actions, models)
    torch.testing.assert_close(after[2] - before[2], 0.5 * x[:, -3:])  # slot 0's model logits move by w * signal
    assert torch.equal(after[5], before[5])  # slot 1's do not: its weight for the empty slot is still 0
    with pytest.raises(ValueError, match="last key"):
        ManagerPolicy(x.shape[1], nvec, (ROUTER_KEY, "budget", "task"), 5, PolicyConfig())


def test_the_text_env_shows_each_models_signal_after_the_question() -> None:
    text = gym.make("ParaOrchText-v0", router_signal=0.5)
    core = gym.make("ParaOrch-v0", router_signal=0.5)
    obs, info = text.reset(seed=4)
    signal = core.reset(seed=4)[0][ROUTER_KEY]
    question = info["messages"][-1]["content"]
    line = question.rsplit("\n", 1)[1]
    assert line.startswith("Router signal")
    for name, value in zip(text.unwrapped.model_names, signal):
        assert f"{name} {float(value):+.2f}" in line
    plain, _ = gym.make("ParaOrchText-v0").reset(seed=4)
    assert "Router signal" not in plain and "Router signal" in obs


def test_the_scripted_expert_calls_the_models_the_router_favours_first() -> None:
    from training.expert import ExpertConfig, ScriptedExpert

    nvec = [2] + [8, 5, 3] * 4  # seven tools and the empty slot, five models
    expert = ScriptedExpert(1, nvec, ExpertConfig(), np.random.default_rng(0))
    signal = np.array([-3.0, 0.0, 3.0, 0.0, 0.0], np.float32)
    draws = 4000
    first = np.array([expert._model_order({ROUTER_KEY: signal})[0] for _ in range(draws)])
    share = np.exp(signal) / np.exp(signal).sum()  # Plackett-Luce: the first pick's probabilities
    np.testing.assert_allclose(np.bincount(first, minlength=5) / draws, share, atol=4 * np.sqrt(0.25 / draws))
    orders = [expert._model_order({}) for _ in range(draws)]  # no router key: a uniform random order
    assert all(sorted(o) == list(range(5)) for o in orders[:50])
    np.testing.assert_allclose(np.bincount([o[0] for o in orders], minlength=5) / draws, 0.2,
                               atol=4 * np.sqrt(0.25 / draws))
