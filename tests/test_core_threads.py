"""The core's results do not depend on how many threads split the work (bitwise, except batch scaling)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = """
import sys
import numpy as np
from parasim.scoring.advantages import group_advantages
from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.masks import loss_mask_from_spans
from parasim.scoring.rewards import PRESETS, compute_rewards_grid

rng = np.random.default_rng(7)
n = 1 << 18
rewards = rng.random(n)
groups = np.repeat(np.arange(n // 8), 8)
adv, keep = group_advantages(rewards, groups, min_group_std=0.2)
batch = TrajectoryBatch.from_arrays(outcome=rng.integers(0, 2, 40_000).astype(float), usd=rng.random(40_000),
                                    latency_s=rng.random(40_000), tool_counts=rng.integers(0, 3, (40_000, 7)),
                                    group_id=np.repeat(np.arange(5_000), 8))
grid = compute_rewards_grid(batch, list(PRESETS.values()))
offsets = np.arange(0, 513 * 4 + 1, 4)
starts = np.tile([0, 100, 300, 600], 513)
mask, turns = loss_mask_from_spans(offsets, starts, starts + 150, np.tile([0, 1, 0, 1], 513), 700, with_turns=True)
np.savez(sys.argv[1], adv=adv, keep=keep, grid=grid, mask=mask, turns=turns)
"""


def _run(threads: int, out: Path) -> dict[str, np.ndarray]:
    # a small per-thread minimum so that the small masks here are split over threads too
    env = {**os.environ, "PARASIM_NUM_THREADS": str(threads), "PARASIM_THREAD_MIN_BYTES": "4096"}
    subprocess.run([sys.executable, "-c", SCRIPT, str(out)], check=True, env=env, timeout=120)
    with np.load(out) as data:
        return dict(data)


def test_one_thread_equals_four_threads(tmp_path):
    one, four = _run(1, tmp_path / "one.npz"), _run(4, tmp_path / "four.npz")
    for name in one:
        np.testing.assert_array_equal(one[name], four[name], err_msg=name)
