"""Rewards stay finite for every input that passes validation, and rescore's JSON is strict.

Before the magnitude rule, weights and preference vectors that each passed their own range overflowed together:
a preference vector of [1e308] x 10 scored by group gave inf, ``w_outcome = w_diversity = 1e308`` gave inf, and
``parasim rescore --grid w_outcome=1e308`` wrote ``Infinity`` (its mean of rewards near 1e308) into its JSON, as
it wrote ``NaN`` for Kendall's tau of a constant ranking. Now a config or a preference row whose absolute weights
sum past 2**1000 is refused naming the fields; anything accepted scores finite, with a finite mean and std.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim.cli import main
from parasim.scoring.batch import BatchValidationError, TrajectoryBatch
from parasim.scoring.reward_config import RewardConfig
from parasim.scoring.rewards import compute_rewards, compute_rewards_grid
from training import rescore

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
F64_MAX = float(np.finfo(np.float64).max)
MAX_REWARD_MAGNITUDE = 2.0**1000  # parasim.scoring.trajectory_schema's (spelled out: the old tree has none)


def _batch(n: int = 8, preference: np.ndarray | None = None) -> TrajectoryBatch:
    rng = np.random.default_rng(0)
    cols = {"outcome": rng.uniform(0, 1, n).round(), "usd": rng.uniform(0, 2, n), "latency_s": rng.uniform(1, 9, n),
            "tool_counts": rng.integers(0, 4, (n, 7)), "rounds": rng.integers(1, 4, n),
            "tool_calls": rng.integers(1, 8, n),
            "distinct_tools": rng.integers(1, 5, n), "group_id": np.repeat([0, 1], n // 2)}
    if preference is not None:
        cols["preference"] = preference
    return TrajectoryBatch.from_arrays(**cols)


def test_a_preference_vector_whose_weights_overflow_is_refused_naming_the_row() -> None:
    pref = np.ones((8, 10))
    pref[3] = 1e308
    with pytest.raises(BatchValidationError, match=r"TrajectoryBatch\.preference\[3\] = .*sum of its absolute "
                                                   r"weights must be <= 2\*\*1000"):
        _batch(preference=pref)
    pref[:] = MAX_REWARD_MAGNITUDE / 10  # at the bound: accepted, and its rewards are finite
    totals = compute_rewards(_batch(preference=pref), RewardConfig(formula="toolorchestra")).total
    assert np.isfinite(totals).all() and totals.max() > 1e299


@pytest.mark.parametrize("fields", [{"w_outcome": 1e308, "w_diversity": 1e308}, {"w_outcome": 1e308},
                                    {"w_length": 2.0**1000, "w_cost": 2.0**999},
                                    {"formula": "toolorchestra", "pref_outcome": -1e308, "pref_cost": 1e308},
                                    {"formula": "router_r1", "format_reward": -1e305}])
def test_weights_whose_rewards_could_overflow_are_refused_naming_the_fields(fields: dict) -> None:
    with pytest.raises(ValueError, match=r"RewardConfig: .*= .*the sum of their absolute values bounds the reward "
                                         r"and must be <= 2\*\*1000"):
        RewardConfig(**fields)
    name = next(k for k in fields if k != "formula")
    with pytest.raises(ValueError, match=name):
        RewardConfig(**fields)


@SETTINGS
@given(weights=st.lists(st.floats(0.0, F64_MAX), min_size=5, max_size=5),
       pref=st.lists(st.floats(-F64_MAX, F64_MAX), min_size=10, max_size=10))
def test_every_accepted_config_and_preference_scores_finite(weights: list[float], pref: list[float]) -> None:
    from parasim.scoring.rewards import mean_std

    names = ("w_outcome", "w_protocol", "w_diversity", "w_length", "w_cost")
    configs = []
    for fields in (dict(zip(names, weights)),
                   {"formula": "toolorchestra", "pref_tools": tuple(pref[:7]), "pref_outcome": pref[7],
                    "pref_cost": pref[8], "pref_latency": pref[9]}):
        try:
            configs.append(RewardConfig(**fields))
        except ValueError as err:
            assert "2**1000" in str(err)
    try:
        batch = _batch(preference=np.tile(pref, (8, 1)))
    except BatchValidationError as err:
        assert "2**1000" in str(err)
        batch = _batch()
    totals = compute_rewards_grid(batch, configs) if configs else np.zeros((0, 8))
    assert np.isfinite(totals).all()
    for row in totals:
        assert all(np.isfinite(mean_std(row)))


def test_mean_std_of_rewards_near_the_bound_is_finite() -> None:
    from parasim.scoring.rewards import mean_std
    from parasim.scoring.trajectory_schema import MAX_REWARD_MAGNITUDE as bound

    assert bound == MAX_REWARD_MAGNITUDE
    x = np.full(1000, MAX_REWARD_MAGNITUDE)
    x[::2] = -MAX_REWARD_MAGNITUDE / 2
    mean, std = mean_std(x)
    assert mean == pytest.approx(MAX_REWARD_MAGNITUDE / 4) and std == pytest.approx(0.75 * MAX_REWARD_MAGNITUDE)


def test_rescore_json_is_strict_and_refuses_an_overflowing_grid(tmp_path, capsys) -> None:
    path = rescore.write_parquet(_batch(40), tmp_path / "t.parquet")
    out = tmp_path / "r.json"
    assert main(["rescore", str(path), "--grid", "w_outcome=1e300,1e301", "--grid", "reward=paramanager,xrouter",
                 "--out", str(out)]) == 0
    text = out.read_text()
    assert "Infinity" not in text and "NaN" not in text
    rows = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert any(r["kendall_tau_vs_base"] is None for r in rows) or all(
        isinstance(r["kendall_tau_vs_base"], float) for r in rows)
    assert rows[1]["mean_reward"] > 1e299 and np.isfinite(rows[1]["std_reward"])
    capsys.readouterr()
    assert main(["rescore", str(path), "--grid", "w_outcome=1e308", "--out", str(out)]) != 0
    assert "w_outcome = 1e+308" in capsys.readouterr().err
