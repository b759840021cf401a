#!/usr/bin/env bash
# GPU check of the LLM manager training path on one GPU (an H200 in mind), offline, in under 8 minutes.
#
# A randomly initialized model of Qwen3-4B's shape (Qwen3Config with its published sizes) stands in for the
# checkpoint, so no download is needed. Measured, in this order:
#   1. rollout tokens/s: HF generate through the trainer's HFEngine (fp32 master weights, bf16 autocast), and vLLM's
#      offline engine in a subprocess when `import vllm` works;
#   2. update tokens/s: forward + backward of the trainer's TokenLogprobs (chunked head, gradient checkpointing)
#      with the PPO loss, plus the AdamW step; peak GPU memory;
#   3. the parasim core on a full-size batch (512 trajectories x 8,192 tokens: rewards, group advantages, span
#      masks, token broadcast, loss normalizers), in ms;
#   4. one real GRPO step of training/llm/grpo.py on ParaOrchText-v0 with simulated tools (the random model
#      writes garbage, so episodes run to the token limit): the trainer's own split of step time into rollout,
#      rewards/advantages/masks, update and sync.
# Writes gpu_check.json and gpu_check.md to OUT_DIR (argument 1, else $OUT, else ./gpu_check_out).
#
# Usage:  bash training/gpu_check.sh [OUT_DIR]
#         PARASIM_GPU_CHECK_SHAPE=tiny bash training/gpu_check.sh /tmp/x    # the same script on CPU, in seconds
# Needs torch, transformers, numpy, scipy, numba, gymnasium and a C++ compiler (parasim is built in place if it
# is not importable). Where gymnasium is missing (the H200 image lacks it), carry its wheels in .whl/:
#   pip download --no-deps --only-binary=:all: -d .whl gymnasium farama-notifications
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-gpu_check_out}}"
SHAPE="${PARASIM_GPU_CHECK_SHAPE:-qwen3-4b}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/parasim_site .whl/*.whl
  export PYTHONPATH="/tmp/parasim_site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PY" -c "import parasim._core" 2>/dev/null; then
  echo "building parasim in place (no deps, no network)..."
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$OUT_DIR/build.log" 2>&1 \
    || { echo "parasim build failed, see $OUT_DIR/build.log"; tail -20 "$OUT_DIR/build.log"; exit 1; }
fi

timeout 450 "$PY" - "$OUT_DIR" "$SHAPE" <<'PYEOF'
import json, os, subprocess, sys, tempfile, time
from pathlib import Path

import numpy as np
import torch

out_dir, shape = Path(sys.argv[1]), sys.argv[2]
cuda = torch.cuda.is_available()
dev = torch.device("cuda" if cuda else "cpu")
report: dict = {"shape": shape, "torch": torch.__version__, "device": torch.cuda.get_device_name() if cuda else "cpu"}
big = shape == "qwen3-4b"
if big and not cuda:
    sys.exit("the qwen3-4b shape needs a GPU; set PARASIM_GPU_CHECK_SHAPE=tiny for a CPU run")


def sync():
    if cuda:
        torch.cuda.synchronize()


def save(partial=False):
    report["partial"] = partial
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report), flush=True)


from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from parasim.training.tiny_lm import TinyLMSpec, build_tokenizer

# --- the model: Qwen3-4B's published config (config.json of Qwen/Qwen3-4B), random weights
if big:
    sizes = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                 rope_theta=1_000_000.0)
    gen_batch, prompt_len, new_tokens = 64, 1024, 256
    upd_batch, upd_len, upd_iters = 4, 4096, 3
    core_n, core_t = 512, 8192
    grpo_kw = dict(tasks_per_step=2, group_size=4, max_tokens=2048, max_turn_tokens=128, minibatch_size=8,
                   micro_batch_size=2, gradient_checkpointing=True)
else:
    s = TinyLMSpec()
    sizes = dict(vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                 num_hidden_layers=s.num_hidden_layers, num_attention_heads=s.num_attention_heads,
                 num_key_value_heads=s.num_key_value_heads, head_dim=s.head_dim,
                 max_position_embeddings=s.max_position_embeddings)
    gen_batch, prompt_len, new_tokens = 4, 64, 16
    upd_batch, upd_len, upd_iters = 2, 128, 2
    core_n, core_t = 64, 1024
    grpo_kw = dict(tasks_per_step=1, group_size=2, max_tokens=800, max_turn_tokens=16, minibatch_size=2,
                   micro_batch_size=2)
tokenizer = build_tokenizer()
config = Qwen3Config(**sizes, tie_word_embeddings=True, rms_norm_eps=1e-6, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.pad_token_id)
config.architectures = ["Qwen3ForCausalLM"]
torch.manual_seed(0)
t = time.perf_counter()
with torch.device(dev):
    lm = Qwen3ForCausalLM(config).float()
sync()
report["params_b"] = sum(p.numel() for p in lm.parameters()) / 1e9
report["init_s"] = time.perf_counter() - t
model_dir = Path(tempfile.mkdtemp(prefix="parasim_gpu_check_"))
t = time.perf_counter()
lm.generation_config = GenerationConfig(eos_token_id=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id)
lm.to(torch.bfloat16).save_pretrained(model_dir, safe_serialization=True)
lm.float()
tokenizer.save_pretrained(model_dir)
report["save_bf16_s"] = time.perf_counter() - t
save(True)

# --- 1a. vLLM (a subprocess, so its memory is gone before training), when importable
vllm_code = f"""
import time, json, numpy as np
from vllm import LLM, SamplingParams
llm = LLM(model={str(model_dir)!r}, skip_tokenizer_init=True, dtype="bfloat16", gpu_memory_utilization=0.45,
          max_model_len={prompt_len + new_tokens + 16}, seed=0)
rng = np.random.default_rng(0)
prompts = [{{"prompt_token_ids": rng.integers(0, {sizes['vocab_size']}, {prompt_len}).tolist()}} for _ in range({gen_batch * 4})]
sp = SamplingParams(max_tokens={new_tokens}, min_tokens={new_tokens}, temperature=1.0, logprobs=0, detokenize=False)
llm.generate(prompts[:8], sp)
t = time.perf_counter(); outs = llm.generate(prompts, sp); dt = time.perf_counter() - t
n = sum(len(o.outputs[0].token_ids) for o in outs)
print("VLLM_RESULT", json.dumps({{"tokens": n, "seconds": dt, "tokens_per_s": n / dt, "batch": len(prompts)}}))
"""
if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0 and cuda:
    try:
        proc = subprocess.run([sys.executable, "-c", vllm_code], capture_output=True, text=True, timeout=200)
        line = [x for x in proc.stdout.splitlines() if x.startswith("VLLM_RESULT")]
        report["vllm_rollout"] = json.loads(line[0].split(" ", 1)[1]) if line else {"error": proc.stderr[-1500:]}
    except subprocess.TimeoutExpired:
        report["vllm_rollout"] = {"error": "timed out after 200 s"}
else:
    report["vllm_rollout"] = {"skipped": "vllm is not importable here" if cuda else "no GPU"}
save(True)

# --- 1b. HF generate through the trainer's engine
from parasim.training.llm.rollout import HFEngine, SamplingParams

engine = HFEngine(lm, [tokenizer.eos_token_id], tokenizer.pad_token_id, dev, shared=True, max_batch=gen_batch)
rng = np.random.default_rng(0)
prompts = [rng.integers(0, sizes["vocab_size"], prompt_len).tolist() for _ in range(gen_batch)]
engine.generate(prompts[:2], SamplingParams(8), seed=0)
if cuda:
    torch.cuda.reset_peak_memory_stats()
sync(); t = time.perf_counter()
gens = engine.generate(prompts, SamplingParams(new_tokens), seed=1)
sync(); dt = time.perf_counter() - t
n = sum(len(g.token_ids) for g in gens)
# a random model almost never samples <|im_end|> (1 in 151,936), so generations run to full length
report["hf_rollout"] = {"batch": gen_batch, "prompt_len": prompt_len, "new_tokens": new_tokens, "tokens": n,
                        "seconds": dt, "tokens_per_s": n / dt,
                        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
save(True)

# --- 2. update: TokenLogprobs + PPO loss + AdamW, bf16 autocast over fp32 master weights
from parasim.training.llm import grpo, runtime

info = runtime.DistInfo(0, 1, 0, dev)
lm.config.use_cache = False
if big:
    lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
policy = runtime.TokenLogprobs(lm, chunk_tokens=1024)
optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
args = grpo.GRPOArgs(kl_coef=0.0, entropy_coef=0.0)
ids = torch.randint(0, sizes["vocab_size"], (upd_batch, upd_len), device=dev)
att = torch.ones_like(ids)
mask = torch.zeros(upd_batch, upd_len, device=dev)
mask[:, upd_len // 4:] = 1.0  # three quarters manager tokens
adv = torch.randn(upd_batch, upd_len, device=dev)


def update_once():
    optimizer.zero_grad(set_to_none=True)
    with runtime.autocast(info, "bfloat16"):
        lp, ent = policy(ids, att)
    loss, _ = grpo.ppo_token_loss(lp, lp.detach() + 0.01, adv, mask, torch.full((upd_batch, 1), 1 / mask.sum().item(),
                                  device=dev), args, None, ent)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()


if cuda:
    torch.cuda.reset_peak_memory_stats()
update_once()
sync(); t = time.perf_counter()
for _ in range(upd_iters):
    update_once()
sync(); dt = (time.perf_counter() - t) / upd_iters
report["update"] = {"batch": upd_batch, "seq_len": upd_len, "seconds_per_step": dt,
                    "tokens_per_s": upd_batch * upd_len / dt,
                    "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
del optimizer, policy, engine, gens, update_once
lm = None
import gc

gc.collect()
if cuda:
    torch.cuda.empty_cache()
save(True)

# --- 3. the parasim core on a full-size step
from parasim import TrajectoryBatch, broadcast_to_tokens, compute_rewards, group_advantages, loss_mask_from_spans, \
    loss_normalizers
from parasim.protocol.schema import NUM_TOOLS

g = np.random.default_rng(1)
batch = TrajectoryBatch.from_arrays(
    outcome=g.integers(0, 2, core_n).astype(float), format_violations=g.integers(0, 2, core_n),
    ended_with_final=g.integers(0, 2, core_n), rounds=g.integers(1, 13, core_n), tool_calls=g.integers(1, 40, core_n),
    distinct_tools=g.integers(1, 8, core_n), tool_counts=g.integers(0, 6, (core_n, NUM_TOOLS)),
    tokens=g.uniform(1e3, 3e4, core_n), cost_units=g.uniform(0, 20, core_n), usd=g.uniform(0, 0.1, core_n),
    latency_s=g.uniform(1, 300, core_n), group_id=np.arange(core_n) // 8, role_id=np.zeros(core_n, np.int32))
turns = 12
bounds = np.sort(g.integers(1, core_t, (core_n, 2 * turns)), axis=1)
starts = np.concatenate([np.zeros((core_n, 1), np.int64), bounds], axis=1)
ends = np.concatenate([bounds, np.full((core_n, 1), core_t, np.int64)], axis=1)
trainable = np.tile(np.arange(2 * turns + 1) % 2, core_n).astype(np.uint8)
offsets = np.arange(core_n + 1, dtype=np.int64) * (2 * turns + 1)
timing = {}
for _ in range(2):
    t = time.perf_counter(); rewards = compute_rewards(batch, "paramanager"); timing["rewards_ms"] = 1e3 * (time.perf_counter() - t)
    t = time.perf_counter(); adv_, keep = group_advantages(rewards.total, batch.group_id, "grpo"); timing["advantages_ms"] = 1e3 * (time.perf_counter() - t)
    t = time.perf_counter()
    m, _ = loss_mask_from_spans(offsets, starts.ravel(), ends.ravel(), trainable, core_t)
    tok = broadcast_to_tokens(adv_.astype(np.float32), m)
    w = loss_normalizers(m, "token-mean")
    timing["masks_broadcast_normalizers_ms"] = 1e3 * (time.perf_counter() - t)
report["core"] = {"trajectories": core_n, "seq_len": core_t, **timing,
                  "total_ms": sum(timing.values())}
save(True)

# --- 4. one real GRPO step on ParaOrchText-v0 (simulated tools), the trainer's own timing split
run_dir = Path(tempfile.mkdtemp(prefix="parasim_gpu_grpo_"))
if cuda:
    torch.cuda.reset_peak_memory_stats()
t = time.perf_counter()
grpo.main(grpo.GRPOArgs(model_path=str(model_dir), output_dir=str(run_dir), total_steps=1, save_every=0,
                        learning_rate=1e-6, **grpo_kw))
log = json.loads((run_dir / "grpo_metrics.jsonl").read_text().splitlines()[-1])
parts = {k: log[k] for k in ("time/rollout", "time/score_adv_mask", "time/update", "time/sync")}
step = sum(parts.values())
report["grpo_step"] = {**grpo_kw, "wall_s_with_load": time.perf_counter() - t, **parts,
                       "share_rewards_adv_masks": parts["time/score_adv_mask"] / step,
                       "len_mean": log["len/len_mean"], "manager_tokens_mean": log["len/manager_tokens_mean"],
                       "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
save(False)

md = ["# parasim GPU check", "", f"device: {report['device']}, torch {report['torch']}, shape {shape} "
      f"({report['params_b']:.2f} B parameters, random weights)", "", "| measure | value |", "| --- | --- |"]
hf, up, core, st = report["hf_rollout"], report["update"], report["core"], report["grpo_step"]
md += [f"| rollout, HF generate (batch {hf['batch']}, {hf['prompt_len']}+{hf['new_tokens']} tokens) | "
       f"{hf['tokens_per_s']:.0f} tokens/s |"]
v = report["vllm_rollout"]
md += [f"| rollout, vLLM offline (batch {v['batch']}) | {v['tokens_per_s']:.0f} tokens/s |" if "tokens_per_s" in v
       else f"| rollout, vLLM | {v.get('skipped') or v.get('error', '')[:200]} |"]
md += [f"| update, fwd+bwd+AdamW (batch {up['batch']} x {up['seq_len']}) | {up['tokens_per_s']:.0f} tokens/s |",
       f"| peak GPU memory in the update | {up['peak_mem_gib']} GiB |",
       f"| core: rewards + advantages + masks, {core['trajectories']} x {core['seq_len']} tokens | "
       f"{core['total_ms']:.1f} ms |",
       f"| real GRPO step: rollout / score+adv+masks / update / sync (s) | {st['time/rollout']:.1f} / "
       f"{st['time/score_adv_mask']:.3f} / {st['time/update']:.1f} / {st['time/sync']:.3f} |",
       f"| share of step time in rewards / advantages / masks | {100 * st['share_rewards_adv_masks']:.3f} % |"]
(out_dir / "gpu_check.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
PYEOF
