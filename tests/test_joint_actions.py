"""The joint action encoding (``action_encoding="joint"``, parasim/sim/joint_actions.py): masks under which every
independently sampled action is a valid round, computed by the compiled rule."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch_vector import ParaOrchVectorEnv
from parasim.protocol.schema import Status
from parasim.sim.joint_actions import JointEncoding

BAD = (int(Status.FORMAT_ERR), int(Status.INVALID_TOOL))


def _sample(masks: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
    """One action row per lane, each slot drawn uniformly among its open entries, independently (what
    MaskableMultiCategorical does with a flat logit vector)."""
    n, total = masks.shape
    m = masks.reshape(n, total // width, width).astype(bool)
    u = rng.random(m.shape) * m  # closed entries score 0, open ones in (0, 1)
    u[~m] = -1.0
    return u.argmax(-1).astype(np.int64)


def test_every_masked_sample_is_a_valid_round_over_1000_episodes_and_the_factored_mask_is_not():
    """Random policy under the masks, 1,000 episodes: 0 FORMAT_ERR, 0 INVALID_TOOL, 0 format violations (empty
    rounds) with the joint encoding; the factored encoding's per-dimension mask, sampled the same way, lets them
    through (what this encoding fixes)."""
    counts = {}
    for encoding in ("joint", "factored"):
        env = ParaOrchVectorEnv(num_envs=100, action_encoding=encoding, max_rounds=6)
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        widths = env.single_action_space.nvec
        bad = violations = episodes = 0
        while episodes < 1000:
            masks = env.action_masks()
            if encoding == "joint":
                a = _sample(masks, int(widths[0]), rng)
            else:  # per dimension: split the flat mask by nvec, one independent draw each
                parts = np.split(masks, np.cumsum(widths)[:-1], axis=1)
                a = np.stack([np.where(p, rng.random(p.shape), -1.0).argmax(1) for p in parts], axis=1)
                a[:, 0] = rng.random(len(a)) < 0.2  # stop as often as the joint draws roughly do
            obs, _, term, _, info = env.step(a)
            if term.any():  # NEXT_STEP: the terminal observation, whose status counts are the episode's
                bad += int(obs["status_counts"][term][:, BAD].sum())
                violations += int(info["trajectory"]["format_violations"][term].sum())
                episodes += int(term.sum())
        counts[encoding] = (bad, violations, episodes)
    assert counts["joint"][:2] == (0, 0), counts
    assert counts["factored"][0] > 0 and counts["factored"][1] > 0, counts


def test_joint_calls_are_the_runnable_triples_and_decode_to_them():
    env = gym.make("ParaOrch-v0", action_encoding="joint").unwrapped
    joint = env.joint
    spec = env.sim.pool.tools
    num_models = len(env.model_names)
    agents = [t for t in range(spec.num_tools) if spec.tools[t].is_agent]
    reviewers = set(spec.with_behaviour("reviewer"))
    # agent tools: every model; answering tools on question and carry, reviewers on verify only; basic tools once
    expected = sum(num_models * (1 if t in reviewers else 2) for t in agents) + 2 * (spec.num_tools - len(agents))
    assert len(joint.calls) == expected and joint.width == expected + 1
    assert env.action_space.nvec.tolist() == [expected + 1] * 4
    rows = joint.decode(np.array([[0, 1, 0, expected + 5], [3, 0, -1, expected]]))
    assert rows[0, 0] == 1 and rows[1, 0] == 0  # slot 0's entry 0 is the stop
    assert rows[1, 1:4].tolist() == joint.calls[2].tolist() and rows[0, 4:7].tolist() == joint.calls[0].tolist()
    assert rows[0, 10] == spec.num_tools + 1 and rows[1, 7] == spec.num_tools + 1  # out of range: unknown tool
    assert rows[0, 7] == spec.num_tools and rows[1, 10:13].tolist() == joint.calls[expected - 1].tolist()


def test_mask_entries_are_exactly_the_calls_the_rules_run():
    """At several reached states, each open entry of each slot, played alone (a vector env whose lanes share the
    seed and the history), runs or is over budget, and each closed entry gets INVALID_TOOL / FORMAT_ERR: the mask is
    the rule, not an approximation of it."""
    probe = ParaOrchVectorEnv(num_envs=1, action_encoding="joint", max_parallel=3, token_budget=30_000)
    width = probe.joint.width
    rng = np.random.default_rng(1)
    for seed in range(3):
        history: list[np.ndarray] = []
        probe.reset(seed=seed)
        for step in range(4):
            mask = probe.action_masks()[0]
            # every entry of every slot in its own lane, the other slots empty (slot 0: a runnable call)
            first = int(np.flatnonzero(mask[1:width])[0]) + 1
            lanes = []
            for k in range(3):
                for e in range(1 if k == 0 else 0, width):
                    row = np.zeros(3, np.int64)
                    row[0] = first if k else e
                    row[k] = e
                    lanes.append((k, e, row))
            venv = ParaOrchVectorEnv(num_envs=len(lanes), action_encoding="joint", max_parallel=3,
                                     token_budget=30_000)
            venv.reset(seed=[seed] * len(lanes))
            for a in history:
                venv.step(np.repeat(a[None], len(lanes), 0))
            obs, *_ = venv.step(np.stack([row for _, _, row in lanes]))
            for j, (k, e, _) in enumerate(lanes):
                status = int(obs["last_status"][j, k])
                assert (status not in BAD) == bool(mask[k * width + e]), (seed, step, k, e, status)
            a = _sample(mask[None], width, rng)[0]
            a[0] = max(a[0], 1)  # keep the episode running
            history.append(a)
            probe.step(a[None])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), steps=st.integers(1, 8), parallel=st.integers(1, 4),
       budget=st.sampled_from([None, 5_000.0, 20_000.0]), available=st.sets(st.integers(0, 6), min_size=1))
def test_property_every_mask_allowed_action_the_env_accepts_is_valid(seed, steps, parallel, budget, available):
    """Any seed, parallelism, token budget and tool subset: actions drawn from the joint masks never get
    INVALID_TOOL or FORMAT_ERR and never make an empty round, and the single env shows the vector env's mask."""
    env = gym.make("ParaOrch-v0", action_encoding="joint", max_parallel=parallel, token_budget=budget)
    obs, _ = env.reset(seed=seed, options={"tools_available": [t in available for t in range(7)]})
    rng = np.random.default_rng(seed)
    width = int(env.action_space.nvec[0])
    for _ in range(steps):
        mask = env.unwrapped.action_masks()
        assert np.array_equal(mask, obs["action_mask"].astype(bool))
        a = _sample(mask[None].astype(np.int8), width, rng)[0]
        obs, _, term, _, info = env.step(a)
        assert not np.isin(obs["last_status"], BAD).any()
        if term:
            assert info["trajectory"]["format_violations"] == 0
            break


def test_joint_encoding_single_equals_vector_lane_and_checks_its_option():
    single = gym.make("ParaOrch-v0", action_encoding="joint")
    venv = gym.make_vec("ParaOrch-v0", num_envs=2, action_encoding="joint")
    o1, _ = single.reset(seed=8)
    o2, _ = venv.reset(seed=7)
    assert venv.single_observation_space["action_mask"].shape == (4 * single.unwrapped.joint.width,)
    assert np.array_equal(o1["action_mask"], o2["action_mask"][1])
    rng = np.random.default_rng(0)
    for _ in range(3):
        a = _sample(venv.unwrapped.action_masks().astype(np.int8), single.unwrapped.joint.width, rng)
        a[:, 0] = np.maximum(a[:, 0], 1)
        o1, *_ = single.step(a[1])
        o2, *_ = venv.step(a)
        for k in o1:
            np.testing.assert_array_equal(o1[k], o2[k][1], err_msg=k)
    with pytest.raises(ValueError, match=r"action_encoding: expected one of \['factored', 'joint'\], got 'flat'"):
        gym.make("ParaOrch-v0", action_encoding="flat")
    with pytest.raises(ValueError, match=r"actions: expected an integer array of shape \(2, 4\)"):
        venv.step(np.zeros((2, 13), np.int64))


def test_joint_encoding_under_maskable_ppo_samples_only_valid_rounds():
    """MaskablePPO's own masked sampling (an untrained policy) through SB3's VecEnv bridge: no invalid call."""
    contrib = pytest.importorskip("sb3_contrib")
    import torch
    from sb3_contrib.common.maskable.utils import get_action_masks

    from parasim.integrations.sb3 import ParaOrchSB3VecEnv

    torch.set_num_threads(1)
    venv = ParaOrchSB3VecEnv(num_envs=50, seed=0, action_encoding="joint", max_rounds=6)
    model = contrib.MaskablePPO("MultiInputPolicy", venv, n_steps=8, batch_size=100, n_epochs=1, seed=0,
                                device="cpu", policy_kwargs={"net_arch": [16]})
    obs = venv.reset()
    episodes = bad = violations = 0
    while episodes < 1000:
        actions, _ = model.predict(obs, action_masks=get_action_masks(venv))
        obs, _, dones, infos = venv.step(actions)
        for i in np.flatnonzero(dones):
            episodes += 1
            bad += int(infos[i]["terminal_observation"]["status_counts"][list(BAD)].sum())
            violations += int(infos[i]["trajectory"]["format_violations"])
    assert (bad, violations) == (0, 0)


def test_joint_encoding_params_come_from_the_rules_record():
    env = gym.make("ParaOrch-v0", action_encoding="joint", max_parallel=2).unwrapped
    again = JointEncoding(env.sim.params)
    assert np.array_equal(again.calls, env.joint.calls) and again.slots == 2


def test_joint_encoding_runs_on_real_tools_with_the_same_rule(backend):
    """The real-tools env (over the scripted server) takes the joint encoding too: masks from its own lane record
    (the observation's), and masked draws that the engine runs without a protocol status."""
    from test_env_real import _make

    env = _make(backend, action_encoding="joint")
    obs, _ = env.reset(seed=0)
    joint = env.unwrapped.joint
    assert env.action_space.nvec.tolist() == [joint.width] * joint.slots
    rng = np.random.default_rng(0)
    for _ in range(3):
        mask = env.unwrapped.action_masks()
        assert np.array_equal(mask, obs["action_mask"].astype(bool))
        a = _sample(mask[None].astype(np.int8), joint.width, rng)[0]
        a[0] = max(a[0], 1)
        obs, _, term, _, _ = env.step(a)
        assert not np.isin(obs["last_status"], BAD).any()
        if term:
            break
