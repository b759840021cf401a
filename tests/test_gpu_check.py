"""The GPU check's own logic that runs without a GPU: the fixed-length one-turn environment that makes parasim's and
TRL's GRPO steps comparable, and the report (a failed section fails the run, its dependents are skipped, the table
says why). The measurements themselves run in scripts/gpu_check.sh (on CPU: --dry-run, in .ci/run)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
def test_one_turn_env_prompts_have_the_fixed_length_and_records_score(bench: ModuleType) -> None:
    import gymnasium as gym
    from tiny_lm import build_tokenizer

    from parasim import TrajectoryBatch, compute_rewards
    from parasim.scoring.rewards import PRESETS

    tokenizer = build_tokenizer()
    bench.register_bench_env()
    env = gym.make(bench.BENCH_ENV_ID, prompt_tokens=37, reward=PRESETS["paramanager"])
    records, prompts = [], set()
    for task_seed in range(6):
        obs, _ = env.reset(seed=task_seed + 100, options={"task_seed": task_seed})
        assert len(tokenizer(obs, add_special_tokens=False)["input_ids"]) == 37
        assert len(tokenizer(text=[obs])["input_ids"][0]) == 37  # as TRL tokenizes its prompts
        prompts.add(obs)
        _obs, _r, terminated, truncated, info = env.step(f"answer {task_seed}")
        assert terminated and not truncated
        assert info["trajectory"]["outcome"] == bench.outcome_of(f"answer {task_seed}")
        records.append({**info["trajectory"], "group_id": task_seed // 3})
    assert len(prompts) == 6  # the task seed picks the prompt
    again, _ = env.reset(seed=0, options={"task_seed": 2})
    assert again == bench.prompt_text(2, 37)
    result = compute_rewards(TrajectoryBatch.from_records(records), "paramanager")
    assert np.all(np.isfinite(result.total))
    with pytest.raises(ValueError, match="prompt_tokens = 0"):
        bench.OneTurnEnv(0)


def test_a_failed_section_fails_the_run_and_skips_what_needs_it(bench: ModuleType, tmp_path: Path) -> None:
    run = bench.Bench(bench.SHAPES["tiny"](), tmp_path, 60.0, tmp_path)
    run.run("grpo_parasim", lambda: {"step_s": 1 / 0})
    run.run("grpo_trl", lambda: {"step_s": 2.0, "rollout_s": 1.0, "rewards_adv_masks_s": 0.1, "update_s": 0.9,
                                 "completion_tokens_per_s": 64.0, "peak_mem_gib": None})
    run.run("grpo_ratio", run.grpo_ratio, needs=("grpo_parasim", "grpo_trl"))
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    sections = saved["sections"]
    assert sections["grpo_parasim"]["error"].startswith("ZeroDivisionError")
    assert sections["grpo_ratio"] == {"skipped": "needs grpo_parasim"}
    assert sections["grpo_trl"]["step_s"] == 2.0 and saved["errors"] == [
        "grpo_parasim: ZeroDivisionError: division by zero"]
    table = bench.render_table(saved)
    assert "| GRPO step, parasim grpo.py (8 completions, 32+16 tokens, token-mean) | ERROR ZeroDivisionError" in table
    assert "| parasim / TRL: step time; completion tokens/s | skipped: needs grpo_parasim |" in table
    assert "2.00 s = 1.00 rollout + 0.100 rewards/adv/masks + 0.90 update; 64 completion tokens/s" in table


def test_no_section_starts_once_the_budget_is_spent(bench: ModuleType, tmp_path: Path) -> None:
    run = bench.Bench(bench.SHAPES["tiny"](), tmp_path, 1e-9, tmp_path)
    run.run("core", run.core)
    assert run.report["sections"]["core"] == {"skipped": "the time budget of 0 s was spent"}


def test_unequal_lengths_make_the_comparison_an_error(bench: ModuleType) -> None:
    shape = bench.SHAPES["tiny"]()
    bench._check_lengths("grpo_trl", {"seq_len_mean": 48.0, "completion_len_mean": 16.0}, shape)
    with pytest.raises(ValueError, match=r"grpo_trl: completion_len_mean = 15.5, expected 16"):
        bench._check_lengths("grpo_trl", {"seq_len_mean": 48.0, "completion_len_mean": 15.5}, shape)


def test_a_stop_signal_records_the_running_section_and_propagates(bench: ModuleType, tmp_path: Path) -> None:
    run = bench.Bench(bench.SHAPES["tiny"](), tmp_path, 60.0, tmp_path)

    def interrupted() -> dict:
        bench._stop(15, None)
        return {}

    with pytest.raises(bench.Stopped):
        run.run("grpo_trl", interrupted)
    saved = json.loads((tmp_path / "gpu_check.json").read_text())
    assert saved["sections"]["grpo_trl"]["error"] == "stopped by the time limit while running"
    assert saved["partial"] is True and saved["errors"] == ["grpo_trl: stopped by the time limit"]
