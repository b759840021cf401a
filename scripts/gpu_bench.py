"""Measurements of the GPU check (``scripts/gpu_check.sh``): the LLM manager's GRPO path on one GPU, and the same
GRPO step through TRL's ``GRPOTrainer`` in the same run.

Why random weights of Qwen3-4B's shape: the check runs on a machine with no hub access, and throughput depends on
the shapes, not on the weights. The sizes are those of Qwen/Qwen3-4B's config.json (hidden 2560, 36 layers, 32
attention heads, 8 KV heads, head_dim 128, intermediate 9728, vocabulary 151,936, tied embeddings, RoPE theta 1e6;
Qwen3-4B-Instruct-2507 differs only in RoPE theta and context length). The tokenizer is the project's locally
trained one (``scripts/tiny_lm.py``); the model's vocabulary stays Qwen3's, so ids past the tokenizer's
are sampled and decoded to nothing, as unknown ids are. Every generation runs to its token limit
(``min_new_tokens``), so both trainers see the same fixed lengths.

Sections, in order (the report is rewritten after each, so a time-out keeps what was measured):
  model        the random model (fp32 master weights, as the trainer loads them) and its bf16 HF directory
  vllm_rollout vLLM's offline engine in a subprocess, only where ``import vllm`` works
  hf_rollout   HF ``generate`` through the trainer's HFEngine (bf16 autocast)
  update       forward + backward of the trainer's TokenLogprobs with its PPO loss, and the AdamW step
  core         rewards, group advantages, span masks, token broadcast and loss normalizers on a full-size batch
  grpo_parasim two steps of ``training/llm/grpo.py`` on a one-turn environment (prompt P tokens, completion C);
               the second step's own split: rollout / rewards+advantages+masks / update / sync
  grpo_trl     two steps of TRL's GRPOTrainer on the same model, batch, lengths, clip range and loss aggregation
  grpo_ratio   parasim over TRL: step time and completion tokens/s
  env_step     one step of ``grpo.py`` on ParaOrchText-v0 with simulated tools (multi-turn), its own split

Loss aggregation: parasim's ``loss_agg="token-mean"`` over a minibatch that is the whole step's batch divides the
summed token losses by the step's manager-token count; TRL's ``loss_type="dapo"`` divides by the active tokens of
the accumulated batch (``num_items_in_batch``), the same number when one generation batch makes one optimizer step.

    python scripts/gpu_bench.py --shape qwen3-4b --out OUT_DIR --budget-s 400
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

SCHEMA_VERSION = 1
BENCH_ENV_ID = "ParasimBench/OneTurn-v0"
# Qwen/Qwen3-4B config.json
QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})


@dataclass(frozen=True)
class Shape:
    """Sizes of one run. ``tiny`` is the CPU dry run of the same code: only these numbers differ."""

    name: str
    model: dict[str, Any]
    rollout_batch: int
    rollout_prompt: int
    rollout_new: int
    update_batch: int
    update_len: int
    update_iters: int
    core_trajectories: int
    core_len: int
    prompts: int  # GRPO step: tasks per step, each with `group` completions
    group: int
    prompt_len: int
    completion_len: int
    micro_batch: int
    env_tasks: int
    env_group: int
    env_max_tokens: int
    env_micro_batch: int

    @property
    def completions(self) -> int:
        return self.prompts * self.group


def _tiny_model() -> dict[str, Any]:
    """TinyLMSpec's sizes with a vocabulary four times the tokenizer's, so that, as at Qwen3's vocabulary, sampled
    ids past the tokenizer's are decoded in the dry run too."""
    from tiny_lm import TinyLMSpec

    spec = asdict(TinyLMSpec())
    spec["vocab_size"] = 4 * spec["vocab_size"]
    return spec


SHAPES: dict[str, Callable[[], Shape]] = {
    "qwen3-4b": lambda: Shape("qwen3-4b", QWEN3_4B, rollout_batch=64, rollout_prompt=1024, rollout_new=256,
                              update_batch=4, update_len=4096, update_iters=3, core_trajectories=512, core_len=8192,
                              prompts=8, group=8, prompt_len=512, completion_len=256, micro_batch=8,
                              env_tasks=2, env_group=4, env_max_tokens=2048, env_micro_batch=4),
    "tiny": lambda: Shape("tiny", _tiny_model(), rollout_batch=4, rollout_prompt=64, rollout_new=16,
                          update_batch=2, update_len=128, update_iters=2, core_trajectories=64, core_len=1024,
                          prompts=2, group=4, prompt_len=32, completion_len=16, micro_batch=4,
                          env_tasks=1, env_group=2, env_max_tokens=800, env_micro_batch=2),
}


# ------------------------------------------------------------------------------------------------ helpers
def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class Clock:
    """Named wall-clock spans with a device sync at both edges, so GPU work is charged to the span that queued it."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            sync()
            self.totals[name] += time.perf_counter() - start


def prompt_text(seed: int, tokens: int) -> str:
    """A prompt of exactly ``tokens`` tokens: a random string of the tokenizer's added tokens, each of which the
    tokenizer matches whole before BPE, so the count does not depend on the neighbours."""
    from tiny_lm import ADDED_TOKENS

    rng = np.random.default_rng([seed, 0x70726F6D])
    return "".join(ADDED_TOKENS[i] for i in rng.integers(0, len(ADDED_TOKENS), tokens))


def outcome_of(text: str) -> float:
    """The one-turn task's verifier: a fixed 0/1 function of the completion's text, the same for both trainers."""
    return float(zlib.crc32(text.encode("utf-8")) & 1)


class OneTurnEnv(gym.Env):
    """A one-turn text environment for the GRPO step: the observation is ``prompt_text`` for the task seed, the
    manager answers once, and the episode ends with a TrajectoryBatch record (outcome from ``outcome_of``) that the
    parasim core scores like any ParaOrchText-v0 episode."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, prompt_tokens: int, reward: Any = None) -> None:
        """``reward``: the RewardConfig that grpo.py hands every environment; the trainer's core scores the record
        with it, and this environment reports no reward components of its own."""
        from envs.paraorch_text import ACTION_MAX_CHARS, CHARSET, ChatText

        if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 1:
            raise ValueError(f"OneTurnEnv.prompt_tokens = {prompt_tokens!r}: must be an integer >= 1")
        self.prompt_tokens = prompt_tokens
        self.observation_space = ChatText(prompt_tokens * 32, min_length=0, charset=CHARSET)
        self.action_space = ChatText(ACTION_MAX_CHARS, min_length=0, charset=CHARSET)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        task_seed = int((options or {}).get("task_seed", seed or 0))
        return prompt_text(task_seed, self.prompt_tokens), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        from parasim.protocol.schema import NUM_TOOLS

        record = {"outcome": outcome_of(action), "format_violations": 0, "ended_with_final": 1, "rounds": 1,
                  "tool_calls": 0, "distinct_tools": 0, "tool_counts": [0] * NUM_TOOLS,
                  "tokens": float(self.prompt_tokens + len(action)), "cost_units": 0.0, "usd": 0.0,
                  "latency_s": 0.0, "role_id": 0}
        return "", 0.0, True, False, {"trajectory": record}


def register_bench_env() -> None:
    if BENCH_ENV_ID not in gym.registry:
        gym.register(id=BENCH_ENV_ID, entry_point=OneTurnEnv)


# ------------------------------------------------------------------------------------------------ the run
class Stopped(BaseException):
    """SIGTERM, as the shell script's ``timeout`` sends it: the running section is recorded as stopped, the report
    saved, and the scratch folder removed on the way out."""


def _stop(signum: int, frame: Any) -> None:
    raise Stopped(f"signal {signum}")


class Bench:
    """Runs the sections in order under a time budget; each one's figures, or its error, land in the report."""

    def __init__(self, shape: Shape, out_dir: Path, budget_s: float, work: Path) -> None:
        """``work``: scratch space for the model directory and the trainers' run folders (8 GB at Qwen3-4B)."""
        import transformers

        import parasim

        self.shape, self.out_dir, self.budget_s, self.work = shape, out_dir, budget_s, work
        self.start = time.perf_counter()
        self.cuda = torch.cuda.is_available()
        self.dev = torch.device("cuda" if self.cuda else "cpu")
        self.state: dict[str, Any] = {}
        self.report: dict[str, Any] = {
            "schema": SCHEMA_VERSION, "shape": shape.name, "sizes": asdict(shape),
            "device": torch.cuda.get_device_name() if self.cuda else "cpu", "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": _version("trl"), "python": sys.version.split()[0],
            "parasim": str(Path(parasim.__file__).parent), "budget_s": budget_s,
            "sections": {}, "errors": [], "partial": True}

    def run(self, name: str, fn: Callable[[], dict[str, Any]], needs: tuple[str, ...] = ()) -> None:
        sections = self.report["sections"]
        missing = [n for n in needs if "error" in sections.get(n, {}) or "skipped" in sections.get(n, {})]
        left = self.budget_s - (time.perf_counter() - self.start)
        if missing:
            sections[name] = {"skipped": f"needs {', '.join(missing)}"}
        elif left <= 0:
            sections[name] = {"skipped": f"the time budget of {self.budget_s:.0f} s was spent"}
        else:
            t = time.perf_counter()
            try:
                sections[name] = {**fn(), "seconds": time.perf_counter() - t}
            except Exception as err:  # noqa: BLE001  (every failure is reported, and fails the run at the end)
                sections[name] = {"error": f"{type(err).__name__}: {err}"[:2000],
                                  "traceback": traceback.format_exc()[-4000:], "seconds": time.perf_counter() - t}
                self.report["errors"].append(f"{name}: {type(err).__name__}: {err}"[:500])
            except Stopped:
                sections[name] = {"error": "stopped by the time limit while running",
                                  "seconds": time.perf_counter() - t}
                self.report["errors"].append(f"{name}: stopped by the time limit")
                self.save()
                raise
            free_memory()
        print(f"[gpu_bench] {name}: {json.dumps(sections[name], default=str)[:600]}", flush=True)
        self.save()

    def save(self) -> None:
        self.report["elapsed_s"] = time.perf_counter() - self.start
        (self.out_dir / "gpu_check.json").write_text(json.dumps(self.report, indent=1, default=str) + "\n")

    # ---- sections
    def model(self) -> dict[str, Any]:
        from tiny_lm import build_tokenizer
        from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

        tokenizer = build_tokenizer()
        eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
        config = Qwen3Config(**self.shape.model, tie_word_embeddings=True, rms_norm_eps=1e-6, eos_token_id=eos,
                             pad_token_id=pad, bos_token_id=pad)
        config.architectures = ["Qwen3ForCausalLM"]
        torch.manual_seed(0)
        t = time.perf_counter()
        with torch.device(self.dev):
            lm = Qwen3ForCausalLM(config).float()
        sync()
        init_s = time.perf_counter() - t
        # the trainers load this directory; its generations run to the step's completion length
        lm.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad,
                                                min_new_tokens=self.shape.completion_len)
        model_dir = self.work / "model"
        t = time.perf_counter()
        lm.to(torch.bfloat16).save_pretrained(model_dir, safe_serialization=True)
        lm.float()
        tokenizer.save_pretrained(model_dir)
        self.state.update(lm=lm, tokenizer=tokenizer, model_dir=model_dir)
        return {"params_b": sum(p.numel() for p in lm.parameters()) / 1e9, "tokenizer_vocab": len(tokenizer),
                "init_s": init_s, "save_bf16_s": time.perf_counter() - t}

    def vllm_rollout(self) -> dict[str, Any]:
        if not self.cuda:
            return {"skipped": "no GPU"}
        if importlib.util.find_spec("vllm") is None:
            return {"skipped": "vllm is not importable here"}
        s = self.shape
        code = f"""
import time, json, numpy as np
from vllm import LLM, SamplingParams
llm = LLM(model={str(self.state['model_dir'])!r}, skip_tokenizer_init=True, dtype="bfloat16",
          gpu_memory_utilization=0.45, max_model_len={s.rollout_prompt + s.rollout_new + 16}, seed=0)
rng = np.random.default_rng(0)
prompts = [{{"prompt_token_ids": rng.integers(0, {s.model['vocab_size']}, {s.rollout_prompt}).tolist()}}
           for _ in range({s.rollout_batch * 4})]
sp = SamplingParams(max_tokens={s.rollout_new}, min_tokens={s.rollout_new}, temperature=1.0, logprobs=0,
                    detokenize=False)
llm.generate(prompts[:8], sp)
t = time.perf_counter(); outs = llm.generate(prompts, sp); dt = time.perf_counter() - t
n = sum(len(o.outputs[0].token_ids) for o in outs)
print("VLLM_RESULT", json.dumps({{"tokens": n, "seconds": dt, "tokens_per_s": n / dt, "batch": len(prompts)}}))
"""
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=200)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("VLLM_RESULT")]
        if not lines:
            raise RuntimeError(f"vLLM exited with {proc.returncode}: {proc.stderr[-1500:]}")
        return json.loads(lines[0].split(" ", 1)[1])

    def hf_rollout(self) -> dict[str, Any]:
        from training.llm.rollout import HFEngine, SamplingParams

        s, lm, tok = self.shape, self.state["lm"], self.state["tokenizer"]
        lm.eval()
        engine = HFEngine(lm, [tok.eos_token_id, tok.pad_token_id], tok.pad_token_id, self.dev, shared=True,
                          max_batch=s.rollout_batch)
        rng = np.random.default_rng(0)
        prompts = [rng.integers(0, s.model["vocab_size"], s.rollout_prompt).tolist() for _ in range(s.rollout_batch)]
        lm.generation_config.min_new_tokens = 8
        engine.generate(prompts[:2], SamplingParams(8), seed=0)
        lm.generation_config.min_new_tokens = s.rollout_new
        reset_peak()
        sync()
        t = time.perf_counter()
        gens = engine.generate(prompts, SamplingParams(s.rollout_new), seed=1)
        sync()
        dt = time.perf_counter() - t
        n = sum(len(g.token_ids) for g in gens)
        return {"batch": s.rollout_batch, "prompt_len": s.rollout_prompt, "new_tokens": s.rollout_new, "tokens": n,
                "seconds_generate": dt, "tokens_per_s": n / dt, "peak_mem_gib": peak_gib()}

    def update(self) -> dict[str, Any]:
        from training.llm import grpo, runtime

        s, lm = self.shape, self.state["lm"]
        info = runtime.DistInfo(0, 1, 0, self.dev)
        lm.train()
        lm.config.use_cache = False
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy = runtime.TokenLogprobs(lm, chunk_tokens=1024)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
        args = grpo.GRPOArgs(kl_coef=0.0, entropy_coef=0.0)
        ids = torch.randint(0, s.model["vocab_size"], (s.update_batch, s.update_len), device=self.dev)
        att = torch.ones_like(ids)
        mask = torch.zeros(s.update_batch, s.update_len, device=self.dev)
        mask[:, s.update_len // 4:] = 1.0  # three quarters manager tokens
        adv = torch.randn(s.update_batch, s.update_len, device=self.dev)
        weight = torch.full((s.update_batch, 1), 1.0 / float(mask.sum()), device=self.dev)

        def once() -> None:
            optimizer.zero_grad(set_to_none=True)
            with runtime.autocast(info, "bfloat16"):
                lp, ent = policy(ids, att)
            loss, _ = grpo.ppo_token_loss(lp, lp.detach() + 0.01, adv, mask, weight, args, None, ent)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()

        reset_peak()
        once()
        sync()
        t = time.perf_counter()
        for _ in range(s.update_iters):
            once()
        sync()
        dt = (time.perf_counter() - t) / s.update_iters
        return {"batch": s.update_batch, "seq_len": s.update_len, "seconds_per_step": dt,
                "tokens_per_s": s.update_batch * s.update_len / dt, "peak_mem_gib": peak_gib(),
                "gradient_checkpointing": True}

    def core(self) -> dict[str, Any]:
        from parasim import (
            TrajectoryBatch,
            broadcast_to_tokens,
            compute_rewards,
            group_advantages,
            loss_mask_from_spans,
            loss_normalizers,
        )
        from parasim.protocol.schema import NUM_TOOLS

        n, width = self.shape.core_trajectories, self.shape.core_len
        g = np.random.default_rng(1)
        batch = TrajectoryBatch.from_arrays(
            outcome=g.integers(0, 2, n).astype(float), format_violations=g.integers(0, 2, n),
            ended_with_final=g.integers(0, 2, n), rounds=g.integers(1, 13, n), tool_calls=g.integers(1, 40, n),
            distinct_tools=g.integers(1, 8, n), tool_counts=g.integers(0, 6, (n, NUM_TOOLS)),
            tokens=g.uniform(1e3, 3e4, n), cost_units=g.uniform(0, 20, n), usd=g.uniform(0, 0.1, n),
            latency_s=g.uniform(1, 300, n), group_id=np.arange(n) // 8, role_id=np.zeros(n, np.int32))
        turns = 12
        bounds = np.sort(g.integers(1, width, (n, 2 * turns)), axis=1)
        starts = np.concatenate([np.zeros((n, 1), np.int64), bounds], axis=1)
        ends = np.concatenate([bounds, np.full((n, 1), width, np.int64)], axis=1)
        trainable = np.tile(np.arange(2 * turns + 1) % 2, n).astype(np.uint8)
        offsets = np.arange(n + 1, dtype=np.int64) * (2 * turns + 1)
        clock = Clock()
        for _ in range(2):  # the first pass warms caches; the figures are the second's
            clock.totals.clear()
            with clock.span("rewards_ms"):
                rewards = compute_rewards(batch, "paramanager")
            with clock.span("advantages_ms"):
                adv, _keep = group_advantages(rewards.total, batch.group_id, "grpo")
            with clock.span("masks_broadcast_normalizers_ms"):
                mask, _ = loss_mask_from_spans(offsets, starts.ravel(), ends.ravel(), trainable, width)
                broadcast_to_tokens(adv.astype(np.float32), mask)
                loss_normalizers(mask, "token-mean")
        timing = {k: 1e3 * v for k, v in clock.totals.items()}
        return {"trajectories": n, "seq_len": width, **timing, "total_ms": sum(timing.values())}

    def grpo_parasim(self) -> dict[str, Any]:
        from training.llm import grpo

        s = self.shape
        register_bench_env()
        run_dir = self.work / "grpo_parasim"
        reset_peak()
        grpo.main(grpo.GRPOArgs(
            model_path=str(self.state["model_dir"]), output_dir=str(run_dir), env_id=BENCH_ENV_ID,
            env_kwargs=json.dumps({"prompt_tokens": s.prompt_len}), total_steps=2, tasks_per_step=s.prompts,
            group_size=s.group, max_tokens=s.prompt_len + s.completion_len, max_turn_tokens=s.completion_len,
            minibatch_size=s.completions, micro_batch_size=s.micro_batch, loss_agg="token-mean",
            clip_eps=0.2, clip_eps_high=0.28, kl_coef=0.0, entropy_coef=0.0, learning_rate=1e-6,
            max_grad_norm=1.0, gradient_checkpointing=True, save_every=0, resume=False))
        peak = peak_gib()
        log = json.loads((run_dir / "grpo_metrics.jsonl").read_text().splitlines()[-1])
        parts = {"rollout_s": log["time/rollout"], "rewards_adv_masks_s": log["time/score_adv_mask"],
                 "update_s": log["time/update"], "sync_s": log["time/sync"]}
        step = sum(parts.values())
        lengths = {"seq_len_mean": log["len/len_mean"], "completion_len_mean": log["len/manager_tokens_mean"]}
        _check_lengths("grpo_parasim", lengths, s)
        return {"completions": s.completions, **lengths, "step_s": step, **parts,
                "share_rewards_adv_masks": parts["rewards_adv_masks_s"] / step,
                "completion_tokens_per_s": s.completions * s.completion_len / step,
                "update_tokens_per_s": s.completions * (s.prompt_len + s.completion_len) / parts["update_s"],
                "peak_mem_gib": peak, "loss_agg": "token-mean", "reward_mean": log["reward_mean"]}

    def grpo_trl(self) -> dict[str, Any]:
        from datasets import Dataset
        from transformers import AutoTokenizer, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        s, model_dir = self.shape, self.state["model_dir"]
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        steps = 2
        prompts = [prompt_text(seed, s.prompt_len) for seed in range(steps * s.prompts)]
        lengths = sorted({len(ids) for ids in tokenizer(text=prompts)["input_ids"]})
        if lengths != [s.prompt_len]:
            raise ValueError(f"TRL's prompts tokenize to {lengths} tokens; the step needs {s.prompt_len}")
        clock = Clock()
        records: list[dict[str, float]] = []
        logged: list[dict[str, float]] = []

        class TimedGRPOTrainer(GRPOTrainer):
            """TRL's trainer with its generation and its generate-and-score phase timed (behaviour unchanged)."""

            def _generate(self, prompts: list) -> Any:
                with clock.span("rollout_s"):
                    return super()._generate(prompts)

            def _generate_and_score_completions(self, inputs: list) -> Any:
                with clock.span("rollout_and_scoring_s"):
                    return super()._generate_and_score_completions(inputs)

        class StepTimes(TrainerCallback):
            """Wall time of each optimizer step, from its first micro-batch to after the optimizer step."""

            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                sync()
                clock.totals.clear()
                self.t = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                sync()
                records.append({"step_s": time.perf_counter() - self.t, **clock.totals})

            def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
                logged.append(dict(logs or {}))

        def outcome_reward(completions: list[str], **_: Any) -> list[float]:
            return [outcome_of(c) for c in completions]

        config = GRPOConfig(
            output_dir=str(self.work / "grpo_trl"), max_steps=steps, per_device_train_batch_size=s.micro_batch,
            gradient_accumulation_steps=s.completions // s.micro_batch, num_generations=s.group,
            max_completion_length=s.completion_len, generation_kwargs={"min_new_tokens": s.completion_len},
            temperature=1.0, top_p=1.0, top_k=0, loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0,
            scale_rewards="group", learning_rate=1e-6, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, max_grad_norm=1.0, optim="adamw_torch", bf16=self.cuda,
            gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False},
            model_init_kwargs={"dtype": "float32"}, shuffle_dataset=False, seed=0, logging_steps=1,
            save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0,
            log_completions=False)
        reset_peak()
        trainer = TimedGRPOTrainer(model=str(model_dir), reward_funcs=outcome_reward, args=config,
                                   train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                                   callbacks=[StepTimes()])
        trainer.train()
        peak = peak_gib()
        del trainer
        if len(records) != steps:
            raise RuntimeError(f"TRL ran {len(records)} optimizer steps; {steps} were asked for")
        last = records[-1]
        means = [x["completions/mean_length"] for x in logged if "completions/mean_length" in x]
        if not means:
            raise RuntimeError("TRL logged no completions/mean_length: cannot check the completion length")
        lengths = {"seq_len_mean": s.prompt_len + means[-1], "completion_len_mean": means[-1]}
        _check_lengths("grpo_trl", lengths, s)
        scoring = last["rollout_and_scoring_s"] - last["rollout_s"]
        return {"completions": s.completions, **lengths, "step_s": last["step_s"], "rollout_s": last["rollout_s"],
                "rewards_adv_masks_s": scoring, "update_s": last["step_s"] - last["rollout_and_scoring_s"],
                "completion_tokens_per_s": s.completions * s.completion_len / last["step_s"],
                "update_tokens_per_s": s.completions * (s.prompt_len + s.completion_len) / (
                    last["step_s"] - last["rollout_and_scoring_s"]), "peak_mem_gib": peak, "loss_type": "dapo"}

    def grpo_ratio(self) -> dict[str, Any]:
        ours, theirs = self.report["sections"]["grpo_parasim"], self.report["sections"]["grpo_trl"]
        return {"step_time_parasim_over_trl": ours["step_s"] / theirs["step_s"],
                "tokens_per_s_parasim_over_trl": ours["completion_tokens_per_s"] / theirs["completion_tokens_per_s"],
                "rollout_time_parasim_over_trl": ours["rollout_s"] / theirs["rollout_s"],
                "update_time_parasim_over_trl": ours["update_s"] / theirs["update_s"]}

    def env_step(self) -> dict[str, Any]:
        from training.llm import grpo

        s = self.shape
        run_dir = self.work / "env_step"
        t = time.perf_counter()
        warm_up_simulator()
        warm_up_s = time.perf_counter() - t
        reset_peak()
        grpo.main(grpo.GRPOArgs(
            model_path=str(self.state["model_dir"]), output_dir=str(run_dir), total_steps=1,
            tasks_per_step=s.env_tasks, group_size=s.env_group, max_tokens=s.env_max_tokens,
            max_turn_tokens=s.completion_len, minibatch_size=s.env_tasks * s.env_group,
            micro_batch_size=s.env_micro_batch, gradient_checkpointing=True, save_every=0, learning_rate=1e-6,
            resume=False))
        log = json.loads((run_dir / "grpo_metrics.jsonl").read_text().splitlines()[-1])
        parts = {"rollout_s": log["time/rollout"], "rewards_adv_masks_s": log["time/score_adv_mask"],
                 "update_s": log["time/update"], "sync_s": log["time/sync"]}
        step = sum(parts.values())
        return {"trajectories": s.env_tasks * s.env_group, "max_tokens": s.env_max_tokens,
                "simulator_jit_warm_up_s": warm_up_s, "step_s": step, **parts,
                "share_rewards_adv_masks": parts["rewards_adv_masks_s"] / step, "seq_len_mean": log["len/len_mean"],
                "manager_tokens_mean": log["len/manager_tokens_mean"], "peak_mem_gib": peak_gib()}

    def run_all(self) -> None:
        self.run("model", self.model)
        self.run("vllm_rollout", self.vllm_rollout, needs=("model",))
        self.run("hf_rollout", self.hf_rollout, needs=("model",))
        self.run("update", self.update, needs=("model",))
        self.state.pop("lm", None)
        free_memory()
        self.run("core", self.core)
        self.run("grpo_parasim", self.grpo_parasim, needs=("model",))
        self.run("grpo_trl", self.grpo_trl, needs=("model",))
        self.run("grpo_ratio", self.grpo_ratio, needs=("grpo_parasim", "grpo_trl"))
        self.run("env_step", self.env_step, needs=("model",))
        self.report["partial"] = False
        self.save()


def warm_up_simulator() -> None:
    """Play one short ParaOrchText-v0 episode (a tool call, then an answer) so that numba compiles the simulator's
    kernels before the timed step: on a fresh machine that compilation has no cache and would count as rollout."""
    import parasim  # noqa: F401  (registers the environments)

    env = gym.make("ParaOrchText-v0", pool="paramanager")
    env.reset(seed=0)
    call = {"name": "standard_reasoner", "arguments": {"model": env.unwrapped.model_names[0], "subtask": "solve"}}
    _obs, _r, terminated, _t, _info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    if not terminated:
        final = {"name": "final_answer", "arguments": {"answer": "0"}}
        _obs, _r, terminated, _t, _info = env.step(f"<tool_call>{json.dumps(final)}</tool_call>")
    if not terminated:
        raise RuntimeError("ParaOrchText-v0 did not end after a final_answer call")
    env.close()


def _check_lengths(section: str, lengths: dict[str, float], s: Shape) -> None:
    """Both trainers must have run the fixed lengths, or their step times are not comparable."""
    want = {"seq_len_mean": s.prompt_len + s.completion_len, "completion_len_mean": s.completion_len}
    for key, value in want.items():
        if abs(lengths[key] - value) > 1e-6:
            raise ValueError(f"{section}: {key} = {lengths[key]}, expected {value} (fixed-length completions)")


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------------------ the table
def _fmt(x: Any, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "n/a"


def render_table(report: dict[str, Any]) -> str:
    """The short Markdown table of a report: one row per figure; a section that failed or was skipped shows why."""
    sec = report["sections"]
    sizes = report["sizes"]
    n, p, c = sizes["prompts"] * sizes["group"], sizes["prompt_len"], sizes["completion_len"]
    model = sec.get("model", {})
    lines = ["# parasim GPU check", "",
             f"device: {report['device']}, torch {report['torch']}, transformers {report['transformers']}, "
             f"trl {report['trl']}; shape {report['shape']} ({_fmt(model.get('params_b'), '.2f')} B parameters, "
             f"random weights); {report.get('elapsed_s', 0):.0f} s", "", "| measure | value |", "| --- | --- |"]

    def row(name: str, label: str, value: Callable[[dict[str, Any]], str]) -> None:
        entry = sec.get(name)
        if entry is None:
            text = "not run"
        elif "error" in entry:
            text = "ERROR " + entry["error"].replace("|", "/").replace("\n", " ")[:200]
        elif "skipped" in entry:
            text = "skipped: " + entry["skipped"]
        else:
            text = value(entry)
        lines.append(f"| {label} | {text} |")

    def split(e: dict[str, Any]) -> str:
        return (f"{e['step_s']:.2f} s = {e['rollout_s']:.2f} rollout + {e['rewards_adv_masks_s']:.3f} rewards/adv/masks"
                f" + {e['update_s']:.2f} update; {e['completion_tokens_per_s']:.0f} completion tokens/s, update "
                f"{_fmt(e.get('update_tokens_per_s'), '.0f')} tokens/s; peak {_fmt(e['peak_mem_gib'], '.1f')} GiB")

    row("hf_rollout", f"rollout, HF generate via HFEngine (batch {sizes['rollout_batch']}, "
        f"{sizes['rollout_prompt']}+{sizes['rollout_new']} tokens)",
        lambda e: f"{e['tokens_per_s']:.0f} tokens/s; peak {_fmt(e['peak_mem_gib'], '.1f')} GiB")
    row("vllm_rollout", "rollout, vLLM offline engine",
        lambda e: f"{e['tokens_per_s']:.0f} tokens/s (batch {e['batch']})")
    row("update", f"update, TokenLogprobs fwd+bwd + AdamW ({sizes['update_batch']} x {sizes['update_len']} tokens)",
        lambda e: f"{e['tokens_per_s']:.0f} tokens/s; peak {_fmt(e['peak_mem_gib'], '.1f')} GiB")
    row("core", f"core: rewards + advantages + masks ({sizes['core_trajectories']} x {sizes['core_len']})",
        lambda e: f"{e['total_ms']:.1f} ms")
    row("grpo_parasim", f"GRPO step, parasim grpo.py ({n} completions, {p}+{c} tokens, token-mean)", split)
    row("grpo_trl", "GRPO step, TRL GRPOTrainer (same batch, loss_type=dapo)", split)
    row("grpo_ratio", "parasim / TRL: step time; completion tokens/s",
        lambda e: f"{e['step_time_parasim_over_trl']:.2f}x; {e['tokens_per_s_parasim_over_trl']:.2f}x "
                  f"(rollout {e['rollout_time_parasim_over_trl']:.2f}x, "
                  f"update {e['update_time_parasim_over_trl']:.2f}x)")
    row("grpo_parasim", "share of parasim's step in rewards / advantages / masks",
        lambda e: f"{100 * e['share_rewards_adv_masks']:.3f} %")
    row("env_step", f"ParaOrchText-v0 step ({sizes['env_tasks'] * sizes['env_group']} episodes, "
        f"<= {sizes['env_max_tokens']} tokens)",
        lambda e: f"{e['step_s']:.2f} s = {e['rollout_s']:.2f} rollout + {e['rewards_adv_masks_s']:.3f} "
                  f"rewards/adv/masks + {e['update_s']:.2f} update; share {100 * e['share_rewards_adv_masks']:.3f} %")
    if report["errors"]:
        lines += ["", "errors: " + "; ".join(report["errors"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    parser.add_argument("--out", type=Path, default=Path("gpu_check_out"))
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="no section starts after this many seconds (the shell script's timeout is the hard stop)")
    args = parser.parse_args(argv)
    if args.budget_s <= 0:
        parser.error(f"--budget-s = {args.budget_s}: must be > 0")
    if args.shape == "qwen3-4b" and not torch.cuda.is_available():
        parser.error("--shape qwen3-4b needs a GPU; the CPU dry run is --shape tiny")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _stop)
    status = 0
    with tempfile.TemporaryDirectory(prefix="parasim_gpu_check_") as work:
        bench = Bench(SHAPES[args.shape](), args.out, args.budget_s, Path(work))
        try:
            bench.run_all()
        except Stopped:
            status = 124
    table = render_table(bench.report)
    (args.out / "gpu_check.md").write_text(table)
    print(table, flush=True)
    return status or (1 if bench.report["errors"] else 0)


if __name__ == "__main__":
    sys.exit(main())
