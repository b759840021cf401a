"""Evaluation of a manager policy: mean@k accuracy and what the accuracy cost.

Each of ``tasks`` evaluation tasks is played ``k`` times with sampling at temperature 1 (ParaManager
reports mean@8 at temperature 1.0), so accuracy is the mean over tasks of mean@k. The evaluation tasks
come from a fixed seed, not the training seed, so every grid point and every seed is measured on the
same tasks. Alongside accuracy per suite and per benchmark: tokens, cost units, USD, critical-path
latency, calls per round, distinct tools per trajectory, the tool and model distributions, the
format-failure rate (trajectories with a FORMAT_ERR / INVALID_TOOL round) and the mean reward.

Pool shift: ``eval.pool`` (a shipped pool name or a pool JSON path) evaluates the trained policy on that pool too,
on the same suites with the same evaluation seeds and tasks, reported beside the training pool's under
``eval_pool``. Only the descriptor head (``policy.model_head="descriptor"``) can act on a pool it was not trained on,
and only with the training pool's tool spec (its per-tool heads): ``check_eval_pool`` refuses anything else.

A population evaluates in one vector env per (pool, suite) (``evaluate_stack``): a block of ``tasks * k`` lanes per
member, each reset with the evaluation seeds the member uses alone, so every member is measured on its own tasks and
draws exactly as alone; at most ``MAX_EVAL_LANES`` lanes share an env (members beyond wait for the next one).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from parasim.config.fields import ConfigError, opt
from parasim.scoring.batch import TrajectoryBatch
from training.policy import ManagerPolicy, PolicyStack
from training.rollout import (
    Actor,
    Block,
    Rollout,
    collect_blocks,
    derive_seed,
    make_envs,
    model_descriptors,
    stack_actor,
)

MAX_EVAL_LANES = 65_536  # lanes of one evaluation env: bounds the memory of a population's evaluation


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol."""

    tasks: int = opt(512, lo=1, hi=1_000_000, help="evaluation tasks per suite")
    k: int = opt(8, lo=1, hi=256, help="samples per task (mean@k)")
    seed: int = opt(2026, lo=0, hi=2**31 - 1, help="seed of the evaluation tasks (shared by all grid points)")
    suites: str = opt("", help="comma-separated extra task suites to report (the training suite always)")
    greedy: bool = opt(False, help="argmax actions instead of sampling (then k samples differ only by tools)")
    pool: str = opt("", help="also evaluate on this pool (shipped name or pool JSON; needs policy.model_head="
                             "descriptor and the training pool's tool spec; empty: the training pool only)")


def check_eval_pool(cfg: Any) -> None:
    """``eval.pool`` of a ``TrainConfig``: empty, or a pool that exists, has the training pool's tool spec and is
    evaluated by a policy with the descriptor head; raises ``ConfigError`` naming the fields."""
    name = cfg.eval.pool
    if not name:
        return
    from parasim.pools.pool import load_pool, pool_file, shipped_pools

    try:
        pool_file(name)
    except ValueError:
        raise ConfigError(f"eval.pool = {name!r}: must be a shipped pool ({', '.join(shipped_pools())}) or a pool JSON "
                          "file") from None
    try:
        other = load_pool(name)
    except ValueError as err:
        raise ConfigError(f"eval.pool = {name!r}: {err}") from None
    if cfg.policy.model_head != "descriptor":
        raise ConfigError(f"eval.pool = {name!r} needs policy.model_head = 'descriptor' (got "
                          f"{cfg.policy.model_head!r}): the index head has one logit per model of the training pool "
                          "and cannot act on another pool")
    try:
        own = load_pool(cfg.env.pool)
    except ValueError:
        return  # env.pool's own check names it
    mine, theirs = _tool_layout(own), _tool_layout(other)
    if mine != theirs:
        raise ConfigError(f"eval.pool = {name!r}: its tool spec {other.tools.name!r} (tools {list(theirs)}) differs "
                          f"from env.pool = {cfg.env.pool!r}'s {own.tools.name!r} (tools {list(mine)}); the policy "
                          "has one head per tool of the training pool's spec")


def _tool_layout(pool: Any) -> tuple[tuple[str, bool], ...]:
    """What the policy's per-tool heads depend on: each tool's name and kind, in the spec's order."""
    return tuple((t.name, t.is_agent) for t in pool.tools.tools)


def summarize(batch: TrajectoryBatch, ro: Rollout, model_names: list[str], reward: Any) -> dict[str, Any]:
    """Scalar metrics and distributions of one evaluation batch."""
    rounds = batch.rounds.sum()
    calls = batch.tool_counts.sum(0).astype(float)
    agent = ro.agent_model_choices()
    model_counts = np.bincount(agent, minlength=len(model_names)).astype(float)
    return {
        "accuracy": float(batch.outcome.mean()),
        "reward": float(ro.rewards(reward).mean()),
        "tokens": float(batch.tokens.mean()),
        "cost_units": float(batch.cost_units.mean()),
        "usd": float(batch.usd.mean()),
        "latency_s": float(batch.latency_s.mean()),
        "rounds": float(batch.rounds.mean()),
        "calls_per_round": float(batch.tool_calls.sum() / rounds) if rounds else 0.0,
        "distinct_tools": float(batch.distinct_tools.mean()),
        "format_failure_rate": float((batch.format_violations > 0).mean()),
        "no_final_rate": float((batch.ended_with_final == 0).mean()),
        "tool_dist": (calls / max(calls.sum(), 1.0)).tolist(),
        "model_dist": {m: float(c / max(model_counts.sum(), 1.0)) for m, c in zip(model_names, model_counts)},
    }


def evaluate(policy: ManagerPolicy, cfg: Any, seed: int, other_pool: bool = True) -> dict[str, Any]:
    """Evaluate on the training suite (and ``eval.suites``), and on ``eval.pool`` when set and ``other_pool``;
    ``seed`` drives action sampling only. A population of one (``evaluate_stack``)."""
    return evaluate_stack(PolicyStack([policy]), [cfg], [seed], other_pool)[0]


def evaluate_on(manager: ManagerPolicy | Callable[[Any], Actor], envs: Any, cfg: Any, seed: int) -> dict[str, Any]:
    """``evaluate``'s metrics of a manager on a vector env the caller made, its ``num_envs`` lanes ``cfg.eval.k``
    samples of each task: a real-tools ``envs.real_vector.RealVectorEnv`` measures on real tools what the same call
    on ``make_envs(cfg.env, lanes, cfg.reward)`` predicts in simulation. The tasks are drawn from ``cfg.eval.seed``
    and a policy's actions from ``seed`` as ``evaluate`` draws them, so two envs over one task list play the same
    tasks. ``manager``: a ``ManagerPolicy``, or a function of the env that returns a scripted actor (the expert)."""
    e = cfg.eval
    block = Block(envs.num_envs, derive_seed(e.seed, "eval", cfg.env.suite), e.k)
    if isinstance(manager, ManagerPolicy):
        gen = torch.Generator().manual_seed(derive_seed(seed, "eval", 0))
        actor = stack_actor(PolicyStack([manager]), [0], np.array([0, envs.num_envs]), [gen], [e.greedy],
                            model_descriptors(envs))
    else:
        actor = manager(envs)
    ro = collect_blocks(actor, envs, [block])
    return _measured(ro, cfg.reward)


def _measured(ro: Rollout, reward: Any) -> dict[str, Any]:
    """One member's evaluation rollout as ``summarize``'s metrics, its accuracy per benchmark and its episodes."""
    return {"metrics": summarize(ro.batch, ro, ro.model_names, reward), "acc_by_benchmark": ro.accuracy_by_benchmark(),
            "trajectories": ro.batch, "benchmark": ro.benchmark}


def _suites(cfg: Any) -> list[str]:
    """The training suite, then the extra ``eval.suites``."""
    return [cfg.env.suite] + [s.strip() for s in cfg.eval.suites.split(",") if s.strip() and s.strip() != cfg.env.suite]


def _targets(cfg: Any, other_pool: bool) -> list[tuple[str, str]]:
    """The (pool, suite) evaluations of a config: the training pool on each suite, then ``eval.pool`` on each."""
    pools = [cfg.env.pool] + ([cfg.eval.pool] if other_pool and cfg.eval.pool else [])
    return [(pool, suite) for pool in pools for suite in _suites(cfg)]


def evaluate_stack(stack: PolicyStack, cfgs: Sequence[Any], seeds: Sequence[int],
                   other_pool: bool = True) -> list[dict[str, Any]]:
    """``evaluate`` of every member ``m`` of ``stack`` under ``cfgs[m]`` with sampling seed ``seeds[m]``
    (``other_pool``: also on ``eval.pool`` where set; the warm start's evaluation leaves it out)."""
    targets = [_targets(c, other_pool) for c in cfgs]
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for pool, suite in dict.fromkeys(t for member in targets for t in member):
        todo = [(m, i) for m, member in enumerate(targets) for i, t in enumerate(member) if t == (pool, suite)]
        while todo:
            chunk, rest, lanes = [], [], 0
            for m, i in todo:  # each member once per env, in member order, up to MAX_EVAL_LANES lanes
                n = cfgs[m].eval.tasks * cfgs[m].eval.k
                fits = not chunk or (lanes + n <= MAX_EVAL_LANES and m not in {c[0] for c in chunk})
                (chunk if fits else rest).append((m, i))
                lanes += n if fits else 0
            todo = rest
            evals = [cfgs[m].eval for m, _ in chunk]
            blocks = [Block(e.tasks * e.k, derive_seed(e.seed, "eval", suite), e.k) for e in evals]
            gens = [torch.Generator().manual_seed(derive_seed(seeds[m], "eval", i)) for m, i in chunk]
            first = cfgs[chunk[0][0]]
            envs = make_envs(replace(first.env, pool=pool, suite=suite), lanes, first.reward)
            actor = stack_actor(stack, [m for m, _ in chunk], np.cumsum([0] + [b.lanes for b in blocks]), gens,
                                [e.greedy for e in evals], model_descriptors(envs))
            ro = collect_blocks(actor, envs, blocks)
            tool_names = list(envs.unwrapped.sim.pool.tools.names)  # the pool's spec: tool_dist's column order
            envs.close()
            for b, (decisions, (m, i)) in enumerate(zip(ro.block_decisions(), chunk)):
                found[m, i] = {**_measured(ro.member(b, decisions), cfgs[m].reward), "tool_names": tool_names}
    out = []
    for m, member in enumerate(targets):
        suites = len(_suites(cfgs[m]))
        own = {s: found[m, i]["metrics"]["accuracy"] for i, (_, s) in enumerate(member[:suites])}
        result: dict[str, Any] = {**found[m, 0]["metrics"], "acc_by_benchmark": found[m, 0]["acc_by_benchmark"],
                                  "trajectories": found[m, 0]["trajectories"], "acc_by_suite": own,
                                  "tool_names": found[m, 0]["tool_names"]}
        if len(member) > suites:  # eval.pool: its metrics on the training suite, its accuracy per suite
            result["eval_pool"] = {"pool": member[suites][0], **found[m, suites]["metrics"],
                                   "acc_by_benchmark": found[m, suites]["acc_by_benchmark"],
                                   "acc_by_suite": {s: found[m, suites + i]["metrics"]["accuracy"]
                                                    for i, (_, s) in enumerate(member[suites:])}}
        out.append(result)
    return out
