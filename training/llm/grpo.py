"""GRPO of a Hugging Face causal LM manager on ParaOrchText-v0, read top to bottom: collect, score, advantage,
mask, update, sync, log, checkpoint.

- collect: G rollouts per task (a group shares its task); HF ``generate`` or a vLLM server samples the manager's
  turns; token ids and sampled logprobs are kept from generation (``rollout.py``), never re-tokenized.
- score / advantage / mask: ``parasim.compute_rewards`` (a preset or RewardConfig), ``parasim.group_advantages``,
  and the loss mask from role spans plus the loss normalizers of ``parasim.scoring.masks``: the same core the
  simulator's trainers use, so a reward studied in a sweep is the reward trained here.
- update: PPO's clipped objective with an asymmetric range (eps, eps_high: DAPO's clip-higher), optional k3 KL to
  a frozen reference, optional entropy bonus; tool and environment tokens have mask 0 and contribute exactly nothing.
- FSDP2 through ``torchrun`` when the world size is > 1; atomic checkpoints that resume exactly.

    python -m training.llm.grpo --model_path runs/llm_sft/checkpoints/step_00000100/model
    torchrun --nproc_per_node 8 -m training.llm.grpo --config grpo.yaml
"""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from parasim.config.fields import ConfigError, load_mapping, opt, validate
from parasim.scoring.advantages import AdvantageConfig
from parasim.scoring.masks import LOSS_AGG_MODES
from parasim.scoring.rewards import PRESETS
from training.llm import runtime
from training.llm.data import TokenTrajectory, pad_batch, pad_rows, token_mask
from training.llm.rollout import HFEngine, RolloutConfig, VLLMEngine, collect, rollout_summary
from training.llm.runtime import DTYPES
from training.loggers import parse_loggers


@dataclass(frozen=True)
class GRPOArgs(AdvantageConfig):
    """GRPO of an LLM manager on ParaOrchText-v0.

    Every setting is a flag (--learning_rate 1e-6) and a key of the --config file; flags override the file.
    Settings shared with the small trainer (parasim train) have its names: learning_rate, ppo_epochs, entropy_coef,
    adv_method, adv_std, adv_scale, adv_clip, min_group_std, clip_eps, clip_eps_high, kl_coef, group_size.
    """

    model_path: str = opt("", help="HF model directory: the SFT result, or a base model (required)")
    ref_model_path: str = opt("", help="reference of the KL term (default: model_path); loaded only when "
                                       "kl_coef > 0")
    output_dir: str = opt("runs/llm_grpo", help="checkpoints, metrics and rollouts")
    seed: int = opt(0, lo=0, hi=2**32 - 1, help="seeds task order, tool randomness, sampling, torch")
    # environment
    env_id: str = opt("ParaOrchText-v0", help="gymnasium id of the text env")
    env_kwargs: str = opt('{"pool": "paramanager"}', help="JSON object of keyword arguments of gym.make")
    tools: str = opt("sim", choices=("sim", "real"), help="simulated tools or real endpoints")
    endpoints: str = opt("", help="real tools: the endpoint map (YAML / JSON) that `parasim serve-pool` writes")
    tasks: str = opt("", help="real tools: JSONL of tasks with gold answers (parasim.real.tasks)")
    call_log: str = opt("", help="real tools: append every call to this calibration JSONL ({rank}: the rank)")
    # rollouts
    engine: str = opt("hf", choices=("hf", "vllm"), help="rollout engine: HF generate in the trainer, or a vLLM "
                                                          "server")
    vllm_url: str = opt("http://127.0.0.1:8000", help="the vLLM server of --engine vllm")
    vllm_model: str = opt("", help="the served model name (default: model_path)")
    total_steps: int = opt(100, lo=0, help="optimizer steps (each: collect, score, update, sync)")
    tasks_per_step: int = opt(8, lo=1, help="tasks per step over all ranks; each gets group_size rollouts")
    group_size: int = opt(8, lo=1, help="rollouts per task (G)")
    max_tokens: int = opt(8192, lo=2, help="trajectory length limit in tokens")
    max_turn_tokens: int = opt(512, lo=1, help="tokens per manager turn")
    temperature: float = opt(1.0, lo=1e-6, hi=100.0, help="sampling temperature")
    top_p: float = opt(1.0, lo=1e-6, hi=1.0, help="nucleus sampling threshold")
    # rewards and advantages (parasim core)
    reward: str = opt("paramanager", help="a preset of parasim.scoring.rewards.PRESETS, or a RewardConfig file "
                                          "(YAML / JSON / TOML)")
    loss_agg: str = opt("token-mean", choices=LOSS_AGG_MODES, help="loss normalization (parasim.scoring.masks)")
    mask_truncated: bool = opt(False, help="drop the loss of cut trajectories entirely")
    # update
    ppo_epochs: int = opt(1, lo=1, help="passes over each batch")
    old_logprobs: str = opt("sampler", choices=("sampler", "recompute"),
                            help="behaviour logprobs: the rollout engine's, or the trainer's before the update")
    minibatch_size: int = opt(64, lo=1, help="trajectories per optimizer step, over all ranks")
    micro_batch_size: int = opt(4, lo=1, help="trajectories per forward on one rank")
    learning_rate: float = opt(1e-6, lo=0.0, hi=1.0, help="AdamW learning rate (after warmup)")
    weight_decay: float = opt(0.0, lo=0.0, hi=1.0, help="AdamW weight decay")
    warmup_steps: int = opt(0, lo=0, help="linear learning-rate warmup steps")
    max_grad_norm: float = opt(1.0, lo=1e-12, help="gradient clipping norm")
    clip_eps: float = opt(0.2, lo=0.0, hi=1.0, help="PPO clip, lower side")
    clip_eps_high: float = opt(0.28, lo=0.0, help="PPO clip, upper side (DAPO clip-higher)")
    kl_coef: float = opt(0.0, lo=0.0, help="k3 KL penalty to the reference (0: off, no reference loaded)")
    entropy_coef: float = opt(0.0, lo=0.0, help="entropy bonus (entropy is logged either way)")
    compute_dtype: str = opt("bfloat16", choices=DTYPES, help="compute dtype on GPUs; CPU runs stay fp32")
    gradient_checkpointing: bool = opt(False, help="recompute activations in backward (less memory)")
    # bookkeeping
    save_every: int = opt(10, lo=0, help="checkpoint every K steps; the last step always saves; 0: never")
    keep_checkpoints: int = opt(2, lo=1, help="checkpoints kept")
    resume: bool = opt(True, help="continue from output_dir/checkpoints/latest when present")
    dump_rollouts: bool = opt(False, help="append every trajectory (ids, spans, logprobs, record) to "
                                          "rollouts[_rankR].jsonl")
    loggers: str = opt("jsonl", help="metric loggers, comma-separated: jsonl (grpo_metrics.jsonl), tensorboard, "
                                     "wandb (offline unless WANDB_MODE says otherwise); names: docs/metrics.md")

    def __post_init__(self) -> None:
        validate(self)
        parse_loggers(self.loggers)
        try:
            kwargs = json.loads(self.env_kwargs) if self.env_kwargs else {}
        except json.JSONDecodeError as err:
            raise ConfigError(f"GRPOArgs.env_kwargs = {self.env_kwargs!r}: not valid JSON ({err.msg})") from None
        if not isinstance(kwargs, dict):
            raise ConfigError(f"GRPOArgs.env_kwargs = {self.env_kwargs!r}: must be a JSON object")
        if self.reward not in PRESETS and not Path(self.reward).is_file():
            raise ConfigError(f"GRPOArgs.reward = {self.reward!r}: must be a preset ({', '.join(PRESETS)}) or a "
                              "RewardConfig file")


def ppo_token_loss(new_lp: torch.Tensor, old_lp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                   row_weight: torch.Tensor, args: GRPOArgs, ref_lp: torch.Tensor | None = None,
                   entropy: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped policy loss summed over tokens with ``mask * row_weight`` (the core's normalizers); the metrics
    are plain sums over the masked tokens (divide by ``metrics["tokens"]`` for means).

    Masked tokens enter through ``torch.where`` *before* any exponential, so they contribute exactly zero value
    and zero gradient (a multiplied-away inf would still leak NaN into the gradient).
    """
    on = mask > 0
    log_ratio = torch.where(on, new_lp - old_lp, torch.zeros_like(new_lp)).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - args.clip_eps, 1.0 + args.clip_eps_high)
    tok = torch.maximum(pg1, pg2)
    w = torch.where(on, row_weight.expand_as(mask), torch.zeros_like(mask))
    on_f = on.float()
    metrics = {"tokens": on_f.sum(), "clip_frac": ((pg2 > pg1).float() * on_f).sum(),
               "approx_kl_old": (((ratio - 1) - log_ratio) * on_f).sum()}
    if ref_lp is not None:
        d = torch.where(on, ref_lp - new_lp, torch.zeros_like(new_lp)).clamp(-20.0, 20.0)
        kl = torch.exp(d) - d - 1.0  # k3: unbiased, non-negative estimate of KL(pi || ref)
        tok = tok + args.kl_coef * kl
        metrics["kl_ref"] = (kl.detach() * on_f).sum()
    if entropy is not None:
        tok = tok - args.entropy_coef * torch.where(on, entropy, torch.zeros_like(entropy))
        metrics["entropy"] = (entropy.detach() * on_f).sum()
    loss = (tok * w).sum()
    metrics["pg_loss"] = (torch.maximum(pg1, pg2).detach() * on_f).sum()
    return loss, {k: v.detach() for k, v in metrics.items()}


def group_seeds(step: int, task: int, rollout: int, seed: int) -> tuple[int, int]:
    """(task seed, tool seed) of one rollout: the task seed depends on (seed, step, task) only, so the G rollouts
    of a group reset to the same task; the tool seed adds the rollout index, so their tool draws are independent
    (the structured trainer's ``reset_groups`` does the same)."""
    return (int(np.random.default_rng([seed, step, task]).integers(2**31)),
            int(np.random.default_rng([seed, step, task, rollout, 1]).integers(2**31)))


def score(records: Sequence[dict[str, Any]], args: GRPOArgs) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Rewards and group advantages of the whole (global) batch by the parasim core; returns per-trajectory
    advantages, the keep filter, and reward components / tool mix for the log."""
    from parasim import TrajectoryBatch, compute_rewards
    from parasim.protocol.schema import Tool

    batch = TrajectoryBatch.from_records(list(records))
    reward_cfg = _reward_config(args.reward)
    result = compute_rewards(batch, reward_cfg)
    adv, keep = args.advantages(result.total, batch.group_id, batch.role_id)
    log = {"reward_mean": float(result.total.mean()), "reward_std": float(result.total.std()),
           "kept_frac": float(np.mean(keep))}
    log.update({f"reward/{k}": float(np.mean(v)) for k, v in result.as_dict().items() if k != "total"})
    for name in ("outcome", "rounds", "tool_calls", "distinct_tools", "cost_units", "usd", "latency_s", "tokens"):
        log[f"traj/{name}"] = float(np.mean(getattr(batch, name)))
    log["traj/ended_with_final"] = float(np.mean(batch.ended_with_final))
    log["traj/format_violations"] = float(np.mean(batch.format_violations))
    counts = batch.tool_counts.sum(axis=0)
    total = max(1, int(counts.sum()))
    log.update({f"tools/{Tool(i).wire_name}": float(c) / total for i, c in enumerate(counts)})
    return np.asarray(adv, np.float64), np.asarray(keep, bool), log


def _reward_config(spec: str) -> Any:
    """The ``--reward`` preset, or the RewardConfig file (validated by ``RewardConfig.from_dict``)."""
    from parasim import RewardConfig
    from parasim.scoring.rewards import preset

    return preset(spec) if spec in PRESETS else RewardConfig.from_dict(load_mapping(spec, "reward"))


def make_engine(args: GRPOArgs, policy: runtime.TokenLogprobs, model_dir: Path, tokenizer: Any,
                info: runtime.DistInfo) -> Any:
    stop_ids = [i for i in {tokenizer.eos_token_id, tokenizer.pad_token_id} if i is not None]
    pad_id = runtime.pad_token_id(tokenizer)
    if args.engine == "vllm":
        return VLLMEngine(args.vllm_url, args.vllm_model or args.model_path, stop_ids,
                          Path(args.output_dir) / "pushed_weights")
    if args.engine != "hf":
        raise ValueError(f"engine = {args.engine!r}; allowed: 'hf', 'vllm'")
    if info.world_size == 1:
        return HFEngine(policy.lm, stop_ids, pad_id, info.device, shared=True, compute_dtype=args.compute_dtype)
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if info.device.type == "cpu" else getattr(torch, args.compute_dtype)
    copy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(info.device).eval()
    return HFEngine(copy, stop_ids, pad_id, info.device, shared=False, compute_dtype=args.compute_dtype)


def main(args: GRPOArgs) -> Path:
    import parasim  # noqa: F401  (registers the environments)
    from parasim import broadcast_to_tokens, loss_normalizers

    if args.kl_coef > 0 and args.ref_model_path:
        runtime.check_model_dir(args.ref_model_path, "ref_model_path")
    info = runtime.init_distributed()
    if args.tasks_per_step % info.world_size or args.minibatch_size % info.world_size:
        raise ValueError(f"tasks_per_step={args.tasks_per_step} and minibatch_size={args.minibatch_size} must be "
                         f"multiples of the world size {info.world_size}")
    out = Path(args.output_dir)
    start_at = runtime.run_start(args.output_dir, args.model_path, args.resume)
    runtime.seed_everything(args.seed + info.rank)
    ckpt_root, ckpt, model_dir = start_at.ckpt_root, start_at.ckpt, start_at.model_dir
    tokenizer, pad_id = start_at.tokenizer, start_at.pad_id
    policy = runtime.load_policy(model_dir, info, compute_dtype=args.compute_dtype,
                                 gradient_checkpointing=args.gradient_checkpointing)
    ref = None
    if args.kl_coef > 0:
        ref = runtime.load_policy(args.ref_model_path or args.model_path, info, compute_dtype=args.compute_dtype)
        ref.requires_grad_(False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    start = runtime.load_training_state(ckpt, policy, optimizer, info)["step"] if ckpt else 0
    engine = make_engine(args, policy, model_dir, tokenizer, info)
    if ckpt and args.engine == "vllm":
        sync(engine, policy, args, info, start)
    local_tasks = args.tasks_per_step // info.world_size
    envs = make_envs(args, local_tasks * args.group_size, info)
    rollout_cfg = RolloutConfig(args.max_tokens, args.max_turn_tokens, args.temperature, args.top_p)
    logger = runtime.StepLog(out, "grpo_metrics", args.loggers, info, resume_step=start if ckpt else None,
                             config=asdict(args))

    for step in range(start, args.total_steps):
        t0 = time.perf_counter()
        # ---- collect: this rank's tasks, group_size rollouts each
        tasks = [info.rank * local_tasks + k for k in range(local_tasks)]
        seeds = [group_seeds(step, t, g, args.seed) for t in tasks for g in range(args.group_size)]
        group_ids = [step * args.tasks_per_step + t for t in tasks for _ in range(args.group_size)]
        policy.eval()
        trajs = collect(envs, engine, tokenizer, seeds, group_ids, rollout_cfg,
                        seed=int(np.random.default_rng([args.seed, step, info.rank]).integers(2**31)))
        policy.train()
        t1 = time.perf_counter()
        # ---- score and advantages over the global batch (group-dependent rewards need whole groups)
        records = _all_gather(info, [t.record for t in trajs])
        adv, keep, log = score(records, args)
        lo = info.rank * len(trajs)
        adv, keep = adv[lo:lo + len(trajs)], keep[lo:lo + len(trajs)]
        # ---- masks: manager tokens only, dropped groups / filtered trajectories out
        width = max(len(t.input_ids) for t in trajs)
        mask = token_mask(trajs, width, mask_truncated=args.mask_truncated)
        mask[:, 0] = 0
        mask[~keep] = 0
        adv_tok = broadcast_to_tokens(adv.astype(np.float32), mask)
        t2 = time.perf_counter()
        old_lp, mismatch = old_logprobs(policy, trajs, mask, pad_id, args, info)
        # ---- update
        rng = np.random.default_rng([args.seed, step, 7])
        local_mb = args.minibatch_size // info.world_size
        sums: dict[str, float] = {}
        lr = args.learning_rate * min(1.0, (step + 1) / max(1, args.warmup_steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        mask_time, grad_norms = 0.0, []
        for _epoch in range(args.ppo_epochs):
            for rows in _minibatches(len(trajs), local_mb, rng):
                tm = time.perf_counter()
                mb_mask = mask[rows]
                counts = torch.tensor([float(mb_mask.sum()), float((mb_mask.sum(1) > 0).sum())])
                g_tokens, g_seqs = runtime.all_reduce_sum(counts, info).tolist()
                weights = np.asarray(loss_normalizers(mb_mask, args.loss_agg, global_tokens=g_tokens,
                                                      global_seqs=g_seqs), np.float64)
                mask_time += time.perf_counter() - tm
                optimizer.zero_grad(set_to_none=True)
                for s in range(0, len(rows), args.micro_batch_size):
                    sub = rows[s:s + args.micro_batch_size]
                    loss, metrics = _micro_step(policy, ref, [trajs[i] for i in sub], mask[sub], adv_tok[sub],
                                                old_lp[sub], weights[s:s + args.micro_batch_size], pad_id, args,
                                                info)
                    loss.backward()
                    for k, v in metrics.items():
                        sums[k] = sums.get(k, 0.0) + float(v)
                norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                grad_norms.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))
                optimizer.step()
        t3 = time.perf_counter()
        # ---- sync the sampler with the new weights
        sync(engine, policy, args, info, step + 1)
        t4 = time.perf_counter()
        # ---- log: token means over all ranks and minibatches
        keys = sorted(sums)
        reduced = dict(zip(keys, runtime.all_reduce_sum(torch.tensor([sums[k] for k in keys]), info).tolist()))
        n_tok = max(reduced.pop("tokens", 0.0), 1.0)
        log.update({k: v / n_tok for k, v in reduced.items()})
        log.update(mismatch)
        lengths = rollout_summary(trajs)
        if not math.isfinite(log.get("pg_loss", 0.0)):
            raise FloatingPointError(f"GRPO loss is not finite at step {step}: {log}")
        log.update({"step": step + 1, "lr": lr, "grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0,
                    **{f"len/{k}": v for k, v in lengths.items()},
                    "time/rollout": t1 - t0, "time/score_adv_mask": t2 - t1 + mask_time,
                    "time/update": t3 - t2 - mask_time, "time/sync": t4 - t3})
        logger.log(log)
        if args.dump_rollouts:
            from training.llm.rollout import dump_trajectories

            dump_trajectories(out / ("rollouts.jsonl" if info.is_main else f"rollouts_rank{info.rank}.jsonl"), trajs)
        if args.save_every > 0 and ((step + 1) % args.save_every == 0 or step + 1 == args.total_steps):
            runtime.save_checkpoint(ckpt_root, step + 1, policy, optimizer, info, {"args": asdict(args)},
                                    tokenizer, keep=args.keep_checkpoints)
    logger.close()
    final = runtime.latest_checkpoint(ckpt_root)
    runtime.barrier(info)
    return final / "model" if final else model_dir


def make_envs(args: GRPOArgs, n: int, info: runtime.DistInfo) -> list[Any]:
    """``n`` text envs; with real tools they share one backend (its per-endpoint concurrency limits hold across
    the whole batch) and one call log."""
    import gymnasium as gym

    kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    if "reward" in kwargs:
        raise ValueError("env_kwargs: set the reward with --reward (the envs and the trainer share it), not in "
                         "env_kwargs")
    kwargs["reward"] = _reward_config(args.reward)  # the env's reward_components are then the trained reward's
    if args.tools == "sim":
        return [gym.make(args.env_id, **kwargs) for _ in range(n)]
    if args.tools != "real":
        raise ValueError(f"tools = {args.tools!r}; allowed: 'sim', 'real'")
    if not args.endpoints or not args.tasks:
        raise ValueError("tools='real' needs --endpoints (the map `parasim serve-pool` writes) and --tasks (JSONL)")
    from parasim.real.backend import RealToolBackend
    from parasim.real.calllog import CallLogger
    from parasim.real.engine import RealEpisodeEngine
    from parasim.real.tasks import load_real_tasks

    backend = RealToolBackend.from_config(args.endpoints, kwargs.pop("pool", "paramanager"))
    tasks = load_real_tasks(args.tasks)
    log_path = Path(args.call_log.replace("{rank}", str(info.rank))) if args.call_log else None
    logger = CallLogger(log_path) if log_path else None
    return [gym.make(args.env_id, tools="real", engine=RealEpisodeEngine(backend, tasks, logger=logger), **kwargs)
            for _ in range(n)]


def sync(engine: Any, policy: runtime.TokenLogprobs, args: GRPOArgs, info: runtime.DistInfo, step: int) -> None:
    """Push the trainer's weights to the sampler: nothing to do for a single-process HF engine (it *is* the
    policy); an FSDP2 run gathers the full weights on every rank (HF copies) or on rank 0 (vLLM push)."""
    if args.engine == "hf" and info.world_size == 1:
        return
    state = runtime.full_state_dict(policy, info, all_ranks=args.engine == "hf")
    if args.engine == "hf" or info.is_main:
        engine.sync_weights(state, step)
    runtime.barrier(info)


def old_logprobs(policy: runtime.TokenLogprobs, trajs: list[TokenTrajectory], mask: np.ndarray, pad_id: int,
                 args: GRPOArgs, info: runtime.DistInfo) -> tuple[np.ndarray, dict[str, float]]:
    """The behaviour logprobs of the importance ratio, [N, T]: the sampler's as generated, or (``recompute``) the
    trainer's own on the same ids before the update, which removes the sampler/trainer numerics gap (bf16 vLLM
    kernels vs the training forward) from the ratio; then the mean gap on manager tokens is logged."""
    sampled = pad_rows([np.asarray(t.sampled_logprobs, np.float32) for t in trajs], mask.shape[1]).numpy()
    if args.old_logprobs == "sampler":
        return sampled, {}
    if args.old_logprobs != "recompute":
        raise ValueError(f"old_logprobs = {args.old_logprobs!r}; allowed: 'sampler', 'recompute'")
    out = np.zeros_like(sampled)
    with torch.no_grad():
        for s in range(0, len(trajs), args.micro_batch_size):
            batch = pad_batch(trajs[s:s + args.micro_batch_size], pad_id).to(info.device)
            with runtime.autocast(info, args.compute_dtype):
                lp, _ = policy(batch.input_ids, batch.attention_mask, args.temperature)
            out[s:s + args.micro_batch_size, :lp.shape[1]] = lp.float().cpu().numpy()
    on = mask > 0
    gap = torch.tensor([float(np.abs(out - sampled)[on].sum()), float(on.sum())], dtype=torch.float64)
    total, count = runtime.all_reduce_sum(gap, info).tolist()
    return out, {"sampler_abs_logprob_gap": total / max(count, 1.0)}


def _micro_step(policy: runtime.TokenLogprobs, ref: runtime.TokenLogprobs | None, trajs: list[TokenTrajectory],
                mask: np.ndarray, adv: np.ndarray, old_lp: np.ndarray, weights: np.ndarray, pad_id: int,
                args: GRPOArgs, info: runtime.DistInfo) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    batch = pad_batch(trajs, pad_id).to(info.device)
    width = batch.input_ids.shape[1]
    m = torch.as_tensor(mask[:, :width], dtype=torch.float32, device=info.device)
    adv_tok = torch.as_tensor(adv[:, :width], dtype=torch.float32, device=info.device)
    old = torch.as_tensor(old_lp[:, :width], dtype=torch.float32, device=info.device)
    row_w = torch.as_tensor(weights, dtype=torch.float32, device=info.device)[:, None]
    with runtime.autocast(info, args.compute_dtype):
        new_lp, entropy = policy(batch.input_ids, batch.attention_mask, args.temperature)
        ref_lp = None
        if ref is not None:
            with torch.no_grad():
                ref_lp, _ = ref(batch.input_ids, batch.attention_mask, args.temperature)
    loss, metrics = ppo_token_loss(new_lp, old, adv_tok, m, row_w, args, ref_lp, entropy)
    return loss * info.world_size, metrics


def _minibatches(n: int, size: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[s:s + size] for s in range(0, n, size)]


def _all_gather(info: runtime.DistInfo, items: list[Any]) -> list[Any]:
    if info.world_size == 1:
        return items
    gathered: list[list[Any]] = [[] for _ in range(info.world_size)]
    dist.all_gather_object(gathered, items)
    return [x for part in gathered for x in part]


if __name__ == "__main__":
    sys.exit(runtime.cli(GRPOArgs, main, "python -m training.llm.grpo"))
