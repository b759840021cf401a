"""Masked SFT of the manager policy on the scripted expert's decisions (the warm start before GRPO).

The loss is the negative log-likelihood of the expert's action, under the env's action mask, over the
dimensions that action actually used (``ManagerPolicy.relevance``): the model of a basic-tool call
or the slots after ``stop`` are not supervised, exactly as they are not reinforced later.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from parasim.config_fields import opt
from parasim.training.policy import ManagerPolicy


@dataclass(frozen=True)
class SFTConfig:
    """SFT hyperparameters; ``epochs=0`` skips SFT (the ``rl_from_base`` ablation)."""

    epochs: int = opt(30, lo=0, hi=1000, help="passes over the expert decisions (0 = no SFT)")
    learning_rate: float = opt(3e-3, lo=0.0, hi=1.0, help="Adam learning rate")
    batch_size: int = opt(256, lo=1, hi=1_000_000, help="decisions per minibatch")


def train_sft(policy: ManagerPolicy, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor,
              cfg: SFTConfig, seed: int, on_epoch: Callable[[int], None] | None = None) -> list[float]:
    """Fit ``policy`` to (observation, mask, expert action) decisions; returns the mean loss per epoch.
    ``on_epoch(epochs_done)`` reports progress."""
    if cfg.epochs == 0 or len(x) == 0:
        return []
    gen = torch.Generator().manual_seed(seed)
    optim = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    losses = []
    for _ in range(cfg.epochs):
        perm = torch.randperm(len(x), generator=gen)
        total, count = 0.0, 0
        for idx in torch.split(perm, cfg.batch_size):
            logp, _ = policy.evaluate(x[idx], mask[idx], actions[idx])
            loss = -logp.mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
            total += loss.item() * len(idx)
            count += len(idx)
        losses.append(total / count)
        if on_epoch is not None:
            on_epoch(len(losses))
    return losses
