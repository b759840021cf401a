"""Rewards: the C++ core equals the NumPy reference on every preset, plus RewardConfig validation."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim.protocol.schema import NUM_TOOLS
from parasim.scoring import reference
from parasim.scoring.batch import BatchValidationError, TrajectoryBatch
from parasim.scoring.reward_config import FORMULA_SPECS, FORMULAS
from parasim.scoring.rewards import (
    COMPONENTS,
    PRESETS,
    RewardConfig,
    compute_rewards,
    compute_rewards_grid,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_batch(rng: np.random.Generator, n: int, n_groups: int, binary: bool = True) -> TrajectoryBatch:
    outcome = rng.integers(0, 2, n).astype(float) if binary else rng.choice([0.0, 0.25, 0.5, 1.0], n)
    rounds = rng.integers(0, 13, n)
    return TrajectoryBatch.from_arrays(
        outcome=outcome, format_violations=rng.integers(0, 3, n) * (rng.random(n) < 0.3),
        ended_with_final=(rng.random(n) < 0.8).astype(np.uint8), rounds=rounds,
        tool_calls=rounds * rng.integers(0, 5, n), distinct_tools=rng.integers(0, NUM_TOOLS + 1, n),
        tool_counts=rng.integers(0, 4, (n, NUM_TOOLS)), tokens=rng.choice([0.0, 12288.0, 20000.0, 24576.0, 4e4], n),
        cost_units=rng.uniform(0, 20, n), usd=rng.choice([0.0, 0.01, 0.1, 0.5], n) * rng.random(n),
        latency_s=rng.exponential(20, n), group_id=rng.integers(-3, n_groups, n) * 7919,
    )


def with_row_preferences(rng: np.random.Generator, batch: TrajectoryBatch, share: float) -> TrajectoryBatch:
    """``batch`` with a random preference vector on about ``share`` of its rows (the others none: NaN)."""
    n, t = len(batch), batch.num_tools
    prefs = rng.uniform(-1, 1, (n, t + 3))
    prefs[rng.random(n) >= share] = np.nan
    return batch.replace(preference=prefs)


def random_config(rng: np.random.Generator, formula: str) -> RewardConfig:
    base = PRESETS[formula]
    draws = {
        "correct_threshold": rng.choice([0.5, 1.0]), "w_protocol": rng.uniform(0, 1), "w_diversity": rng.uniform(0, 1),
        "theta_par": rng.uniform(0.5, 4), "theta_tool": rng.uniform(1, 7), "par_share": rng.uniform(0, 1),
        "diversity_needs_correct": bool(rng.integers(0, 2)), "l_tar": rng.choice([4096.0, 12288.0]),
        "c_tar": rng.choice([4.0, 8.0, 12.0]), "budget_max_factor": rng.uniform(1.1, 3),
        "pref_tools": tuple(rng.uniform(-1, 1, NUM_TOOLS)), "pref_cost": rng.uniform(0, 1),
        "usd_scale": rng.uniform(0, 5), "max_cost_penalty": rng.uniform(0, 1), "alpha_cost": rng.uniform(0, 1),
        "cost_pct_lo": rng.uniform(0, 40), "cost_pct_hi": rng.uniform(60, 100),
    }
    return base.replace(**{k: v for k, v in draws.items() if k in FORMULA_SPECS[formula].fields})


def assert_matches_reference(batch: TrajectoryBatch, cfg: RewardConfig) -> None:
    got = compute_rewards(batch, cfg).as_dict()
    want = reference.reward_components(batch, cfg)
    for name in ("total", *COMPONENTS):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=f"{cfg.formula}.{name}")
    np.testing.assert_allclose(sum(got[c] for c in COMPONENTS), got["total"], rtol=1e-12, atol=1e-12)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 80), n_groups=st.integers(1, 12),
       formula=st.sampled_from(FORMULAS), binary=st.booleans(), sort_groups=st.booleans(),
       row_prefs=st.sampled_from([0.0, 0.5, 1.0]))
def test_core_matches_reference(seed, n, n_groups, formula, binary, sort_groups, row_prefs):
    rng = np.random.default_rng(seed)
    batch = random_batch(rng, n, n_groups, binary)
    if row_prefs:  # some or all rows carry their own preference vector (toolorchestra reads it, the rest ignore it)
        batch = with_row_preferences(rng, batch, row_prefs)
    if sort_groups:  # sorted runs take toolorchestra's single-pass path, other layouts the group table
        batch = batch.subset(np.argsort(batch.group_id, kind="stable"))
    assert_matches_reference(batch, random_config(rng, formula))


@pytest.mark.parametrize("layout", ["shuffled", "sorted"])
def test_a_row_vector_equal_to_the_configs_scores_as_none(layout):
    """A row whose preference vector is the config's own gets bit for bit the reward of a row without one, in
    every component, on both normalization paths and in a grid; rows with other vectors change only their own."""
    rng = np.random.default_rng(5)
    batch = random_batch(rng, 3_000, 200)
    if layout == "sorted":
        batch = batch.subset(np.argsort(batch.group_id, kind="stable"))
    cfg = random_config(rng, "toolorchestra")
    own = np.array([*cfg.pref_tools, cfg.pref_outcome, cfg.pref_cost, cfg.pref_latency])
    same = batch.replace(preference=np.tile(own, (len(batch), 1)))
    none = compute_rewards(batch, cfg).as_dict()
    for name, values in compute_rewards(same, cfg).as_dict().items():
        np.testing.assert_array_equal(values, none[name], err_msg=name)
    np.testing.assert_array_equal(compute_rewards_grid(same, [cfg, "paramanager"]),
                                  compute_rewards_grid(batch, [cfg, "paramanager"]))
    other = same.preference.copy()
    other[::7] = rng.uniform(0, 2, (len(other[::7]), other.shape[1]))  # every 7th row its own vector
    changed = compute_rewards(same.replace(preference=other), cfg).total
    np.testing.assert_array_equal(np.delete(changed, np.s_[::7]), np.delete(none["total"], np.s_[::7]))
    assert not np.array_equal(changed[::7], none["total"][::7])


def test_row_vectors_weigh_their_own_features_and_other_formulas_ignore_them():
    batch = TrajectoryBatch.from_arrays(
        outcome=[1.0, 1.0, 1.0, 1.0], usd=[0.1, 0.3, 0.1, 0.3], latency_s=[5.0, 1.0, 5.0, 1.0], group_id=[1, 1, 2, 2],
        preference=[[0.0] * NUM_TOOLS + [1.0, 1.0, 0.0], [np.nan] * (NUM_TOOLS + 3),
                    [0.0] * NUM_TOOLS + [0.0, 0.0, 1.0], [0.0] * NUM_TOOLS + [0.0, 0.0, 1.0]])
    cfg = PRESETS["toolorchestra"].replace(pref_outcome=0.0, pref_cost=0.0, pref_latency=2.0)
    r = compute_rewards(batch, cfg)
    # row 0: its own vector, cost only (the cheaper of its group: 1); row 1: the config's, latency x 2 (faster: 1)
    np.testing.assert_allclose(r.total, [1.0, 2.0, 0.0, 1.0])
    np.testing.assert_allclose(r.cost, [1.0, 0.0, 0.0, 0.0])
    plain = batch.replace(preference=np.full((4, NUM_TOOLS + 3), np.nan))
    for name in ("paramanager", "xrouter", "router_r1"):
        np.testing.assert_array_equal(compute_rewards(batch, name).total, compute_rewards(plain, name).total)


def test_the_flag_decides_which_rows_have_a_vector_and_the_core_checks_the_width():
    from parasim import _core
    from parasim.scoring.rewards import _param_rows

    rng = np.random.default_rng(3)
    batch = with_row_preferences(rng, random_batch(rng, 500, 40), 0.3)
    assert batch.has_preference.sum() > 0 and not batch.preference[batch.has_preference == 0].any()
    flagged_off = batch.replace(has_preference=np.zeros(len(batch), np.uint8))  # vectors kept, none flagged
    plain = TrajectoryBatch.from_arrays(**{k: v for k, v in batch.as_dict().items()
                                           if k not in ("preference", "has_preference")})
    np.testing.assert_array_equal(compute_rewards(flagged_off, "toolorchestra").total,
                                  compute_rewards(plain, "toolorchestra").total)
    with pytest.raises(BatchValidationError, match=r"has_preference\[0\] = 1: preference\[0\] is NaN"):
        TrajectoryBatch.from_arrays(outcome=[1.0], preference=[[np.nan] * 10], has_preference=[1])
    with pytest.raises(BatchValidationError, match=r"preference\[0, 3\] = nan: a row must be all finite"):
        TrajectoryBatch.from_arrays(outcome=[1.0], preference=[[0.0] * 3 + [np.nan] * 7])
    params = _param_rows(batch, [PRESETS["toolorchestra"]])
    with pytest.raises(ValueError, match=r"preference: expected shape \(N, 10\)"):
        _core.score_rewards({**batch.as_dict(), "preference": np.zeros((len(batch), 7))}, params,
                            np.empty((1, len(batch))))


@pytest.mark.parametrize("layout", ["shuffled", "sorted", "one_long_group"])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_match_reference_on_a_threaded_batch(name, layout):
    batch = random_batch(np.random.default_rng(1), 20_000, 500)  # enough blocks to split over threads
    if layout == "sorted":  # runs straddle the 256-row blocks
        batch = batch.subset(np.argsort(batch.group_id, kind="stable"))
    elif layout == "one_long_group":  # longer than a run the single-pass path takes
        batch = TrajectoryBatch(**{**batch.as_dict(), "group_id": np.zeros(len(batch), np.int64)})
    assert_matches_reference(batch, PRESETS[name])
    assert_matches_reference(with_row_preferences(np.random.default_rng(2), batch, 0.5), PRESETS[name])


def test_grid_equals_one_config_at_a_time():
    rng = np.random.default_rng(2)
    batch = random_batch(rng, 9_000, 300)
    configs = [random_config(rng, f) for f in FORMULAS for _ in range(3)] + ["xrouter"]
    grid = compute_rewards_grid(batch, configs)
    assert grid.shape == (len(configs), len(batch)) and grid.dtype == np.float64
    for row, cfg in zip(grid, configs):
        np.testing.assert_array_equal(row, compute_rewards(batch, cfg).total)
    out = np.empty_like(grid)
    assert compute_rewards_grid(batch, configs, out=out) is out
    np.testing.assert_array_equal(out, grid)
    assert compute_rewards_grid(batch, []).shape == (0, len(batch))
    with pytest.raises(ValueError, match="out: expected a C-contiguous float64"):
        compute_rewards_grid(batch, configs, out=np.empty((2, 2)))


def test_a_budget_grid_shares_its_sums_and_gives_each_config_alone():
    """Configs that agree on the first terms of the paramanager sum share them within a block (the grid's fast
    path); rows equal, bit for bit, each config scored alone, also when other formulas and configs that differ in
    the shared terms come between them."""
    rng = np.random.default_rng(4)
    batch = random_batch(rng, 5_000, 200)
    base = PRESETS["paramanager"]
    grid = [base.replace(c_tar=c, l_tar=lt, w_cost=w) for c in (2.0, 8.0) for lt in (4096, 16384) for w in (0.0, 0.5)]
    configs = grid[:3] + ["toolorchestra"] + grid[3:5] + [base.replace(w_outcome=0.5)] + grid[5:] + grid[:2]
    for row, cfg in zip(compute_rewards_grid(batch, configs), configs):
        np.testing.assert_array_equal(row, compute_rewards(batch, cfg).total)


def test_hand_computed_paramanager_values():
    batch = TrajectoryBatch.from_arrays(
        outcome=[1.0, 0.0], format_violations=[0, 2], ended_with_final=[1, 0], rounds=[4, 2], tool_calls=[5, 8],
        distinct_tools=[3, 1], tokens=[18432.0, 30000.0], cost_units=[4.0, 12.0])
    r = compute_rewards(batch, "paramanager")
    # row 0: 5 calls / 4 rounds = 1.25 = theta_par, 3 tools = theta_tool, tokens 1.5 x L_tar: half-way to -1
    np.testing.assert_allclose(r.diversity, [0.2, 0.0])
    np.testing.assert_allclose(r.length, [-0.25, -0.5])
    np.testing.assert_allclose(r.cost, [0.0, -0.25])
    np.testing.assert_allclose(r.protocol, [0.0, -0.5])
    np.testing.assert_allclose(r.total, [1.0 + 0.2 - 0.25, -0.5 - 0.5 - 0.25])


def test_toolorchestra_is_zero_when_wrong_and_normalized_within_group():
    batch = TrajectoryBatch.from_arrays(
        outcome=[1.0, 1.0, 0.0, 1.0], usd=[0.1, 0.3, 0.0, 0.2], latency_s=[5.0, 5.0, 1.0, 9.0],
        group_id=[7, 7, 7, 3])
    r = compute_rewards(batch, PRESETS["toolorchestra"].replace(pref_outcome=1.0, pref_cost=1.0, pref_latency=0.0))
    # group 7: outcome in {0, 1} -> 1 for the right ones; -usd in [-0.3, 0] -> (−0.1+0.3)/0.3 and 0
    np.testing.assert_allclose(r.outcome, [1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(r.cost, [2 / 3, 0.0, 0.0, 0.0])
    assert r.total[2] == 0.0 and r.total[3] == 0.0  # wrong answer; a group of one has no spread


def test_xrouter_and_router_r1_values():
    batch = TrajectoryBatch.from_arrays(outcome=[1.0, 1.0, 0.0, 1.0], usd=[0.0, 0.5, 0.5, 0.04],
                                        ended_with_final=[1, 1, 1, 0], format_violations=[0, 0, 0, 0])
    np.testing.assert_allclose(compute_rewards(batch, "xrouter").total, [1.0, 0.2, 0.0, 1 - 0.12])
    cfg = PRESETS["router_r1"].replace(cost_lo=0.0, cost_hi=0.5, alpha_cost=0.5)
    # sqrt(0.5) is past cost_hi: no cost reward; an unfinished trajectory gets the format reward
    np.testing.assert_allclose(compute_rewards(batch, cfg).total, [1.0, 0.5, 0.0, -1.0])


def test_config_ranges_name_field_and_range():
    with pytest.raises(ValueError, match=r"RewardConfig.theta_par = 0: must be finite and in \(0.0, 4.0\]"):
        RewardConfig(theta_par=0)
    with pytest.raises(ValueError, match=r"RewardConfig.budget_max_factor = 1.0: must be finite and in \(1.0, inf\]"):
        RewardConfig(budget_max_factor=1.0)
    with pytest.raises(ValueError, match=r"RewardConfig.w_cost = nan"):
        RewardConfig(w_cost=float("nan"))
    with pytest.raises(TypeError, match=r"RewardConfig.c_tar = '8': must be a real number"):
        RewardConfig(c_tar="8")
    with pytest.raises(ValueError, match=r"RewardConfig.formula = 'grpo'"):
        RewardConfig(formula="grpo")
    with pytest.raises(ValueError, match=r"RewardConfig.pref_tools"):
        RewardConfig(pref_tools=(1.0, 2.0))
    with pytest.raises(ValueError, match=r"cost_lo / cost_hi: set both"):
        RewardConfig(formula="router_r1", cost_lo=0.1)
    with pytest.raises(ValueError, match=r"cost_pct_lo = 90.0: must be < cost_pct_hi"):
        RewardConfig(cost_pct_lo=90, cost_pct_hi=10)


def test_replace_parses_strings_and_refuses_fields_the_formula_ignores():
    cfg = PRESETS["paramanager"].replace(c_tar="4", diversity_needs_correct="false")
    assert cfg.c_tar == 4.0 and cfg.diversity_needs_correct is False
    assert PRESETS["toolorchestra"].replace(pref_tools="1:0:0:0:0:0:0").pref_tools[0] == 1.0
    with pytest.raises(ValueError, match=r"\['c_tar'\] are not read by formula 'xrouter'"):
        PRESETS["xrouter"].replace(c_tar=4)
    with pytest.raises(ValueError, match="unknown field"):
        PRESETS["xrouter"].replace(ctar=4)
    with pytest.raises(ValueError, match=r"RewardConfig.c_tar = 'four': not a number"):
        PRESETS["paramanager"].replace(c_tar="four")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.c_tar = 5.0  # type: ignore[misc]


def test_from_dict_and_to_dict_roundtrip():
    cfg = RewardConfig.from_dict({"preset": "router_r1", "alpha_cost": 0.3})
    assert cfg.formula == "router_r1" and cfg.alpha_cost == 0.3
    assert RewardConfig.from_dict(cfg.to_dict()) == cfg
    to = PRESETS["toolorchestra"].replace(pref_cost=0.9)
    assert RewardConfig.from_dict(dataclasses.asdict(to)) == to  # a full dump, unread fields at their defaults
    assert set(PRESETS["xrouter"].to_dict()) == set(FORMULA_SPECS["xrouter"].fields)


def test_unknown_preset_and_wrong_batch_type():
    batch = TrajectoryBatch.from_arrays(outcome=[1.0])
    with pytest.raises(ValueError, match="unknown reward preset 'paramanger'"):
        compute_rewards(batch, "paramanger")
    with pytest.raises(TypeError, match="batch must be a TrajectoryBatch"):
        compute_rewards({"outcome": np.ones(1)}, "xrouter")  # type: ignore[arg-type]


def test_presets_cite_their_source():
    from parasim.scoring.rewards import PRESET_SOURCES

    assert "RECONSTRUCTION" in PRESET_SOURCES["paramanager"]
    for name, arxiv in (("toolorchestra", "2511.21689"), ("xrouter", "2510.08439"), ("router_r1", "2506.09033")):
        assert arxiv in PRESET_SOURCES[name]
