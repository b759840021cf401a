"""The structured manager policy: an MLP over ParaOrch-v0's observation with one head per action dimension.

The action is MultiDiscrete ``[stop, (tool, model, target) x K]`` (see ``parasim.envs.paraorch``).
Each dimension gets its own categorical head (factorized over call slots and the stop action), and
the env's ``action_mask`` (the per-dimension masks, concatenated) sets illegal logits to -inf, so the
policy never samples a masked choice and its log-probabilities renormalize over legal ones.

Not every dimension matters for every action: after ``stop`` nothing else is executed, an empty slot
has no model or target, and basic tools (python, search) take no model. Those dimensions still get a
sample (the env ignores them) but are left out of the log-probability and entropy, so the gradient
only flows through choices that changed what the environment did.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from parasim.training.fields import opt
from torch import nn

from parasim.protocol.schema import Tool

EMPTY_TOOL = len(Tool) - 1  # the tool head's last choice (index NUM_TOOLS) is "no call in this slot"
MIN_LOGIT = -1e9


@dataclass(frozen=True)
class PolicyConfig:
    """Size of the manager policy network."""

    hidden: int = opt(128, lo=8, hi=4096, help="width of the shared trunk")
    layers: int = opt(2, lo=1, hi=8, help="hidden layers of the trunk")


def obs_to_tensor(obs: Mapping[str, np.ndarray], keys: tuple[str, ...]) -> torch.Tensor:
    """Flatten the observation keys (batched, leading dim N) into float features, log-squashed.

    ``sign(x) * log1p(|x|)`` keeps token counts and costs (thousands) and flags (0/1) on one scale
    without running statistics, which would make a run depend on its history and break exact resume.
    """
    parts = [np.asarray(obs[k], dtype=np.float32).reshape(len(obs[k]), -1) for k in keys]
    x = torch.from_numpy(np.concatenate(parts, axis=1))
    return torch.sign(x) * torch.log1p(x.abs())


class ManagerPolicy(nn.Module):
    """MLP trunk plus factorized categorical heads over the MultiDiscrete action dimensions."""

    def __init__(self, obs_dim: int, nvec: np.ndarray | list[int], obs_keys: tuple[str, ...],
                 num_agent_tools: int, cfg: PolicyConfig = PolicyConfig()) -> None:
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.obs_keys = tuple(obs_keys)
        self.num_agent_tools = num_agent_tools
        if (len(self.nvec) - 1) % 3:
            raise ValueError(f"action nvec {self.nvec}: expected [stop] + 3 dims per call slot")
        self.slots = (len(self.nvec) - 1) // 3
        layers: list[nn.Module] = []
        width = obs_dim
        for _ in range(cfg.layers):
            layers += [nn.Linear(width, cfg.hidden), nn.Tanh()]
            width = cfg.hidden
        self.trunk = nn.Sequential(*layers)
        self.heads = nn.Linear(width, sum(self.nvec))
        self.splits = np.cumsum(self.nvec)[:-1].tolist()

    def logits(self, x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
        """Masked logits per dimension; ``mask`` is the concatenated per-dimension action mask."""
        flat = self.heads(self.trunk(x)).masked_fill(~mask.bool(), MIN_LOGIT)
        return list(torch.tensor_split(flat, self.splits, dim=1))

    def relevance(self, actions: torch.Tensor) -> torch.Tensor:
        """Which dimensions of each action changed what the env did (bool[N, D])."""
        rel = torch.zeros_like(actions, dtype=torch.bool)
        rel[:, 0] = True
        go = actions[:, 0] == 0
        for s in range(self.slots):
            tool = actions[:, 1 + 3 * s]
            used = go & (tool != self.nvec[1 + 3 * s] - 1)
            rel[:, 1 + 3 * s] = go
            rel[:, 2 + 3 * s] = used & (tool < self.num_agent_tools)
            rel[:, 3 + 3 * s] = used
        return rel

    def evaluate(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability and entropy of ``actions`` (int[N, D]) over their relevant dimensions."""
        logits = self.logits(x, mask)
        rel = self.relevance(actions).float()
        logp = torch.zeros(x.shape[0])
        ent = torch.zeros(x.shape[0])
        for d, lg in enumerate(logits):
            lsm = torch.log_softmax(lg, dim=1)
            logp = logp + lsm.gather(1, actions[:, d : d + 1]).squeeze(1) * rel[:, d]
            ent = ent - (lsm.exp() * lsm).sum(1) * rel[:, d]
        return logp, ent

    @torch.no_grad()
    def act(self, x: torch.Tensor, mask: torch.Tensor, generator: torch.Generator,
            greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample (or take the argmax of) every dimension; returns actions int64[N, D] and their log-probs."""
        logits = self.logits(x, mask)
        cols = []
        for lg in logits:
            if greedy:
                cols.append(lg.argmax(1))
            else:
                probs = torch.softmax(lg, dim=1)
                cols.append(torch.multinomial(probs, 1, generator=generator).squeeze(1))
        actions = torch.stack(cols, dim=1)
        logp, _ = self.evaluate(x, mask, actions)
        return actions, logp
