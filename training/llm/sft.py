"""Masked SFT of a Hugging Face causal LM manager: next-token loss on the manager's tokens only.

The data are trajectories (JSONL, see ``data.py``) from the simulator's scripted expert or from logged real runs,
recoverable failures included (a failed call, then the repair): the manager should learn to repair, so those
trajectories stay, and their tool outputs, like all environment text, carry no loss.

    python -m training.llm.sft --model_path MODEL --data sft.jsonl --output_dir runs/sft
    torchrun --nproc_per_node 8 -m training.llm.sft --config sft.yaml     # FSDP2
"""
from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from parasim.config.fields import opt, validate
from parasim.scoring.masks import LOSS_AGG_MODES
from training.llm import runtime
from training.llm.data import TokenTrajectory, pad_batch, read_jsonl, token_mask
from training.llm.runtime import DTYPES
from training.loggers import parse_loggers


@dataclass
class SFTArgs:
    """Masked SFT of an LLM manager on trajectories (JSONL).

    Every setting is a flag (--learning_rate 1e-5) and a key of the --config file; flags override the file.
    """

    model_path: str = opt("", help="HF model directory: a base model, or a checkpoint's model/ (required)")
    data: str = opt("", help="JSONL of trajectories (required)")
    output_dir: str = opt("runs/llm_sft", help="checkpoints and metrics")
    seed: int = opt(0, lo=0, hi=2**32 - 1, help="seeds the data order, torch and numpy")
    total_steps: int = opt(100, lo=0, help="optimizer steps")
    batch_size: int = opt(16, lo=1, help="trajectories per optimizer step, over all ranks")
    micro_batch_size: int = opt(4, lo=1, help="trajectories per forward on one rank")
    learning_rate: float = opt(1e-5, lo=0.0, hi=1.0, help="AdamW learning rate (after warmup)")
    weight_decay: float = opt(0.0, lo=0.0, hi=1.0, help="AdamW weight decay")
    warmup_steps: int = opt(0, lo=0, help="linear learning-rate warmup steps")
    max_grad_norm: float = opt(1.0, lo=1e-12, help="gradient clipping norm")
    max_tokens: int = opt(16384, lo=2, help="longer trajectories are cut (and marked truncated)")
    loss_agg: str = opt("token-mean", choices=LOSS_AGG_MODES, help="loss normalization (parasim.loss_normalizers)")
    mask_truncated: bool = opt(False, help="drop the loss of cut trajectories entirely")
    compute_dtype: str = opt("bfloat16", choices=DTYPES, help="compute dtype on GPUs; CPU runs stay fp32")
    gradient_checkpointing: bool = opt(False, help="recompute activations in backward (less memory)")
    save_every: int = opt(50, lo=0, help="checkpoint every K steps; the last step always saves; 0: never")
    keep_checkpoints: int = opt(2, lo=1, help="checkpoints kept")
    resume: bool = opt(True, help="continue from output_dir/checkpoints/latest when present")
    loggers: str = opt("jsonl", help="metric loggers, comma-separated: jsonl (sft_metrics.jsonl), tensorboard, "
                                     "wandb (offline unless WANDB_MODE says otherwise); names: docs/metrics.md")

    def __post_init__(self) -> None:
        validate(self)
        parse_loggers(self.loggers)


def batch_indices(step: int, n: int, batch_size: int, seed: int) -> np.ndarray:
    """The dataset rows of a step: epochs are seeded permutations, so a resumed run sees the same order."""
    start = step * batch_size
    rows = []
    while len(rows) < batch_size:
        epoch, offset = divmod(start + len(rows), n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        rows.extend(perm[offset:offset + batch_size - len(rows)].tolist())
    return np.asarray(rows)


def masked_nll(policy: runtime.TokenLogprobs, trajs: Sequence[TokenTrajectory], pad_id: int, args: SFTArgs,
               info: runtime.DistInfo, global_tokens: float, global_seqs: float) -> tuple[torch.Tensor, int]:
    """Sum over manager tokens of -log p, weighted by the core's loss normalizers for the *global* batch."""
    from parasim import loss_normalizers

    batch = pad_batch(trajs, pad_id).to(info.device)
    mask_np = token_mask(trajs, batch.input_ids.shape[1], mask_truncated=args.mask_truncated)
    mask_np[:, 0] = 0
    weights = loss_normalizers(mask_np, args.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
    mask = torch.as_tensor(mask_np, dtype=torch.float32, device=info.device)
    row_w = torch.as_tensor(np.asarray(weights), dtype=torch.float32, device=info.device)[:, None]
    with runtime.autocast(info, args.compute_dtype):
        logprobs, _ = policy(batch.input_ids, batch.attention_mask)
    loss = -(logprobs * mask * row_w).sum() * info.world_size  # FSDP2 averages gradients over ranks
    return loss, int(mask_np.sum())


def main(args: SFTArgs) -> Path:
    runtime.check_file(args.data, "data", "a JSONL of trajectories")
    info = runtime.init_distributed()
    out = Path(args.output_dir)
    start_at = runtime.run_start(args.output_dir, args.model_path, args.resume)
    runtime.seed_everything(args.seed + info.rank)
    ckpt_root, ckpt, model_dir = start_at.ckpt_root, start_at.ckpt, start_at.model_dir
    tokenizer, pad_id = start_at.tokenizer, start_at.pad_id
    data = read_jsonl(args.data, tokenizer, args.max_tokens)
    if not data:
        raise ValueError(f"--data {args.data}: no trajectories")
    if args.batch_size % info.world_size:
        raise ValueError(f"batch_size={args.batch_size} must be a multiple of the world size {info.world_size}")
    policy = runtime.load_policy(model_dir, info, compute_dtype=args.compute_dtype,
                                 gradient_checkpointing=args.gradient_checkpointing)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
    start = runtime.load_training_state(ckpt, policy, optimizer, info)["step"] if ckpt else 0
    logger = runtime.StepLog(out, "sft_metrics", args.loggers, info, resume_step=start if ckpt else None,
                             config=asdict(args), record="sft")

    for step in range(start, args.total_steps):
        rows = batch_indices(step, len(data), args.batch_size, args.seed)[info.rank::info.world_size]
        local = [data[i] for i in rows]
        local_mask = token_mask(local, max(len(t.input_ids) for t in local), mask_truncated=args.mask_truncated)
        counts = torch.tensor([float(local_mask[:, 1:].sum()), float((local_mask[:, 1:].sum(1) > 0).sum())])
        global_tokens, global_seqs = runtime.all_reduce_sum(counts, info).tolist()
        lr = args.learning_rate * min(1.0, (step + 1) / max(1, args.warmup_steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        total_loss, trained = 0.0, 0
        for s in range(0, len(local), args.micro_batch_size):
            micro = local[s:s + args.micro_batch_size]
            loss, n = masked_nll(policy, micro, pad_id, args, info, global_tokens, global_seqs)
            loss.backward()
            total_loss += float(loss.detach()) / info.world_size
            trained += n
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        optimizer.step()
        stats = runtime.all_reduce_sum(torch.tensor([total_loss, float(trained)]), info).tolist()
        loss_value = stats[0]
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"SFT loss is {loss_value} at step {step}")
        logger.log({"step": step + 1, "loss": loss_value, "manager_tokens": int(stats[1]),
                    "grad_norm": float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm),
                    "lr": lr})
        if args.save_every > 0 and ((step + 1) % args.save_every == 0 or step + 1 == args.total_steps):
            runtime.save_checkpoint(ckpt_root, step + 1, policy, optimizer, info, {"args": asdict(args)},
                                    tokenizer, keep=args.keep_checkpoints)
    logger.close()
    final = runtime.latest_checkpoint(ckpt_root)
    runtime.barrier(info)
    return final / "model" if final else model_dir


if __name__ == "__main__":
    sys.exit(runtime.cli(SFTArgs, main, "python -m training.llm.sft"))
