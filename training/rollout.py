"""Rollout collection from the ParaOrch vector env: one episode per lane, lanes grouped by task.

Shared by GRPO (groups of G lanes on one task), evaluation (k lanes per task for mean@k) and the
expert. A ``Rollout`` keeps every manager decision of every lane flattened (features, mask, action,
log-prob, lane), plus the finished episodes as a core ``TrajectoryBatch`` whose ``group_id`` is the
task group, so rewards and advantages come from one core call each.

A population collects in one vector env: its lanes are cut into ``Block``s, one per member, each reset with the
seeds and task options the member's own env would get alone (``block_reset``). ParaOrch-v0's lanes are
independent (lane ``i`` seeded ``s`` replays the single env seeded ``s``), so a member's block plays, decision for
decision, the episodes it plays alone; ``Rollout.member`` gives them back as the member's own rollout.
"""
from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import parasim  # noqa: F401  (registers ParaOrch-v0)
from parasim.config.env_options import POOL_TEMPERATURE
from parasim.protocol.schema import AGENT_TOOLS
from parasim.scoring.batch import TrajectoryBatch
from parasim.scoring.rewards import PRESETS, RewardConfig, compute_rewards
from training.policy import ManagerPolicy, PolicyStack, obs_to_tensor, relevance, trunk_keys


def derive_seed(seed: int, *tags: Any) -> int:
    """A 31-bit seed derived from ``seed`` and tags: independent streams per purpose and step."""
    keys = [zlib.crc32(str(t).encode()) for t in tags]
    return int(np.random.SeedSequence([int(seed), *keys]).generate_state(1)[0] & 0x7FFFFFFF)


_ENV_THREADS = {"n": 1}  # numba threads per vector env this process makes (set_env_threads)


def threads_per_worker(workers: int) -> int:
    """numba threads for each of ``workers`` processes sharing this machine, so that the cores are used once:
    ``cores // workers``, at least 1, at most numba's thread count (the env's results do not depend on it)."""
    import numba

    return max(1, min(numba.config.NUMBA_NUM_THREADS, (os.cpu_count() or 1) // max(1, workers)))


def set_env_threads(n: int) -> None:
    """Step the vector envs this process makes from now on (``make_envs``) on ``n`` threads: a sweep's worker sets
    ``threads_per_worker(workers)``, a trainer alone ``threads_per_worker(1)``."""
    _ENV_THREADS["n"] = int(n)


def make_envs(env_cfg: Any, num_envs: int, reward: RewardConfig) -> gym.vector.VectorEnv:
    """The batched env for an ``EnvConfig`` (every field is an env keyword; ``token_budget`` 0 = none) that scores
    its episodes under ``reward`` in ``info["reward_components"]``. Trainers score episodes themselves
    (``Rollout.rewards``), since the lanes of a population's env belong to members with rewards of their own.
    ``pool_set`` is not an env keyword: the env gets the pool with those overrides applied (``env_pool``)."""
    return gym.make_vec("ParaOrch-v0", num_envs=num_envs, vectorization_mode="vector_entry_point", reward=reward,
                        num_threads=_ENV_THREADS["n"], **env_kwargs(env_cfg))


def env_kwargs(env_cfg: Any) -> dict[str, Any]:
    """An ``EnvConfig`` as ParaOrch-v0's keywords, for the simulated vector env (``make_envs``) and for real-tools
    envs (``training.real_eval``) alike."""
    from parasim.pools.overrides import env_pool

    kwargs = asdict(env_cfg)
    kwargs["token_budget"] = kwargs["token_budget"] or None
    kwargs["pool"] = env_pool(kwargs["pool"], kwargs.pop("pool_set", ""))
    temperature = kwargs.pop("temperature", POOL_TEMPERATURE)
    if temperature != POOL_TEMPERATURE:
        kwargs["harness"] = {"temperature": temperature}
    return kwargs


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
    keys = trunk_keys(obs)
    dim = obs_to_tensor(obs, keys).shape[1]
    nvec = [int(n) for n in np.asarray(envs.single_action_space.nvec)]
    names = list(envs.unwrapped.model_names)
    envs.close()
    return EnvSpec(keys, dim, nvec, len(AGENT_TOOLS), names)


@dataclass(frozen=True)
class Block:
    """One member's lanes of a collection: how many, the seed of their resets, lanes per task group."""

    lanes: int
    seed: int
    group_size: int


def block_reset(envs: gym.vector.VectorEnv, block: Block) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reset of one block: lane seeds, task index and task seed per lane.

    Each block of ``group_size`` lanes plays one task with independent tool randomness: each group's task index is
    sampled from ``seed``'s stream with the suite's weights (the distribution the env would draw from itself)
    together with a task seed, and every lane of the group gets both as reset options (``task_index`` /
    ``task_seed``): the lanes then play the identical task (same row, hidden difficulty and preferred wrong
    answers), while each lane's tool calls draw from its own stream, seeded per lane.
    """
    n, g = block.lanes, block.group_size
    if n % g:
        raise ValueError(f"lanes={n} is not a multiple of group_size={g}")
    env = envs.unwrapped
    rng = np.random.default_rng(np.random.SeedSequence([block.seed, 0]))
    task_index = rng.choice(env.num_tasks, size=n // g, p=env.task_weights())
    task_seed = rng.integers(2**62, size=n // g)
    lane_seeds = np.random.SeedSequence([block.seed, 1]).generate_state(n, np.uint32)
    return lane_seeds.astype(np.int64), np.repeat(task_index, g), np.repeat(task_seed, g)


def reset_blocks(envs: gym.vector.VectorEnv, blocks: Sequence[Block]) -> dict[str, np.ndarray]:
    """Reset every lane, block after block, as each block's env would be reset alone (``block_reset``)."""
    if sum(b.lanes for b in blocks) != envs.num_envs:
        raise ValueError(f"blocks of {[b.lanes for b in blocks]} lanes do not fill num_envs={envs.num_envs}")
    parts = [block_reset(envs, b) for b in blocks]
    obs, _ = envs.reset(seed=np.concatenate([p[0] for p in parts]),
                        options={"task_index": np.concatenate([p[1] for p in parts]),
                                 "task_seed": np.concatenate([p[2] for p in parts])})
    return obs


@dataclass
class Rollout:
    """Every decision of one collection, flattened over (round, lane), and the finished episodes.

    ``bounds`` cut the lanes into the collection's blocks (``[0, N]`` for one); ``member(b)`` is block ``b``'s
    rollout, with its own lane numbers and task groups.
    """

    x: torch.Tensor  # float[M, F]
    mask: torch.Tensor  # bool[M, A]
    actions: torch.Tensor  # int64[M, D]
    logp: torch.Tensor  # float[M], log-prob under the collecting policy
    lane: torch.Tensor  # int64[M]
    batch: TrajectoryBatch  # N episodes, group_id = task group (numbered across blocks)
    benchmark: np.ndarray  # int[N]
    model_names: list[str]
    env_steps: int
    collect_s: float
    relevant: torch.Tensor  # bool[M, D]
    status_counts: np.ndarray  # float[N, S], calls per status at the end of each episode
    reward_components: dict[str, np.ndarray]  # float64[N] each: the env's score of each episode, "total" included
    bounds: np.ndarray  # int[B + 1], lanes [bounds[b], bounds[b + 1]) are block b's
    models: torch.Tensor  # float[M, F_m], the pool's model descriptor rows (the descriptor head's input)

    def decisions_of(self, lanes: torch.Tensor) -> torch.Tensor:
        """Indices of the decisions made in the given lanes."""
        return torch.nonzero(torch.isin(self.lane, lanes)).squeeze(1)

    def block_decisions(self) -> list[np.ndarray]:
        """Each block's decisions (indices, in collection order)."""
        block = np.searchsorted(self.bounds, self.lane.numpy(), side="right") - 1
        order = np.argsort(block, kind="stable")
        return np.split(order, np.searchsorted(block[order], np.arange(1, len(self.bounds) - 1)))

    def member(self, b: int, decisions: np.ndarray | None = None) -> Rollout:
        """Block ``b`` as a rollout of its own (lanes and groups numbered from 0), what the member collects alone;
        ``decisions`` are its indices from ``block_decisions`` when already at hand."""
        if len(self.bounds) == 2:
            return self
        lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
        sel = torch.from_numpy(self.block_decisions()[b] if decisions is None else decisions)
        return Rollout(self.x[sel], self.mask[sel], self.actions[sel], self.logp[sel], self.lane[sel] - lo,
                       self.member_batch(b), self.benchmark[lo:hi], self.model_names, self.env_steps, self.collect_s,
                       self.relevant[sel], self.status_counts[lo:hi],
                       {k: v[lo:hi] for k, v in self.reward_components.items()}, np.array([0, hi - lo]), self.models)

    def member_batch(self, b: int) -> TrajectoryBatch:
        """Block ``b``'s episodes with its task groups numbered from 0 (``member(b).batch`` without the decisions)."""
        if len(self.bounds) == 2:
            return self.batch
        batch = self.batch.subset(slice(int(self.bounds[b]), int(self.bounds[b + 1])))
        return batch.replace(group_id=batch.group_id - batch.group_id[0]) if len(batch) else batch

    def agent_model_choices(self) -> np.ndarray:
        """Model index of every executed agent-tool call (for the model distribution)."""
        cols = range(2, self.actions.shape[1], 3)
        picks = [self.actions[:, c][self.relevant[:, c]] for c in cols]
        return torch.cat(picks).numpy() if picks else np.zeros(0, np.int64)

    def rewards(self, config: RewardConfig) -> np.ndarray:
        """The training reward of every episode (float64[N]) under ``config``: one core call over the rollout's
        groups, which also scores the formulas that rate a trajectory against its group
        (``config.batch_dependent``). For the others it is the score the env gave each episode as it finished
        under the same config (the core computes it row by row)."""
        return compute_rewards(self.batch, config).total

    def accuracy_by_benchmark(self) -> dict[str, float]:
        """Mean outcome per benchmark of the episodes' tasks."""
        from parasim.tasks.suites import BENCHMARKS

        out = {}
        for b in np.unique(self.benchmark):
            out[BENCHMARKS[int(b)].name] = float(self.batch.outcome[self.benchmark == b].mean())
        return out


# (live lanes, the observation of every lane, features and masks of the live ones) -> (actions int64[L, D],
# log-probs float[L])
Actor = Callable[[np.ndarray, dict[str, np.ndarray], torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def model_descriptors(envs: gym.Env | gym.vector.VectorEnv) -> torch.Tensor:
    """The env's pool's model descriptor rows (``parasim.pools.descriptors``) as the policy reads them,
    float[M, F_m]."""
    return torch.from_numpy(np.array(envs.unwrapped.descriptors.models))


def policy_actor(policy: ManagerPolicy, generator: torch.Generator | None, greedy: bool = False,
                 models: torch.Tensor | None = None) -> Actor:
    """Adapt a ``ManagerPolicy`` to ``collect``'s actor signature (``models``: the env's descriptor rows)."""
    return lambda live, obs, x, mask: policy.act(x, mask, generator, greedy, models)


def stack_actor(stack: PolicyStack, members: Sequence[int], bounds: np.ndarray,
                generators: Sequence[torch.Generator | None], greedy: Sequence[bool],
                models: torch.Tensor | None = None) -> Actor:
    """A ``PolicyStack`` acting in a collection whose block ``b`` (lanes ``bounds[b]:bounds[b + 1]``) is member
    ``members[b]``'s (ascending, so the live lanes come grouped by member), with that block's generator and
    greedy flag; ``models`` are the env's descriptor rows."""
    if list(members) != sorted(set(members)):
        raise ValueError(f"members={list(members)}: blocks must belong to distinct members in ascending order")
    gens: list[torch.Generator | None] = [None] * stack.size
    flags = [False] * stack.size
    for b, m in enumerate(members):
        gens[m], flags[m] = generators[b], bool(greedy[b])

    def act(live: np.ndarray, obs: dict[str, np.ndarray], x: torch.Tensor,
            mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = np.zeros(stack.size, np.int64)
        counts[list(members)] = np.diff(np.searchsorted(live, bounds))
        return stack.act(x, mask, counts.tolist(), gens, flags, models)

    return act


def collect(actor: Actor | ManagerPolicy, envs: gym.vector.VectorEnv, seed: int, group_size: int,
            generator: torch.Generator | None = None, greedy: bool = False) -> Rollout:
    """Play one episode in every lane (groups of ``group_size`` lanes share a task) and keep every decision."""
    if isinstance(actor, ManagerPolicy):
        actor = policy_actor(actor, generator, greedy, model_descriptors(envs))
    return collect_blocks(actor, envs, [Block(envs.num_envs, seed, group_size)])


def collect_blocks(actor: Actor, envs: gym.vector.VectorEnv, blocks: Sequence[Block]) -> Rollout:
    """Play one episode in every lane, each block reset as its own env would be (``reset_blocks``), and keep
    every decision; task groups are numbered across blocks."""
    t0 = time.perf_counter()
    n = envs.num_envs
    obs = reset_blocks(envs, blocks)
    benchmark = np.zeros(n, np.int64)
    keys = trunk_keys(obs)
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
        a, lp = actor(live, obs, x, mask)
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
    groups = np.cumsum([0] + [b.lanes // b.group_size for b in blocks])
    traj["group_id"] = np.concatenate([groups[i] + np.arange(b.lanes, dtype=np.int64) // b.group_size
                                       for i, b in enumerate(blocks)])
    actions_all = torch.cat(acts)
    relevant = relevance(actions_all, [int(v) for v in envs.single_action_space.nvec], len(AGENT_TOOLS))
    bounds = np.cumsum([0] + [b.lanes for b in blocks])
    batch = TrajectoryBatch.from_arrays(num_tools=traj["tool_counts"].shape[1], **traj)  # the pool's tool spec
    return Rollout(torch.cat(xs), torch.cat(masks), actions_all, torch.cat(logps), torch.cat(lanes),
                   batch, benchmark, list(envs.unwrapped.model_names), env_steps,
                   time.perf_counter() - t0, relevant, status_counts, components, bounds, model_descriptors(envs))
