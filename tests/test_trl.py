"""TRL's GRPOTrainer on ParaOrchText-v0 (tiny Qwen3, CPU): the reward TRL receives is the env's reward for the same
completions, single-turn through ``make_reward_func`` and multi-turn through ``ParaOrchRollout``."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL
trl = pytest.importorskip("trl", minversion="1.16", reason="TRL is in the [test] extra")

import gymnasium as gym  # noqa: E402
from tiny_lm import build_tiny_lm  # noqa: E402

import parasim  # noqa: E402,F401  (registers the envs)
from parasim.integrations.trl import (  # noqa: E402
    ParaOrchRollout,
    completion_turns,
    make_reward_func,
    task_dataset,
)
from training.llm.rollout import reset_for_group  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV_KWARGS = {"max_rounds": 2}
FINAL = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "A"}}\n</tool_call>'
PYTHON = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("trl") / "tiny", seed=0)


@pytest.fixture(scope="module")
def dataset() -> Any:
    return task_dataset(2, env_kwargs=ENV_KWARGS, seed=3)


def env_total(task_seed: int, tool_seed: int, turns: list[str]) -> float:
    """The env's reward for these turns on this row, computed here without the integration's code: a fresh env,
    the trainer's group reset, the turns, and ``end_episode`` for an episode they leave unfinished."""
    env = gym.make("ParaOrchText-v0", reward="paramanager", **ENV_KWARGS)
    reset_for_group(env, task_seed, tool_seed)
    for text in turns:
        _obs, _r, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            return info["reward_components"]["total"]
    return env.unwrapped.end_episode()[4]["reward_components"]["total"]


def grpo_args(out: Path, **overrides: Any) -> Any:
    """Two tiny GRPO steps on CPU: one prompt, two generations per step."""
    base = {"output_dir": str(out), "max_steps": 2, "per_device_train_batch_size": 2, "num_generations": 2,
            "max_completion_length": 24, "use_vllm": False, "report_to": "none", "logging_steps": 1,
            "save_strategy": "no", "use_cpu": True, "bf16": False, "gradient_checkpointing": False, "seed": 0}
    return trl.GRPOConfig(**{**base, **overrides})


def test_dataset_rows_are_distinct_tasks_in_trl_formats(dataset: Any) -> None:
    assert set(dataset.column_names) == {"prompt", "task_seed", "tool_seed", "task_index", "benchmark"}
    prompts = [json.dumps(p) for p in dataset["prompt"]]
    assert len(set(prompts)) == len(prompts)
    assert [m["role"] for m in dataset[0]["prompt"]] == ["system", "user"]
    standard = task_dataset(2, env_kwargs=ENV_KWARGS, seed=3, conversational=False)
    env = gym.make("ParaOrchText-v0", **ENV_KWARGS)
    obs, _ = reset_for_group(env, standard[0]["task_seed"], standard[0]["tool_seed"])
    assert standard[0]["prompt"] == obs


def test_reward_func_pays_the_envs_reward_and_logs_components(dataset: Any) -> None:
    reward = make_reward_func("paramanager", ENV_KWARGS)
    row = dataset[0]
    parsed_call = {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function", "function": {"name": "final_answer",
                                                                    "arguments": {"answer": "A"}}}]}
    completions = [FINAL, "no tool call at all", [{"role": "assistant", "content": PYTHON}], [parsed_call]]
    logged: dict[str, float] = {}
    out = reward(prompts=[row["prompt"]] * 4, completions=completions, task_seed=[row["task_seed"]] * 4,
                 tool_seed=[row["tool_seed"]] * 4, log_metric=logged.__setitem__)
    expected = [env_total(row["task_seed"], row["tool_seed"], completion_turns(c)) for c in completions]
    assert out == expected
    assert out[0] == out[3]  # TRL's parsed tool_calls are played as the <tool_call> text they came from
    assert out[0] != out[1]  # answering and writing no call are paid differently
    assert logged["parasim/total"] == pytest.approx(sum(out) / 4) and "parasim/correct" in logged
    assert reward.__name__ == "parasim_paramanager"


def manager_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The maximal runs of tokens with mask 1: one per manager turn, since env text always separates turns."""
    runs: list[list[int]] = []
    for k, (token, m) in enumerate(zip(ids, mask)):
        if m and (k == 0 or not mask[k - 1]):
            runs.append([])
        if m:
            runs[-1].append(token)
    return runs


def test_grpo_trainer_multi_turn_rollout_rewards_are_the_envs(tiny: Path, dataset: Any, tmp_path: Path) -> None:
    """Two GRPO steps with ``rollout_func=ParaOrchRollout``: TRL's reward (the replaying ``make_reward_func``,
    weight 1) equals the env's own episode reward (``ParaOrchRollout.reward_func``, weight 0, logged beside it) and
    an independent replay; only the manager's tokens have env_mask 1."""
    rollout = ParaOrchRollout(dataset, env_kwargs=ENV_KWARGS, max_turn_tokens=8)
    calls: list[tuple[list, dict[str, list]]] = []

    def recorded(prompts: list, trainer: Any) -> dict[str, list]:
        out = rollout(prompts, trainer)
        calls.append((prompts, {k: list(v) for k, v in out.items()}))
        return out

    scorer = make_reward_func("paramanager", ENV_KWARGS)
    args = grpo_args(tmp_path, max_completion_length=160, reward_weights=[1.0, 0.0])
    trainer = trl.GRPOTrainer(model=str(tiny), reward_funcs=[scorer, ParaOrchRollout.reward_func], args=args,
                              rollout_func=recorded, train_dataset=dataset)
    trainer.train()
    assert len(calls) == 2
    tok = trainer.processing_class
    rows = {json.dumps(p): (t, s) for p, t, s in zip(dataset["prompt"], dataset["task_seed"], dataset["tool_seed"])}
    turns_played = 0
    for prompts, out in calls:
        for i, ids in enumerate(out["completion_ids"]):
            mask = out["env_mask"][i]
            assert len(mask) == len(ids) == len(out["logprobs"][i]) <= 160
            assert set(mask) == {0, 1}  # the env's feedback is in the completion, masked out
            runs = manager_runs(ids, mask)
            assert [tok.decode(r, skip_special_tokens=True) for r in runs] == out["manager_turns"][i]
            task_seed, tool_seed = rows[json.dumps(prompts[i])]
            obs, _ = reset_for_group(gym.make("ParaOrchText-v0", **ENV_KWARGS), task_seed, tool_seed)
            assert tok.decode(out["prompt_ids"][i]) == obs  # the prompt is the env's first observation
            assert out["env_reward"][i] == env_total(task_seed, tool_seed, out["manager_turns"][i])
            turns_played += len(runs)
    assert turns_played > 4  # some episode had a second turn after the env's feedback
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all(math.isfinite(h["reward"]) for h in logged)
    episode_means = [sum(o["env_reward"]) / 2 for _, o in calls]
    assert [h["reward"] for h in logged] == pytest.approx(episode_means)
    assert [h["rewards/parasim_paramanager/mean"] for h in logged] == pytest.approx(episode_means)
    assert [h["rewards/reward_func/mean"] for h in logged] == pytest.approx(episode_means)
    assert all(math.isfinite(h["parasim/total"]) for h in logged)  # the components TRL logged through log_metric


def test_rollout_refuses_prompts_of_another_dataset_and_vllm(dataset: Any) -> None:
    rollout = ParaOrchRollout(dataset, env_kwargs=ENV_KWARGS)

    class Trainer:
        use_vllm = True

    with pytest.raises(ValueError, match="use_vllm: ParaOrchRollout samples with the trainer's own model"):
        rollout([dataset[0]["prompt"]], Trainer())
    Trainer.use_vllm = False
    with pytest.raises(ValueError, match="prompt: not a row of the dataset"):
        rollout([[{"role": "user", "content": "something else"}]], Trainer())
    with pytest.raises(ValueError, match="max_turn_tokens: expected an int >= 1, got 0"):
        ParaOrchRollout(dataset, max_turn_tokens=0)
    with pytest.raises(ValueError, match=r"reward: given both as reward='xrouter' and as env_kwargs\['reward'\]"):
        make_reward_func("xrouter", {"reward": "paramanager"})
    with pytest.raises(ValueError, match="conversational: TRL would render these prompts without the tool list"):
        task_dataset(1, env_kwargs={"tokenizer": "a chat-template tokenizer"})


@pytest.mark.slow  # two GRPOTrainer builds and steps: about 25 s on one free core
def test_docs_example_script_trains_in_both_modes_and_logs_reward_components(tiny: Path, tmp_path: Path) -> None:
    """docs/bridges/trl_grpo.py as users run it (its ``main``), one GRPO step per mode on the tiny model: TRL's
    reward is finite and every step logs the env's reward components and accuracy (``parasim/...``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trl_grpo_example", ROOT / "docs" / "bridges" / "trl_grpo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    for mode in ("reward", "rollout"):
        history = example.main(["--model", str(tiny), "--mode", mode, "--steps", "1", "--rows", "2", "--batch", "2",
                                "--max-completion", "64", "--max-rounds", "2", "--out", str(tmp_path / mode)])
        assert len(history) == 1 and math.isfinite(history[0]["reward"]), mode
        logged = set(history[0])
        assert {"parasim/total", "parasim/outcome", "parasim/protocol", "parasim/correct"} <= logged, (mode, logged)


def test_rollout_reward_func_logs_the_episodes_components() -> None:
    logged: dict[str, float] = {}
    components = [{"total": 1.0, "outcome": 1.0}, {"total": 0.0, "outcome": 0.0}]
    out = ParaOrchRollout.reward_func(prompts=["a", "b"], completions=["x", "y"], env_reward=[1.0, 0.0],
                                      reward_components=components, correct=[True, False],
                                      log_metric=logged.__setitem__)
    assert out == [1.0, 0.0] and logged == {"parasim/total": 0.5, "parasim/outcome": 0.5, "parasim/correct": 0.5}
