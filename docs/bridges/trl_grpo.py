"""GRPO on ParaOrchText-v0 with TRL's ``GRPOTrainer`` (TRL 1.16), in one of two modes:

- ``--mode reward``: TRL samples one manager turn per prompt; ``parasim.integrations.trl.make_reward_func`` plays
  it through the env on the row's task (simulated tools replay exactly) and pays the env's reward.
- ``--mode rollout``: ``ParaOrchRollout`` plays whole episodes with the trainer's model (each turn sampled from the
  exact token stream, the env's feedback appended with ``env_mask`` 0, so only the manager's tokens train), and
  ``ParaOrchRollout.reward_func`` pays each episode's env reward.

Both log the batch means of every reward component and the accuracy per step (``parasim/<component>``,
``parasim/correct`` in ``trainer.state.log_history`` and the trainer's ``report_to``). Generation runs on the
trainer's own model (``use_vllm=False``): docs/bridges.md says why. Usage::

    python docs/bridges/trl_grpo.py --model Qwen/Qwen3-0.6B --mode rollout --steps 200 --out runs/trl

``tests/test_trl.py`` runs it on a tiny random Qwen3 model (``scripts/tiny_lm.py``) for a step in each mode.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
import trl

from parasim.integrations.trl import ParaOrchRollout, make_reward_func, task_dataset


def build_trainer(model: str, out: str, mode: str, steps: int, *, rows: int = 64, env_kwargs: dict | None = None,
                  preset: str = "paramanager", **config: Any) -> trl.GRPOTrainer:
    """A GRPOTrainer on ``rows`` tasks of the env (``task_dataset``) with parasim's reward (``mode="reward"``) or
    its rollout function (``mode="rollout"``); ``config`` overrides GRPOConfig fields."""
    env_kwargs = dict(env_kwargs or {})
    dataset = task_dataset(rows, env_kwargs=env_kwargs)
    args = trl.GRPOConfig(**{
        "output_dir": out, "max_steps": steps, "per_device_train_batch_size": 4, "num_generations": 4,
        "max_completion_length": 512 if mode == "rollout" else 256, "use_vllm": False, "logging_steps": 1,
        "report_to": "none", "save_strategy": "no", "bf16": torch.cuda.is_available(),
        "use_cpu": not torch.cuda.is_available(), "seed": 0, **config})
    if mode == "reward":
        return trl.GRPOTrainer(model=model, reward_funcs=make_reward_func(preset, env_kwargs), args=args,
                               train_dataset=dataset)
    if mode == "rollout":
        rollout = ParaOrchRollout(dataset, preset=preset, env_kwargs=env_kwargs, max_turn_tokens=256)
        return trl.GRPOTrainer(model=model, reward_funcs=ParaOrchRollout.reward_func, args=args,
                               rollout_func=rollout, train_dataset=dataset)
    raise ValueError(f"mode: expected 'reward' or 'rollout', got {mode!r}")


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Train, print each step's reward, accuracy and reward components, and return TRL's log history."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a causal LM: hub id or local folder")
    p.add_argument("--mode", choices=("reward", "rollout"), default="rollout")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rows", type=int, default=64, help="tasks in the training set")
    p.add_argument("--batch", type=int, default=4, help="completions per step (per device)")
    p.add_argument("--max-completion", type=int, default=None, help="tokens per completion (whole episode)")
    p.add_argument("--max-rounds", type=int, default=4, help="ParaOrchText-v0's round limit")
    p.add_argument("--out", default="runs/trl_grpo")
    p.add_argument("--report-to", default="none", help="TRL's report_to: none, tensorboard, wandb")
    args = p.parse_args(argv)
    overrides: dict[str, Any] = {"per_device_train_batch_size": args.batch, "num_generations": args.batch,
                                 "report_to": args.report_to}
    if args.max_completion is not None:
        overrides["max_completion_length"] = args.max_completion
    trainer = build_trainer(args.model, args.out, args.mode, args.steps, rows=args.rows,
                            env_kwargs={"max_rounds": args.max_rounds}, **overrides)
    trainer.train()
    history = [h for h in trainer.state.log_history if "reward" in h]
    for h in history:
        parts = " ".join(f"{k.split('/', 1)[1]}={v:.3f}" for k, v in h.items() if k.startswith("parasim/"))
        print(f"step {h['step']}: reward {h['reward']:+.4f}  {parts}")
    return history


if __name__ == "__main__":
    main()
