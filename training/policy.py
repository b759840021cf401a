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
from torch import nn

from parasim.config_fields import opt
from parasim.protocol.schema import NUM_STATUSES

MIN_LOGIT = -1e9


@dataclass(frozen=True)
class PolicyConfig:
    """Size of the manager policy network."""

    hidden: int = opt(128, lo=8, hi=4096, help="width of the shared trunk")
    layers: int = opt(2, lo=1, hi=8, help="hidden layers of the trunk")


CATEGORICAL = {"last_status": NUM_STATUSES + 1}  # per-slot status of the last round, NUM_STATUSES = no call


def obs_to_tensor(obs: Mapping[str, np.ndarray], keys: tuple[str, ...]) -> torch.Tensor:
    """Flatten the observation keys (batched, leading dim N) into float features.

    Counts, tokens and costs are squashed by ``sign(x) * log1p(|x|)`` (thousands and flags on one
    scale without running statistics, which would make a run depend on its history and break exact
    resume); categorical keys (``CATEGORICAL``) are one-hot encoded.
    """
    parts = []
    for k in keys:
        arr = np.asarray(obs[k])
        n = len(arr)
        if k in CATEGORICAL:
            parts.append(np.eye(CATEGORICAL[k], dtype=np.float32)[arr.astype(np.int64).reshape(n, -1)].reshape(n, -1))
        else:
            a = arr.astype(np.float32).reshape(n, -1)
            parts.append(np.sign(a) * np.log1p(np.abs(a)))
    return torch.from_numpy(np.concatenate(parts, axis=1))


def relevance(actions: torch.Tensor, nvec: list[int], num_agent_tools: int) -> torch.Tensor:
    """Which dimensions of each action changed what the env did (bool[N, D]).

    ``stop`` always; a slot's tool only when the round runs; its model only for an agent tool; its
    target for any call.
    """
    rel = torch.zeros_like(actions, dtype=torch.bool)
    rel[:, 0] = True
    go = actions[:, 0] == 0
    for s in range((len(nvec) - 1) // 3):
        tool = actions[:, 1 + 3 * s]
        used = go & (tool != nvec[1 + 3 * s] - 1)
        rel[:, 1 + 3 * s] = go
        rel[:, 2 + 3 * s] = used & (tool < num_agent_tools)
        rel[:, 3 + 3 * s] = used
    return rel


class ManagerPolicy(nn.Module):
    """MLP trunk, one categorical head per action dimension, model and target conditioned on the tool.

    Slots are factorized (each has its own heads) but within a slot the model and target logits get a
    learned per-tool offset, because the protocol couples them: only ``critical_reviewer`` may target
    the leading answer for verification, and the best model depends on the tool. A fully factorized
    head could not put all its probability on legal (tool, target) pairs.
    """

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
        tools, models, targets = self.nvec[1:4] if self.slots else (1, 1, 1)
        self.tool_model = nn.Parameter(torch.zeros(self.slots, tools, models))
        self.tool_target = nn.Parameter(torch.zeros(self.slots, tools, targets))
        self.splits = np.cumsum(self.nvec)[:-1].tolist()

    def _run(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor | None,
             generator: torch.Generator | None = None, greedy: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Masked logits per dimension, sampling each dimension first when ``actions`` is None."""
        base = torch.tensor_split(self.heads(self.trunk(x)), self.splits, dim=1)
        legal = torch.tensor_split(mask.bool(), self.splits, dim=1)
        cols: list[torch.Tensor] = []
        out = []
        for d, lg in enumerate(base):
            slot, part = divmod(d - 1, 3)
            if d > 0 and part > 0:
                tool = cols[1 + 3 * slot]
                lg = lg + (self.tool_model if part == 1 else self.tool_target)[slot][tool]
            lg = lg.masked_fill(~legal[d], MIN_LOGIT)
            out.append(lg)
            if actions is not None:
                cols.append(actions[:, d])
            elif greedy:
                cols.append(lg.argmax(1))
            else:
                cols.append(torch.multinomial(torch.softmax(lg, dim=1), 1, generator=generator).squeeze(1))
        return torch.stack(cols, dim=1), out

    def logits(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        """Masked logits per dimension, model and target conditioned on the tools in ``actions``."""
        return self._run(x, mask, actions)[1]

    def relevance(self, actions: torch.Tensor) -> torch.Tensor:
        """Which dimensions of each action changed what the env did (bool[N, D])."""
        return relevance(actions, self.nvec, self.num_agent_tools)

    def _score(self, logits: list[torch.Tensor], actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rel = self.relevance(actions).float()
        logp = torch.zeros(actions.shape[0])
        ent = torch.zeros(actions.shape[0])
        for d, lg in enumerate(logits):
            lsm = torch.log_softmax(lg, dim=1)
            logp = logp + lsm.gather(1, actions[:, d : d + 1]).squeeze(1) * rel[:, d]
            ent = ent - (lsm.exp() * lsm).sum(1) * rel[:, d]
        return logp, ent

    def evaluate(self, x: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability and entropy of ``actions`` (int[N, D]) over their relevant dimensions.

        The entropy is that of each relevant dimension's conditional distribution (given the sampled
        tool), summed: what the PPO entropy bonus and the logs use.
        """
        return self._score(self.logits(x, mask, actions), actions)

    @torch.no_grad()
    def act(self, x: torch.Tensor, mask: torch.Tensor, generator: torch.Generator,
            greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample (or take the argmax of) every dimension; returns actions int64[N, D] and their log-probs."""
        actions, logits = self._run(x, mask, None, generator, greedy)
        return actions, self._score(logits, actions)[0]
