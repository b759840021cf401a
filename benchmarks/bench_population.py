"""Population training: a 48-run sweep against one run of the same recipe, and env-steps/s with the policy in the
loop for a population against one policy.

Each is measured against its baseline in the same run:
- ``parasim sweep`` with the default recipe and backend (each of the workers, one per CPU, trains its share of the
  points as one population) over 16 C_tar values x 3 seeds vs the same command over one point and one seed: the
  ratio is what the other 47 runs cost on top of one. Both are the whole command in a fresh process (imports,
  workers, numba cache loads, store and report included), as a user runs them;
- one collection of a 48-member population (48 x 1,024 lanes in one vector env, every member sampling its own
  lanes) vs the same collection by one policy on its 1,024 lanes, today's per-process loop: env-steps/s of each.

Run: ``pytest benchmarks/bench_population.py --benchmark-only`` (figures in ``extra_info``), or
``python benchmarks/bench_population.py [REPEATS]`` for a table (the sweep pair REPEATS times, default 1).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from training.config import make_config
from training.policy import PolicyStack
from training.population import build_policy
from training.rollout import (
    Block,
    collect_blocks,
    derive_seed,
    env_spec,
    make_envs,
    model_descriptors,
    stack_actor,
)

torch.set_num_threads(1)
GRID = "c_tar=" + ",".join(str(c) for c in range(1, 17))
SEEDS = 3
MEMBERS = 48
ROOT = Path(__file__).resolve().parents[1]


def _sweep_command_seconds(grid: str, seeds: int, out: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds (the command and its workers) of ``parasim sweep --grid GRID --seeds SEEDS``
    (default recipe and backend) in a fresh process. The CPU time tells how much of a slow wall-clock was other
    jobs on the same cores."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "parasim", "sweep", "--grid", grid, "--seeds", str(seeds), "--out", out,
           "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def sweep_seconds() -> dict[str, float]:
    """Wall-clock and CPU seconds of the 48-run sweep and of one run of the same recipe through the same command."""
    with tempfile.TemporaryDirectory() as out:
        one, one_cpu = _sweep_command_seconds("c_tar=8", 1, f"{out}/one")
        everything, everything_cpu = _sweep_command_seconds(GRID, SEEDS, f"{out}/all")
    return {"runs": 16 * SEEDS, "sweep_s": everything, "one_run_s": one, "ratio": everything / one,
            "sweep_cpu_s": everything_cpu, "one_run_cpu_s": one_cpu, "load_average": os.getloadavg()[0]}


def collect_rates(members: int = MEMBERS, steps: int = 2) -> tuple[float, float]:
    """Env-steps/s of a population's collection (``members`` untrained policies, 1,024 lanes each, one vector env)
    and of one policy's collection on its 1,024 lanes."""
    cfgs = [make_config("default", {"c_tar": str(1 + m % 16), "seed": str(m // 16)}) for m in range(members)]
    spec = env_spec(cfgs[0].env)
    lanes, group = cfgs[0].grpo.lanes, cfgs[0].grpo.group_size
    rates = []
    for size in (members, 1):
        stack = PolicyStack([build_policy(c, spec) for c in cfgs[:size]])
        envs = make_envs(cfgs[0].env, lanes * size, cfgs[0].reward)
        total, elapsed = 0, 0.0
        for s in range(steps):
            seeds = [derive_seed(c.seed, "grpo", s) for c in cfgs[:size]]
            gens = [torch.Generator().manual_seed(x) for x in seeds]
            bounds = [lanes * m for m in range(size + 1)]
            actor = stack_actor(stack, range(size), bounds, gens, [False] * size, model_descriptors(envs))
            ro = collect_blocks(actor, envs, [Block(lanes, x, group) for x in seeds])
            total, elapsed = total + ro.env_steps, elapsed + ro.collect_s
        envs.close()
        rates.append(total / elapsed)
    return rates[0], rates[1]


def test_sweep_of_48_runs_against_one_run(benchmark):
    figures = benchmark.pedantic(sweep_seconds, rounds=1, iterations=1)
    benchmark.extra_info.update(figures)


def test_population_env_steps_per_s_against_one_policy(benchmark):
    population, single = benchmark.pedantic(collect_rates, rounds=1, iterations=1)
    benchmark.extra_info.update(population_steps_per_s=population, single_steps_per_s=single,
                                ratio=population / single, members=MEMBERS)


if __name__ == "__main__":
    population, single = collect_rates()
    print(f"env steps/s with the policy in the loop: population of {MEMBERS} {population:,.0f}   one policy "
          f"{single:,.0f}   ratio {population / single:.2f}")
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
        f = sweep_seconds()
        print(f"{f['runs']}-run sweep (default recipe and backend, {os.cpu_count()} CPUs): {f['sweep_s']:.1f} s "
              f"({f['sweep_cpu_s']:.0f} CPU s)   one run: {f['one_run_s']:.1f} s ({f['one_run_cpu_s']:.0f} CPU s)   "
              f"ratio {f['ratio']:.2f}   (load average {f['load_average']:.2f})", flush=True)
