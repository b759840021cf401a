"""training.real_eval: a ``parasim train`` run's manager rebuilt from its folder plays what the run evaluated.

``load_trained`` + ``evaluate_on`` over the simulated vector env must reproduce the run's own final evaluation
(metrics.json) exactly: the sim-to-real loop (scripts/sim_to_real.py) predicts a manager's real figures with that
call, so any difference in the policy, the tasks drawn or the sampling would be a gap of the harness, not of the
simulator. Unfinished or foreign folders are refused with the reason.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.evaluate import evaluate_on
from training.real_eval import load_trained
from training.rollout import derive_seed, make_envs

pytestmark = pytest.mark.slow  # a real training run of a few seconds


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train") / "run"
    subprocess.run([sys.executable, "-m", "parasim", "train", "--set", "grpo.steps=2", "--set", "expert.episodes=64",
                    "--set", "eval.tasks=16", "--set", "eval.k=2", "--set", "sft.epochs=1", "--out", str(out),
                    "--quiet", "--no-progress"], check=True, capture_output=True)
    return out


def test_the_rebuilt_manager_replays_the_runs_own_evaluation(run_dir: Path, one_torch_thread) -> None:
    cfg, policy = load_trained(run_dir)
    saved = json.loads((run_dir / "metrics.json").read_text())
    lanes = cfg.eval.tasks * cfg.eval.k
    result = evaluate_on(policy, make_envs(cfg.env, lanes, cfg.reward), cfg, derive_seed(cfg.seed, "evaluate"))
    for key in ("accuracy", "reward", "tokens", "cost_units", "rounds"):
        assert result["metrics"][key] == pytest.approx(saved[key], rel=0, abs=1e-12), key


def test_unfinished_and_foreign_folders_are_refused(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="parasim train run"):
        load_trained(tmp_path)
    partial = tmp_path / "partial" / "ckpt"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text((run_dir / "ckpt" / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="not finished"):
        load_trained(partial.parent)
    state = torch.load(run_dir / "ckpt" / "grpo.pt", weights_only=False)
    torch.save({**state, "step": 1}, partial / "grpo.pt")
    with pytest.raises(ValueError, match="GRPO step 1 of 2"):
        load_trained(partial.parent)
