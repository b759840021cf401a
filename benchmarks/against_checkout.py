"""The vector env's speed against another checkout's (an older commit), old against new in the same run.

The machine a benchmark runs on is rarely quiet: on a shared 2-core VM the speed of one and the same build moves by
up to 2x from one minute to the next, so two runs timed one after the other compare the machine's moods as much as
the code. Here each checkout runs in its own warm worker process (its own ``parasim`` and compiled core, this
interpreter's packages), both step the same pre-sampled actions (``bench_policy``), and the driver alternates short
timed slices between them, in ABBA order, both pinned to one core (on a VM the two cores have different neighbours);
the median of the per-pair ratios is the figure, since a slow spell slows both halves of a pair alike.

    python benchmarks/against_checkout.py /path/to/old/checkout [--lanes 4096] [--pairs 300] [--mode env]

The other checkout needs its compiled core inside its ``parasim/`` (``pip install --no-build-isolation --no-deps
--target /tmp/core /path/to/old/checkout`` and copy ``parasim/_core*.so`` from there). ``--mode kernel`` times the
compiled step alone (``Simulator.step``), ``env`` the whole vector env step (rewards, infos, observation copies).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent

WORKER = r'''
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[7])})  # both workers on one core: one core's neighbours must not bias a side
sys.path.insert(0, sys.argv[4])  # this benchmark's directory, for bench_policy alone
if sys.argv[5] == "other":  # an editable install of this checkout redirects "parasim" to it: not for the other one
    sys.meta_path = [f for f in sys.meta_path if "parasim" not in type(f).__module__]
    sys.path.insert(0, sys.argv[6])
import numpy as np
from bench_policy import policy_actions
import gymnasium as gym
import parasim
from parasim.sim import Simulator

lanes, steps, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if mode == "env":
    env = gym.make_vec("ParaOrch-v0", num_envs=lanes, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    acts = policy_actions(env.unwrapped.sim.nvec, lanes, steps)
    step = env.step
else:
    sim = Simulator("paramanager", "paramanager", lanes)
    sim.seed(np.arange(lanes))
    sim.reset()
    acts = policy_actions(sim.nvec, lanes, steps)
    done = [np.zeros(lanes, np.uint8)]

    def step(a):
        done[0] = sim.step(a, done[0]).copy()  # the finished lanes reset on their next step (NEXT_STEP)
for a in acts:
    step(a)
print(parasim.__file__, flush=True)
for _ in sys.stdin:
    t0 = time.process_time()
    for a in acts:
        step(a)
    print(lanes * steps / (time.process_time() - t0), flush=True)
'''


class Comparison(NamedTuple):
    """Steps/s of each checkout over the slices, and the median within a pair of this checkout's / the other's."""

    this: list[float]
    other: list[float]
    ratio: float


def _worker(tree: Path, lanes: int, steps: int, mode: str, role: str) -> subprocess.Popen:
    """A warm worker on ``tree``'s parasim (``role`` "this": as ``import parasim`` finds it from ``tree``; "other":
    ``tree`` first on the path, past any editable install's redirect)."""
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(lanes), str(steps), mode, str(HERE), role, str(tree),
                             str(cpu)],
                            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    loaded = proc.stdout.readline().strip()
    if not loaded.startswith(str(tree)):
        proc.kill()
        raise RuntimeError(f"{tree}: its worker did not start on its own parasim (got {loaded or 'nothing'!r}); "
                           "is its compiled core built inside its parasim/? (see the module docstring)")
    return proc


def _slice(proc: subprocess.Popen) -> float:
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def compare(other: Path, lanes: int = 4096, steps: int = 20, pairs: int = 300, mode: str = "env") -> Comparison:
    """``pairs`` interleaved slices of ``steps`` steps at ``lanes`` lanes, this checkout against ``other`` (this
    one's parasim is whatever ``import parasim`` finds with this checkout first on the path, an editable install's
    core included)."""
    this_tree = HERE.parent
    if not list((other / "parasim").glob("_core*.so")):
        raise FileNotFoundError(f"{other}/parasim: no compiled core (_core*.so); build it as the module docstring "
                                "says")
    workers = [_worker(this_tree, lanes, steps, mode, "this"), _worker(other.resolve(), lanes, steps, mode, "other")]
    try:
        this, theirs = [], []
        for p in range(pairs):
            order = (0, 1) if p % 2 == 0 else (1, 0)
            got = {w: _slice(workers[w]) for w in order}
            this.append(got[0])
            theirs.append(got[1])
    finally:
        for w in workers:
            w.stdin.close()
            w.wait()
    return Comparison(this, theirs, statistics.median(t / o for t, o in zip(this, theirs, strict=True)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (its compiled core inside its parasim/)")
    parser.add_argument("--lanes", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="env steps per timed slice")
    parser.add_argument("--pairs", type=int, default=300, help="slice pairs (ABBA order)")
    parser.add_argument("--mode", choices=("env", "kernel"), default="env")
    args = parser.parse_args(argv)
    got = compare(args.other, args.lanes, args.steps, args.pairs, args.mode)
    print(f"{args.mode}, {args.lanes:,} lanes, {args.pairs} pairs of {args.steps}-step slices, CPU-time steps/s")
    for name, rates in (("this checkout", got.this), (str(args.other), got.other)):
        print(f"  {name:40s} best {max(rates):12,.0f}  median {statistics.median(rates):12,.0f}")
    best = max(got.this) / max(got.other)
    print(f"  this / other: median of the pairs' ratios x{got.ratio:.3f}, of the bests x{best:.3f}")


if __name__ == "__main__":
    main()
