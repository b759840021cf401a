"""Group advantages: the C++ core (fast and general paths) equals the NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim.scoring import reference
from parasim.scoring.advantages import METHODS, SCALES, group_advantages

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NICE = [0.0, 0.25, 0.5, 1.0, -1.0, 2.0]  # values whose sums are exact, so identical groups stay identical


def group_layout(draw, n: int) -> np.ndarray:
    kind = draw(st.sampled_from(["contiguous", "shuffled", "ragged", "sparse_ids", "one_group"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "contiguous":
        g = draw(st.sampled_from([1, 2, 3, 4, 8, 16]))
        return np.repeat(np.arange(-(n // -g)), g)[:n] * 3 + 5
    if kind == "shuffled":
        g = draw(st.sampled_from([2, 4, 8]))
        return rng.permutation(np.repeat(np.arange(-(n // -g)), g)[:n])
    if kind == "ragged":
        return np.sort(rng.integers(0, max(1, n // 3), n))
    if kind == "sparse_ids":
        return rng.choice([-(2**62), -5, 0, 10**12, 2**62], n)
    return np.zeros(n, np.int64)


@st.composite
def cases(draw):
    n = draw(st.integers(0, 70))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):
        rewards = rng.choice(NICE, n)
    else:
        rewards = rng.uniform(-100, 100, n)
    groups = group_layout(draw, n)
    method = draw(st.sampled_from(sorted(METHODS)))
    kwargs = {
        "scale": draw(st.sampled_from([None, *SCALES])), "std": draw(st.sampled_from(["unbiased", "biased"])),
        "eps": draw(st.sampled_from([1e-6, 1e-2])), "clip": draw(st.sampled_from([None, 0.5, 3.0])),
        "min_group_std": draw(st.sampled_from([None, 0.0, 0.1, 0.6])),
        "role_ids": rng.integers(0, 3, n).astype(np.int32) if method == "per_role" or draw(st.booleans()) else None,
    }
    return rewards.astype(dtype), groups.astype(draw(st.sampled_from([np.int64, np.int32]))), method, kwargs


def _close_to_threshold(rewards, groups, kwargs) -> np.ndarray:
    """Rows of groups whose std sits within rounding of min_group_std (keep may legitimately differ)."""
    out = np.zeros(rewards.shape[0], bool)
    if kwargs["min_group_std"] is None:
        return out
    ddof = 1 if kwargs["std"] == "unbiased" else 0
    for g in np.unique(groups):
        rows = groups == g
        x = rewards[rows].astype(np.float64)
        s = float(np.std(x, ddof=ddof)) if x.size > ddof else 0.0
        out[rows] = abs(s - kwargs["min_group_std"]) < 1e-9
    return out


@SETTINGS
@given(cases())
def test_core_matches_reference(case):
    rewards, groups, method, kwargs = case
    adv, keep = group_advantages(rewards, groups, method, **kwargs)
    ref_adv, ref_keep = reference.group_advantages(rewards, groups, method, **kwargs)
    assert adv.dtype == rewards.dtype and keep.dtype == np.bool_
    ok = ~_close_to_threshold(rewards, groups, kwargs)
    np.testing.assert_array_equal(keep[ok], ref_keep[ok])
    tol = 2e-5 if rewards.dtype == np.float32 else 1e-8
    np.testing.assert_allclose(adv[ok], ref_adv[ok], rtol=tol, atol=tol)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_fast_path_equals_general_path(method):
    rng = np.random.default_rng(0)
    n, g = 1 << 18, 8  # large enough for the contiguous kernel to use several threads
    rewards = rng.normal(size=n)
    groups = np.repeat(np.arange(n // g), g)
    roles = rng.integers(0, 2, n).astype(np.int32)
    perm = rng.permutation(n)  # the same groups shuffled can only go through the general path
    kw = {"role_ids": roles, "min_group_std": 0.3, "clip": 4.0}
    fast, fast_keep = group_advantages(rewards, groups, method, **kw)
    slow, slow_keep = group_advantages(rewards[perm], groups[perm], method, **{**kw, "role_ids": roles[perm]})
    np.testing.assert_allclose(fast[perm], slow, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(fast_keep[perm], slow_keep)


def test_grpo_matches_numpy_reshape_at_scale():
    rng = np.random.default_rng(1)
    rewards = rng.integers(0, 2, 1 << 18).astype(np.float32)
    adv, keep = group_advantages(rewards, np.repeat(np.arange((1 << 18) // 8), 8))
    x = rewards.reshape(-1, 8).astype(np.float64)
    want = (x - x.mean(1, keepdims=True)) / (x.std(1, ddof=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(adv, want.reshape(-1), rtol=1e-6, atol=1e-6)
    assert keep.all()


def test_edge_cases_by_hand():
    adv, keep = group_advantages(np.array([3.0]), np.array([9]))
    assert adv[0] == 0.0 and keep[0]  # a group of one
    adv, _ = group_advantages(np.array([1.0, 1.0, 1.0]), np.array([2, 2, 2]), eps=0.0)
    np.testing.assert_array_equal(adv, 0.0)  # identical rewards with eps = 0: 0, not nan
    adv, _ = group_advantages(np.array([1.0, 0.0, 0.0, 1.0]), np.array([5, 5, 5, 5]), "rloo")
    np.testing.assert_allclose(adv, [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3])  # r_i - mean of the others
    adv, keep = group_advantages(np.array([1.0, 1.0, 0.0, 1.0]), np.array([0, 0, 1, 1]), min_group_std=0.1)
    np.testing.assert_array_equal(keep, [False, False, True, True])
    assert adv[0] == adv[1] == 0.0
    adv, keep = group_advantages(np.zeros(0), np.zeros(0, np.int64))
    assert adv.shape == keep.shape == (0,)


def test_out_buffers_are_filled_in_place():
    rewards = np.arange(8, dtype=np.float32)
    adv, keep = np.empty(8, np.float32), np.empty(8, bool)
    got = group_advantages(rewards, np.repeat([0, 1], 4), out=(adv, keep))
    assert got[0] is adv and got[1] is keep
    with pytest.raises(ValueError, match=r"out\[0\]: expected a C-contiguous float32"):
        group_advantages(rewards, np.repeat([0, 1], 4), out=(np.empty(8), keep))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"rewards": [0.0, np.nan, 1.0]}, ValueError, r"rewards\[1\] = nan: must be finite"),
    ({"rewards": [0.0, 1.0, np.inf], "group_ids": [0, 1, 2]}, ValueError, r"rewards\[2\] = inf: must be finite"),
    ({"group_ids": [0.0, 0.0, 1.0]}, TypeError, r"group_ids: dtype float64 is not an integer type"),
    ({"group_ids": [0, 0]}, ValueError, r"group_ids: expected shape \(3,\) like rewards"),
    ({"rewards": ["a", "b", "c"]}, TypeError, r"rewards: dtype <U1 is not real-valued"),
    ({"method": "ppo"}, ValueError, r"method = 'ppo': must be one of"),
    ({"method": "per_role"}, ValueError, r"role_ids: required by method 'per_role'"),
    ({"role_ids": [0, -1, 0]}, ValueError, r"role_ids\[1\] = -1: must be >= 0"),
    ({"scale": "global"}, ValueError, r"scale = 'global': must be one of"),
    ({"std": "sample"}, ValueError, r"std = 'sample'"),
    ({"eps": -1.0}, ValueError, r"eps = -1.0: must be finite and >= 0"),
    ({"clip": 0.0}, ValueError, r"clip = 0.0: must be finite and > 0"),
    ({"min_group_std": -0.1}, ValueError, r"min_group_std = -0.1: must be finite and >= 0"),
])
def test_bad_inputs_are_rejected_with_a_clear_message(kwargs, error, message):
    args = {"rewards": [0.0, 1.0, 0.5], "group_ids": [0, 0, 1], **kwargs}
    with pytest.raises(error, match=message):
        group_advantages(np.asarray(args.pop("rewards")), np.asarray(args.pop("group_ids")), **args)


def test_integer_rewards_and_unsigned_ids_are_converted():
    adv, _ = group_advantages(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1], np.uint8))
    assert adv.dtype == np.float64
    np.testing.assert_allclose(adv, [-0.7071061, 0.7071061, -0.7071061, 0.7071061], rtol=1e-6)
