"""The reward core sized by the tool spec's tool count: a batch of T tools (here 9, and 1 and 64 at the edges)
scores as the NumPy reference does, with one tool preference per tool."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim import _core
from parasim.protocol.schema import MAX_TOOLS
from parasim.scoring import reference
from parasim.scoring.batch import BatchValidationError, TrajectoryBatch
from parasim.scoring.reward_config import FORMULA_SPECS, FORMULAS
from parasim.scoring.rewards import COMPONENTS, PRESETS, RewardConfig, compute_rewards, compute_rewards_grid

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def batch_of(rng: np.random.Generator, n: int, n_groups: int, num_tools: int) -> TrajectoryBatch:
    rounds = rng.integers(0, 13, n)
    counts = rng.integers(0, 4, (n, num_tools)) * (rng.random((n, num_tools)) < 0.6)
    return TrajectoryBatch.from_arrays(
        outcome=rng.choice([0.0, 0.5, 1.0], n), format_violations=rng.integers(0, 3, n) * (rng.random(n) < 0.3),
        ended_with_final=(rng.random(n) < 0.8).astype(np.uint8), rounds=rounds, tool_calls=counts.sum(1),
        distinct_tools=(counts > 0).sum(1), tool_counts=counts, tokens=rng.uniform(0, 4e4, n),
        cost_units=rng.uniform(0, 20, n), usd=rng.uniform(0, 0.5, n), latency_s=rng.exponential(20, n),
        group_id=rng.integers(-2, n_groups, n) * 31, num_tools=num_tools)


def config_of(rng: np.random.Generator, formula: str, num_tools: int) -> RewardConfig:
    draws = {"num_tools": num_tools, "pref_tools": tuple(rng.uniform(-1, 1, num_tools)),
             "pref_cost": rng.uniform(0, 1), "pref_latency": rng.uniform(0, 1), "w_diversity": rng.uniform(0, 1),
             "theta_tool": rng.uniform(1, 7), "usd_scale": rng.uniform(0, 5), "alpha_cost": rng.uniform(0, 1)}
    return PRESETS[formula].replace(**{k: v for k, v in draws.items() if k in FORMULA_SPECS[formula].fields})


def assert_matches_reference(batch: TrajectoryBatch, cfg: RewardConfig) -> None:
    got = compute_rewards(batch, cfg).as_dict()
    want = reference.reward_components(batch, cfg)
    for name in ("total", *COMPONENTS):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=f"{cfg.formula}.{name}")


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 70), n_groups=st.integers(1, 10),
       formula=st.sampled_from(FORMULAS), sort_groups=st.booleans())
def test_nine_tools_match_reference(seed, n, n_groups, formula, sort_groups):
    rng = np.random.default_rng(seed)
    batch = batch_of(rng, n, n_groups, 9)
    if sort_groups:  # toolorchestra's single-pass path over sorted runs, else the group table
        batch = batch.subset(np.argsort(batch.group_id, kind="stable"))
    assert_matches_reference(batch, config_of(rng, formula, 9))


@pytest.mark.parametrize("num_tools", [1, 9, MAX_TOOLS])
def test_tool_count_edges_on_a_threaded_batch(num_tools):
    rng = np.random.default_rng(num_tools)
    batch = batch_of(rng, 6_000, 200, num_tools)
    cfg = config_of(rng, "toolorchestra", num_tools)
    assert_matches_reference(batch, cfg)
    assert_matches_reference(batch.subset(np.argsort(batch.group_id, kind="stable")), cfg)
    assert compute_rewards(batch, cfg).tools.any()  # the per-tool term is live


def test_per_tool_preferences_weigh_their_own_column():
    counts = np.zeros((2, 9), int)
    counts[1, 8] = 3  # only the ninth tool differs within the group
    batch = TrajectoryBatch.from_arrays(outcome=[1.0, 1.0], tool_counts=counts, group_id=[0, 0], num_tools=9)
    prefs = (0.0,) * 8 + (2.0,)
    cfg = PRESETS["toolorchestra"].replace(num_tools=9, pref_tools=prefs, pref_outcome=0.0, pref_cost=0.0,
                                           pref_latency=0.0)
    np.testing.assert_array_equal(compute_rewards(batch, cfg).tools, [0.0, 2.0])


def test_configs_for_another_tool_count():
    batch = batch_of(np.random.default_rng(3), 50, 5, 9)
    # formulas that read no tool preference score any tool count, and as the reference does
    for name in ("paramanager", "xrouter", "router_r1"):
        assert PRESETS[name].num_tools == 7
        assert_matches_reference(batch, PRESETS[name])
    with pytest.raises(ValueError, match=r"RewardConfig.num_tools = 7: the batch has 9 tools"):
        compute_rewards(batch, "toolorchestra")
    with pytest.raises(ValueError, match=r"RewardConfig.num_tools = 7: the batch has 9 tools"):
        compute_rewards_grid(batch, ["paramanager", "toolorchestra"])
    with pytest.raises(ValueError, match=r"RewardConfig.pref_tools = .*expected num_tools = 9 weights"):
        RewardConfig(formula="toolorchestra", num_tools=9)
    with pytest.raises(ValueError, match=r"RewardConfig.num_tools = 65"):
        RewardConfig(num_tools=65, pref_tools=(0.0,) * 65)


def test_core_checks_the_tool_count_and_row_width():
    names = _core.reward_param_names(9)
    assert names[-9:] == [f"pref_tool_{t}" for t in range(9)] and names[:3] == ["formula", "correct_threshold",
                                                                                  "w_outcome"]
    batch = TrajectoryBatch.from_arrays(outcome=[1.0], num_tools=9)
    row = np.array(PRESETS["xrouter"].core_params, ndmin=2)  # a 7-tool row
    with pytest.raises(ValueError, match=r"params: expected shape \(C, 34\) \(25 parameters \+ one preference per "
                                         r"tool, T = 9\)"):
        _core.score_rewards(batch.as_dict(), row, np.empty((1, 1)), None)
    wide = {**batch.as_dict(), "tool_counts": np.zeros((1, MAX_TOOLS + 1), np.int32)}
    with pytest.raises(ValueError, match=rf"1 <= T <= {MAX_TOOLS} tools, got T = {MAX_TOOLS + 1}"):
        _core.score_rewards(wide, np.zeros((1, 25 + MAX_TOOLS + 1)), np.empty((1, 1)), None)
    with pytest.raises(ValueError, match=rf"num_tools = 0: must be in \[1, {MAX_TOOLS}\]"):
        _core.reward_param_names(0)
    with pytest.raises(BatchValidationError, match=r"tool_counts: expected shape \(N, 7\)"):
        TrajectoryBatch.from_arrays(outcome=[1.0], tool_counts=np.zeros((1, 9), int))
