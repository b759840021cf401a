"""GRPO on ParaOrch-v0: task groups, determinism, exact resume after a crash, estimators, KL, learning."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from parasim.cli import main
from parasim.scoring.advantages import METHODS
from training import expert, grpo
from training.config import make_config
from training.pipeline import build_policy, run_pipeline
from training.rollout import collect, make_envs

TINY = {"grpo.steps": "4", "grpo.tasks_per_step": "8", "grpo.group_size": "4", "grpo.minibatches": "2",
        "grpo.checkpoint_every": "2", "expert.episodes": "128", "sft.epochs": "1", "eval.tasks": "16",
        "eval.k": "2", "policy.hidden": "32"}


# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


def _weights(path):
    return torch.load(path, weights_only=False)["policy"]


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_groups_share_a_task_but_not_their_randomness():
    cfg = make_config("default", TINY)
    envs = make_envs(cfg.env, 64, cfg.reward)
    # a sampler seed whose draws give each group a lane that calls a tool: eight lanes of an untrained policy all
    # stopping at once (about 1 in 2^8 a group) have equal tokens whatever the tool outcomes
    ro = collect(build_policy(cfg), envs, seed=7, group_size=8, generator=torch.Generator().manual_seed(1))
    groups = ro.benchmark.reshape(8, 8)
    assert (groups == groups[:, :1]).all()  # one benchmark (one task) per group
    assert len(np.unique(groups[:, 0])) > 1  # different tasks across groups
    tokens = ro.batch.tokens.reshape(8, 8)
    assert all(len(np.unique(row)) > 1 for row in tokens)  # independent tool outcomes inside a group
    assert ro.batch.group_id.tolist() == np.repeat(np.arange(8), 8).tolist()
    again = collect(build_policy(cfg), envs, seed=7, group_size=8, generator=torch.Generator().manual_seed(1))
    np.testing.assert_array_equal(again.batch.tokens, ro.batch.tokens)


def test_training_is_deterministic_for_a_seed(tmp_path):
    cfg = make_config("default", TINY)
    a = run_pipeline(cfg, tmp_path / "a")
    b = run_pipeline(cfg, tmp_path / "b")
    assert _same(_weights(tmp_path / "a" / "grpo.pt"), _weights(tmp_path / "b" / "grpo.pt"))
    assert a["reward_curve"] == b["reward_curve"] and a["accuracy"] == b["accuracy"]
    run_pipeline(make_config("default", {**TINY, "seed": "1"}), tmp_path / "c")
    assert not _same(_weights(tmp_path / "a" / "grpo.pt"), _weights(tmp_path / "c" / "grpo.pt"))


class Crash(Exception):
    pass


def test_killed_run_resumes_to_identical_weights(tmp_path):
    cfg = make_config("default", {**TINY, "grpo.steps": "5"})
    full = run_pipeline(cfg, tmp_path / "full")

    def die_at_step_3(row):
        if row["step"] == 3:
            raise Crash  # after the step-2 checkpoint (steps 0, 1 done), before the next one

    with pytest.raises(Crash):
        run_pipeline(cfg, tmp_path / "crashed", log=die_at_step_3)
    assert torch.load(tmp_path / "crashed" / "grpo.pt", weights_only=False)["step"] == 2
    seen = []
    resumed = run_pipeline(cfg, tmp_path / "crashed", log=lambda row: seen.append(row["step"]))
    assert seen == [2, 3, 4]
    assert _same(_weights(tmp_path / "full" / "grpo.pt"), _weights(tmp_path / "crashed" / "grpo.pt"))
    assert resumed["reward_curve"] == full["reward_curve"] and resumed["accuracy"] == full["accuracy"]
    with pytest.raises(ValueError, match="different config"):
        run_pipeline(make_config("default", {**TINY, "grpo.steps": "6"}), tmp_path / "crashed")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_core_estimator_trains(method):
    cfg = make_config("default", {**TINY, "grpo.steps": "1", "grpo.adv_method": method, "grpo.kl_coef": "0.1",
                                  "grpo.min_group_std": "0.05", "grpo.adv_clip": "3"})
    history = grpo.train(cfg, build_policy(cfg))
    row = history[0]
    assert np.isfinite([row["loss"], row["entropy"], row["kl"]]).all()
    assert row["kl"] >= 0 and row["entropy"] > 0 and 0 < row["kept"] <= 1


@pytest.mark.slow
def test_reward_rises_above_the_sft_start_on_the_default_config():
    result = run_pipeline(make_config("default", {"eval.tasks": "32"}))
    curve = result["reward_curve"]
    assert np.mean(curve[-5:]) > np.mean(curve[:3]) + 0.05


def test_expert_demonstrations_are_correct_balanced_and_keep_repairs():
    cfg = make_config("default", {**TINY, "expert.episodes": "512", "expert.max_tool_share": "0.3"})
    demos = expert.demonstrations(cfg)
    s = demos.stats
    assert 0 < s["kept"] <= s["episodes"] * s["expert_accuracy"]  # only correct trajectories survive
    assert max(s["tool_share"]) <= 0.3 and s["recovered"] > 0  # balanced; failed-then-repaired kept
    assert len(demos.x) == len(demos.actions) == s["decisions"] > s["kept"]
    offsets = np.concatenate([[0], np.cumsum(make_envs(cfg.env, 1, cfg.reward).single_action_space.nvec)[:-1]])
    assert demos.mask[torch.arange(len(demos.x))[:, None], torch.as_tensor(offsets) + demos.actions].all()


def test_balance_caps_the_dominant_tool():
    counts = np.zeros((100, 7), np.int32)
    counts[:80, 0] = 3  # 80 trajectories of one tool
    counts[80:, 1:4] = 1
    keep = expert.balance(counts, np.ones(100, bool), 0.4)
    shares = counts[keep].sum(0) / counts[keep].sum()
    assert shares.max() <= 0.4 and keep[80:].all()


def test_evaluation_metrics_and_train_cli(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--config", "default", "--out", str(out), "--quiet"]
    args += [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert sum(metrics["tool_dist"]) == pytest.approx(1.0)
    assert sum(metrics["model_dist"].values()) == pytest.approx(1.0)
    assert set(metrics["acc_by_benchmark"]) <= {"AIME24", "AIME25", "AMC", "HMMT25", "GPQA", "MMLU-Pro",
                                                "LiveCodeBench"}
    assert 0 <= metrics["format_failure_rate"] <= 1 and metrics["calls_per_round"] >= 0
    assert "accuracy SFT" in capsys.readouterr().out
    assert main(["rescore", str(out / "trajectories.parquet"), "--grid", "c_tar=4,16"]) == 0
    assert main(["train", "--config", "default", "--set", "grpo.learning_rate=7", "--out", str(out)]) == 2


def test_env_reward_is_the_sweep_points_reward():
    """A sweep over ``c_tar``: each point's envs score under the point's RewardConfig, so ``info["reward_components"]``
    is the reward GRPO trains on (scored once, by the env), and points with different ``c_tar`` score differently."""
    from parasim.scoring.rewards import compute_rewards
    from training.sweep import expand

    scored = {}
    for point in expand([("c_tar", ["4", "16"])], seeds=[0], fixed=TINY):
        cfg = point.config()
        envs = make_envs(cfg.env, 32, cfg.reward)
        assert envs.unwrapped.reward_config == cfg.reward and cfg.reward.c_tar == float(dict(point.overrides)["c_tar"])
        ro = collect(build_policy(cfg), envs, seed=3, group_size=4, generator=torch.Generator().manual_seed(0))
        expected = compute_rewards(ro.batch, cfg.reward)
        for name, values in expected.as_dict().items():
            np.testing.assert_array_equal(ro.reward_components[name], values)
        np.testing.assert_array_equal(ro.rewards(cfg.reward), expected.total)
        scored[cfg.reward.c_tar] = (ro.batch, ro.reward_components["cost"])
    batch, cost4 = scored[4.0]
    assert (batch.cost_units > 4).any()  # the tiny policy's episodes cross the lower target ...
    np.testing.assert_array_equal(scored[16.0][0].cost_units, batch.cost_units)  # same episodes
    assert (cost4[batch.cost_units > 4] < scored[16.0][1][batch.cost_units > 4]).any()  # ... and pay for it there


def test_batch_dependent_formulas_are_scored_over_the_rollouts_groups():
    """ToolOrchestra min-max normalizes within a group: the env, which sees one episode, cannot give the training
    reward, so the trainer scores the rollout's groups in one core call."""
    from parasim.scoring.rewards import PRESETS, compute_rewards

    cfg = make_config("default", {**TINY, "reward_preset": "toolorchestra"})
    assert cfg.reward.batch_dependent and not PRESETS["paramanager"].batch_dependent
    envs = make_envs(cfg.env, 16, cfg.reward)
    ro = collect(build_policy(cfg), envs, seed=3, group_size=4, generator=torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(ro.rewards(cfg.reward), compute_rewards(ro.batch, cfg.reward).total)
