"""The one check for configuration text that is pasted into a model's prompt (pool model names and the like).

A model id from a pool file is written verbatim into the manager's system prompt and tool list; a newline
or a chat-template sequence in it (``<|im_end|>``, ``</tool_call>``, ``<think>``) would end the system
turn, forge a tool call or open a reasoning block, and so rewrite the prompt the model is trained on.
Such text is therefore refused where it is read, not escaped where it is rendered, and this module is the
single definition of what is refused.
"""
from __future__ import annotations

import re
import unicodedata

# Unicode categories refused anywhere in prompt text: controls (newline and tab included), format characters
# (zero-width and bidirectional overrides), surrogates, private use, and the line / paragraph separators.
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})

# Chat-template control sequences: special-token delimiters of ChatML / Qwen / Llama 3 (``<|...|>``) and their
# full-width DeepSeek form, the Hermes / Qwen3 tool and reasoning tags, Gemma turn tags, Llama 2 / Mistral markers.
FORBIDDEN_SEQUENCES = re.compile(  # a whole special token first, so that the error shows it
    r"<\|[^|<>\s]{0,64}\|>|<\uff5c[^\uff5c<>\s]{0,64}\uff5c>|<\||\|>|<\uff5c|\uff5c>"
    r"|</?\s*(?:tool_call|tool_response|tools|think|im_start|im_end|start_of_turn|end_of_turn|s)\s*/?>"
    r"|\[/?INST\]|<</?SYS>>",
    re.IGNORECASE,
)


class PromptTextError(ValueError):
    """Text meant for a prompt that is not a string, too long, or holds a forbidden character or sequence."""


def check_prompt_text(field: str, value: object, *, max_len: int = 128) -> str:
    """``value`` if it is a non-empty string of at most ``max_len`` characters that is safe to paste into a
    prompt; else ``PromptTextError`` naming ``field``, the offending part and what is allowed."""
    if not isinstance(value, str):
        raise PromptTextError(f"{field}: expected a string, got {type(value).__name__}")
    if not value.strip():
        raise PromptTextError(f"{field}: expected a non-empty string, got {value!r}")
    if len(value) > max_len:
        raise PromptTextError(f"{field}: expected at most {max_len} characters, got {len(value)} "
                              f"({value[:40]!r}...)")
    for i, char in enumerate(value):
        category = unicodedata.category(char)
        if category in FORBIDDEN_CATEGORIES:
            raise PromptTextError(
                f"{field}: character {char!r} (U+{ord(char):04X}, category {category}) at position {i} of "
                f"{_shown(value)} is not allowed in prompt text (no control, format or line-separator "
                f"characters, newlines included)")
    match = FORBIDDEN_SEQUENCES.search(value)
    if match:
        raise PromptTextError(
            f"{field}: {match.group()!r} at position {match.start()} of {_shown(value)} is a chat-template "
            f"control sequence, not allowed in prompt text (no '<|', '|>', <tool_call>, <think> or similar tags)")
    return value


def _shown(value: str) -> str:
    """``value`` quoted for an error message, cut to 80 characters."""
    return repr(value) if len(value) <= 80 else f"{value[:80]!r}..."
