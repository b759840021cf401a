"""One grid point end to end: scripted expert -> masked SFT -> GRPO -> evaluation.

This is what ``parasim train`` runs and what every sweep worker runs. With a ``workdir`` the SFT
weights and the GRPO checkpoint live there, so a killed run resumes where it stopped and finishes
with the same weights as an uninterrupted one.
"""
from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parasim.training import expert, grpo, sft
from parasim.training.config import TrainConfig
from parasim.training.evaluate import evaluate
from parasim.training.loggers import ProgressCallback
from parasim.training.policy import ManagerPolicy
from parasim.training.rollout import derive_seed, env_spec
from parasim.training.store import atomic_write_bytes, atomic_write_json


def _quiet(phase: str, done: int, total: int) -> None:
    """The default progress callback: report nothing."""


def build_policy(cfg: TrainConfig) -> ManagerPolicy:
    """A freshly initialized policy for the env of ``cfg`` (init seeded by ``cfg.seed``)."""
    spec = env_spec(cfg.env)
    torch.manual_seed(derive_seed(cfg.seed, "init"))
    return ManagerPolicy(spec.obs_dim, spec.nvec, spec.obs_keys, spec.num_agent_tools, cfg.policy)


def warm_start(cfg: TrainConfig, policy: ManagerPolicy, workdir: Path | None,
               progress: ProgressCallback = _quiet) -> dict[str, Any]:
    """Expert demonstrations and SFT, or the stored SFT weights of an interrupted run."""
    path = workdir / "sft.pt" if workdir is not None else None
    if path is not None and path.exists():
        state = torch.load(path, weights_only=False)
        policy.load_state_dict(state["policy"])
        return state["info"]
    info: dict[str, Any] = {"sft_losses": [], "expert": {}}
    if cfg.sft.epochs > 0:
        progress("expert", 0, 1)
        demos = expert.demonstrations(cfg)
        progress("expert", 1, 1)
        info["expert"] = demos.stats
        progress("sft", 0, cfg.sft.epochs)
        info["sft_losses"] = sft.train_sft(policy, demos.x, demos.mask, demos.actions, cfg.sft,
                                           derive_seed(cfg.seed, "sft"),
                                           on_epoch=lambda e: progress("sft", e, cfg.sft.epochs))
    if path is not None:
        buf = io.BytesIO()
        torch.save({"policy": policy.state_dict(), "info": info}, buf)
        atomic_write_bytes(path, buf.getvalue())
    return info


def claim_workdir(wd: Path, cfg: TrainConfig) -> None:
    """Record the config in ``wd``; refuse to resume checkpoints that belong to a different config."""
    wd.mkdir(parents=True, exist_ok=True)
    path = wd / "config.json"
    mine = json.loads(json.dumps(cfg.to_dict()))
    if path.exists() and json.loads(path.read_text()) != mine:
        raise ValueError(f"{wd} holds checkpoints of a different config; use another --out or remove it")
    atomic_write_json(path, mine)


def grpo_resume_step(workdir: Path) -> int | None:
    """The GRPO steps an interrupted run in ``workdir`` has checkpointed (None: none yet), where a resumed run's
    metric logs continue."""
    path = workdir / "grpo.pt"
    return int(torch.load(path, weights_only=False)["step"]) if path.exists() else None


def run_pipeline(cfg: TrainConfig, workdir: str | Path | None = None,
                 log: Callable[[dict[str, Any]], None] | None = None,
                 keep_trajectories: bool = False, progress: ProgressCallback = _quiet) -> dict[str, Any]:
    """Train and evaluate one config; returns JSON-ready metrics plus the training curve.

    ``sft_*`` are the evaluation metrics of the warm-started policy before GRPO (same tasks, same k as
    the final ones), so ``reward - sft_reward`` is what GRPO added; ``train_reward_start`` / ``_end``
    are the first step's and the last five steps' mean training reward. ``progress(phase, done, total)``
    follows the phases (expert, sft, eval sft, grpo, eval); it never touches the run's randomness.
    """
    wd = Path(workdir) if workdir is not None else None
    if wd is not None:
        claim_workdir(wd, cfg)
    t0 = time.perf_counter()
    policy = build_policy(cfg)
    info = warm_start(cfg, policy, wd, progress)
    progress("eval sft", 0, 1)
    start = evaluate(policy, cfg, derive_seed(cfg.seed, "evaluate"))
    progress("eval sft", 1, 1)
    start.pop("trajectories")
    t_sft = time.perf_counter() - t0

    def step_log(row: dict[str, Any]) -> None:
        progress("grpo", row["step"] + 1, cfg.grpo.steps)
        if log is not None:
            log(row)

    resumed = grpo_resume_step(wd) if wd is not None else None
    progress("grpo", resumed or 0, cfg.grpo.steps)
    history = grpo.train(cfg, policy, wd / "grpo.pt" if wd is not None else None, step_log)
    t_grpo = time.perf_counter() - t0 - t_sft
    progress("eval", 0, 1)
    metrics = evaluate(policy, cfg, derive_seed(cfg.seed, "evaluate"))
    progress("eval", 1, 1)
    batch = metrics.pop("trajectories")
    curve = [h["reward"] for h in history]
    result = {
        **metrics,
        **{f"sft_{k}": start[k] for k in ("accuracy", "reward", "tokens", "cost_units", "latency_s")},
        "train_reward_start": curve[0] if curve else None,
        "train_reward_end": float(np.mean(curve[-5:])) if curve else None,
        "reward_curve": curve,
        "accuracy_curve": [h["accuracy"] for h in history],
        "entropy_curve": [h["entropy"] for h in history],
        "env_steps_per_s": float(np.mean([h["env_steps_per_s"] for h in history])) if history else None,
        "sft_s": t_sft, "grpo_s": t_grpo, "eval_s": time.perf_counter() - t0 - t_sft - t_grpo,
        "config": cfg.to_dict(), **info,
    }
    if keep_trajectories:
        result["trajectories"] = batch
    return result
