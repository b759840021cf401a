"""Masks: span tables to token masks, turn indices, broadcasting and loss normalizers vs the reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parasim.scoring import reference
from parasim.scoring.masks import (
    LOSS_AGG_MODES,
    broadcast_to_tokens,
    loss_mask_from_spans,
    loss_normalizers,
)

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def span_tables(draw):
    """Rows of spans: mostly a tokenized chat (sorted, touching, alternating roles), sometimes arbitrary
    (overlapping, unsorted), with zero-length spans and spans that end exactly at or past T."""
    seq_len = draw(st.integers(0, 40))
    rows = draw(st.integers(0, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    offsets, starts, ends, trainable = [0], [], [], []
    for _ in range(rows):
        k = int(rng.integers(0, 6))
        if rng.random() < 0.6:
            cuts = np.sort(rng.integers(0, seq_len + 8, k + 1))
            s, e = cuts[:-1], cuts[1:]
            if k and rng.random() < 0.3:
                e[-1] = max(seq_len, s[-1])  # a span ending exactly at T (unless it starts past it)
        else:
            s = rng.integers(0, seq_len + 4, k)
            e = s + rng.integers(0, 12, k)
        starts += s.tolist()
        ends += e.tolist()
        trainable += (rng.random(k) < 0.5).tolist()
        offsets.append(len(starts))
    truncated = rng.random(rows) < 0.2 if draw(st.booleans()) else None
    return (np.array(offsets), np.array(starts, np.int64), np.array(ends, np.int64), np.array(trainable),
            seq_len, truncated, draw(st.booleans()))


@SETTINGS
@given(span_tables())
def test_mask_and_turns_match_reference(table):
    offsets, starts, ends, trainable, seq_len, truncated, mask_truncated = table
    mask, turns = loss_mask_from_spans(offsets, starts, ends, trainable, seq_len, truncated=truncated,
                                       mask_truncated=mask_truncated, with_turns=True)
    ref_mask, ref_turns = reference.loss_mask_from_spans(offsets, starts, ends, trainable, seq_len,
                                                         truncated=truncated, mask_truncated=mask_truncated)
    assert mask.dtype == np.uint8 and turns is not None and turns.dtype == np.int32
    np.testing.assert_array_equal(mask, ref_mask)
    np.testing.assert_array_equal(turns, ref_turns)
    plain, none = loss_mask_from_spans(offsets, starts, ends, trainable, seq_len, truncated=truncated,
                                       mask_truncated=mask_truncated)
    assert none is None
    np.testing.assert_array_equal(plain, mask)

    rng = np.random.default_rng(int(mask.sum()))
    values = rng.normal(size=mask.shape[0]).astype(np.float32)
    np.testing.assert_array_equal(broadcast_to_tokens(values, mask), reference.broadcast_to_tokens(values, mask))
    per_turn = rng.normal(size=(mask.shape[0], max(1, int(turns.max(initial=0)) + 1)))
    np.testing.assert_array_equal(broadcast_to_tokens(per_turn, mask, turns),
                                  reference.broadcast_to_tokens(per_turn, mask, turns))
    token_loss = rng.normal(size=mask.shape)
    for mode in LOSS_AGG_MODES:
        for counts in ({}, {"global_tokens": 3.0 * mask.sum() + 1.0, "global_seqs": 2.0 * mask.shape[0] + 1.0},
                       {"norm_len": 7.5}):
            weights = loss_normalizers(mask, mode, **counts)
            loss = float((token_loss * (mask != 0) * weights[:, None]).sum())
            assert loss == pytest.approx(reference.aggregated_loss(token_loss, mask, mode, **counts), rel=1e-12,
                                         abs=1e-12), (mode, counts)


def test_threaded_rows_match_reference():
    rng = np.random.default_rng(3)
    rows, seq_len, per_row = 300, 257, 9
    cuts = np.sort(rng.integers(0, seq_len + 20, (rows, per_row + 1)), axis=1)
    offsets = np.arange(0, rows * per_row + 1, per_row)
    starts, ends = cuts[:, :-1].reshape(-1), cuts[:, 1:].reshape(-1)
    trainable = np.tile(np.arange(per_row) % 2, rows)
    mask, turns = loss_mask_from_spans(offsets, starts, ends, trainable, seq_len, with_turns=True)
    ref_mask, ref_turns = reference.loss_mask_from_spans(offsets, starts, ends, trainable, seq_len)
    np.testing.assert_array_equal(mask, ref_mask)
    np.testing.assert_array_equal(turns, ref_turns)


def test_hand_built_chat():
    # [system 0:4][manager 4:9][tool 9:15][manager 15:18] padded to 20; a second row cut at T
    offsets = [0, 4, 6]
    starts, ends = [0, 4, 9, 15, 0, 12], [4, 9, 15, 18, 12, 25]
    trainable = [0, 1, 0, 1, 0, 1]
    mask, turns = loss_mask_from_spans(offsets, starts, ends, trainable, 20, with_turns=True)
    assert mask[0].tolist() == [0] * 4 + [1] * 5 + [0] * 6 + [1] * 3 + [0] * 2
    assert turns[0].tolist() == [-1] * 4 + [0] * 5 + [-1] * 6 + [1] * 3 + [-1] * 2
    assert mask[1].tolist() == [0] * 12 + [1] * 8  # clipped at T
    cut, _ = loss_mask_from_spans(offsets, starts, ends, trainable, 20, mask_truncated=True)
    assert cut[0].tolist() == mask[0].tolist() and not cut[1].any()  # the overlong row is dropped
    flagged, _ = loss_mask_from_spans(offsets, starts, ends, trainable, 20, truncated=[1, 0], mask_truncated=True)
    assert not flagged.any()
    out = np.empty((2, 20), np.uint8)
    assert loss_mask_from_spans(offsets, starts, ends, trainable, 20, out=out)[0] is out


def test_overlap_never_trains_tool_tokens():
    mask, _ = loss_mask_from_spans([0, 2], [0, 3], [8, 5], [1, 0], 10)
    assert mask[0].tolist() == [1, 1, 1, 0, 0, 1, 1, 1, 0, 0]


def test_loss_normalizers_by_hand_and_with_global_counts():
    mask = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], np.uint8)
    np.testing.assert_allclose(loss_normalizers(mask, "token-mean"), [1 / 3] * 3)
    np.testing.assert_allclose(loss_normalizers(mask, "seq-mean-token-sum"), [1 / 2] * 3)
    np.testing.assert_allclose(loss_normalizers(mask, "seq-mean-token-mean"), [1 / 4, 1 / 2, 0.0])
    np.testing.assert_allclose(loss_normalizers(mask, "seq-mean-token-sum-norm"), [1 / 8] * 3)
    np.testing.assert_allclose(loss_normalizers(mask, "seq-mean-token-sum-norm", norm_len=2), [1 / 4] * 3)
    # data parallel: another rank holds 5 more tokens in 2 more sequences
    np.testing.assert_allclose(loss_normalizers(mask, "token-mean", global_tokens=8), [1 / 8] * 3)
    np.testing.assert_allclose(loss_normalizers(mask, "seq-mean-token-mean", global_seqs=4), [1 / 8, 1 / 4, 0.0])
    np.testing.assert_array_equal(loss_normalizers(np.zeros((2, 3), np.uint8), "token-mean"), [0.0, 0.0])
    np.testing.assert_allclose(loss_normalizers(mask.astype(bool), "token-mean"), [1 / 3] * 3)


@pytest.mark.parametrize(("args", "error", "message"), [
    (([1, 2], [0], [1], [1], 5), ValueError, r"row_offsets\[0\] = 1: offsets must start at 0"),
    (([0, 2, 1], [0, 1], [1, 2], [1, 1], 5), ValueError, r"row_offsets\[2\] = 1"),
    (([0, 1], [-1], [1], [1], 5), ValueError, r"starts\[0\] = -1: must be >= 0"),
    (([0, 2], [0, 4], [1, 3], [1, 1], 5), ValueError, r"ends\[1\] = 3: must be >= starts\[1\] = 4"),
    (([0, 1], [0.5], [1], [1], 5), TypeError, r"starts: dtype float64 is not an integer type"),
    (([0, 1], [0], [1], [1], -1), ValueError, r"seq_len = -1: must be an integer >= 0"),
    (([], [], [], [], 5), ValueError, r"row_offsets: needs B \+ 1 entries"),
])
def test_bad_span_tables_are_rejected(args, error, message):
    with pytest.raises(error, match=message):
        loss_mask_from_spans(*(np.asarray(a) if isinstance(a, list) else a for a in args))


def test_bad_broadcast_and_normalizer_inputs():
    mask = np.ones((2, 3), np.uint8)
    with pytest.raises(ValueError, match=r"turn_ids\[1, 2\]: turn index out of range for values with 2 columns"):
        broadcast_to_tokens(np.zeros((2, 2)), mask, np.array([[0, 1, 1], [0, 1, 2]]))
    with pytest.raises(ValueError, match=r"values: expected shape \(2\)"):
        broadcast_to_tokens(np.zeros(3), mask)
    with pytest.raises(ValueError, match=r"values\[1\] = nan: must be finite"):
        broadcast_to_tokens(np.array([0.0, np.nan]), mask)
    with pytest.raises(ValueError, match=r"mode = 'mean'"):
        loss_normalizers(mask, "mean")
    with pytest.raises(ValueError, match=r"global_tokens = -1"):
        loss_normalizers(mask, "token-mean", global_tokens=-1)
