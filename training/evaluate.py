"""Evaluation of a manager policy: mean@k accuracy and what the accuracy cost.

Each of ``tasks`` evaluation tasks is played ``k`` times with sampling at temperature 1 (ParaManager
reports mean@8 at temperature 1.0), so accuracy is the mean over tasks of mean@k. The evaluation tasks
come from a fixed seed, not the training seed, so every grid point and every seed is measured on the
same tasks. Alongside accuracy per suite and per benchmark: tokens, cost units, USD, critical-path
latency, calls per round, distinct tools per trajectory, the tool and model distributions, the
format-failure rate (trajectories with a FORMAT_ERR / INVALID_TOOL round) and the mean reward.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from parasim.batch import TrajectoryBatch
from parasim.config_fields import opt
from parasim.protocol.schema import NUM_TOOLS, Tool
from parasim.training.policy import ManagerPolicy
from parasim.training.rollout import Rollout, collect, derive_seed, make_envs


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol."""

    tasks: int = opt(512, lo=1, hi=1_000_000, help="evaluation tasks per suite")
    k: int = opt(8, lo=1, hi=256, help="samples per task (mean@k)")
    seed: int = opt(2026, lo=0, hi=2**31 - 1, help="seed of the evaluation tasks (shared by all grid points)")
    suites: str = opt("", help="comma-separated extra task suites to report (the training suite always)")
    greedy: bool = opt(False, help="argmax actions instead of sampling (then k samples differ only by tools)")


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


def evaluate(policy: ManagerPolicy, cfg: Any, seed: int) -> dict[str, Any]:
    """Evaluate on the training suite (and ``eval.suites``); ``seed`` drives action sampling only."""
    e: EvalConfig = cfg.eval
    suites = [cfg.env.suite] + [s.strip() for s in e.suites.split(",") if s.strip() and s.strip() != cfg.env.suite]
    out: dict[str, Any] = {}
    for i, suite in enumerate(suites):
        envs = make_envs(replace(cfg.env, suite=suite), e.tasks * e.k, cfg.reward)
        gen = torch.Generator().manual_seed(derive_seed(seed, "eval", i))
        ro = collect(policy, envs, seed=derive_seed(e.seed, "eval", suite), group_size=e.k, generator=gen,
                     greedy=e.greedy)
        envs.close()
        metrics = summarize(ro.batch, ro, ro.model_names, cfg.reward)
        if i == 0:
            out.update(metrics)
            out["acc_by_benchmark"] = ro.accuracy_by_benchmark()
            out["trajectories"] = ro.batch
        out.setdefault("acc_by_suite", {})[suite] = metrics["accuracy"]
    out["tool_names"] = [Tool(t).wire_name for t in range(NUM_TOOLS)]
    return out
