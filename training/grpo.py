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

A population (``train_stack``) runs its members' steps together: one collection in one vector env (a block of
lanes per member, reset with the member's own seeds), each member's episodes scored under its own reward and
advantaged within its own groups, and PPO updates in which every member with a minibatch left contributes it to
one pass of the ``PolicyStack``; the loss, gradient clipping, Adam step and statistics stay per member. Members
may differ in any GRPO setting, in their step count and in where they resume.
"""
from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parasim.config.fields import opt
from parasim.config.writes import atomic_write_bytes
from parasim.scoring.advantages import AdvantageConfig
from parasim.scoring.rewards import compute_rewards
from training.policy import ADAM_BETAS, ManagerPolicy, MemberAdam, PolicyStack, clip_member_grads
from training.rollout import (
    Block,
    Rollout,
    collect_blocks,
    derive_seed,
    make_envs,
    model_descriptors,
    stack_actor,
)

ADAM_EPS = 1e-5
STATS = ("loss", "entropy", "kl", "clip_frac", "approx_kl")


@dataclass(frozen=True)
class GRPOConfig(AdvantageConfig):
    """GRPO hyperparameters (defaults: 1024 lanes x 60 steps, about 20 s per sweep point on one core); the advantage
    settings are ``AdvantageConfig``'s, shared with the LLM trainer."""

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
    checkpoint_every: int = opt(10, lo=1, hi=100_000, help="checkpoint every K steps (with a checkpoint dir)")

    @property
    def lanes(self) -> int:
        """Vector-env lanes per step."""
        return self.tasks_per_step * self.group_size


def _schedule(ro: Rollout, block: int, decisions: np.ndarray, keep: np.ndarray, g: GRPOConfig,
              gen: torch.Generator) -> list[np.ndarray]:
    """A block's minibatches over all PPO epochs, as indices of its decisions (in collection order): the kept
    trajectories in a fresh order per epoch from the member's generator, cut into ``g.minibatches``; empty ones
    are skipped (no update)."""
    lanes = torch.from_numpy(np.flatnonzero(keep))
    n_mb = min(g.minibatches, max(1, len(lanes)))
    local = ro.lane.numpy()[decisions] - ro.bounds[block]
    out = []
    for _ in range(g.ppo_epochs):
        perm = lanes[torch.randperm(len(lanes), generator=gen)]
        for mb_lanes in torch.tensor_split(perm, n_mb):
            chosen = np.zeros(len(keep), bool)
            chosen[mb_lanes.numpy()] = True
            sel = decisions[chosen[local]]
            if len(sel):
                out.append(sel)
    return out


def _per_row(sizes: Sequence[int], *settings: Sequence[float]) -> list[float] | list[torch.Tensor]:
    """Settings given per member, as scalars when the members agree on all of them (what a member alone uses),
    else as float32 values per row (the scalar a member alone uses is cast to float32 all the same)."""
    if all(len(set(values)) == 1 for values in settings):
        return [values[0] for values in settings]
    counts = torch.as_tensor(list(sizes))
    return [torch.repeat_interleave(torch.tensor(values, dtype=torch.float32), counts) for values in settings]


def update_stack(stack: PolicyStack, ref: PolicyStack | None, optim: MemberAdam, ro: Rollout,
                 decisions: Sequence[np.ndarray], members: Sequence[int], advs: Sequence[np.ndarray],
                 keeps: Sequence[np.ndarray], gs: Sequence[GRPOConfig],
                 gens: Sequence[torch.Generator]) -> list[dict[str, float]]:
    """PPO-clipped policy-gradient epochs of each block's member (``members[b]``, whose decisions are
    ``decisions[b]``) over the decisions of its kept trajectories.

    Update ``k`` runs the ``k``-th minibatch of every block that has one in one pass; the loss is each member's
    own (means over its rows), summed, so each member's gradient is the one it gets alone. Returns each block's
    mean statistics over its minibatches.
    """
    schedules = [_schedule(ro, b, decisions[b], keeps[b], gs[b], gens[b]) for b in range(len(members))]
    a_lane = torch.as_tensor(np.concatenate(advs), dtype=torch.float32)
    stats: list[list[list[float]]] = [[] for _ in members]
    for k in range(max(map(len, schedules), default=0)):
        blocks = [b for b in range(len(members)) if k < len(schedules[b])]
        sizes = [len(schedules[b][k]) for b in blocks]
        sel = torch.from_numpy(np.concatenate([schedules[b][k] for b in blocks]))
        x, mask, act, old_logp = ro.x[sel], ro.mask[sel], ro.actions[sel], ro.logp[sel]
        a = a_lane[ro.lane[sel]]
        counts = np.zeros(stack.size, np.int64)
        counts[[members[b] for b in blocks]] = sizes
        # the entropy's graph only where a member's loss weighs it; elsewhere its backward would add only zeros
        weighed = any(gs[b].entropy_coef > 0 for b in blocks)
        logp, ent = stack.evaluate(x, mask, act, counts.tolist(), "grad" if weighed else "value", ro.models)
        ratio = torch.exp(logp - old_logp)
        lo, hi = _per_row(sizes, [1 - gs[b].clip_eps for b in blocks], [1 + gs[b].clip_eps_high for b in blocks])
        pg = -torch.minimum(ratio * a, torch.clamp(ratio, lo, hi) * a)
        kl_rows = None
        if ref is not None and any(gs[b].kl_coef > 0 for b in blocks):
            with torch.no_grad():
                ref_logp, _ = ref.evaluate(x, mask, act, counts.tolist(), "none", ro.models)
            log_r = ref_logp - logp
            kl_rows = (torch.exp(log_r) - 1 - log_r).split(sizes)  # k3 estimator (Schulman), >= 0
        losses, kls = [], []
        for j, (b, pg_b, ent_b) in enumerate(zip(blocks, pg.split(sizes), ent.split(sizes))):
            loss = pg_b.mean() - gs[b].entropy_coef * ent_b.mean()
            kl = torch.zeros(())
            if kl_rows is not None and gs[b].kl_coef > 0:
                kl = kl_rows[j].mean()
                loss = loss + gs[b].kl_coef * kl
            losses.append(loss)
            kls.append(kl)
        optim.zero_grad()
        (losses[0] if len(losses) == 1 else torch.stack(losses).sum()).backward()
        max_norms = np.zeros(stack.size)
        max_norms[[members[b] for b in blocks]] = [gs[b].max_grad_norm for b in blocks]
        clip_member_grads(stack, max_norms)
        optim.step(counts > 0)
        with torch.no_grad():
            clipped = ((ratio - 1).abs() > _per_row(sizes, [gs[b].clip_eps for b in blocks])[0]).float()
            drift = old_logp - logp
            values = torch.stack([torch.stack([loss, e.mean(), kl, c.mean(), d.mean()]) for loss, e, kl, c, d in
                                  zip(losses, ent.split(sizes), kls, clipped.split(sizes), drift.split(sizes))])
        for b, row in zip(blocks, values.tolist()):
            stats[b].append(row)
    return [{k: float(np.mean([r[i] for r in rows])) if rows else 0.0 for i, k in enumerate(STATS)} for rows in stats]


def update(policy: ManagerPolicy, ref: ManagerPolicy | None, optim: torch.optim.Optimizer, ro: Rollout,
           adv: np.ndarray, keep: np.ndarray, g: GRPOConfig, gen: torch.Generator) -> dict[str, float]:
    """PPO-clipped policy-gradient epochs of one policy over a one-block rollout, stepping ``optim`` (its
    ``torch.optim.Adam``): a population of one (``update_stack``); the policy and the optimizer's state move in
    place."""
    group = optim.param_groups[0]
    if not isinstance(optim, torch.optim.Adam) or tuple(group["betas"]) != ADAM_BETAS or group["weight_decay"]:
        raise ValueError(f"optim: expected torch.optim.Adam with betas={ADAM_BETAS} and no weight decay, got {optim}")
    stack = PolicyStack([policy])
    adam = MemberAdam(stack, [group["lr"]], group["eps"])
    adam.load_member(0, optim.state_dict())
    stats = update_stack(stack, None if ref is None else PolicyStack([ref]), adam, ro, ro.block_decisions(), [0],
                         [adv], [keep], [g], [gen])[0]
    policy.load_state_dict(stack.member_state(0))
    optim.load_state_dict(adam.member_state(0))
    return stats


def save_checkpoint(path: Path, policy_state: dict[str, torch.Tensor], optim_state: dict, step: int,
                    history: list[dict[str, Any]]) -> None:
    """Weights, optimizer, next step and history in one file, replaced atomically."""
    buf = io.BytesIO()
    torch.save({"policy": policy_state, "optim": optim_state, "step": step, "history": history}, buf)
    atomic_write_bytes(path, buf.getvalue())


def train(cfg: Any, policy: ManagerPolicy, ckpt: Path | None = None,
          log: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run ``cfg.grpo.steps`` GRPO steps on ``policy`` in place (resuming from ``ckpt`` if it exists).

    ``cfg`` is a ``TrainConfig``; a frozen copy of ``policy`` as passed in (the SFT policy, also on
    resume) is the KL reference. Returns one row of statistics per step. A population of one (``train_stack``).
    """
    stack = PolicyStack([policy])
    history = train_stack([cfg], stack, [ckpt], [log])[0]
    policy.load_state_dict(stack.member_state(0))
    return history


def train_stack(cfgs: Sequence[Any], stack: PolicyStack, ckpts: Sequence[Path | None],
                logs: Sequence[Callable[[dict[str, Any]], None] | None],
                on_step: Callable[[int, int], None] | None = None) -> list[list[dict[str, Any]]]:
    """GRPO for every member ``m`` of ``stack`` under ``cfgs[m]`` (resuming from ``ckpts[m]`` if it exists), in
    place; each member's history. ``logs[m]`` gets member ``m``'s rows; ``on_step(done, total)`` follows the
    population's steps. The members' lanes share one vector env (remade when the set of members still training
    changes), whose own reward is unused: each member is scored under its own reward."""
    gs: list[GRPOConfig] = [c.grpo for c in cfgs]
    ref = copy.deepcopy(stack).requires_grad_(False) if any(g.kl_coef > 0 for g in gs) else None
    optim = MemberAdam(stack, [g.learning_rate for g in gs], ADAM_EPS)
    step = [0] * stack.size
    histories: list[list[dict[str, Any]]] = [[] for _ in gs]
    for m, ckpt in enumerate(ckpts):
        if ckpt is not None and ckpt.exists():
            state = torch.load(ckpt, weights_only=False)
            stack.load_member(m, state["policy"])
            optim.load_member(m, state["optim"])
            step[m], histories[m] = state["step"], state["history"]
    envs, env_members = None, None
    total = max((g.steps for g in gs), default=0)
    while members := [m for m in range(stack.size) if step[m] < gs[m].steps]:
        if members != env_members:
            if envs is not None:
                envs.close()
            envs = make_envs(cfgs[members[0]].env, sum(gs[m].lanes for m in members), cfgs[members[0]].reward)
            env_members = members
        t0 = time.perf_counter()
        seeds = [derive_seed(cfgs[m].seed, "grpo", step[m]) for m in members]
        gens = [torch.Generator().manual_seed(s) for s in seeds]
        blocks = [Block(gs[m].lanes, s, gs[m].group_size) for m, s in zip(members, seeds)]
        # 1. collect: group_size lanes per task, one block of lanes per member
        ro = collect_blocks(stack_actor(stack, members, np.cumsum([0] + [b.lanes for b in blocks]), gens,
                                        [False] * len(members), model_descriptors(envs)), envs, blocks)
        decisions = ro.block_decisions()
        parts = [ro.member_batch(b) for b in range(len(members))]
        # 2. the core's reward under each member's reward config
        rewards = [compute_rewards(batch, cfgs[m].reward).total for m, batch in zip(members, parts)]
        # 3. group-relative advantages within each member's groups
        adv_keep = [gs[m].advantages(r, batch.group_id, batch.role_id) for m, r, batch in zip(members, rewards, parts)]
        # 4. PPO-clipped updates
        stats = update_stack(stack, ref, optim, ro, decisions, members, [a for a, _ in adv_keep],
                             [k for _, k in adv_keep], [gs[m] for m in members], gens)
        # 5. log
        rate = ro.env_steps / max(ro.collect_s, 1e-9)
        for b, m in enumerate(members):
            batch, keep = parts[b], adv_keep[b][1]
            row = {"step": step[m], "reward": float(rewards[b].mean()), "accuracy": float(batch.outcome.mean()),
                   "tokens": float(batch.tokens.mean()), "cost_units": float(batch.cost_units.mean()),
                   "kept": float(keep.mean()), "decisions": len(decisions[b]),
                   "env_steps_per_s": rate, "step_s": time.perf_counter() - t0, **stats[b]}
            histories[m].append(row)
            step[m] += 1
            if logs[m] is not None:
                logs[m](row)
            if ckpts[m] is not None and (step[m] % gs[m].checkpoint_every == 0 or step[m] == gs[m].steps):
                save_checkpoint(ckpts[m], stack.member_state(m), optim.member_state(m), step[m], histories[m])
        if on_step is not None:
            on_step(max(step), total)
    if envs is not None:
        envs.close()
    return histories
