"""Rollout collection from the ParaOrch vector env: one episode per lane, lanes grouped by task.

Shared by GRPO (groups of G lanes on one task), evaluation (k lanes per task for mean@k) and the
expert. A ``Rollout`` keeps every manager decision of every lane flattened (features, mask, action,
log-prob, lane), plus the finished episodes as a core ``TrajectoryBatch`` whose ``group_id`` is the
task group, so rewards and advantages come from one core call each.
"""
from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import parasim  # noqa: F401  (registers ParaOrch-v0)
from parasim.batch import TrajectoryBatch
from parasim.protocol.schema import AGENT_TOOLS
from parasim.rewards import PRESETS, RewardConfig, compute_rewards
from parasim.training.policy import ManagerPolicy, obs_to_tensor, relevance


def derive_seed(seed: int, *tags: Any) -> int:
    """A 31-bit seed derived from ``seed`` and tags: independent streams per purpose and step."""
    keys = [zlib.crc32(str(t).encode()) for t in tags]
    return int(np.random.SeedSequence([int(seed), *keys]).generate_state(1)[0] & 0x7FFFFFFF)


def make_envs(env_cfg: Any, num_envs: int, reward: RewardConfig) -> gym.vector.VectorEnv:
    """The batched env for an ``EnvConfig`` (every field is an env keyword; ``token_budget`` 0 = none) that scores
    its episodes under the run's ``reward``, so ``info["reward_components"]`` is what the trainer optimizes."""
    kwargs = asdict(env_cfg)
    kwargs["token_budget"] = kwargs["token_budget"] or None
    return gym.make_vec("ParaOrch-v0", num_envs=num_envs, vectorization_mode="vector_entry_point", reward=reward,
                        **kwargs)


@dataclass(frozen=True)
class EnvSpec:
    """What a policy needs to know about the env: feature width, action dims, pool models."""

    obs_keys: tuple[str, ...]
    obs_dim: int
    nvec: list[int]
    num_agent_tools: int
    model_names: list[str]


def env_spec(env_cfg: Any) -> EnvSpec:
    """Read the observation and action layout from a one-lane env."""
    envs = make_envs(env_cfg, 1, PRESETS["paramanager"])  # the layout does not depend on the reward
    obs, _ = envs.reset(seed=0)
    keys = tuple(sorted(k for k in obs if k != "action_mask"))
    dim = obs_to_tensor(obs, keys).shape[1]
    nvec = [int(n) for n in np.asarray(envs.single_action_space.nvec)]
    names = list(envs.unwrapped.model_names)
    envs.close()
    return EnvSpec(keys, dim, nvec, len(AGENT_TOOLS), names)


@dataclass
class Rollout:
    """Every decision of one collection, flattened over (round, lane), and the finished episodes."""

    x: torch.Tensor  # float[M, F]
    mask: torch.Tensor  # bool[M, A]
    actions: torch.Tensor  # int64[M, D]
    logp: torch.Tensor  # float[M], log-prob under the collecting policy
    lane: torch.Tensor  # int64[M]
    batch: TrajectoryBatch  # N episodes, group_id = task group
    benchmark: np.ndarray  # int[N]
    model_names: list[str]
    env_steps: int
    collect_s: float
    relevant: torch.Tensor  # bool[M, D]
    status_counts: np.ndarray  # float[N, S], calls per status at the end of each episode
    reward_components: dict[str, np.ndarray]  # float64[N] each: the env's score of each episode, "total" included

    def decisions_of(self, lanes: torch.Tensor) -> torch.Tensor:
        """Indices of the decisions made in the given lanes."""
        return torch.nonzero(torch.isin(self.lane, lanes)).squeeze(1)

    def agent_model_choices(self) -> np.ndarray:
        """Model index of every executed agent-tool call (for the model distribution)."""
        cols = range(2, self.actions.shape[1], 3)
        picks = [self.actions[:, c][self.relevant[:, c]] for c in cols]
        return torch.cat(picks).numpy() if picks else np.zeros(0, np.int64)

    def rewards(self, config: RewardConfig) -> np.ndarray:
        """The training reward of every episode (float64[N]) under ``config``, the envs' reward: the score each
        env gave its episode as it finished, unless the formula scores a trajectory against the others
        (``config.batch_dependent``), when only the rollout's groups can score it (one core call)."""
        if config.batch_dependent:
            return compute_rewards(self.batch, config).total
        return self.reward_components["total"]

    def accuracy_by_benchmark(self) -> dict[str, float]:
        """Mean outcome per benchmark of the episodes' tasks."""
        from parasim.tasks import BENCHMARKS

        out = {}
        for b in np.unique(self.benchmark):
            out[BENCHMARKS[int(b)].name] = float(self.batch.outcome[self.benchmark == b].mean())
        return out


# (live lanes, their observations, features, masks) -> (actions int64[L, D], log-probs float[L])
Actor = Callable[[np.ndarray, dict[str, np.ndarray], torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def policy_actor(policy: ManagerPolicy, generator: torch.Generator | None, greedy: bool = False) -> Actor:
    """Adapt a ``ManagerPolicy`` to ``collect``'s actor signature."""
    return lambda live, obs, x, mask: policy.act(x, mask, generator, greedy)


def reset_groups(envs: gym.vector.VectorEnv, seed: int, group_size: int) -> dict[str, np.ndarray]:
    """Reset so that each block of ``group_size`` lanes plays one task, with independent tool randomness.

    Each group's task index is sampled from ``seed``'s stream with the suite's weights (the distribution the env
    would draw from itself) together with a task seed, and every lane of the group gets both as reset options
    (``task_index`` / ``task_seed``): the lanes then play the identical task (same row, hidden difficulty and
    preferred wrong answers), while each lane's tool calls draw from its own stream, seeded per lane.
    """
    n = envs.num_envs
    if n % group_size:
        raise ValueError(f"num_envs={n} is not a multiple of group_size={group_size}")
    env = envs.unwrapped
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    task_index = rng.choice(env.num_tasks, size=n // group_size, p=env.task_weights())
    task_seed = rng.integers(2**62, size=n // group_size)
    lane_seeds = np.random.SeedSequence([seed, 1]).generate_state(n, np.uint32)
    obs, _ = envs.reset(seed=[int(s) for s in lane_seeds],
                        options={"task_index": np.repeat(task_index, group_size),
                                 "task_seed": np.repeat(task_seed, group_size)})
    return obs


def collect(actor: Actor | ManagerPolicy, envs: gym.vector.VectorEnv, seed: int, group_size: int,
            generator: torch.Generator | None = None, greedy: bool = False) -> Rollout:
    """Play one episode in every lane (groups of ``group_size`` lanes share a task) and keep every decision."""
    if isinstance(actor, ManagerPolicy):
        actor = policy_actor(actor, generator, greedy)
    t0 = time.perf_counter()
    n = envs.num_envs
    obs = reset_groups(envs, seed, group_size)
    benchmark = np.zeros(n, np.int64)
    keys = tuple(sorted(k for k in obs if k != "action_mask"))
    done = np.zeros(n, bool)
    traj: dict[str, np.ndarray] = {}
    status_counts = np.zeros((n, obs["status_counts"].shape[1]))
    components: dict[str, np.ndarray] = {}
    xs, masks, acts, logps, lanes = [], [], [], [], []
    actions = np.zeros((n, len(envs.single_action_space.nvec)), np.int64)
    env_steps = 0
    while not done.all():
        live = np.flatnonzero(~done)
        x = obs_to_tensor({k: obs[k][live] for k in keys}, keys)
        mask = torch.from_numpy(obs["action_mask"][live].astype(bool))
        a, lp = actor(live, {k: v[live] for k, v in obs.items()}, x, mask)
        actions[live] = a.numpy()
        xs.append(x), masks.append(mask), acts.append(a), logps.append(lp), lanes.append(torch.from_numpy(live))
        obs, _, terminated, truncated, info = envs.step(actions)
        env_steps += len(live)
        fin = (terminated | truncated) & ~done
        if fin.any():
            t = info["trajectory"]
            for k, v in t.items():
                if not k.startswith("_"):
                    traj.setdefault(k, np.zeros((n, *v.shape[1:]), v.dtype))[fin] = v[fin]
            for k, v in info["reward_components"].items():
                if not k.startswith("_"):
                    components.setdefault(k, np.zeros(n))[fin] = v[fin]
            benchmark[fin] = info["benchmark"][fin]
            status_counts[fin] = obs["status_counts"][fin]  # NEXT_STEP autoreset: still the terminal obs
            done |= fin
    traj["group_id"] = np.arange(n, dtype=np.int64) // group_size
    actions_all = torch.cat(acts)
    relevant = relevance(actions_all, [int(v) for v in envs.single_action_space.nvec], len(AGENT_TOOLS))
    return Rollout(torch.cat(xs), torch.cat(masks), actions_all, torch.cat(logps), torch.cat(lanes),
                   TrajectoryBatch.from_arrays(**traj), benchmark, list(envs.unwrapped.model_names), env_steps,
                   time.perf_counter() - t0, relevant, status_counts, components)

