"""A model's family and kind, read from its name: the groups whose members share part of their per-(question,
model) effect in the call model (``interaction.family``, ``interaction.kind`` of a pool file).

The family is the maker (Kim et al.'s "same provider" effect); the kind separates reasoning models (trained to think
at length before answering) from chat models, which the per-query tables show failing on different questions
(docs/simulator.md, section 8). The fit on those tables (``scripts/joint_structure.py``) and the shipped pools
(``scripts/build_pools.py``) both read the groups from here, so a model is grouped the same way in both.
"""
from __future__ import annotations

# name prefix (lower case) -> maker
MAKERS = (("claude", "anthropic"), ("chatgpt", "openai"), ("gpt", "openai"), ("o1", "openai"), ("o4", "openai"),
          ("gemini", "google"), ("gemma", "google"), ("llama", "meta"), ("qwen", "qwen"), ("mixtral", "mistral"),
          ("mathstral", "mistral"), ("codestral", "mistral"), ("yi-", "01ai"), ("phi-", "microsoft"),
          ("deepseek", "deepseek"), ("reka", "reka"), ("grok", "xai"))
# Reasoning models by name prefix (lower case), and any model whose name says "thinking" (Qwen3's *-Thinking-2507
# checkpoints, Gemini's Flash Thinking); every other model is a chat model. The prefixes were chosen in session 10
# after the held-out per-pair table had been read (section 8 says so); "thinking" was added in session 11 for the
# pools' Qwen3 thinking checkpoints and moves no model of the shipped tables (Gemini-Flash-2.0-Thinking, their one
# such name, is matched by its prefix).
REASONING = ("o1", "o3", "o4", "grok-3-mini", "gemini-2.5", "gemini-flash-2.0-thinking", "deepseek-r1", "qwq",
             "gpt-oss")
REASONING_WORD = "thinking"


def kind_of(model: str) -> str:
    """A model's kind, from its name: "reasoning" or "chat"."""
    low = model.lower()
    return "reasoning" if low.startswith(REASONING) or REASONING_WORD in low else "chat"


def family_of(model: str) -> str | None:
    """The maker of a model, from its name (None when unknown)."""
    low = model.lower().removeprefix("meta-")
    for prefix, maker in MAKERS:
        if low.startswith(prefix):
            return maker
    return None


def family_label(maker: str, kind: str) -> str:
    """The family of one maker's models of one kind: families nest in kinds (``joint_fit.kind_of_groups``)."""
    return f"{maker}/{kind}"


def pool_family(model: str, kind: str | None = None) -> str:
    """A pool model's family: its maker (or, unknown, its own name) within its kind (``kind``, or ``kind_of``)."""
    return family_label(family_of(model) or model, kind or kind_of(model))
