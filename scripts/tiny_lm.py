"""A tiny random Qwen3-architecture causal LM with a locally trained tokenizer, for CPU tests and the GPU check.

A generator, kept out of the wheel: the tests (``scripts`` is on pytest's path), ``scripts/gpu_bench.py`` and
``python scripts/tiny_lm.py OUT_DIR`` use it.

Why: every line of the LLM training path (SFT, GRPO rollouts, weight pushes to a vLLM server) must run in CI
without a GPU and without hub access. A model of Qwen3's *architecture* (``Qwen3ForCausalLM``: q/k norms, GQA,
tied embeddings) exercises the same code paths in ``transformers`` and vLLM as Qwen3-4B, at a size that runs in
milliseconds. The tokenizer is byte-level BPE (as Qwen's) trained here on a small built-in text, with the special
tokens and the chat template the Qwen3 tool-calling format (``<tool_call>`` blocks, Hermes style) needs.

Everything is deterministic for a seed: the tokenizer training is deterministic on a fixed text, and the weights
come from ``torch.manual_seed(seed)``.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Special tokens: removed by ``skip_special_tokens`` and never produced by BPE merges.
SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Added but *not* special, as in Qwen3: a detokenizer that skips special tokens (vLLM's default) must keep them,
# or the tool-call parser never sees the blocks.
ADDED_TOKENS: tuple[str, ...] = (
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)

# A Qwen3-style chat template (ChatML turns, tool schema in the system turn, tool results folded into a user turn
# as <tool_response> blocks, assistant tool calls rendered as <tool_call> JSON blocks).
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls | default([]) %}"
    "{%- set fn = tool_call.function if tool_call.function is defined else tool_call %}"
    "{%- if loop.first and message.content %}{{- '\\n' }}{%- elif not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' }}"
    "{%- if fn.arguments is string %}{{- fn.arguments }}{%- else %}{{- fn.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Training text for the BPE merges: the vocabulary the manager conversations actually use (tool names, JSON,
# statuses, numbers), so that tokens per character stay near a real tokenizer's and sequences stay short.
_CORPUS = """\
You are the manager. Solve the task by calling tools. Each round you may issue up to four parallel calls.
<tool_call>
{"name": "standard_reasoner", "arguments": {"model": "qwen3-30b-a3b", "subtask": "Solve the equation 3x + 5 = 20."}}
</tool_call>
<tool_call>
{"name": "code_reasoner", "arguments": {"model": "qwen3-coder-30b-a3b", "subtask": "Write python that sums 1..100."}}
</tool_call>
<tool_call>
{"name": "critical_reviewer", "arguments": {"model": "gpt-oss-20b", "subtask": "Check the answer 5 for 3x + 5 = 20."}}
</tool_call>
<tool_call>
{"name": "knowledge_searcher", "arguments": {"model": "qwen3-30b-a3b", "subtask": "Who wrote the paper?"}}
</tool_call>
<tool_call>
{"name": "ensemble_solver", "arguments": {"model": "gpt-oss-20b", "subtask": "What is 17 * 23?"}}
</tool_call>
<tool_call>
{"name": "python", "arguments": {"code": "print(sum(range(1, 101)))"}}
</tool_call>
<tool_call>
{"name": "search", "arguments": {"query": "capital of Australia"}}
</tool_call>
<tool_call>
{"name": "final_answer", "arguments": {"answer": "5"}}
</tool_call>
<tool_response>
{"status": "OK", "output": "x = 5", "tokens_in": 120, "tokens_out": 348, "cost_units": 1.0, "latency_s": 2.41}
</tool_response>
<tool_response>
{"status": "EXEC_ERR", "output": "Traceback (most recent call last): NameError", "tokens_in": 80, "tokens_out": 0}
</tool_response>
<tool_response>
{"status": "TIMEOUT", "output": "", "latency_s": 60.0}
</tool_response>
<tool_response>
{"status": "FORMAT_ERR", "output": "could not parse the call"}
</tool_response>
<tool_response>
{"status": "INVALID_TOOL", "output": "unknown tool"}
</tool_response>
<tool_response>
{"status": "BUDGET_EXCEEDED", "output": "the round limit was reached"}
</tool_response>
The reviewer flags the leading answer as wrong. The previous call failed, so retry it with a simpler subtask.
Question: A train travels 120 km in 2 hours. What is its average speed in km per hour? Answer: 60.
Question: Which of the following is a prime number? (A) 21 (B) 27 (C) 29 (D) 33. Answer: (C).
Question: What is the derivative of x^2 + 3x? Answer: 2x + 3. The sum of the first 100 integers is 5050.
Let me think step by step about the problem, compare the candidate answers, and decide which tool to call next.
0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 0.5 1.25 3.14 -1 true false null [] {} () , . : ; ' " \\ / + - * = < > _ #
"""


def _corpus_lines() -> list[str]:
    """The built-in text plus ParaOrchText-v0's system prompt for the shipped ``paramanager`` pool, one line per
    training sample. Merges may span words (no regex pre-split, unlike Qwen's tokenizer), so the long, fixed
    prompt (rules, model cards, JSON tool list) compresses to a few hundred tokens and CPU tests stay fast."""
    from envs.paraorch_text import describe_models
    from parasim.protocol.tool_schema import render_system_prompt

    return (_CORPUS + render_system_prompt(describe_models("paramanager"))).splitlines(keepends=True)


@dataclass(frozen=True)
class TinyLMSpec:
    """Sizes of the tiny model. head_dim 32 because vLLM's CPU attention kernels accept only some head sizes
    (32 is the smallest common one); vocab 1024 keeps the embedding small while leaving room for real merges."""

    vocab_size: int = 1024
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 16384


def build_tokenizer(vocab_size: int = TinyLMSpec.vocab_size, *, corpus: Sequence[str] | None = None,
                    split_digits: bool = False):
    """Train a byte-level BPE tokenizer and wrap it as a ``PreTrainedTokenizerFast``.

    Byte-level means every string is encodable (model output never hits an unknown token), as with Qwen's own.
    ``corpus`` (lines of text) replaces the built-in training text (the manager's conversations), for models that
    see other text; ``split_digits`` makes every digit a token of its own (as Qwen's and Llama's tokenizers do),
    so that numbers are spelled the same way wherever they occur and digit-by-digit arithmetic is learnable.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(ADDED_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus_lines() if corpus is None else list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=TinyLMSpec.max_position_embeddings,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(list(ADDED_TOKENS), special_tokens=False)
    fast.chat_template = CHAT_TEMPLATE
    if len(fast) > vocab_size:
        raise ValueError(f"vocab_size={vocab_size} is smaller than the tokenizer's {len(fast)} tokens")
    return fast


def qwen3_config(spec: TinyLMSpec, tokenizer):
    """The ``Qwen3Config`` of a model of ``spec``'s sizes whose special token ids are ``tokenizer``'s."""
    from transformers import Qwen3Config

    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="float32",
    )
    config.architectures = ["Qwen3ForCausalLM"]
    return config


def save_checkpoint(model, tokenizer, out_dir: str | Path, meta: dict) -> Path:
    """Write ``model`` (safetensors, with a sampling generation config), ``tokenizer`` and ``meta`` (as
    ``parasim_tiny_lm.json``) to ``out_dir``, in the form transformers and a vLLM server both load offline."""
    from transformers import GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    eos_id, pad_id = model.config.eos_token_id, model.config.pad_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id,
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _add_legacy_keys(out)
    (out / "parasim_tiny_lm.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out


def build_tiny_lm(out_dir: str | Path, seed: int = 0, spec: TinyLMSpec | None = None) -> Path:
    """Write a random Qwen3ForCausalLM (safetensors), its tokenizer and generation config to ``out_dir``.

    The directory loads with ``AutoModelForCausalLM.from_pretrained``, ``AutoTokenizer.from_pretrained`` and a vLLM
    server, all offline. Returns the directory.
    """
    import torch
    from transformers import Qwen3ForCausalLM

    spec = spec or TinyLMSpec()
    tokenizer = build_tokenizer(spec.vocab_size)
    config = qwen3_config(spec, tokenizer)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Qwen3ForCausalLM(config).to(torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    return save_checkpoint(model, tokenizer, out_dir, {"seed": seed, **spec.__dict__})


def _add_legacy_keys(out: Path) -> None:
    """Add the keys transformers 4.x reads, so that a vLLM environment pinned to an older transformers loads the
    directory too: ``rope_theta`` / ``torch_dtype`` in config.json, the generic tokenizer class and an inline chat
    template in tokenizer_config.json (transformers 5 writes ``TokenizersBackend`` and a separate .jinja file)."""
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.setdefault("rope_theta", config.get("rope_parameters", {}).get("rope_theta", 10000.0))
    config.setdefault("torch_dtype", config.get("dtype", "float32"))
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tok_path = out / "tokenizer_config.json"
    tok_config = json.loads(tok_path.read_text())
    tok_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    tok_config["chat_template"] = CHAT_TEMPLATE
    tok_path.write_text(json.dumps(tok_config, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write a tiny random Qwen3 model + tokenizer for CPU tests.")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build_tiny_lm(args.out_dir, seed=args.seed))
