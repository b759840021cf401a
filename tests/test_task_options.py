"""Task options (docs/task_options.md): an episode's tool subset, tool prices and preference vector, given as reset
options or drawn per episode (``task_options="random"``), in the single env, each vector-env lane and the simulator,
and the preference vector reaching the toolorchestra reward through the trajectory row."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import parasim  # noqa: F401  (registers the envs)
from parasim import TrajectoryBatch, compute_rewards
from parasim.config.env_options import check_task_option_mode, check_task_options
from parasim.protocol.schema import Status
from parasim.scoring.rewards import PRESETS
from parasim.sim import Simulator
from parasim.sim.state import empty_action, set_action_slot
from parasim.sim.task_options import OPTS_GIVEN, OPTS_NONE


@pytest.fixture(scope="module")
def tool_names() -> tuple[str, ...]:
    return Simulator().pool.tools.names


def _round(env_or_sim, tool: int, model: int = 0) -> np.ndarray:
    nvec = env_or_sim.nvec if isinstance(env_or_sim, Simulator) else env_or_sim.unwrapped.source.nvec
    action = empty_action((len(nvec) - 1) // 3, int(nvec[1]) - 1)
    set_action_slot(action, 0, tool, model, 0)
    return action


# ------------------------------------------------------------------------------------------------ validation
def test_options_are_checked_with_the_option_the_index_and_the_range(tool_names):
    t = len(tool_names)
    opts = check_task_options({"preference": [0.5] * (t + 3), "tools_available": [tool_names[0], tool_names[4]],
                               "tool_prices": {tool_names[4]: 0.25}}, tool_names, None)
    assert opts.preference.shape == (1, t + 3) and opts.tools_available[0].tolist() == [
        i in (0, 4) for i in range(t)]
    assert opts.tool_prices[0, 4] == 0.25 and np.isnan(np.delete(opts.tool_prices[0], 4)).all()
    assert check_task_options({}, tool_names, 3) == (None, None, None)
    bad = [
        ({"preference": [1.0] * t}, ValueError, rf"options\['preference'\]: expected {t + 3} numbers"),
        ({"preference": [1.0] * (t + 2) + [float("nan")]}, ValueError, r"preference'\]\[9\]: expected a finite"),
        ({"preference": [True] * (t + 3)}, TypeError, r"preference'\]\[0\]: expected a number"),
        ({"tools_available": [tool_names[0], "hammer"]}, ValueError, r"unknown tool\(s\) \['hammer'\]"),
        ({"tools_available": [False] * t}, ValueError, "must offer at least one tool"),
        ({"tools_available": [1] * t}, ValueError, f"expected {t} bools"),
        ({"tool_prices": [-0.1] + [None] * (t - 1)}, ValueError, r"tool_prices'\]\[0\]: expected a finite number in "
                                                                  r"\[0.0, 1000000.0\]"),
        ({"tool_prices": {"hammer": 1.0}}, ValueError, r"unknown tool\(s\) \['hammer'\]"),
        ({"tool_prices": "cheap"}, TypeError, "expected 7 numbers"),
    ]
    for options, error, match in bad:
        with pytest.raises(error, match=match):
            check_task_options(options, tool_names, None)
    with pytest.raises(ValueError, match=r"options\['preference'\]\[1\]: expected 10 numbers"):
        check_task_options({"preference": [[0.0] * 10, [0.0] * 9]}, tool_names, 2)
    with pytest.raises(ValueError, match=r"task_options: expected one of \[None, 'random'\], got 'sometimes'"):
        check_task_option_mode("sometimes")


def test_vector_env_takes_one_value_for_all_lanes_or_one_per_lane(tool_names):
    t = len(tool_names)
    one = check_task_options({"preference": list(range(t + 3))}, tool_names, 3).preference
    assert one.shape == (3, t + 3) and (one == np.arange(t + 3)).all()
    per = check_task_options({"tools_available": [[tool_names[0]], list(tool_names[4:6]), list(tool_names)]},
                             tool_names, 3)
    assert per.tools_available.sum(1).tolist() == [1, 2, t]
    arr = check_task_options({"tool_prices": np.full((3, t), 0.5)}, tool_names, 3).tool_prices
    assert arr.shape == (3, t) and (arr == 0.5).all()
    env = gym.make_vec("ParaOrch-v0", num_envs=3)
    with pytest.raises(ValueError, match=r"options\['tools_available'\]\[2\]: an episode must offer at least one"):
        env.reset(seed=0, options={"tools_available": [[tool_names[0]], [tool_names[5]], [False] * t]})


# ------------------------------------------------------------------------------------------ tools and prices
def test_an_unoffered_tool_is_masked_and_its_call_is_invalid_tool():
    env = gym.make("ParaOrch-v0")
    python = env.unwrapped.sim.pool.tools.index("python")
    names = env.unwrapped.sim.pool.tools.names
    offered = (names[0], names[python - 1])
    obs, _ = env.reset(seed=3, options={"tools_available": list(offered)})
    t = env.unwrapped.sim.num_tools
    tools_mask = obs["action_mask"][2:2 + t]
    assert tools_mask.tolist() == [int(n in offered) for n in names]
    obs, _, _, _, _ = env.step(_round(env, python))
    assert obs["last_status"][0] == Status.INVALID_TOOL and obs["tool_counts"][python] == 0
    obs, _, _, _, _ = env.step(_round(env, 0))
    assert obs["last_status"][0] != Status.INVALID_TOOL and obs["tool_counts"][0] == 1
    # the next reset without options offers every tool again, and its mask shows it
    obs, _ = env.reset()
    fresh, _ = gym.make("ParaOrch-v0").reset(seed=3)
    np.testing.assert_array_equal(obs["action_mask"], fresh["action_mask"])
    assert env.unwrapped.sim.episode_tools().available.all()


def test_the_first_reset_with_options_leaves_the_no_options_path_and_later_plain_resets_clear_them():
    """A simulator never given options skips them at every reset (OPTS_NONE); once a reset is given some it keeps
    them for that episode and clears them at the next plain reset, autoresets included."""
    n = 4
    sim = Simulator("paramanager", "paramanager", n, max_rounds=1)
    sim.seed(np.arange(n))
    sim.reset()
    assert sim.params[0]["task_opts"] == OPTS_NONE
    with pytest.raises(ValueError, match="Simulator.step: expected actions of shape"):
        sim.step(_round(sim, 0), np.zeros(n, np.uint8))  # one lane's row for four lanes
    t = sim.num_tools
    pref = np.zeros((n, t + 3))
    pref[:, t] = 1.0
    prices = np.full((n, t), np.nan)
    prices[:, 0] = 0.5
    sim.reset(np.array([1, 1, 0, 0], np.uint8), preference=pref, tool_prices=prices)
    assert sim.params[0]["task_opts"] == OPTS_GIVEN
    tools = sim.episode_tools()
    assert (tools.preference[:2] == pref[:2]).all() and np.isnan(tools.preference[2:]).all()
    assert (tools.price_usd[:2, 0] == 0.5).all() and np.isnan(tools.price_usd[2:, 0]).all()
    done = sim.step(np.tile(_round(sim, 0), (n, 1)), np.zeros(n, np.uint8)).copy()  # the round limit ends them
    assert done.all() and sim.trajectory()["has_preference"].tolist() == [1, 1, 0, 0]
    sim.step(np.tile(_round(sim, 0), (n, 1)), done)  # NEXT_STEP autoresets: plain episodes again
    tools = sim.episode_tools()
    assert np.isnan(tools.preference).all() and np.isnan(tools.price_usd).all()


def test_episode_prices_set_each_calls_usd_and_the_trajectorys():
    env = gym.make("ParaOrch-v0")
    sim = env.unwrapped.sim
    names = sim.pool.tools.names
    env.reset(seed=4, options={"tool_prices": {names[0]: 0.125}})
    assert sim.episode_tools().price_usd[0, 0] == 0.125 and np.isnan(sim.episode_tools().price_usd[0, 1:]).all()
    spent = 0.0
    for tool in (0, 0, names.index("python")):
        env.step(_round(env, tool))
        calls = sim.last_round(0)
        spent += sum(c["usd"] for c in calls)
        if tool == 0 and calls[0]["status"] in (Status.OK, Status.EXEC_ERR, Status.TIMEOUT, Status.TRUNCATED):
            assert calls[0]["usd"] == 0.125
    _, _, term, _, info = env.step(np.array([1] + [0] * (len(sim.nvec) - 1)))
    assert term and info["trajectory"]["usd"] == pytest.approx(spent)


def test_without_options_the_episode_is_the_plain_one():
    """Given options for one reset only; an explicit none of each (None) is the same as absent."""
    a, b = gym.make("ParaOrch-v0"), gym.make("ParaOrch-v0")
    a.reset(seed=11)
    b.reset(seed=11, options={"preference": None, "tools_available": None, "tool_prices": None})
    rng = np.random.default_rng(0)
    for _ in range(6):
        act = rng.integers(0, a.unwrapped.source.nvec)
        act[0] = 0
        oa, ra, ta, _, ia = a.step(act)
        ob, rb, tb, _, ib = b.step(act)
        assert all(np.array_equal(oa[k], ob[k]) for k in oa) and ra == rb
        if ta:
            assert ia["trajectory"]["has_preference"] == 0 and not ia["trajectory"]["preference"].any()
            break


# ------------------------------------------------------------------------------------------------ preference
def test_preference_reaches_the_trajectory_and_rescoring_weighs_each_episode_by_its_own():
    n = 6
    env = gym.make_vec("ParaOrch-v0", num_envs=n, reward="toolorchestra")
    t = env.unwrapped.sim.num_tools
    prefs = np.zeros((n, t + 3))
    prefs[:3, t + 1] = 1.0  # lanes 0-2: cost only
    prefs[3:, t + 2] = 1.0  # lanes 3-5: latency only
    env.reset(seed=0, options={"task_index": np.zeros(n, np.int64), "task_seed": np.full(n, 9),
                               "preference": prefs})
    np.testing.assert_array_equal(env.unwrapped.sim.episode_tools().preference, prefs)
    rows: list[dict] = [{}] * n
    rng = np.random.default_rng(1)
    done = np.zeros(n, bool)
    while not done.all():
        act = rng.integers(0, env.unwrapped.sim.nvec, size=(n, len(env.unwrapped.sim.nvec)))
        act[:, 0] = rng.random(n) < 0.3
        _, _, term, _, info = env.step(act)
        for i in np.flatnonzero(term & ~done):
            rows[i] = {k: v[i] for k, v in info["trajectory"].items() if not k.startswith("_")}
        done |= term
    batch = TrajectoryBatch.from_records(rows).replace(group_id=np.zeros(n, np.int64))
    np.testing.assert_array_equal(batch.preference, prefs)
    assert batch.has_preference.all()
    got = compute_rewards(batch, "toolorchestra")
    assert (got.outcome == 0).all() and (got.tools == 0).all()
    assert (got.latency[:3] == 0).all() and (got.cost[3:] == 0).all()
    plain = batch.replace(preference=np.full(batch.preference.shape, np.nan))
    base = PRESETS["toolorchestra"].replace(pref_outcome=0.0, pref_cost=0.0, pref_latency=0.0)
    by_cost = compute_rewards(plain, base.replace(pref_cost=1.0))
    by_lat = compute_rewards(plain, base.replace(pref_latency=1.0))
    np.testing.assert_array_equal(got.total, np.r_[by_cost.total[:3], by_lat.total[3:]])


# ------------------------------------------------------------------------------------------------ drawn options
def _episodes(env, seed: int, steps: int, policy_seeds: list[int]) -> list[list[dict]]:
    """Per lane, the trajectory rows of its finished episodes under a fixed random policy with its own generator
    (``policy_seeds``), a single env resetting right after each episode as a SAME_STEP vector env's lanes do."""
    vector = isinstance(env.unwrapped, gym.vector.VectorEnv)
    env.reset(seed=seed)
    nvec = env.unwrapped.sim.nvec
    rngs = [np.random.default_rng(s) for s in policy_seeds]
    out: list[list[dict]] = [[] for _ in policy_seeds]
    for _ in range(steps):
        act = np.stack([r.integers(0, nvec) for r in rngs])
        act[:, 0] = [r.random() < 0.25 for r in rngs]
        if vector:
            _, _, term, _, info = env.step(act)
            for i in np.flatnonzero(term):
                out[i].append({k: v[i] for k, v in info["final_info"]["trajectory"].items() if not k.startswith("_")})
        else:
            _, _, term, _, info = env.step(act[0])
            if term:
                out[0].append(info["trajectory"])
                env.reset()
    return out


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b, strict=True))


def test_drawn_options_are_deterministic_and_a_single_env_replays_a_lane():
    n = 4
    vec = gym.make_vec("ParaOrch-v0", num_envs=n, task_options="random", autoreset_mode=AutoresetMode.SAME_STEP)
    first = _episodes(vec, 100, 30, list(range(n)))
    again = _episodes(vec, 100, 30, list(range(n)))
    assert all(_same(a, b) for a, b in zip(first, again, strict=True)) and sum(map(len, first)) > n
    prefs = [tuple(row["preference"]) for lane in first for row in lane]
    assert len(set(prefs)) == len(prefs)  # each episode its own draw
    assert all(row["has_preference"] == 1 for lane in first for row in lane)
    single = gym.make("ParaOrch-v0", task_options="random")
    for lane in (0, 2):
        assert _same(_episodes(single, 100 + lane, 30, [lane])[0], first[lane])
    plain = _episodes(gym.make_vec("ParaOrch-v0", num_envs=n, autoreset_mode=AutoresetMode.SAME_STEP), 100, 30,
                      list(range(n)))
    assert not _same(plain[0], first[0])  # withheld tools and prices change the episodes


def test_lanes_with_one_task_seed_share_drawn_options_and_given_ones_win():
    n = 6
    sim = Simulator(num_lanes=n, task_options="random")
    sim.seed(list(range(n)))
    sim.reset(task_seeds=np.array([5, 5, 5, 6, 6, 7]))
    tools = sim.episode_tools()
    for f in tools:
        assert np.array_equal(f[0], f[1], equal_nan=True) and np.array_equal(f[1], f[2], equal_nan=True)
        assert np.array_equal(f[3], f[4], equal_nan=True)
    assert not np.array_equal(tools.preference[0], tools.preference[3])
    assert tools.available[:, sim.params[0]["direct"]].all()  # the fallback solver is always offered
    t = sim.num_tools
    given = np.tile(np.arange(t + 3, dtype=float), (n, 1))
    sim.reset(task_seeds=np.array([5, 5, 5, 6, 6, 7]), preference=given)
    again = sim.episode_tools()
    np.testing.assert_array_equal(again.preference, given)
    np.testing.assert_array_equal(again.available, tools.available)  # the draw itself is unchanged
    np.testing.assert_array_equal(again.price_usd, tools.price_usd)


def test_random_mode_changes_nothing_of_the_calls_streams():
    """The drawn options come from their own stream: with every tool offered at the pool's price, an episode's
    calls are those of the plain simulator (only the preference vector differs)."""
    n = 8
    plain, drawn = Simulator(num_lanes=n), Simulator(num_lanes=n, task_options="random")
    t = plain.num_tools
    for sim in (plain, drawn):
        sim.seed(list(range(n)))
        sim.reset(tools_available=np.ones((n, t), bool), tool_prices=np.full((n, t), np.nan))
    rng = np.random.default_rng(2)
    for _ in range(5):
        act = rng.integers(0, plain.nvec, size=(n, len(plain.nvec)))
        act[:, 0] = 0
        plain.step(act, np.zeros(n, np.uint8))
        drawn.step(act, np.zeros(n, np.uint8))
    a, b = plain.trajectory(np.arange(n)), drawn.trajectory(np.arange(n))
    for k in a:
        if k not in ("preference", "has_preference"):
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert not a["has_preference"].any() and b["has_preference"].all()


def test_descriptors_show_the_episode_tool_prices() -> None:
    """With descriptors, the ``tools`` rows' usd_per_call column is the episode's own price where it has one (a
    given reset option, or drawn by task_options="random"), the pool's elsewhere; the vector env's lane equals the
    single env seeded alike."""
    from parasim.pools.descriptors import TOOL_FEATURES, squash

    col = TOOL_FEATURES.index("usd_per_call")
    env = gym.make("ParaOrch-v0", descriptors=True)
    pool_rows, _ = env.reset(seed=0)
    obs, _ = env.reset(seed=0, options={"tool_prices": {"search": 0.05}})
    search = env.unwrapped.sim.pool.tools.names.index("search")
    assert obs["tools"][search, col] == pytest.approx(squash(np.float64(0.05), "usd_per_call"))
    others = np.arange(len(obs["tools"])) != search
    np.testing.assert_array_equal(obs["tools"][others], pool_rows["tools"][others])
    vec = gym.make_vec("ParaOrch-v0", num_envs=3, vectorization_mode="vector_entry_point", descriptors=True,
                       task_options="random")
    lanes, _ = vec.reset(seed=1)
    single = gym.make("ParaOrch-v0", descriptors=True, task_options="random")
    for i in range(3):
        np.testing.assert_array_equal(single.reset(seed=1 + i)[0]["tools"], lanes["tools"][i])
    assert not np.array_equal(lanes["tools"][0], lanes["tools"][1])  # drawn per episode
