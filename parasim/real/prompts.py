"""Agent tools as prompt templates, and reading an answer back out of a model's text.

ParaManager's agent tools are one model behind different instructions (standard reasoning, critical
review, code reasoning, knowledge search, an ensemble of samples); these templates are that, kept short
and fixed so that the tool, not the prompt, is what a calibration fit measures. The templates are the tool
spec's data (``real.system_prompt`` in ``parasim/tools/specs/default.json``). Every template asks for
a last line ``Final answer: ...`` (and accepts ``\\boxed{...}``, which math-tuned models write anyway),
so one extractor serves all tools and the termination model.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from parasim.protocol.schema import Tool
from parasim.tools.spec import ToolDef, default_tool_spec

_ANSWER_RULE = "End with a last line of the form 'Final answer: <answer>'."

# each agent tool's system prompt: the tool spec's ``real.system_prompt`` (parasim/tools/specs/default.json)
SYSTEM_PROMPTS: dict[Tool, str] = {
    Tool(t.index): t.system_prompt for t in default_tool_spec().tools if t.system_prompt is not None}

TERMINATION_SYSTEM = (
    "You write the final answer to a question from the work of several tools. Weigh agreeing answers from "
    "different tools and models more, discount answers a reviewer marked WRONG, and prefer checked evidence. "
    f"{_ANSWER_RULE}")


def agent_messages(tool: Tool | ToolDef, question: str, subtask: str, context: str = "",
                   options: Sequence[str] = ()) -> list[dict[str, str]]:
    """Chat messages for one agent-tool call: the tool's system prompt (a default tool's, or a spec tool's
    ``real.system_prompt``), then question, subtask and context.

    The question is always included (a subtask alone may lose what is asked); ``context`` is the output of
    the earlier call the manager chose to pass on (``context_from``).
    """
    parts = [f"Question: {question}"]
    if options:
        parts.append("Options:\n" + "\n".join(f"({chr(65 + i)}) {o}" for i, o in enumerate(options)))
    if subtask and subtask.strip() != question.strip():
        parts.append(f"Task: {subtask}")
    if context:
        parts.append(f"Earlier result:\n{context}")
    system = tool.system_prompt if isinstance(tool, ToolDef) else SYSTEM_PROMPTS[tool]
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def termination_messages(question: str, evidence: Sequence[str], manager_answer: str | None,
                         options: Sequence[str] = ()) -> list[dict[str, str]]:
    """Chat messages for the termination model: the question, each tool result, the manager's proposal."""
    parts = [f"Question: {question}"]
    if options:
        parts.append("Options:\n" + "\n".join(f"({chr(65 + i)}) {o}" for i, o in enumerate(options)))
    parts.append("Tool results:\n" + ("\n\n".join(evidence) if evidence else "(none)"))
    if manager_answer:
        parts.append(f"The manager proposes: {manager_answer}")
    return [{"role": "system", "content": TERMINATION_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str | None:
    """The last fenced Python block of a model's text, or None when it wrote none."""
    blocks = _CODE_BLOCK.findall(text or "")
    return blocks[-1] if blocks and blocks[-1].strip() else None


# Linear on any text (they run on the loop all episodes share): no pattern may rescan a whitespace run once per
# position in it. ``^\s*answer`` did, from each line start of a run of blank lines: ``^[^\S\n]*`` stops at the line's
# end and finds each ``Answer:`` from its own line start, so the matches are the same. ``\s*\**\s*`` tried every
# split of a run between its two ``\s*``: possessive quantifiers (``*+``, Python 3.11) take each part in one way,
# which loses no match, as the verdict word starts with neither a space nor a star.
_FINAL = re.compile(r"final\s+answer\s*[:：]\s*(.+)", re.IGNORECASE)
_ANSWER = re.compile(r"^[^\S\n]*answer\s*[:：]\s*(.+)", re.IGNORECASE | re.MULTILINE)
_VERDICT = re.compile(r"verdict\s*+[:：]\s*+\**+\s*+(correct|wrong|incorrect)", re.IGNORECASE)


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``, braces balanced (a regex cannot nest)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j].strip()
    return None


def extract_answer(text: str) -> str:
    """The answer a model gave: last ``Final answer:`` line, else last ``\\boxed{}``, else ``Answer:``, else
    the last non-empty line. Empty when the text is empty; never raises."""
    finals = _FINAL.findall(text or "")
    if finals:
        return finals[-1].strip().strip("*").strip()
    boxed = _last_boxed(text or "")
    if boxed:
        return boxed
    answers = _ANSWER.findall(text or "")
    if answers:
        return answers[-1].strip()
    lines = (text or "").rstrip().splitlines()  # rstrip first: a flood of trailing blank lines is never split
    return lines[-1].strip() if lines else ""


def review_verdict(text: str) -> bool | None:
    """True when a review flags the candidate as wrong, False when it accepts it, None when it says neither."""
    found = _VERDICT.findall(text or "")
    return None if not found else found[-1].lower() in ("wrong", "incorrect")


def normalize_answer(answer: str) -> str:
    """A key for voting: case, spaces, surrounding punctuation and ``$`` dropped."""
    return re.sub(r"\s+", " ", answer.strip().strip(".$ ").lower())


def majority_vote(answers: Sequence[str]) -> tuple[str, int]:
    """The most frequent non-empty answer (first seen wins ties) and its vote count; ``("", 0)`` if none."""
    keyed = [(normalize_answer(a), a) for a in answers if normalize_answer(a)]
    if not keyed:
        return "", 0
    counts = Counter(k for k, _ in keyed)
    best = max(counts.values())
    for key, original in keyed:
        if counts[key] == best:
            return original.strip(), best
    raise AssertionError("unreachable")
