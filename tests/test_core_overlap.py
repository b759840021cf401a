"""In-place core calls: an ``out=`` buffer that shares memory with an input is refused, naming both arguments.

The core's kernels read their inputs through ``__restrict`` pointers while they write their outputs, so before
these checks ``group_advantages(r, g, out=(r, keep))`` returned advantages off by up to 2 (the rewards were
overwritten while the group statistics were still being read) and ``compute_rewards_grid(out=<a view of
batch.usd>)`` overwrote the batch's column. Each case here failed before the fix (no error, wrong numbers or a
changed batch); the property test checks that any overlapping slice is refused and any separate buffer gives the
same numbers as a fresh call.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim.scoring.advantages import METHODS, group_advantages
from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.masks import broadcast_to_tokens, loss_mask_from_spans
from parasim.scoring.rewards import compute_rewards_grid

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _rewards(n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    groups = rng.permutation(np.repeat(np.arange(3), n // 3)).astype(np.int64)  # unsorted groups
    return rng.normal(size=n), groups


@pytest.mark.parametrize("method", [m for m in METHODS if not METHODS[m].needs_roles])
def test_advantages_into_the_rewards_buffer_are_refused(method: str) -> None:
    rewards, groups = _rewards()
    before = rewards.copy()
    with pytest.raises(ValueError, match=r"out\[0\]: shares memory with rewards"):
        group_advantages(rewards, groups, method, out=(rewards, np.empty(rewards.shape, np.bool_)))
    np.testing.assert_array_equal(rewards, before)  # refused before the core wrote anything


def test_keep_mask_aliasing_the_advantages_or_an_input_is_refused() -> None:
    rewards, groups = _rewards()
    raw = np.zeros(rewards.size * 8, np.uint8)
    adv = raw.view(np.float64)
    with pytest.raises(ValueError, match=r"out\[0\]: shares memory with out\[1\]"):
        group_advantages(rewards, groups, out=(adv, raw[:rewards.size].view(np.bool_)))
    ids = groups.view(np.uint8)[:rewards.size].view(np.bool_)  # keep written over the group ids
    with pytest.raises(ValueError, match=r"out\[1\]: shares memory with group_ids"):
        group_advantages(rewards, groups, out=(np.empty_like(rewards), ids))


def test_reward_grid_into_a_view_of_the_batch_is_refused() -> None:
    usd = np.zeros((1, 6))
    batch = TrajectoryBatch.from_arrays(outcome=np.linspace(0, 1, 6), usd=usd[0])
    column = batch.usd.reshape(1, -1)
    assert np.shares_memory(column, batch.usd)
    with pytest.raises(ValueError, match=r"out: shares memory with batch\.usd"):
        compute_rewards_grid(batch, ["paramanager"], out=column)
    np.testing.assert_array_equal(batch.usd, 0.0)


def test_mask_outputs_aliasing_their_inputs_are_refused() -> None:
    spans = np.zeros(8, np.int64)
    offsets, starts, ends = spans[:2], spans[2:3], spans[3:4]
    offsets[1], ends[0] = 1, 2
    with pytest.raises(ValueError, match=r"out: shares memory with row_offsets"):
        loss_mask_from_spans(offsets, starts, ends, np.array([True]), 2, out=offsets.view(np.uint8)[:2].reshape(1, 2))
    mask = np.ones((2, 3), np.uint8)
    values = np.arange(6, dtype=np.float64)
    with pytest.raises(ValueError, match=r"out: shares memory with values"):
        broadcast_to_tokens(values[:2], mask, out=values.reshape(2, 3))


@SETTINGS
@given(start=st.integers(0, 11), method=st.sampled_from(["grpo", "rloo", "dr_grpo"]),
       scale=st.sampled_from(["group", "batch", "none"]))
def test_any_overlapping_slice_is_refused_and_separate_buffers_match(start: int, method: str, scale: str) -> None:
    rewards, groups = _rewards()
    n = rewards.size
    fresh, fresh_keep = group_advantages(rewards, groups, method, scale=scale)
    store = np.concatenate([rewards, np.zeros(n)])  # rewards in store[:n]; an out slice from `start` overlaps them
    with pytest.raises(ValueError, match="shares memory with rewards"):
        group_advantages(store[:n], groups, method, scale=scale, out=(store[start:start + n], np.empty(n, np.bool_)))
    adv, keep = np.full(n, np.nan), np.zeros(n, np.bool_)
    group_advantages(store[:n], groups, method, scale=scale, out=(adv, keep))
    np.testing.assert_array_equal(adv, fresh)
    np.testing.assert_array_equal(keep, fresh_keep)


# ------------------------------------------------------------- finding 8: loss weights stay finite
@pytest.mark.parametrize("mode,kwargs", [
    ("token-mean", {"global_tokens": 5e-324}), ("token-mean", {"global_tokens": 0.5}),
    ("seq-mean-token-sum", {"global_seqs": 5e-324}), ("seq-mean-token-mean", {"global_seqs": 1e-300}),
    ("seq-mean-token-sum-norm", {"norm_len": 5e-324}), ("seq-mean-token-sum-norm", {"norm_len": 0.25})])
def test_loss_normalizer_totals_below_one_are_refused_not_infinite(mode: str, kwargs: dict) -> None:
    from parasim.scoring.masks import loss_normalizers

    mask = np.array([[1, 1, 0], [1, 0, 0]], np.uint8)
    (name, value), = kwargs.items()
    with pytest.raises(ValueError, match=rf"{name} = {value!r}: must be .*>= 1"):
        loss_normalizers(mask, mode, **kwargs)
    weights = loss_normalizers(mask, mode, **{name: 0.0 if name != "norm_len" else 1.0})
    assert np.isfinite(weights).all() and (weights <= 1).all()
