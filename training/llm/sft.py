"""Masked SFT of a Hugging Face causal LM manager: next-token loss on the manager's tokens only.

The data are trajectories (JSONL, see ``data.py``) from the simulator's scripted expert or from logged real runs,
recoverable failures included (a failed call, then the repair): the manager should learn to repair, so those
trajectories stay, and their tool outputs, like all environment text, carry no loss (shared/DESIGN.md 4, 5).

    python -m parasim.training.llm.sft --model_path MODEL --data sft.jsonl --output_dir runs/sft
    torchrun --nproc_per_node 8 -m parasim.training.llm.sft --config sft.yaml     # FSDP2
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from parasim.masks import LOSS_AGG_MODES
from parasim.training.llm import runtime
from parasim.training.llm.data import TokenTrajectory, pad_batch, read_jsonl, token_mask


@dataclass
class SFTArgs:
    """Masked SFT of an LLM manager on trajectories (JSONL)."""

    model_path: str = ""  # HF directory (a base model, or a checkpoint's model/)
    data: str = ""  # JSONL of trajectories
    output_dir: str = "runs/llm_sft"
    seed: int = 0
    total_steps: int = 100
    batch_size: int = 16  # trajectories per optimizer step, over all ranks
    micro_batch_size: int = 4  # trajectories per forward on one rank
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    max_tokens: int = 16384  # longer trajectories are cut (and marked truncated)
    loss_agg: str = "token-mean"  # token-mean | seq-mean-token-sum | seq-mean-token-mean (parasim.loss_normalizers)
    mask_truncated: bool = False  # drop the loss of cut trajectories entirely
    compute_dtype: str = "bfloat16"  # on GPUs; CPU runs stay fp32
    gradient_checkpointing: bool = False
    save_every: int = 50  # steps; the last step always saves; 0: never
    keep_checkpoints: int = 2
    resume: bool = True  # continue from output_dir/checkpoints/latest when present

    def __post_init__(self) -> None:
        big = float(2**62)
        runtime.check_fields(self, {
            "total_steps": (0, big), "batch_size": (1, big), "micro_batch_size": (1, big),
            "learning_rate": (0.0, 1.0), "weight_decay": (0.0, 1.0), "warmup_steps": (0, big),
            "max_grad_norm": (1e-12, big), "max_tokens": (2, big), "save_every": (0, big),
            "keep_checkpoints": (1, big)},
            {"loss_agg": LOSS_AGG_MODES, "compute_dtype": ("bfloat16", "float16", "float32")})


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
    logger = runtime.JsonlLogger(out / "sft_metrics.jsonl", info)

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
    final = runtime.latest_checkpoint(ckpt_root)
    runtime.barrier(info)
    return final / "model" if final else model_dir


if __name__ == "__main__":
    main(runtime.parse_config(SFTArgs))
