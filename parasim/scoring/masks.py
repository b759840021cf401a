"""Token loss masks from span tables, advantages broadcast to tokens, and loss normalizers.

A trajectory's tokens are a sequence of spans (system / prompt, manager turns, tool outputs, ...); only
manager tokens are trained, never the tools' output. Spans come as a CSR table over B rows: row b owns
spans ``row_offsets[b]:row_offsets[b+1]`` with ``starts``, exclusive ``ends`` and a ``trainable`` flag.
One core call builds the [B, T] uint8 mask (and, on request, each token's turn index for per-turn
advantages); :func:`loss_normalizers` gives the per-row weights of the usual loss aggregations.

Arguments are converted only where that is exact: indices must be integers that fit the core's dtype
(int64 offsets / starts / ends, int32 turn ids), flags bools or exactly 0 / 1, ``seq_len`` an int (not
a bool); anything else is a TypeError / ValueError naming the argument, the index and the range.
"""
from __future__ import annotations

import numpy as np

from parasim import _core
from parasim.scoring.batch import (
    bool_scalar,
    check_no_overlap,
    flag_array,
    int_array,
    int_scalar,
    real_array,
    real_scalar,
)

__all__ = ["LOSS_AGG_MODES", "broadcast_to_tokens", "loss_mask_from_spans", "loss_normalizers", "mask_row_counts"]

LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                   "seq-mean-token-sum-norm")


def _mask_array(mask: np.ndarray) -> np.ndarray:
    """A [B, T] mask as uint8, nonzero = trained; a NaN is an error, not a trained token."""
    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask: expected a 2-d [B, T] array, got shape {m.shape}")
    if m.dtype == np.bool_:
        return np.ascontiguousarray(m).view(np.uint8)
    if m.dtype.kind not in "iuf":
        raise TypeError(f"mask: dtype {m.dtype} is not numeric")
    if m.dtype.kind == "f" and not np.isfinite(m).all():
        b, t = np.unravel_index(int(np.flatnonzero(~np.isfinite(m))[0]), m.shape)
        raise ValueError(f"mask[{b}, {t}] = {m[b, t]}: must be finite (0 = not trained, nonzero = trained)")
    return np.ascontiguousarray(m if m.dtype == np.uint8 else (m != 0), dtype=np.uint8)


def loss_mask_from_spans(row_offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray, trainable: np.ndarray,
                         seq_len: int, *, truncated: np.ndarray | None = None, mask_truncated: bool = False,
                         with_turns: bool = False,
                         out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The uint8 loss mask [B, seq_len] and, with ``with_turns``, the int32 turn index [B, seq_len].

    Trainable spans are 1, then non-trainable spans 0 (where spans overlap, tool output wins), the rest
    (padding) 0. Spans may end past ``seq_len`` (the sequence was cut): they are clipped, or with
    ``mask_truncated`` the whole row is masked, as are rows flagged in ``truncated`` (DAPO's overlong
    filtering, arXiv 2503.14476). Turn k of a row is its k-th trainable span in table order; tokens
    outside trainable spans have turn -1. ``out`` is a preallocated uint8 [B, seq_len] buffer.
    """
    offsets = int_array(row_offsets, "row_offsets", np.int64)
    if offsets.shape[0] < 1:
        raise ValueError("row_offsets: needs B + 1 entries (at least [0])")
    st, en = int_array(starts, "starts", np.int64), int_array(ends, "ends", np.int64)
    flags = flag_array(trainable, "trainable")
    seq_len = int_scalar("seq_len", seq_len, 0)
    mask_truncated = bool_scalar("mask_truncated", mask_truncated)
    with_turns = bool_scalar("with_turns", with_turns)
    rows = offsets.shape[0] - 1
    trunc = None
    if truncated is not None:
        trunc = flag_array(truncated, "truncated")
        if trunc.shape != (rows,):
            raise ValueError(f"truncated: expected shape ({rows},), got {trunc.shape}")
    if out is None:
        out = np.empty((rows, seq_len), np.uint8)
    elif out.shape != (rows, seq_len) or out.dtype != np.uint8 or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous uint8 array of shape {(rows, seq_len)}")
    check_no_overlap({"out": out}, {"row_offsets": offsets, "starts": st, "ends": en, "trainable": flags,
                                    "truncated": trunc})
    turns = np.empty((rows, seq_len), np.int32) if with_turns else None
    counts = np.empty(rows, np.int64)
    _core.loss_mask_from_spans(offsets, st, en, flags, seq_len, trunc, mask_truncated, out, turns, counts)
    return out, turns


def broadcast_to_tokens(values: np.ndarray, mask: np.ndarray, turn_ids: np.ndarray | None = None, *,
                        out: np.ndarray | None = None) -> np.ndarray:
    """values[b] on every masked token of row b, 0 elsewhere; with ``turn_ids``, values[b, turn] per turn.

    The result has the values' dtype when it is float32 or float64, else float64.
    """
    m = _mask_array(mask)
    v = real_array(values, "values")
    want = 2 if turn_ids is not None else 1
    if v.ndim != want or v.shape[0] != m.shape[0]:
        raise ValueError(f"values: expected shape ({m.shape[0]}{', K' if want == 2 else ''}) for a mask of "
                         f"shape {m.shape}, got {v.shape}")
    if not np.isfinite(v).all():
        i = np.unravel_index(int(np.flatnonzero(~np.isfinite(v))[0]), v.shape)
        raise ValueError(f"values[{', '.join(map(str, i))}] = {v[i]}: must be finite")
    turns = None
    if turn_ids is not None:
        turns = int_array(turn_ids, "turn_ids", np.int32, ndim=2)
        if turns.shape != m.shape:
            raise ValueError(f"turn_ids: expected the mask's shape {m.shape}, got {turns.shape}")
    if out is None:
        out = np.empty(m.shape, v.dtype)
    elif out.shape != m.shape or out.dtype != v.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous {v.dtype} array of shape {m.shape}")
    check_no_overlap({"out": out}, {"values": v, "mask": m, "turn_ids": turns})
    _core.broadcast_to_tokens(v, m, turns, out)
    return out


def mask_row_counts(mask: np.ndarray) -> np.ndarray:
    """Trainable tokens per row (int64[B])."""
    m = _mask_array(mask)
    counts = np.empty(m.shape[0], np.int64)
    _core.mask_row_counts(m, counts)
    return counts


def _count(name: str, value: float, *, zero: bool = True) -> float:
    """A total of tokens, sequences or a length: 0 (with ``zero``: nothing to weigh) or at least 1. A count in
    (0, 1) is no count, and its reciprocal, the weight, could be infinite (5e-324 gives inf)."""
    v = real_scalar(name, value, 0.0)
    if v < 1.0 and not (zero and v == 0.0):
        raise ValueError(f"{name} = {value!r}: must be {'0 or ' if zero else ''}>= 1 (a count of tokens or "
                         "sequences; its reciprocal is the weight)")
    return v


def loss_normalizers(mask: np.ndarray, mode: str, *, global_tokens: float | None = None,
                     global_seqs: float | None = None, norm_len: float | None = None) -> np.ndarray:
    """Per-row weights c[b] (float64[B]) with loss = sum_{b,t} token_loss[b,t] * mask[b,t] * c[b].

    * ``token-mean``: c = 1 / tokens (every trained token weighs the same; DAPO's choice).
    * ``seq-mean-token-sum``: c = 1 / seqs.
    * ``seq-mean-token-mean``: c = 1 / (seqs * tokens_b) (GRPO's original per-sequence mean).
    * ``seq-mean-token-sum-norm``: c = 1 / (seqs * norm_len), a constant length (Dr. GRPO, arXiv 2503.20783);
      ``norm_len`` defaults to T.

    Under data parallelism pass ``global_tokens`` / ``global_seqs`` summed over ranks so that every rank
    weighs tokens alike; by default they are this mask's totals. They are counts, 0 or >= 1 (``norm_len`` >= 1),
    so every weight is at most 1. ``seqs`` counts rows with at least one
    trained token (an empty row contributes nothing). Empty totals give weight 0, not a division by zero.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"mode = {mode!r}: must be one of {list(LOSS_AGG_MODES)}")
    g_tok = None if global_tokens is None else _count("global_tokens", global_tokens)
    g_seq = None if global_seqs is None else _count("global_seqs", global_seqs)
    n_len = None if norm_len is None else _count("norm_len", norm_len, zero=False)
    counts = mask_row_counts(mask).astype(np.float64)
    n_tok = float(counts.sum()) if g_tok is None else g_tok
    n_seq = float((counts > 0).sum()) if g_seq is None else g_seq
    length = float(np.asarray(mask).shape[1]) if n_len is None else n_len
    if mode == "token-mean":
        return np.full(counts.shape, 1.0 / n_tok if n_tok > 0 else 0.0)
    inv_seq = 1.0 / n_seq if n_seq > 0 else 0.0
    if mode == "seq-mean-token-sum":
        return np.full(counts.shape, inv_seq)
    if mode == "seq-mean-token-mean":
        return np.where(counts > 0, inv_seq / np.maximum(counts, 1.0), 0.0)
    return np.full(counts.shape, inv_seq / length if length > 0 else 0.0)
