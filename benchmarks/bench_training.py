"""Training throughput: env-steps/s while the policy acts, GRPO updates/s, and a sweep's wall-clock per point.

Each is measured against a baseline in the same run:
- collection (the default 1,024 lanes, policy sampling every decision) vs the same vector env stepped with
  pre-sampled actions (the env alone): the ratio is what the torch policy costs per env step;
- a full GRPO step (collect, score, advantage, PPO update) vs a masked-SFT step over the same decisions
  (forward and backward only): the ratio is what rollouts, rewards and PPO bookkeeping add;
- a default grid point through the sweep's local backend (a spawned worker, results store) vs the same
  point run in-process: the ratio is the driver's overhead per point.

Run: ``pytest benchmarks/bench_training.py --benchmark-only`` (rates in ``extra_info``), or
``python benchmarks/bench_training.py`` for a table.
"""
from __future__ import annotations

import tempfile
import time

import numpy as np
import torch

from parasim.scoring.rewards import compute_rewards
from training import grpo, sweep
from training.config import make_config
from training.pipeline import build_policy
from training.rollout import collect, make_envs
from training.sft import SFTConfig, train_sft

torch.set_num_threads(1)
CFG = make_config()
LANES = CFG.grpo.tasks_per_step * CFG.grpo.group_size


def collect_rate(steps: int = 5) -> float:
    """Env-steps/s of ``collect`` with the (untrained) policy acting at the default lane count."""
    policy, envs = build_policy(CFG), make_envs(CFG.env, LANES, CFG.reward)
    gen = torch.Generator().manual_seed(0)
    total, elapsed = 0, 0.0
    for s in range(steps):
        ro = collect(policy, envs, seed=s, group_size=CFG.grpo.group_size, generator=gen)
        total, elapsed = total + ro.env_steps, elapsed + ro.collect_s
    return total / elapsed


def env_only_rate(steps: int = 40) -> float:
    """Env-steps/s of the same vector env with pre-sampled legal-ish actions (no policy)."""
    envs = make_envs(CFG.env, LANES, CFG.reward)
    nvec = envs.single_action_space.nvec
    rng = np.random.default_rng(0)
    acts = rng.integers(0, nvec, size=(steps, LANES, len(nvec)))
    acts[..., 0] = rng.random((steps, LANES)) < 0.3
    acts[..., 3::3] = 0
    envs.reset(seed=0)
    t0 = time.perf_counter()
    for a in acts:
        envs.step(a)
    return steps * LANES / (time.perf_counter() - t0)


def grpo_step_rate(steps: int = 3) -> tuple[float, float]:
    """GRPO steps/s (collect, score, advantage, update) and SFT steps/s over the same decisions."""
    policy, envs = build_policy(CFG), make_envs(CFG.env, LANES, CFG.reward)
    optim = torch.optim.Adam(policy.parameters(), lr=CFG.grpo.learning_rate)
    g, t_grpo, t_sft = CFG.grpo, 0.0, 0.0
    for s in range(steps):
        gen = torch.Generator().manual_seed(s)
        t0 = time.perf_counter()
        ro = collect(policy, envs, seed=s, group_size=g.group_size, generator=gen)
        rewards = compute_rewards(ro.batch, CFG.reward).total
        adv, keep = g.advantages(rewards, ro.batch.group_id, ro.batch.role_id)
        grpo.update(policy, None, optim, ro, adv, keep, g, gen)
        t_grpo += time.perf_counter() - t0
        t0 = time.perf_counter()
        sft_cfg = SFTConfig(epochs=g.ppo_epochs, batch_size=max(1, len(ro.x) // g.minibatches))
        train_sft(policy, ro.x, ro.mask, ro.actions, sft_cfg, seed=s, models=ro.models)
        t_sft += time.perf_counter() - t0
    return steps / t_grpo, steps / t_sft


def sweep_point_seconds() -> tuple[float, float]:
    """Wall-clock of one default grid point via the local backend, and in-process."""
    point = sweep.expand(sweep.parse_grid(["c_tar=8"]), [0])[0]
    t0 = time.perf_counter()
    sweep.run_point(point)
    inproc = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        sweep.run_sweep([point], out, "local", workers=1, progress=False)
        driver = time.perf_counter() - t0
    return driver, inproc


def test_collect_env_steps_per_s(benchmark):
    base = env_only_rate()
    rate = benchmark.pedantic(collect_rate, rounds=3, iterations=1)
    benchmark.extra_info.update(steps_per_s=rate, env_only_steps_per_s=base, policy_share=1 - rate / base)


def test_grpo_updates_per_s(benchmark):
    rates = benchmark.pedantic(grpo_step_rate, rounds=2, iterations=1)
    benchmark.extra_info.update(grpo_steps_per_s=rates[0], sft_steps_per_s=rates[1], ratio=rates[0] / rates[1])


def test_sweep_wall_clock_per_point(benchmark):
    driver, inproc = benchmark.pedantic(sweep_point_seconds, rounds=1, iterations=1)
    benchmark.extra_info.update(point_s=driver, in_process_s=inproc, overhead_s=driver - inproc)


if __name__ == "__main__":
    base, rate = env_only_rate(), collect_rate()
    print(f"env steps/s while training ({LANES} lanes): {rate:,.0f}   env alone: {base:,.0f}   ratio {rate / base:.2f}")
    g_rate, s_rate = grpo_step_rate()
    print(f"GRPO updates/s: {g_rate:.2f}   masked-SFT steps/s on the same decisions: {s_rate:.2f}")
    driver, inproc = sweep_point_seconds()
    print(f"sweep wall-clock per default point: {driver:.1f} s via the local backend, {inproc:.1f} s in-process")
