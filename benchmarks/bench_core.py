"""The C++ core against its baselines, each pytest-benchmark group one comparison measured in the same run.

Run: ``pytest benchmarks/bench_core.py --benchmark-only --benchmark-json=.benchmarks/core.json`` then
``python benchmarks/report.py .benchmarks/core.json`` for the ratio table in docs/performance.md.

* advantages, N = 1e3 .. 1e7, G = 8 contiguous: core vs NumPy reshape, vectorized torch, a Python
  dict-loop grouping (the structure of the default GRPO path of a popular RL library; N <= 1e5 only)
  and a memcpy of the same rewards (np.copyto into a preallocated buffer: the memory bound).
* masks, 4096 x 8192 tokens: core vs Python-list building, NumPy (difference array + cumsum), memset
  (ndarray.fill(0) on a preallocated mask) and the same fill with ones.
* rewards, N = 1e6, and the reward grid, 64 configs x 1e6: core vs NumPy.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from parasim.protocol.schema import NUM_TOOLS
from parasim.scoring import reference
from parasim.scoring.advantages import group_advantages
from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.masks import broadcast_to_tokens, loss_mask_from_spans
from parasim.scoring.rewards import PRESETS, compute_rewards, compute_rewards_grid

G = 8
EPS = 1e-6
SIZES = [10**3, 10**4, 10**5, 10**6, 10**7]
DICT_LOOP_MAX = 10**5
B, T = 4096, 8192


# ------------------------------------------------------------------------------------------- advantages
def numpy_reshape(r: np.ndarray) -> np.ndarray:
    x = r.reshape(-1, G)
    return ((x - x.mean(1, keepdims=True)) / (x.std(1, ddof=1, keepdims=True) + EPS)).reshape(-1)


def torch_vectorized(r: torch.Tensor) -> torch.Tensor:
    x = r.view(-1, G)
    return ((x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + EPS)).view(-1)


def python_dict_loop(scores: torch.Tensor, index: list[int]) -> torch.Tensor:
    """Group by id in a dict of lists, per-group torch statistics, per-element update."""
    id2score: dict[int, list[torch.Tensor]] = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2mean, id2std = {}, {}
    for idx, vals in id2score.items():
        if len(vals) == 1:
            id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            t = torch.stack(vals)
            id2mean[idx], id2std[idx] = torch.mean(t), torch.std(t)
    out = scores.clone()
    for i in range(len(scores)):
        out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + EPS)
    return out


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"N={n:.0e}")
def adv_case(request):
    n = request.param
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, n).astype(np.float64) * rng.random(n)
    groups = np.repeat(np.arange(n // G, dtype=np.int64), G)
    return n, rewards, groups


@pytest.mark.parametrize("impl", ["core", "core_alloc", "core_int32_ids", "numpy_reshape", "torch", "python_dict_loop",
                                  "memcpy", "memcpy_rewards_and_ids"])
def test_advantages(benchmark, adv_case, impl):
    n, rewards, groups = adv_case
    benchmark.group = f"advantages N={n:.0e} G={G}"
    if impl == "core":
        out = (np.empty_like(rewards), np.empty(n, bool))
        benchmark(group_advantages, rewards, groups, out=out)
        np.testing.assert_allclose(out[0], numpy_reshape(rewards), atol=1e-9)
    elif impl == "core_alloc":
        benchmark(group_advantages, rewards, groups)
    elif impl == "core_int32_ids":  # half the id bytes to stream: the kernel is memory-bound at large N
        out = (np.empty_like(rewards), np.empty(n, bool))
        benchmark(group_advantages, rewards, groups.astype(np.int32), out=out)
    elif impl == "numpy_reshape":
        benchmark(numpy_reshape, rewards)
    elif impl == "torch":
        benchmark(torch_vectorized, torch.from_numpy(rewards))
    elif impl == "python_dict_loop":
        if n > DICT_LOOP_MAX:
            pytest.skip("the dict loop takes minutes at this size")
        scores, index = torch.from_numpy(rewards), groups.tolist()
        benchmark.pedantic(python_dict_loop, args=(scores, index), rounds=3 if n >= 10**5 else 10, iterations=1)
    elif impl == "memcpy":
        dst = np.empty_like(rewards)
        benchmark(np.copyto, dst, rewards)
    else:  # every input byte the kernel must read, copied
        dst_r, dst_g = np.empty_like(rewards), np.empty_like(groups)
        benchmark(lambda: (np.copyto(dst_r, rewards), np.copyto(dst_g, groups)))


# ------------------------------------------------------------------------------------------- masks
@pytest.fixture(scope="module")
def chat_spans():
    """4096 rows of a tokenized multi-turn chat: a system prompt, then manager / tool turns of random
    length, rows ending anywhere up to T (the rest is padding), some cut at T."""
    rng = np.random.default_rng(0)
    offsets, starts, ends, trainable = [0], [], [], []
    for _ in range(B):
        pos = int(rng.integers(256, 1024))
        starts.append(0), ends.append(pos), trainable.append(0)
        manager = True
        while pos < T and rng.random() > 0.05:
            length = int(rng.integers(64, 512) if manager else rng.integers(128, 2048))
            starts.append(pos), ends.append(pos + length), trainable.append(int(manager))
            pos += length
            manager = not manager
        offsets.append(len(starts))
    return (np.array(offsets, np.int64), np.array(starts, np.int64), np.array(ends, np.int64),
            np.array(trainable, np.uint8))


def python_list_mask(offsets: list[int], starts: list[int], ends: list[int], trainable: list[int]) -> np.ndarray:
    rows = []
    for b in range(len(offsets) - 1):
        row = [0] * T
        for s in range(offsets[b], offsets[b + 1]):
            if trainable[s]:
                hi = min(ends[s], T)
                row[starts[s]:hi] = [1] * (hi - starts[s])
        rows.append(row)
    return np.array(rows, dtype=np.uint8)


def numpy_mask(offsets, starts, ends, trainable) -> np.ndarray:
    row = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    keep = trainable.astype(bool)
    diff = np.zeros((len(offsets) - 1, T + 1), np.int8)
    np.add.at(diff, (row[keep], np.minimum(starts[keep], T)), 1)
    np.add.at(diff, (row[keep], np.minimum(ends[keep], T)), -1)
    return (np.cumsum(diff[:, :T], axis=1, dtype=np.int8) > 0).view(np.uint8)


@pytest.mark.parametrize("impl", ["core", "core_alloc", "core_with_turns", "python_list", "numpy", "memset",
                                  "memset_ones"])
def test_masks(benchmark, chat_spans, impl):
    benchmark.group = f"masks {B}x{T}"
    offsets, starts, ends, trainable = chat_spans
    if impl == "core":
        out = np.empty((B, T), np.uint8)
        benchmark(loss_mask_from_spans, offsets, starts, ends, trainable, T, out=out)
        np.testing.assert_array_equal(out, numpy_mask(offsets, starts, ends, trainable))
    elif impl == "core_alloc":
        benchmark(loss_mask_from_spans, offsets, starts, ends, trainable, T)
    elif impl == "core_with_turns":
        out = np.empty((B, T), np.uint8)
        benchmark(loss_mask_from_spans, offsets, starts, ends, trainable, T, out=out, with_turns=True)
    elif impl == "python_list":
        lists = (offsets.tolist(), starts.tolist(), ends.tolist(), trainable.tolist())
        benchmark.pedantic(python_list_mask, args=lists, rounds=3, iterations=1)
    elif impl == "numpy":
        benchmark(numpy_mask, offsets, starts, ends, trainable)
    elif impl == "memset":
        out = np.empty((B, T), np.uint8)
        benchmark(out.fill, 0)
    else:  # a mask holds ones; some CPUs store zero lines faster than any other value
        out = np.empty((B, T), np.uint8)
        benchmark(out.fill, 1)


@pytest.mark.parametrize("impl", ["core", "numpy", "memset"])
def test_broadcast(benchmark, chat_spans, impl):
    benchmark.group = f"broadcast advantages to {B}x{T} float32"
    mask, _ = loss_mask_from_spans(*chat_spans, T)
    values = np.random.default_rng(0).normal(size=B).astype(np.float32)
    out = np.empty((B, T), np.float32)
    if impl == "core":
        benchmark(broadcast_to_tokens, values, mask, out=out)
    elif impl == "numpy":
        benchmark(np.multiply, values[:, None], mask, out=out)
    else:
        benchmark(out.fill, 0.0)


# ------------------------------------------------------------------------------------------- rewards
@pytest.fixture(scope="module")
def big_batch() -> TrajectoryBatch:
    n = 10**6
    rng = np.random.default_rng(0)
    rounds = rng.integers(1, 13, n)
    return TrajectoryBatch.from_arrays(
        outcome=rng.integers(0, 2, n).astype(float),
        format_violations=rng.integers(0, 2, n) * (rng.random(n) < 0.1),
        ended_with_final=(rng.random(n) < 0.9).astype(np.uint8), rounds=rounds,
        tool_calls=rounds * rng.integers(1, 5, n),
        distinct_tools=rng.integers(1, NUM_TOOLS + 1, n), tool_counts=rng.integers(0, 6, (n, NUM_TOOLS)),
        tokens=rng.lognormal(9, 0.7, n), cost_units=rng.lognormal(1.8, 0.6, n), usd=rng.lognormal(-4, 1, n),
        latency_s=rng.lognormal(3, 0.8, n), group_id=np.repeat(np.arange(n // G), G))


def numpy_toolorchestra(batch: TrajectoryBatch) -> np.ndarray:
    """ToolOrchestra's reward in vectorized NumPy for contiguous groups of G (reshape min-max)."""
    cfg = PRESETS["toolorchestra"]
    feats = np.column_stack([batch.tool_counts, batch.outcome, -batch.usd, -batch.latency_s]).reshape(-1, G, 10)
    lo, hi = feats.min(1, keepdims=True), feats.max(1, keepdims=True)
    span = hi - lo
    norm = np.where(span > 0, (feats - lo) / np.where(span > 0, span, 1.0), 0.0).reshape(-1, 10)
    prefs = np.array([*cfg.pref_tools, cfg.pref_outcome, cfg.pref_cost, cfg.pref_latency])
    return (norm @ prefs) * (batch.outcome >= cfg.correct_threshold)


@pytest.mark.parametrize("preset", ["paramanager", "toolorchestra"])
@pytest.mark.parametrize("impl", ["core", "numpy"])
def test_rewards(benchmark, big_batch, preset, impl):
    benchmark.group = f"rewards {preset} N=1e6"
    if impl == "core":
        benchmark(compute_rewards, big_batch, preset)
    elif preset == "paramanager":
        benchmark(reference.reward_components, big_batch, PRESETS[preset])
    else:
        got = compute_rewards(big_batch, preset).total
        np.testing.assert_allclose(numpy_toolorchestra(big_batch), got, atol=1e-12)
        benchmark(numpy_toolorchestra, big_batch)


def sweep_configs() -> list:
    """64 paramanager configs: the budget grid of a reward sweep (4 C_tar x 4 L_tar x 4 cost weights)."""
    base = PRESETS["paramanager"]
    return [base.replace(c_tar=c, l_tar=lt, w_cost=w)
            for c in (4, 8, 12, 16) for lt in (4096, 8192, 12288, 16384) for w in (0.0, 0.25, 0.5, 1.0)]


def mixed_configs() -> list:
    return [PRESETS[name] for name in ("paramanager", "toolorchestra", "xrouter", "router_r1")] * 16


@pytest.mark.parametrize("impl", ["core", "core_mixed_formulas", "write_output", "numpy"])
def test_reward_grid(benchmark, big_batch, impl):
    benchmark.group = "reward grid 64 configs x N=1e6"
    if impl == "write_output":  # the bound (issue 22: core <= 2x): writing the 64 x N output once
        out = np.empty((64, len(big_batch)))
        benchmark(out.fill, 1.5)
    elif impl == "core":
        out = np.empty((64, len(big_batch)))
        benchmark(compute_rewards_grid, big_batch, sweep_configs(), out=out)
    elif impl == "core_mixed_formulas":
        out = np.empty((64, len(big_batch)))
        benchmark(compute_rewards_grid, big_batch, mixed_configs(), out=out)
    else:
        configs = sweep_configs()
        benchmark.pedantic(lambda: np.stack([reference.reward_components(big_batch, c)["total"] for c in configs]),
                           rounds=2, iterations=1)
