"""Plain NumPy references of every C++ kernel: the readable definition the core is tested against.

Nothing here is tuned for speed; each function spells its formula out so that a reader can check it
against the paper, and the property tests check ``parasim._core`` against it on random batches.
"""
from __future__ import annotations

import numpy as np

from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.reward_config import RewardConfig
from parasim.scoring.rewards import COMPONENTS, router_r1_cost_bounds


# ----------------------------------------------------------------------------------------- rewards
def soft_budget(x: np.ndarray, target: float, max_factor: float) -> np.ndarray:
    """DAPO-style soft budget: 0 up to ``target``, linear down to -1 at ``max_factor * target``, -1 beyond."""
    return -np.clip((x - target) / ((max_factor - 1.0) * target), 0.0, 1.0)


def group_minmax_normalize(values: np.ndarray, group_id: np.ndarray) -> np.ndarray:
    """(v - min_g) / (max_g - min_g) per column within each group; 0 where a column is constant in its group."""
    out = np.zeros(values.shape, np.float64)
    for g in np.unique(group_id):
        rows = group_id == g
        v = values[rows].astype(np.float64)
        lo, hi = v.min(axis=0), v.max(axis=0)
        span = hi - lo
        out[rows] = np.where(span > 0, (v - lo) / np.where(span > 0, span, 1.0), 0.0)
    return out


def preference_vectors(batch: TrajectoryBatch, cfg: RewardConfig) -> np.ndarray:
    """ToolOrchestra's preference vector of every row, [N, T + 3]: the row's own (``batch.preference``) where it has
    one (``has_preference``), else the config's (pref_tools, pref_outcome, pref_cost, pref_latency)."""
    config = np.array([*cfg.pref_tools, cfg.pref_outcome, cfg.pref_cost, cfg.pref_latency])
    own = batch.has_preference[:, None] != 0
    return np.where(own, np.asarray(batch.preference, np.float64), config[None, :])


def reward_components(batch: TrajectoryBatch, cfg: RewardConfig) -> dict[str, np.ndarray]:
    """Every component of ``cfg``'s formula; ``total`` is their sum."""
    n = len(batch)
    c = {k: np.zeros(n) for k in COMPONENTS}
    o = batch.outcome
    correct = (o >= cfg.correct_threshold).astype(np.float64)
    if cfg.formula == "paramanager":
        c["outcome"] = cfg.w_outcome * o
        penalty = cfg.format_penalty * batch.format_violations + cfg.no_final_penalty * (1.0 - batch.ended_with_final)
        c["protocol"] = -cfg.w_protocol * np.minimum(1.0, penalty)
        par = batch.tool_calls / np.maximum(batch.rounds, 1)
        div = (cfg.par_share * np.minimum(1.0, par / cfg.theta_par)
               + (1.0 - cfg.par_share) * np.minimum(1.0, batch.distinct_tools / cfg.theta_tool))
        c["diversity"] = cfg.w_diversity * div * (correct if cfg.diversity_needs_correct else 1.0)
        c["length"] = cfg.w_length * soft_budget(batch.tokens, cfg.l_tar, cfg.budget_max_factor)
        c["cost"] = cfg.w_cost * soft_budget(batch.cost_units, cfg.c_tar, cfg.budget_max_factor)
    elif cfg.formula == "toolorchestra":
        feats = np.column_stack([batch.tool_counts, o, -batch.usd, -batch.latency_s])
        norm = group_minmax_normalize(feats, batch.group_id) * correct[:, None]
        prefs = preference_vectors(batch, cfg)
        c["tools"] = np.array([norm[i, :-3] @ prefs[i, :-3] for i in range(n)]).reshape(n)
        c["outcome"] = prefs[:, -3] * norm[:, -3]
        c["cost"] = prefs[:, -2] * norm[:, -2]
        c["latency"] = prefs[:, -1] * norm[:, -1]
    elif cfg.formula == "xrouter":
        c["outcome"] = o.copy()
        c["cost"] = -o * np.minimum(cfg.usd_scale * batch.usd, cfg.max_cost_penalty)
    elif cfg.formula == "router_r1":
        lo, hi = router_r1_cost_bounds(batch, cfg)
        bad = (batch.format_violations > 0) | (batch.ended_with_final == 0)
        scaled = np.clip((np.sqrt(batch.usd) - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.zeros(n)
        c["protocol"] = np.where(bad, cfg.format_reward, 0.0)
        c["outcome"] = np.where(bad, 0.0, (1.0 - cfg.alpha_cost) * o)
        c["cost"] = np.where(bad, 0.0, cfg.alpha_cost * correct * (1.0 - scaled))
    total = np.zeros(n)
    for k in COMPONENTS:
        total = total + c[k]
    c["total"] = total
    return c


# ----------------------------------------------------------------------------------------- advantages
def _std(x: np.ndarray, unbiased: bool) -> float:
    if x.size < (2 if unbiased else 1):
        return 0.0
    return float(np.std(x, ddof=1 if unbiased else 0))


def _scaled(x: np.ndarray) -> tuple[np.ndarray, int]:
    """x * 2**-e and e, with 2**e > max |x|: a power of two scales exactly, and the scaled values' squares
    cannot overflow, however large (up to the float64 maximum) the rewards are."""
    e = int(np.frexp(np.max(np.abs(x), initial=0.0))[1])
    return np.ldexp(x, -e), e


def _ldexp(x: np.ndarray | float, e: np.ndarray | int) -> np.ndarray:
    """x * 2**e, inf past the float64 maximum without a warning: an advantage may truly overflow."""
    with np.errstate(over="ignore"):
        return np.ldexp(x, e)


def group_advantages(rewards: np.ndarray, group_ids: np.ndarray, method: str = "grpo", *, eps: float = 1e-6,
                     std: str = "unbiased", scale: str | None = None, clip: float | None = None,
                     role_ids: np.ndarray | None = None,
                     min_group_std: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Group-relative advantages, one group at a time (see :func:`parasim.scoring.advantages.group_advantages`).

    Each group's statistics are taken of its rewards in units of 2**e (:func:`_scaled`); the centered
    values are kept in those units (``dev`` times 2**``exp``) until the end, so nothing overflows on the way.
    """
    r = np.asarray(rewards, np.float64)
    g = np.asarray(group_ids)
    unbiased = std == "unbiased"
    scale = scale or ("none" if method in ("dr_grpo", "rloo") else "group")
    dev = np.zeros(r.size)
    exp = np.zeros(r.size, np.int64)
    keep = np.ones(r.size, bool)
    units = g if method != "per_role" else np.stack([g, np.asarray(role_ids)], axis=1)
    _, unit = np.unique(units, axis=0 if units.ndim == 2 else None, return_inverse=True)
    unit = unit.reshape(-1)
    for u in np.unique(unit):
        rows = np.flatnonzero(unit == u)
        x, e = _scaled(r[rows])
        if x.size == 1:
            continue  # a group of one has nothing to compare against
        centered = x - x.mean()
        if method == "rloo":
            centered = centered * x.size / (x.size - 1)  # r_i - mean of the others
        if scale == "group":
            denom = _std(x, unbiased) + _ldexp(eps, -e)  # std + eps in the same units: the 2**e cancels
            centered = centered / denom if denom > 0 else 0.0 * centered
            e = 0
        dev[rows], exp[rows] = centered, e
    if scale == "batch":
        x, e = _scaled(r)
        denom = _std(x, unbiased) + _ldexp(eps, -e)
        dev = dev / denom if denom > 0 else 0.0 * dev
        exp = exp - e
    adv = _ldexp(dev, exp)  # inf where the advantage itself overflows (the core raises there)
    if min_group_std is not None:
        for gid in np.unique(g):
            rows = g == gid
            x, e = _scaled(r[rows])
            if _ldexp(_std(x, unbiased), e) < min_group_std:
                keep[rows] = False
        adv[~keep] = 0.0
    if clip is not None:
        adv = np.clip(adv, -clip, clip)
    return adv.astype(np.asarray(rewards).dtype, copy=False), keep


# ----------------------------------------------------------------------------------------- masks
def loss_mask_from_spans(row_offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray, trainable: np.ndarray,
                         seq_len: int, *, truncated: np.ndarray | None = None,
                         mask_truncated: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Token loss mask [B, T] and turn index [B, T] from a span table, by plain loops.

    Row b owns spans ``row_offsets[b]:row_offsets[b+1]``; trainable spans are written 1, then
    non-trainable spans 0 (tool output is never trained, even where spans overlap); the rest is 0.
    The k-th trainable span of a row (table order) is turn k; tokens outside trainable spans are -1.
    With ``mask_truncated`` a row that is flagged truncated, or has a span past ``seq_len``, is all 0.
    """
    b_count = len(row_offsets) - 1
    mask = np.zeros((b_count, seq_len), np.uint8)
    turn = np.full((b_count, seq_len), -1, np.int32)
    for b in range(b_count):
        spans = range(row_offsets[b], row_offsets[b + 1])
        over = any(ends[s] > seq_len for s in spans) or (truncated is not None and bool(truncated[b]))
        if mask_truncated and over:
            continue
        k = 0
        for s in spans:
            if trainable[s]:
                mask[b, starts[s]:min(ends[s], seq_len)] = 1
                turn[b, starts[s]:min(ends[s], seq_len)] = k
                k += 1
        for s in spans:
            if not trainable[s]:
                mask[b, starts[s]:min(ends[s], seq_len)] = 0
                turn[b, starts[s]:min(ends[s], seq_len)] = -1
    return mask, turn


def broadcast_to_tokens(values: np.ndarray, mask: np.ndarray, turn_ids: np.ndarray | None = None) -> np.ndarray:
    """values[b] (or values[b, turn[b, t]] per turn) on every masked token, 0 elsewhere."""
    values = np.asarray(values)
    if turn_ids is None:
        return (values[:, None] * (mask != 0)).astype(values.dtype)
    out = np.zeros(mask.shape, values.dtype)
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[b, t] and turn_ids[b, t] >= 0:
                out[b, t] = values[b, turn_ids[b, t]]
    return out


def aggregated_loss(token_loss: np.ndarray, mask: np.ndarray, mode: str, *, global_tokens: float | None = None,
                    global_seqs: float | None = None, norm_len: float | None = None) -> float:
    """The loss each aggregation mode defines, computed from its definition over the trained tokens, row by row
    (``parasim.scoring.masks.loss_normalizers`` gives per-row weights instead; a test checks that the two agree, so this
    is not a second copy of those weights): ``token-mean`` the mean over all trained tokens, ``seq-mean-token-sum`` the
    mean over trained rows of each row's sum, ``seq-mean-token-mean`` of each row's mean, ``seq-mean-token-sum-norm``
    of each row's sum over a constant length. ``global_*`` replace this mask's token and row counts."""
    rows = [[float(token_loss[b, t]) for t in range(mask.shape[1]) if mask[b, t] != 0] for b in range(mask.shape[0])]
    trained = [r for r in rows if r]
    n_tok = sum(len(r) for r in rows) if global_tokens is None else global_tokens
    n_seq = len(trained) if global_seqs is None else global_seqs
    length = mask.shape[1] if norm_len is None else norm_len
    if mode == "token-mean":
        return sum(sum(r) for r in trained) / n_tok if n_tok > 0 else 0.0
    if n_seq <= 0:
        return 0.0
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in trained) / n_seq
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in trained) / n_seq
    if mode == "seq-mean-token-sum-norm":
        return sum(sum(r) / length for r in trained) / n_seq if length > 0 else 0.0
    raise ValueError(f"mode = {mode!r}")
