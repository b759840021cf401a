"""One grid point end to end: scripted expert -> masked SFT -> GRPO -> evaluation.

This is what ``parasim train`` runs and what the per-point sweep backends run: the population trainer
(``population.run_population``) with one member, so a point trained alone and a point trained in a population
go through the same code. With a ``workdir`` the SFT weights and the GRPO checkpoint live there, so a killed run
resumes where it stopped and finishes with the same weights as an uninterrupted one.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.config import TrainConfig
from training.loggers import ProgressCallback
from training.population import build_policy, claim_workdir, grpo_resume_step, run_population

__all__ = ["build_policy", "claim_workdir", "grpo_resume_step", "run_pipeline"]


def _quiet(phase: str, done: int, total: int) -> None:
    """The default progress callback: report nothing."""


def run_pipeline(cfg: TrainConfig, workdir: str | Path | None = None,
                 log: Callable[[dict[str, Any]], None] | None = None,
                 keep_trajectories: bool = False, progress: ProgressCallback = _quiet) -> dict[str, Any]:
    """Train and evaluate one config; returns JSON-ready metrics plus the training curve.

    ``sft_*`` are the evaluation metrics of the warm-started policy before GRPO (same tasks, same k as
    the final ones), so ``reward - sft_reward`` is what GRPO added; ``train_reward_start`` / ``_end``
    are the first step's and the last five steps' mean training reward. ``progress(phase, done, total)``
    follows the phases (expert, sft, eval sft, grpo, eval); it never touches the run's randomness.
    """
    return run_population([cfg], [workdir], [log], keep_trajectories, progress)[0]
