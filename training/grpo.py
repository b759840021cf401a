"""GRPO for the structured manager, CleanRL style: collect, score, advantage, update, log.

Each step resets ``tasks_per_step * group_size`` vector-env lanes so that every group of
``group_size`` lanes plays the same task (ParaManager: 8 samples per question), scores the finished
trajectories with the core's reward (any preset or override), turns them into group-relative
advantages with the core's estimator (grpo, dr_grpo, rloo, ...; ToolOrchestra's low-std group filter),
and takes PPO-clipped steps (clip-higher: ``clip_eps_high`` on the upper side, DAPO) with an optional
k3 KL penalty to the frozen SFT policy. Every decision of a trajectory carries that trajectory's
advantage; the loss averages over all kept decisions of the batch (token-mean's analogue).

Exact resume: all randomness of step ``t`` (env resets, action sampling, minibatch order) is drawn
from seeds derived from ``(seed, t)``, so a checkpoint needs only the weights, the optimizer state,
the step and the history; a resumed run replays the same steps bit for bit.
"""
from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parasim.advantages import METHODS, SCALES, group_advantages
from parasim.batch import TrajectoryBatch
from parasim.config_fields import opt
from parasim.training.policy import ManagerPolicy
from parasim.training.rollout import Rollout, collect, derive_seed, make_envs
from parasim.training.store import atomic_write_bytes

ADV_STDS = ("unbiased", "biased")
ADV_SCALES = ("default", *SCALES)  # "default": the estimator's own scale (parasim.advantages.METHODS)


@dataclass(frozen=True)
class GRPOConfig:
    """GRPO hyperparameters (defaults: 1024 lanes x 60 steps, about 20 s per sweep point on one core)."""

    steps: int = opt(60, lo=0, hi=100_000, help="GRPO updates (0 = evaluate the SFT policy: sft_only)")
    tasks_per_step: int = opt(128, lo=1, hi=65_536, help="distinct tasks per step")
    group_size: int = opt(8, lo=2, hi=256, help="rollouts per task (G)")
    learning_rate: float = opt(3e-4, lo=0.0, hi=1.0, help="Adam learning rate")
    ppo_epochs: int = opt(2, lo=1, hi=64, help="passes over each batch")
    minibatches: int = opt(4, lo=1, hi=4096, help="minibatches per pass (split by trajectory)")
    clip_eps: float = opt(0.2, lo=0.0, hi=1.0, help="PPO clip, lower side")
    clip_eps_high: float = opt(0.28, lo=0.0, hi=10.0, help="PPO clip, upper side (DAPO clip-higher)")
    kl_coef: float = opt(0.0, lo=0.0, hi=100.0, help="k3 KL penalty to the SFT policy (0 = off)")
    entropy_coef: float = opt(0.0, lo=0.0, hi=10.0, help="entropy bonus (entropy is logged either way)")
    max_grad_norm: float = opt(1.0, lo=0.0, hi=1e6, help="gradient clipping (0 = off)")
    adv_method: str = opt("grpo", choices=tuple(METHODS), help="core advantage estimator (parasim.advantages)")
    adv_std: str = opt("unbiased", choices=ADV_STDS, help="std estimator of grpo")
    adv_scale: str = opt("default", choices=ADV_SCALES, help="advantage scaling (default: the method's own)")
    adv_clip: float = opt(0.0, lo=0.0, hi=1e6, help="clip advantages to +-adv_clip (0 = off)")
    min_group_std: float = opt(0.0, lo=0.0, hi=1e6, help="drop groups with reward std below (ToolOrchestra 0.1)")
    checkpoint_every: int = opt(10, lo=1, hi=100_000, help="checkpoint every K steps (with a checkpoint dir)")


def advantages(rewards: np.ndarray, batch: TrajectoryBatch, g: GRPOConfig) -> tuple[np.ndarray, np.ndarray]:
    """The core's group-relative advantages under the config's estimator and filters."""
    return group_advantages(
        rewards, batch.group_id, g.adv_method, std=g.adv_std, role_ids=batch.role_id,
        scale=None if g.adv_scale == "default" else g.adv_scale,
        clip=g.adv_clip or None, min_group_std=g.min_group_std or None,
    )


def update(policy: ManagerPolicy, ref: ManagerPolicy | None, optim: torch.optim.Optimizer, ro: Rollout,
           adv: np.ndarray, keep: np.ndarray, g: GRPOConfig, gen: torch.Generator) -> dict[str, float]:
    """PPO-clipped policy-gradient epochs over the decisions of kept trajectories."""
    lanes = torch.from_numpy(np.flatnonzero(keep))
    n_mb = min(g.minibatches, max(1, len(lanes)))
    stats: dict[str, list[float]] = {"loss": [], "entropy": [], "kl": [], "clip_frac": [], "approx_kl": []}
    a_lane = torch.as_tensor(adv, dtype=torch.float32)
    for _ in range(g.ppo_epochs):
        perm = lanes[torch.randperm(len(lanes), generator=gen)]
        for mb_lanes in torch.tensor_split(perm, n_mb):
            sel = ro.decisions_of(mb_lanes)
            if sel.numel() == 0:
                continue
            x, mask, act, old_logp = ro.x[sel], ro.mask[sel], ro.actions[sel], ro.logp[sel]
            a = a_lane[ro.lane[sel]]
            logp, ent = policy.evaluate(x, mask, act)
            ratio = torch.exp(logp - old_logp)
            pg = -torch.minimum(ratio * a, torch.clamp(ratio, 1 - g.clip_eps, 1 + g.clip_eps_high) * a)
            loss = pg.mean() - g.entropy_coef * ent.mean()
            kl = torch.zeros(())
            if ref is not None and g.kl_coef > 0:
                with torch.no_grad():
                    ref_logp, _ = ref.evaluate(x, mask, act)
                log_r = ref_logp - logp
                kl = (torch.exp(log_r) - 1 - log_r).mean()  # k3 estimator (Schulman), >= 0
                loss = loss + g.kl_coef * kl
            optim.zero_grad()
            loss.backward()
            if g.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(policy.parameters(), g.max_grad_norm)
            optim.step()
            with torch.no_grad():
                stats["loss"].append(loss.item())
                stats["entropy"].append(ent.mean().item())
                stats["kl"].append(kl.item())
                stats["clip_frac"].append(float(((ratio - 1).abs() > g.clip_eps).float().mean()))
                stats["approx_kl"].append(float((old_logp - logp).mean()))
    return {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}


def save_checkpoint(path: Path, policy: ManagerPolicy, optim: torch.optim.Optimizer, step: int,
                    history: list[dict[str, Any]]) -> None:
    """Weights, optimizer, next step and history in one file, replaced atomically."""
    buf = io.BytesIO()
    torch.save({"policy": policy.state_dict(), "optim": optim.state_dict(), "step": step, "history": history}, buf)
    atomic_write_bytes(path, buf.getvalue())


def train(cfg: Any, policy: ManagerPolicy, ckpt: Path | None = None,
          log: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run ``cfg.grpo.steps`` GRPO steps on ``policy`` in place (resuming from ``ckpt`` if it exists).

    ``cfg`` is a ``TrainConfig``; a frozen copy of ``policy`` as passed in (the SFT policy, also on
    resume) is the KL reference. Returns one row of statistics per step.
    """
    g: GRPOConfig = cfg.grpo
    ref = copy.deepcopy(policy).requires_grad_(False) if g.kl_coef > 0 else None
    optim = torch.optim.Adam(policy.parameters(), lr=g.learning_rate, eps=1e-5)
    start, history = 0, []
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        policy.load_state_dict(state["policy"])
        optim.load_state_dict(state["optim"])
        start, history = state["step"], state["history"]
    envs = make_envs(cfg.env, g.tasks_per_step * g.group_size, cfg.reward)
    for step in range(start, g.steps):
        t0 = time.perf_counter()
        seed = derive_seed(cfg.seed, "grpo", step)
        gen = torch.Generator().manual_seed(seed)
        # 1. collect: group_size lanes per task
        ro = collect(policy, envs, seed=seed, group_size=g.group_size, generator=gen)
        # 2. the core's reward under cfg.reward (scored by the envs as episodes ended)
        rewards = ro.rewards(cfg.reward)
        # 3. group-relative advantages
        adv, keep = advantages(rewards, ro.batch, g)
        # 4. PPO-clipped update
        stats = update(policy, ref, optim, ro, adv, keep, g, gen)
        # 5. log
        row = {"step": step, "reward": float(rewards.mean()), "accuracy": float(ro.batch.outcome.mean()),
               "tokens": float(ro.batch.tokens.mean()), "cost_units": float(ro.batch.cost_units.mean()),
               "kept": float(keep.mean()), "decisions": int(ro.lane.numel()),
               "env_steps_per_s": ro.env_steps / max(ro.collect_s, 1e-9), "step_s": time.perf_counter() - t0, **stats}
        history.append(row)
        if log is not None:
            log(row)
        if ckpt is not None and ((step + 1) % g.checkpoint_every == 0 or step + 1 == g.steps):
            save_checkpoint(ckpt, policy, optim, step + 1, history)
    envs.close()
    return history
