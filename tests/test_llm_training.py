"""LLM manager training on CPU with the tiny Qwen3 model: masked SFT, then GRPO on ParaOrchText-v0 with simulated
tools; masks give tool / environment tokens exactly zero gradient; checkpoints resume to identical weights; a
2-process FSDP2 run (gloo) matches the single-process one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from parasim.training.llm import grpo, runtime, sft  # noqa: E402
from parasim.training.llm.data import (  # noqa: E402
    ROLE_ENV,
    ROLE_MANAGER,
    TokenTrajectory,
    read_jsonl,
    render_segments,
    token_mask,
    write_jsonl,
)
from parasim.training.llm.rollout import Generation, parse_completion_choice  # noqa: E402
from parasim.training.tiny_lm import build_tiny_lm  # noqa: E402

REPAIR = '<tool_call>\n{"name": "python", "arguments": {"code": "print(%d+1)"}}\n</tool_call>'
FINAL = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "%d"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("llm") / "tiny", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def recoverable_failure(a: int) -> dict:
    """A trajectory where a call fails (EXEC_ERR), the manager repairs it, then answers."""
    return {"messages": [
        {"role": "system", "content": "You are the manager."},
        {"role": "user", "content": f"What is {a}+1?"},
        {"role": "assistant", "content": REPAIR % a},
        {"role": "tool", "content": '{"status": "EXEC_ERR", "output": "NameError"}'},
        {"role": "assistant", "content": REPAIR % a},
        {"role": "tool", "content": json.dumps({"status": "OK", "output": str(a + 1)})},
        {"role": "assistant", "content": FINAL % (a + 1)},
    ]}


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    write_jsonl(path, [recoverable_failure(a) for a in range(8)])
    return path


# ------------------------------------------------------------------------------------------- formats
def test_render_segments_tile_the_chat_and_isolate_manager_turns(tokenizer) -> None:
    row = recoverable_failure(3)
    segments = render_segments(tokenizer, row["messages"])
    full = tokenizer.apply_chat_template(row["messages"], tokenize=False)
    assert "".join(text for text, _ in segments) == full
    manager = [text for text, role in segments if role == ROLE_MANAGER]
    assert manager == [REPAIR % 3 + "<|im_end|>", REPAIR % 3 + "<|im_end|>", FINAL % 4 + "<|im_end|>"]
    assert all("EXEC_ERR" not in text for text in manager)


def test_token_mask_marks_exactly_the_manager_tokens(tokenizer, sft_data: Path) -> None:
    trajs = read_jsonl(sft_data, tokenizer)
    width = max(len(t.input_ids) for t in trajs)
    mask = token_mask(trajs, width)
    for b, t in enumerate(trajs):
        want = np.zeros(width, np.uint8)
        for s, e, r in t.spans:
            want[s:e] = r == ROLE_MANAGER
        assert np.array_equal(mask[b], want)
        manager_text = tokenizer.decode([i for i, m in zip(t.input_ids, mask[b]) if m])
        assert "EXEC_ERR" not in manager_text and "<tool_call>" in manager_text
    cut = read_jsonl(sft_data, tokenizer, max_tokens=40)
    assert all(t.truncated and len(t.input_ids) == 40 for t in cut)
    assert token_mask(cut, 40, mask_truncated=True).sum() == 0


def test_trajectory_spans_are_validated() -> None:
    with pytest.raises(ValueError, match="spans"):
        TokenTrajectory([1, 2, 3], [(0, 2, ROLE_ENV)])
    with pytest.raises(ValueError, match=r"spans\[1\]"):
        TokenTrajectory([1, 2, 3], [(0, 1, ROLE_ENV), (2, 3, ROLE_MANAGER)])


def test_vllm_completion_choice_parsing() -> None:
    choice = {"text": "ab", "finish_reason": "stop", "token_ids": [5, 7, 2],
              "logprobs": {"tokens": ["token_id:5", "token_id:7", "token_id:2"], "token_logprobs": [-0.1, -0.2, -0.3]}}
    assert parse_completion_choice(choice, [2]) == Generation([5, 7, 2], [-0.1, -0.2, -0.3], True)
    del choice["token_ids"]
    choice["finish_reason"] = "length"
    choice["logprobs"]["tokens"] = ["token_id:5", "token_id:7", "token_id:9"]
    assert parse_completion_choice(choice, [2]) == Generation([5, 7, 9], [-0.1, -0.2, -0.3], False)
    with pytest.raises(ValueError, match="logprobs"):
        parse_completion_choice({"token_ids": [1], "logprobs": None}, [2])


def test_config_file_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text("group_size: 4\nlearning_rate: 3.0e-6\nreward: toolorchestra\n")
    args = runtime.parse_config(grpo.GRPOArgs, ["--config", str(cfg), "--group_size", "2", "--resume", "false"])
    assert (args.group_size, args.learning_rate, args.reward, args.resume) == (2, 3e-6, "toolorchestra", False)
    cfg.write_text('{"group_sise": 4}')
    with pytest.raises(ValueError, match="group_sise"):
        runtime.parse_config(grpo.GRPOArgs, ["--config", str(cfg)])


# ------------------------------------------------------------------------------------------- the loss
def test_ppo_loss_gives_masked_tokens_exactly_zero_gradient() -> None:
    gen = torch.Generator().manual_seed(0)
    shape = (3, 11)
    mask = (torch.rand(shape, generator=gen) > 0.5).float()
    new_lp = (-torch.rand(shape, generator=gen) * 3).requires_grad_(True)
    old_lp = new_lp.detach() + 0.3 * torch.randn(shape, generator=gen)
    ref_lp = new_lp.detach() + 0.3 * torch.randn(shape, generator=gen)
    adv = torch.randn(shape, generator=gen)
    entropy = torch.rand(shape, generator=gen).requires_grad_(True)
    row_w = torch.full((3, 1), 1.0 / mask.sum())
    args = grpo.GRPOArgs(kl_coef=0.1, entropy_coef=0.01)
    loss, metrics = grpo.ppo_token_loss(new_lp, old_lp, adv, mask, row_w, args, ref_lp, entropy)
    loss.backward()
    off = mask == 0
    assert torch.isfinite(loss)
    assert torch.all(new_lp.grad[off] == 0) and torch.all(entropy.grad[off] == 0)
    assert torch.all(new_lp.grad[~off] != 0)
    # Extreme values on masked tokens (what tool tokens carry: logprob 0 from the sampler) change nothing.
    wild_old, wild_adv, wild_ref = old_lp.clone(), adv.clone(), ref_lp.clone()
    wild_old[off], wild_adv[off], wild_ref[off] = -1e4, 1e6, 1e4
    loss2, _ = grpo.ppo_token_loss(new_lp, wild_old, wild_adv, mask, row_w, args, wild_ref, entropy)
    assert loss2.item() == loss.item()
    assert float(metrics["tokens"]) == float(mask.sum())


# ------------------------------------------------------------------------------------------- SFT
def test_sft_trains_on_manager_tokens_and_resumes_exactly(tiny: Path, sft_data: Path, tmp_path: Path) -> None:
    base = sft.SFTArgs(model_path=str(tiny), data=str(sft_data), total_steps=4, batch_size=4, micro_batch_size=2,
                       learning_rate=3e-3, save_every=2)
    straight = sft.main(replace(base, output_dir=str(tmp_path / "a")))
    losses = [json.loads(line)["loss"] for line in (tmp_path / "a" / "sft_metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 4 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    sft.main(replace(base, output_dir=str(tmp_path / "b"), total_steps=2))
    resumed = sft.main(replace(base, output_dir=str(tmp_path / "b")))
    _assert_same_weights(straight, resumed)


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k, v in wa.items():
        assert torch.equal(v, wb[k]), k


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))
