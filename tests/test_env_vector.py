"""The batched vector env: Gymnasium vector API, autoreset modes, reset masks, equality with single envs."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import parasim  # noqa: F401
from envs.paraorch_vector import ParaOrchVectorEnv
from parasim.protocol.schema import NUM_TOOLS
from parasim.tasks.suites import load_suite

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
N = 6
EMPTY = NUM_TOOLS  # tool value of an empty slot


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
    a = np.zeros((N, len(vec.single_action_space.nvec)), np.int64)
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
    assert vec.action_space.shape == (N, len(vec.single_action_space.nvec))
    seen = 0
    for a in _policy_actions(vec.action_space, 20, 2, stop_p=0.5):
        obs, r, term, trunc, info = vec.step(a)
        assert obs in vec.observation_space
        if "episode" in info:
            seen += int(info["_episode"].sum())
            np.testing.assert_allclose(info["episode"]["r"][info["_episode"]], r[info["_episode"]])
            np.testing.assert_array_equal(info["_trajectory"], term)
    assert seen > 0


def test_task_index_gives_lane_i_the_single_envs_task_with_its_own_stream():
    """Lane i with options[i] replays the single env seeded s + i with those options, step for step; lanes that
    share task_index and task_seed share the task, not the tool outcomes; autoresets draw by weight again."""
    task_index = np.array([5, 5, 5, 2, 2, 2])
    task_seed = np.array([11, 11, 11, 3, 3, 3])
    vec = ParaOrchVectorEnv(num_envs=N, max_rounds=3)
    obs, _ = vec.reset(seed=40, options={"task_index": task_index, "task_seed": task_seed})
    single = [gym.make("ParaOrch-v0", max_rounds=3) for _ in range(N)]
    for i, env in enumerate(single):
        o, _ = env.reset(seed=40 + i, options={"task_index": int(task_index[i]), "task_seed": int(task_seed[i])})
        for k in o:
            np.testing.assert_array_equal(o[k], obs[k][i])
    np.testing.assert_array_equal(obs["task"][:3], obs["task"][[0, 0, 0]])  # same question features
    assert not np.array_equal(obs["task"][0], obs["task"][3])
    a = np.zeros((N, len(vec.single_action_space.nvec)), np.int64)  # one standard_reasoner call per round
    a[:, 4::3] = EMPTY
    pending = np.zeros(N, bool)
    tokens, played = [], []
    for _ in range(8):
        obs, r, term, _, info = vec.step(a)
        for i, env in enumerate(single):
            o, ri = (env.reset()[0], 0.0) if pending[i] else env.step(a[i])[:2]
            assert ri == r[i]
            for k in o:
                np.testing.assert_array_equal(o[k], obs[k][i])
        if term.any():
            played.append(info["task_index"][term])
            tokens.append(info["trajectory"]["tokens"][term])
            benchmark = load_suite("paramanager").benchmark[info["task_index"][term]]
            np.testing.assert_array_equal(info["benchmark"][term], benchmark)
        pending = term.copy()
    assert len(played) == 2 and all(len(p) == N for p in played)
    np.testing.assert_array_equal(played[0], task_index)  # the first episodes played the requested tasks
    assert len(np.unique(tokens[0][:3])) > 1  # same task, independent tool randomness
    assert len(np.unique(np.concatenate(played[1:]))) > 2  # autoresets drew tasks by weight again


def test_task_options_are_validated():
    vec = ParaOrchVectorEnv(num_envs=N)
    assert vec.num_tasks == 7 and vec.task_weights().sum() == pytest.approx(1.0)
    for bad in (np.full(N, 7), np.full(N, -1), np.zeros(N + 1, np.int64), np.zeros(N)):
        with pytest.raises(ValueError, match=r"options\['task_index'\].*\[0, 7\)"):
            vec.reset(options={"task_index": bad})
    with pytest.raises(ValueError, match=r"options\['task_seed'\]"):
        vec.reset(options={"task_seed": np.full(N, -3)})
    env = gym.make("ParaOrch-v0", suite="math")
    assert env.unwrapped.num_tasks == 4
    with pytest.raises(ValueError, match=r"options\['task_index'\].*\[0, 4\)"):
        env.reset(options={"task_index": 4})
    mask = np.array([True, False] * (N // 2))
    vec.reset(seed=1)
    obs, _ = vec.reset(options={"reset_mask": mask, "task_index": np.full(N, 6)})
    assert (obs["task"][mask, 3] == 1).all()  # LiveCodeBench (code) in the masked lanes


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_make_vec_takes_the_autoreset_mode_in_vector_kwargs(mode):
    """``vector_kwargs={"autoreset_mode": ...}``, as Gymnasium's vectorizers take it, reaches the compiled vector env
    (default and explicit vector-entry-point mode) and the sync vectorizer alike, and they agree step for step;
    other vector_kwargs are still refused by Gymnasium for the vector entry point."""
    kwargs = {"max_rounds": 3}
    compiled = [gym.make_vec("ParaOrch-v0", num_envs=N, vector_kwargs={"autoreset_mode": mode}, **kwargs),
                gym.make_vec("ParaOrch-v0", num_envs=N, vectorization_mode="vector_entry_point",
                             vector_kwargs={"autoreset_mode": mode}, **kwargs)]
    sync = gym.make_vec("ParaOrch-v0", num_envs=N, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode},
                        **kwargs)
    for env in compiled:
        assert isinstance(env.unwrapped, ParaOrchVectorEnv) and env.unwrapped.autoreset_mode == mode
        assert env.metadata["autoreset_mode"] == mode
    assert isinstance(sync, SyncVectorEnv) and sync.metadata["autoreset_mode"] == mode
    outs = [env.reset(seed=3)[0] for env in (*compiled, sync)]
    for o in outs[1:]:
        _assert_tree_equal(outs[0], o, "reset")
    finished = 0
    for t, a in enumerate(_policy_actions(sync.action_space, 12, 2)):
        steps = [env.step(a) for env in (*compiled, sync)]
        for s in steps[1:]:
            for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), steps[0], s, strict=True):
                _assert_tree_equal(x, y, f"step {t} {name}")
        finished += int(steps[0][2].sum())
        if mode == AutoresetMode.SAME_STEP and steps[0][2].any():
            assert "final_obs" in steps[0][4]
    assert finished > 0
    assert gym.spec("ParaOrch-v0").kwargs == {}  # the registered kwargs are not changed by a make_vec
    with pytest.raises(gym.error.Error, match="vector_kwargs"):
        gym.make_vec("ParaOrch-v0", num_envs=2, vector_kwargs={"copy": False})


@pytest.mark.slow
def test_two_threads_step_exactly_what_one_thread_steps():
    """Lane blocks on two of numba's threads: the same observations, rewards, terminations and terminal infos
    (trajectories, reward components) as one thread, step for step, autoresets and task options included."""
    import numba

    from parasim.sim import PARALLEL_MIN_LANES

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread on this machine")
    n = PARALLEL_MIN_LANES
    envs = [gym.make_vec("ParaOrch-v0", num_envs=n, vectorization_mode="vector_entry_point", max_rounds=4,
                         task_options="random", num_threads=t) for t in (1, 2)]
    assert [e.unwrapped.sim._threaded for e in envs] == [False, True]
    first = [e.reset(seed=7)[0] for e in envs]
    _assert_tree_equal(first[0], first[1], "reset")
    finished = 0
    for t, a in enumerate(_policy_actions(envs[0].action_space, 30, 3)):
        one, two = envs[0].step(a), envs[1].step(a)
        for name, x, y in zip(("obs", "reward", "terminated", "truncated", "info"), one, two, strict=False):
            _assert_tree_equal(x, y, f"step {t} {name}")
        finished += int(one[2].sum())
    assert finished > n


def test_num_threads_is_checked():
    with pytest.raises(TypeError, match="num_threads: expected an integer"):
        gym.make_vec("ParaOrch-v0", num_envs=2, vectorization_mode="vector_entry_point", num_threads=1.5)
