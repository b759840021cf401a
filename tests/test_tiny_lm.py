"""The tiny Qwen3 test model: loads offline with the Auto classes, is deterministic, and its tokenizer speaks the
Qwen3 tool-call format (the blocks survive the detokenization vLLM uses)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_lm import ADDED_TOKENS, SPECIAL_TOKENS, build_tiny_lm, build_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny") / "m", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_loads_with_auto_classes_offline(tiny_dir: Path, tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert len(tokenizer) <= model.config.vocab_size <= len(tokenizer) + 8  # rows past the tokenizer: padding
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    ids = tokenizer("hello <tool_call>", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=5, do_sample=True)
    assert out.shape[1] > ids.shape[1]
    logits = model(ids).logits
    assert torch.isfinite(logits).all()
    assert (tiny_dir / "model.safetensors").exists()
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["rope_theta"] == 10000.0


def test_same_seed_same_bytes_other_seed_other_weights(tiny_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_lm(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    other = build_tiny_lm(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (tiny_dir / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_dir / "tokenizer.json").read_bytes()


def test_special_and_added_tokens_are_single_ids(tokenizer) -> None:
    for token in SPECIAL_TOKENS + ADDED_TOKENS:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, token
    text = '<tool_call>\n{"name": "python"}\n</tool_call><|im_end|>'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    # vLLM detokenizes with skip_special_tokens=True; the tool-call tags must survive it, <|im_end|> must not.
    assert tokenizer.decode(ids, skip_special_tokens=True) == '<tool_call>\n{"name": "python"}\n</tool_call>'


def test_chat_template_renders_tool_calls_and_responses(tokenizer) -> None:
    messages = [
        {"role": "system", "content": "You are the manager."},
        {"role": "user", "content": "What is 2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "python", "arguments": {"code": "print(2+3)"}}},
            {"type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}},
        ]},
        {"role": "tool", "content": '{"status": "OK", "output": "5"}'},
        {"role": "tool", "content": '{"status": "TIMEOUT"}'},
    ]
    tools = [{"type": "function", "function": {"name": "python", "description": "run", "parameters": {}}}]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are the manager.\n\n# Tools")
    assert '<tool_call>\n{"name": "python", "arguments": {"code": "print(2+3)"}}\n</tool_call>\n<tool_call>' in text
    assert text.count("<tool_response>") == 2 and text.count("<|im_start|>user") == 2
    assert text.endswith("<|im_start|>assistant\n")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80))
def test_byte_level_round_trip(text: str) -> None:
    tok = _shared_tokenizer()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert all(0 <= i < len(tok) for i in ids)
    if not any(t in text for t in SPECIAL_TOKENS + ADDED_TOKENS):
        assert tok.decode(ids) == text


_TOKENIZER_CACHE: list = []


def _shared_tokenizer():
    if not _TOKENIZER_CACHE:
        _TOKENIZER_CACHE.append(build_tokenizer())
    return _TOKENIZER_CACHE[0]
