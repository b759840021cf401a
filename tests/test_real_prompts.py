"""Answers and verdicts are read out of model text in linear time, and as before on every other reply.

The extractors run on the event loop that all episodes of a real-tools run share, on untrusted text. Their old
patterns backtracked quadratically on whitespace runs: ``^\\s*answer`` rescanned a run of blank lines from each of
its line starts, and ``\\s*\\**\\s*`` tried every split of a run between its two ``\\s*`` (10,000 newlines took
2 s, ``"Verdict:"`` and 40,000 spaces about 2 minutes). The hostile shapes here are 1 MiB each: on the old
patterns the whitespace floods among them run into the hang guard, and the others (runs the old patterns happened
to read in one pass, many marker words) keep a new pattern from being slow on them instead. The reference below is
the old extractor, kept verbatim to check that answers on normal replies, and on random texts made of the markers'
pieces, are unchanged.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parasim.real import prompts

MIB = 2**20

_OLD_FINAL = re.compile(r"final\s+answer\s*[:：]\s*(.+)", re.IGNORECASE)
_OLD_ANSWER = re.compile(r"^\s*answer\s*[:：]\s*(.+)", re.IGNORECASE | re.MULTILINE)
_OLD_VERDICT = re.compile(r"verdict\s*[:：]\s*\**\s*(correct|wrong|incorrect)", re.IGNORECASE)


def _old_extract_answer(text: str) -> str:
    """``prompts.extract_answer`` before the fix (quadratic on whitespace runs): the reference for normal text."""
    finals = _OLD_FINAL.findall(text or "")
    if finals:
        return finals[-1].strip().strip("*").strip()
    boxed = prompts._last_boxed(text or "")
    if boxed:
        return boxed
    answers = _OLD_ANSWER.findall(text or "")
    if answers:
        return answers[-1].strip()
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _old_review_verdict(text: str) -> bool | None:
    found = _OLD_VERDICT.findall(text or "")
    return None if not found else found[-1].lower() in ("wrong", "incorrect")


# name -> (text, answer, verdict)
HOSTILE: dict[str, tuple[str, str, bool | None]] = {
    "newlines": ("\n" * MIB, "", None),
    "crlf": ("\r\n" * (MIB // 2), "", None),
    "spaces_and_newlines": (" \n\t" * (MIB // 3), "", None),
    "unicode_line_breaks": ("\u2028\x85\x0b" * (MIB // 3), "", None),
    "verdict_spaces": ("Verdict:" + " " * MIB, "Verdict:", None),
    "verdict_newlines": ("Verdict:" + "\n" * MIB, "Verdict:", None),
    "verdict_spaced_stars": ("Verdict:" + " *" * (MIB // 2), "Verdict:" + " *" * (MIB // 2), None),
    "verdict_flood_then_verdict": ("Verdict:" + "\n" * MIB + "Verdict: WRONG", "Verdict: WRONG", True),
    "final_answer_newlines": ("Final answer:" + "\n" * MIB, "Final answer:", None),
    "answer_colon_newlines": ("Answer:" + "\n" * MIB, "Answer:", None),
    "newlines_then_answer": ("\n" * MIB + "  Answer: 42", "42", None),
    "newlines_then_answer_word": ("\n" * MIB + "answer 42", "answer 42", None),
    "blank_lines_of_spaces": ((" " * 63 + "\n") * (MIB // 64) + "x", "x", None),
    "many_answer_words": ("\nanswer " * (MIB // 8), "answer", None),
}


@pytest.mark.timeout(60)  # a hang guard only: each shape takes well under a second
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_replies_are_read_in_linear_time(name: str):
    text, answer, verdict = HOSTILE[name]
    assert prompts.extract_answer(text) == answer
    assert prompts.review_verdict(text) is verdict
    assert prompts.extract_code(text) is None


NORMAL: list[tuple[str, str, bool | None]] = [
    ("Step 1: think.\nFinal answer: 42", "42", None),
    ("The steps check out.\nVerdict: CORRECT\nFinal answer: 42", "42", False),
    ("I will compute it.\n```python\nprint('42')\n```\nFinal answer: 42", "42", None),
    ("**Final answer:** 7", "7", None),
    ("Final Answer：  x = 3  ", "x = 3", None),
    ("final\n answer :\n\n 12", "12", None),
    ("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}", None),
    ("Answer: (C)\n", "(C)", None),
    ("Reasoning.\n\n\n   answer: B\n\nthanks", "B", None),
    ("answer: 1\nAnswer: 2\n", "2", None),
    ("the answer: is here\nno", "no", None),
    ("a\n\nlast line  ", "last line", None),
    ("line one\r\nline two\r\n\r\n", "line two", None),
    ("Verdict: **WRONG**\nThe sum is off.\nFinal answer: 41", "41", True),
    ("**Verdict:** INCORRECT\nFinal answer: 5", "5", True),
    ("verdict:\n\n  correct\nAnswer: 9", "9", False),
    ("Verdict :\t* wrong", "Verdict :\t* wrong", True),
    ("Verdict: * * WRONG", "Verdict: * * WRONG", None),
    ("Verdict: CORRECT\n...\nVerdict: WRONG", "Verdict: WRONG", True),
    ("No verdict here.\nFinal answer: 3", "3", None),
    ("#0 standard_reasoner (good) [OK] answer: 42\nFinal answer: 42", "42", None),
    ("", "", None),
    ("   \n\t\n", "", None),
]


@pytest.mark.parametrize(("text", "answer", "verdict"), NORMAL)
def test_normal_replies_read_as_with_the_old_patterns(text: str, answer: str, verdict: bool | None):
    assert (prompts.extract_answer(text), prompts.review_verdict(text)) == (answer, verdict)
    assert (_old_extract_answer(text), _old_review_verdict(text)) == (answer, verdict)


_PIECES = ["answer", "Answer", "final", "Final answer", "verdict", "Verdict", ":", "：", "correct", "WRONG",
           "incorrect", "42", "x", "\\boxed{", "}", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u2028", "\x85", "*", "**"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40))
def test_answers_are_unchanged_on_texts_of_marker_pieces(pieces: list[str]):
    text = "".join(pieces)
    assert prompts.extract_answer(text) == _old_extract_answer(text)
    assert prompts.review_verdict(text) == _old_review_verdict(text)
