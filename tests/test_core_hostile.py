"""Hostile inputs at the Python -> C++ boundary: each is an error naming the argument, never a silent cast.

One regression test per finding of the hardening review (each failed before the fix: the bad value was
accepted and gave a wrong result), then properties: extreme but finite rewards give the reference's
(and a power-of-two rescaling's) advantages, and any bad dtype or out-of-range value raises
TypeError / ValueError naming the argument (with its index and value for arrays).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim import _core
from parasim.scoring import reference
from parasim.scoring.advantages import METHODS, group_advantages
from parasim.scoring.batch import BatchValidationError, TrajectoryBatch
from parasim.scoring.masks import broadcast_to_tokens, loss_mask_from_spans, loss_normalizers
from parasim.scoring.reward_config import RewardConfig

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
F64_MAX = float(np.finfo(np.float64).max)
I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)


# ----------------------------------------------------------------------------------- the findings
def test_role_ids_past_int32_are_an_error_not_role_zero():
    rewards, groups = np.array([0.0, 1.0, 5.0, 9.0]), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"role_ids\[2\] = 4294967296: must be >= 0 and <= 2147483647"):
        group_advantages(rewards, groups, "per_role", role_ids=np.array([0, 0, 2**32, 2**32], np.int64))
    roles = np.array([0, 0, 1, 1], np.int64)  # in range: converted, and each role its own baseline
    adv, _ = group_advantages(rewards, groups, "per_role", role_ids=roles)
    np.testing.assert_allclose(adv, reference.group_advantages(rewards, groups, "per_role", role_ids=roles)[0])
    assert adv[2] < 0 < adv[1]


def test_group_id_of_2_to_the_63_is_an_error_not_int64_min():
    with pytest.raises(BatchValidationError, match=r"group_id\[1\] = 9.223372036854776e\+18: must be in \["):
        TrajectoryBatch.from_arrays(outcome=[0.5, 0.5], group_id=np.array([0.0, 2.0**63]))
    edge = TrajectoryBatch.from_arrays(outcome=[0.5], group_id=np.array([-(2.0**63)]))  # exactly INT64_MIN
    assert edge.group_id.tolist() == [I64.min]


def test_turn_index_past_int32_is_an_error_not_turn_zero():
    mask = np.ones((1, 3), np.uint8)
    with pytest.raises(ValueError, match=r"turn_ids\[0, 2\] = 4294967296: must be >= -2147483648"):
        broadcast_to_tokens(np.array([[1.0, 2.0]]), mask, np.array([[0, 1, 2**32]], np.int64))


def test_nan_trainable_flag_is_an_error_not_trainable():
    with pytest.raises(ValueError, match=r"trainable\[1\] = nan: must be 0 or 1"):
        loss_mask_from_spans([0, 2], [0, 2], [2, 3], np.array([1.0, np.nan]), 3)
    with pytest.raises(ValueError, match=r"truncated\[0\] = 2: must be 0 or 1"):
        loss_mask_from_spans([0, 1], [0], [2], [1], 3, truncated=np.array([2]))


def test_bool_seq_len_is_an_error_not_one():
    with pytest.raises(TypeError, match=r"seq_len = True: must be an integer, not bool"):
        loss_mask_from_spans([0, 1], [0], [1], [1], True)
    args = (np.array([0, 1]), np.array([0]), np.array([1]), np.array([1], np.uint8))
    with pytest.raises(TypeError, match=r"seq_len = True: must be an integer, not bool"):  # the core on its own
        _core.loss_mask_from_spans(*args, True, None, False, np.empty((1, 1), np.uint8), None, np.empty(1, np.int64))


@pytest.mark.parametrize("method", ["grpo", "per_role"])
def test_rewards_near_the_float64_maximum_keep_their_advantages(method):
    rewards = np.array([1e308, -1e308, 1e308, -1e308])  # r - mean = +-1e308: squares overflow unscaled
    adv, keep = group_advantages(rewards, np.zeros(4, np.int64), method, role_ids=np.zeros(4, np.int32))
    np.testing.assert_allclose(adv, [0.8660254, -0.8660254, 0.8660254, -0.8660254], rtol=1e-7)  # sqrt(3) / 2
    assert keep.all()
    adv, _ = group_advantages(np.array([F64_MAX, -F64_MAX, 3.0, 1.0]), np.array([7, 7, 2, 2]), scale="batch")
    ref, _ = reference.group_advantages(np.array([F64_MAX, -F64_MAX, 3.0, 1.0]), np.array([7, 7, 2, 2]),
                                        scale="batch")
    np.testing.assert_allclose(adv, ref, rtol=1e-12)
    assert abs(adv[0]) > 0.5  # not the all-zero result of an inf variance


def test_tiny_rewards_with_eps_zero_keep_their_advantages():
    for x in (5e-324, 1e-200):  # squares underflow to 0 unscaled, which made every advantage 0
        adv, _ = group_advantages(np.array([x, 0.0, x, 0.0]), np.array([0, 0, 1, 1]), eps=0.0)
        np.testing.assert_allclose(adv, [0.7071068, -0.7071068, 0.7071068, -0.7071068], rtol=1e-6)


def test_an_advantage_past_the_dtype_maximum_is_an_error_unless_clipped():
    rewards = np.array([F64_MAX, F64_MAX, -F64_MAX])  # r - mean = -4/3 of the maximum
    with pytest.raises(ValueError, match=r"rewards\[2\] = -1.7976931348623157e\+308: its advantage overflows float64"):
        group_advantages(rewards, np.zeros(3, np.int64), "dr_grpo")
    adv, _ = group_advantages(rewards, np.zeros(3, np.int64), "dr_grpo", clip=5.0)
    np.testing.assert_array_equal(adv, [5.0, 5.0, -5.0])
    f32 = np.array([3e38, -3e38, 3e38], np.float32)
    with pytest.raises(ValueError, match=r"rewards\[1\] = .*: its advantage overflows float32"):
        group_advantages(f32, np.zeros(3, np.int32), "rloo")
    with pytest.raises(ValueError, match=r"rewards\[1\] = .*: its advantage overflows float32"):
        group_advantages(np.array([3e38, -3e38, 1, 3e38], np.float32), np.array([4, 4, 0, 4]), "dr_grpo")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"method": 7}, ValueError, r"method = 7: must be in \[0, 3\]"),
    ({"method": True}, TypeError, r"method = True: must be an integer, not bool"),
    ({"scale": 3}, ValueError, r"scale = 3: must be in \[0, 2\]"),
    ({"eps": float("nan")}, ValueError, r"eps = nan: must be finite and >= 0"),
    ({"clip": 0.0}, ValueError, r"clip = 0.0: must be finite and > 0"),
    ({"min_std": -1.0}, ValueError, r"min_std = -1.0: must be finite and >= 0"),
])
def test_core_checks_its_scalar_arguments(kwargs, error, message):
    args = {"method": 0, "scale": 0, "unbiased": True, "eps": 1e-6, "clip": None, "min_std": None, **kwargs}
    adv, keep = np.empty(2), np.empty(2, np.uint8)
    with pytest.raises(error, match=message):
        _core.group_advantages(np.array([1.0, 2.0]), np.zeros(2, np.int64), None, args["method"], args["scale"],
                               args["unbiased"], args["eps"], args["clip"], args["min_std"], adv, keep)


def test_core_rejects_an_unknown_reward_formula_code():
    batch = TrajectoryBatch.from_arrays(outcome=[1.0, 0.0])
    params = np.array(RewardConfig(formula="xrouter").core_params, ndmin=2)
    params[0, 0] = 7.0
    with pytest.raises(ValueError, match=r"params\[0, 0\] \(formula\) = 7.0: must be finite and a formula code"):
        _core.score_rewards(batch.as_dict(), params, np.empty((1, 2)), None)
    params[0, 0], params[0, 2] = 2.0, np.nan
    with pytest.raises(ValueError, match=r"params\[0, 2\] \(w_outcome\) = nan: must be finite"):
        _core.score_rewards(batch.as_dict(), params, np.empty((1, 2)), None)


def test_bools_are_not_numbers_in_a_trajectory_batch():
    with pytest.raises(BatchValidationError, match=r"outcome: dtype bool is not a number"):
        TrajectoryBatch.from_arrays(outcome=np.array([True, False]))
    with pytest.raises(BatchValidationError, match=r"rounds\[1\] = True: a bool is not a number"):
        TrajectoryBatch.from_records([{"outcome": 1.0, "rounds": 3}, {"outcome": 0.0, "rounds": True}])
    with pytest.raises(BatchValidationError, match=r"tokens\[0\] = 1152921504606846977: must be >= "):
        TrajectoryBatch.from_arrays(outcome=[1.0], tokens=np.array([2**60 + 1]))  # not exact in float64
    assert TrajectoryBatch.from_arrays(outcome=[1.0], ended_with_final=[True]).ended_with_final.tolist() == [1]


def test_unsigned_starts_past_int64_name_their_true_value():
    with pytest.raises(ValueError, match=r"starts\[0\] = 9223372036854775808: must be >= "):
        loss_mask_from_spans([0, 1], np.array([2**63], np.uint64), np.array([2**63 + 5], np.uint64), [1], 3)


def test_nan_in_a_float_mask_is_an_error_not_a_trained_token():
    with pytest.raises(ValueError, match=r"mask\[0, 1\] = nan: must be finite"):
        broadcast_to_tokens(np.ones(1), np.array([[1.0, np.nan]]))


# ----------------------------------------------------------------------------------- extreme rewards
@st.composite
def extreme_cases(draw):
    n = draw(st.integers(0, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.choice([0.0, 0.5, 1.0, -1.0], n) if draw(st.booleans()) else rng.uniform(-1, 1, n)
    layout = draw(st.sampled_from(["contiguous", "shuffled", "ragged"]))
    if layout == "contiguous":
        groups = np.arange(n) // draw(st.sampled_from([2, 3, 4, 8]))
    else:
        groups = rng.integers(0, max(1, n // 3), n)
        groups = groups if layout == "shuffled" else np.sort(groups)
    k = draw(st.one_of(st.sampled_from([-1000, -540, 0, 540, 1000, 1021]), st.integers(-1000, 1021)))
    method = draw(st.sampled_from(sorted(METHODS)))
    kwargs = {"scale": draw(st.sampled_from([None, "group", "batch", "none"])),
              "std": draw(st.sampled_from(["unbiased", "biased"])), "eps": draw(st.sampled_from([0.0, 1e-6])),
              "clip": draw(st.sampled_from([None, 3.0])), "min_group_std": draw(st.sampled_from([None, 0.1])),
              "role_ids": rng.integers(0, 2, n).astype(np.int32)}
    return base, groups.astype(np.int64), k, method, kwargs


def _scale_of(method: str, kwargs: dict) -> str:
    return kwargs["scale"] or METHODS[method].default_scale


@SETTINGS
@given(extreme_cases())
def test_extreme_magnitudes_match_the_reference(case):
    """Rewards times 2**k, k from -1000 to 1021: from near-subnormal to near the float64 maximum."""
    base, groups, k, method, kwargs = case
    rewards = np.ldexp(base, k)
    adv, keep = group_advantages(rewards, groups, method, **kwargs)
    ref, ref_keep = reference.group_advantages(rewards, groups, method, **kwargs)
    np.testing.assert_array_equal(keep, ref_keep)
    size = 2.0**k if _scale_of(method, kwargs) == "none" and kwargs["clip"] is None else 1.0
    np.testing.assert_allclose(adv, ref, rtol=1e-9, atol=1e-9 * size)


@SETTINGS
@given(extreme_cases())
def test_power_of_two_rescaling_commutes_with_the_advantages(case):
    """With eps = 0 and no filters, scaled rewards give the same advantages (scale none: scaled by 2**k)."""
    base, groups, k, method, kwargs = case
    kwargs = {**kwargs, "eps": 0.0, "clip": None, "min_group_std": None}
    plain, _ = group_advantages(base, groups, method, **kwargs)
    scaled, _ = group_advantages(np.ldexp(base, k), groups, method, **kwargs)
    if _scale_of(method, kwargs) == "none":
        np.testing.assert_allclose(np.ldexp(scaled, -k), plain, rtol=1e-9, atol=1e-9)
    else:
        np.testing.assert_allclose(scaled, plain, rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------------- hostile arguments
N = 4
MASK = np.ones((N, 5), np.uint8)
SPANS = {"row_offsets": [0, 1, 2, 4], "starts": [0, 1, 2, 3], "ends": [1, 2, 3, 4], "trainable": [1, 0, 1, 0]}


def _spans(**over):
    a = {**SPANS, **over}
    seq_len = a.pop("seq_len", 5)
    return loss_mask_from_spans(a.pop("row_offsets"), a.pop("starts"), a.pop("ends"), a.pop("trainable"), seq_len,
                                **a)


# argument -> (call with that argument replaced, its valid value, kind of value)
CALLS = {
    "rewards": (lambda v: group_advantages(v, np.array([0, 0, 1, 1])), np.arange(4.0), "real"),
    "group_ids": (lambda v: group_advantages(np.arange(4.0), v), np.array([0, 0, 1, 1]), "int64"),
    "role_ids": (lambda v: group_advantages(np.arange(4.0), np.zeros(4, int), "per_role", role_ids=v),
                 np.array([0, 1, 0, 1]), "role"),
    "eps": (lambda v: group_advantages(np.arange(4.0), np.zeros(4, int), eps=v), 1e-6, "real>=0"),
    "clip": (lambda v: group_advantages(np.arange(4.0), np.zeros(4, int), clip=v), 1.0, "real>0"),
    "min_group_std": (lambda v: group_advantages(np.arange(4.0), np.zeros(4, int), min_group_std=v), 0.1, "real>=0"),
    "starts": (lambda v: _spans(starts=v), np.array(SPANS["starts"]), "int64"),
    "ends": (lambda v: _spans(ends=v), np.array(SPANS["ends"]), "int64"),
    "row_offsets": (lambda v: _spans(row_offsets=v), np.array(SPANS["row_offsets"]), "int64"),
    "trainable": (lambda v: _spans(trainable=v), np.array(SPANS["trainable"]), "flag"),
    "truncated": (lambda v: _spans(truncated=v), np.array([0, 1, 0]), "flag"),
    "seq_len": (lambda v: _spans(seq_len=v), 5, "int>=0"),
    "mask_truncated": (lambda v: _spans(mask_truncated=v), True, "bool"),
    "with_turns": (lambda v: _spans(with_turns=v), False, "bool"),
    "values": (lambda v: broadcast_to_tokens(v, MASK), np.arange(4.0), "real"),
    "turn_ids": (lambda v: broadcast_to_tokens(np.zeros((N, 3)), MASK, v), np.ones((N, 5), int), "int32"),
    "global_tokens": (lambda v: loss_normalizers(MASK, "token-mean", global_tokens=v), 8.0, "real>=0"),
    "global_seqs": (lambda v: loss_normalizers(MASK, "seq-mean-token-sum", global_seqs=v), 2.0, "real>=0"),
    "norm_len": (lambda v: loss_normalizers(MASK, "seq-mean-token-sum-norm", norm_len=v), 3.0, "real>=1"),
    "TrajectoryBatch.role_id": (lambda v: TrajectoryBatch.from_arrays(outcome=np.zeros(4), role_id=v),
                                np.array([0, 1, 0, 1]), "role"),
    "TrajectoryBatch.group_id": (lambda v: TrajectoryBatch.from_arrays(outcome=np.zeros(4), group_id=v),
                                 np.array([0, 0, 1, 1]), "int64"),
    "TrajectoryBatch.tokens": (lambda v: TrajectoryBatch.from_arrays(outcome=np.zeros(4), tokens=v),
                               np.array([1.0, 2.0, 3.0, 4.0]), "real"),
}
# array kind -> (lo, hi) the values must fit in, and the dtype that can carry a value past it
RANGES = {"int64": ((I64.min, I64.max), np.uint64), "int32": ((I32.min, I32.max), np.int64),
          "role": ((0, I32.max), np.int64), "real": ((-(2**53), 2**53), np.int64)}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_valid_argument_is_accepted(name):
    call, valid, _ = CALLS[name]
    call(valid)


@st.composite
def hostile(draw):
    """(argument name, a bad value for it, the text its error must contain)."""
    name = draw(st.sampled_from(sorted(CALLS)))
    _, valid, kind = CALLS[name]
    if kind in ("real>=0", "real>0", "real>=1", "int>=0", "bool"):
        bad = draw(st.sampled_from({
            "real>=0": [True, "1", float("nan"), float("inf"), -1.0, 1j],
            "real>0": [True, "1", float("nan"), float("-inf"), 0.0, -2, 1j],
            "real>=1": [True, "1", float("nan"), float("inf"), 0.0, 0.5, 5e-324, -2, 1j],
            "int>=0": [True, False, 1.5, np.float64(3.0), "3", -1, 2**64],
            "bool": [1, 0.0, float("nan"), "yes", None],
        }[kind]))
        return name, bad, f"{name} = {bad!r}"
    shape = np.shape(valid)
    flat = int(draw(st.integers(0, int(np.prod(shape)) - 1)))
    where = ", ".join(str(int(i)) for i in np.unravel_index(flat, shape))
    how = draw(st.sampled_from(["dtype", "value"]))
    if how == "dtype":
        integral_floats_ok = name.startswith("TrajectoryBatch.")  # from_arrays takes 3.0 for 3, by design
        dtypes = ["U1", "complex128", "object"] + (["bool"] if kind != "flag" else []) + (
            ["float64", "float32"] if kind in ("int64", "int32", "role") and not integral_floats_ok else [])
        dtype = draw(st.sampled_from(dtypes))
        bad = np.asarray(valid).astype(dtype) if dtype != "object" else np.full(shape, None, object)
        return name, bad, name.split(".")[-1]
    if kind == "flag":
        value = draw(st.sampled_from([np.nan, 2.0, 0.5, -1.0]))
        bad = np.asarray(valid, np.float64)
        bad.flat[flat] = value
        return name, bad, f"{name}[{where}] = {value!r}"
    (lo, hi), carrier = RANGES[kind]
    if carrier == np.uint64:
        value = draw(st.integers(hi + 1, 2**64 - 1))
    else:
        value = draw(st.one_of(st.integers(hi + 1, I64.max), st.integers(I64.min, lo - 1)))
    bad = np.asarray(valid).astype(carrier)
    bad.flat[flat] = value
    return name, bad, f"{name}[{where}] = {value}"


@settings(max_examples=400, deadline=None)
@given(hostile())
def test_hostile_arguments_raise_an_error_naming_them(case):
    name, bad, text = case
    call, _, _ = CALLS[name]
    with pytest.raises((TypeError, ValueError)) as info:
        call(bad)
    assert text in str(info.value), str(info.value)
