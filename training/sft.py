"""Masked SFT of the manager policy on the scripted expert's decisions (the warm start before GRPO).

The loss is the negative log-likelihood of the expert's action, under the env's action mask, over the
dimensions that action actually used (``ManagerPolicy.relevance``): the model of a basic-tool call
or the slots after ``stop`` are not supervised, exactly as they are not reinforced later.

A population trains all its members in one loop (``train_sft_stack``): each update takes the next minibatch of
every member that has one left, runs them in one pass of the ``PolicyStack`` and steps each member's own Adam, so
every member sees the minibatches, losses and updates it would see alone.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from parasim.config.fields import opt
from training.policy import ManagerPolicy, MemberAdam, PolicyStack

ADAM_EPS = 1e-8  # torch.optim.Adam's default, which SFT has always used


@dataclass(frozen=True)
class SFTConfig:
    """SFT hyperparameters; ``epochs=0`` skips SFT (the ``rl_from_base`` ablation)."""

    epochs: int = opt(30, lo=0, hi=1000, help="passes over the expert decisions (0 = no SFT)")
    learning_rate: float = opt(3e-3, lo=0.0, hi=1.0, help="Adam learning rate")
    batch_size: int = opt(256, lo=1, hi=1_000_000, help="decisions per minibatch")


@dataclass(frozen=True)
class Decisions:
    """(observation features, action mask, expert action) per decision, and the pool's model descriptor rows (the
    descriptor head's input): one member's SFT data."""

    x: torch.Tensor
    mask: torch.Tensor
    actions: torch.Tensor
    models: torch.Tensor | None = None


def train_sft(policy: ManagerPolicy, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor,
              cfg: SFTConfig, seed: int, on_epoch: Callable[[int], None] | None = None,
              models: torch.Tensor | None = None) -> list[float]:
    """Fit ``policy`` to (observation, mask, expert action) decisions (``models``: the pool's descriptor rows);
    returns the mean loss per epoch. ``on_epoch(epochs_done)`` reports progress. A population of one
    (``train_sft_stack``)."""
    stack = PolicyStack([policy])
    losses = train_sft_stack(stack, [Decisions(x, mask, actions, models)], [cfg], [seed], on_epoch)[0]
    policy.load_state_dict(stack.member_state(0))
    return losses


def _minibatches(n: int, cfg: SFTConfig, seed: int) -> Iterator[tuple[torch.Tensor, bool]]:
    """A member's minibatches over all epochs and whether each ends its epoch: a fresh permutation per epoch from
    the member's own generator, cut into ``batch_size`` decisions."""
    if cfg.epochs == 0 or n == 0:
        return
    gen = torch.Generator().manual_seed(seed)
    for _ in range(cfg.epochs):
        batches = torch.split(torch.randperm(n, generator=gen), cfg.batch_size)
        for j, idx in enumerate(batches):
            yield idx, j == len(batches) - 1


def train_sft_stack(stack: PolicyStack, data: Sequence[Decisions | None], cfgs: Sequence[SFTConfig],
                    seeds: Sequence[int], on_epoch: Callable[[int], None] | None = None) -> list[list[float]]:
    """SFT of every member ``m`` of ``stack`` on ``data[m]`` (None: no SFT) under ``cfgs[m]`` and ``seeds[m]``; the
    mean loss per epoch of each member. Members may share a ``Decisions`` object (it is gathered from once); they
    share one env config, so the descriptor rows of the first are every member's.
    ``on_epoch`` gets the epochs every training member has finished."""
    size = stack.size
    sets: dict[int, int] = {}
    parts: list[Decisions] = []
    offset: list[int] = []
    for d in data:
        if d is not None and id(d) not in sets:
            sets[id(d)] = sum(len(p.x) for p in parts)
            parts.append(d)
        offset.append(sets[id(d)] if d is not None else 0)
    batches = [_minibatches(len(d.x) if d is not None else 0, c, s) for d, c, s in zip(data, cfgs, seeds)]
    nxt = [next(b, None) for b in batches]
    training = [m for m in range(size) if nxt[m] is not None]
    if not training:
        return [[] for _ in range(size)]
    x, mask, actions = (torch.cat([getattr(p, f) for p in parts]) for f in ("x", "mask", "actions"))
    models = parts[0].models
    optim = MemberAdam(stack, [c.learning_rate for c in cfgs], ADAM_EPS)
    losses: list[list[float]] = [[] for _ in range(size)]
    totals = np.zeros((size, 2))  # loss sum and count of each member's current epoch
    reported = 0
    while any(item is not None for item in nxt):
        members = [m for m in range(size) if nxt[m] is not None]
        idx = torch.cat([nxt[m][0] + offset[m] for m in members])
        counts = np.zeros(size, np.int64)
        counts[members] = [len(nxt[m][0]) for m in members]
        logp, _ = stack.evaluate(x[idx], mask[idx], actions[idx], counts.tolist(), "none", models)
        loss = [-part.mean() for part in logp.split(counts[members].tolist())]
        optim.zero_grad()
        (loss[0] if len(loss) == 1 else torch.stack(loss).sum()).backward()
        optim.step(counts > 0)
        values = torch.stack(loss).tolist()
        for m, value in zip(members, values):
            totals[m] += (value * len(nxt[m][0]), len(nxt[m][0]))
            if nxt[m][1]:
                losses[m].append(float(totals[m, 0] / totals[m, 1]))
                totals[m] = 0.0
            nxt[m] = next(batches[m], None)
        done = min(len(losses[m]) for m in training)
        if on_epoch is not None and done > reported:
            reported = done
            on_epoch(done)
    return losses
