"""Answer extraction and verification: the forms models really write, and text that must not crash it."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parasim.protocol.schema import Domain
from parasim.tools.sandbox import Sandbox, SandboxConfig, probe_bwrap
from parasim.tools.verify import (
    AnswerKind,
    _same_output,
    extract_boxed,
    extract_choice,
    extract_code,
    extract_final,
    kind_for,
    math_equal,
    normalize_text,
    verify,
    verify_code,
)


@pytest.mark.parametrize("text,expected", [
    (r"so \boxed{42}", "42"),
    (r"first \boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\left\{ x \mid x^{2} > 1 \right\}}", r"\left\{ x \mid x^{2} > 1 \right\}"),
    (r"\fbox{7}", "7"),
    (r"\boxed {3}", "3"),
    (r"\boxed{unclosed", None),
    ("no box", None),
])
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("reasoning...\n<answer> Paris </answer>", "Paris"),
    (r"<answer>\boxed{5}</answer>", "5"),
    ("Final Answer: **$x = 3$**.", "x = 3"),
    (r"so \boxed{\text{Paris}}", "Paris"),
    ("We conclude.\nThe answer is 12.", "12"),
    ("answer: first\nAnswer: second", "second"),
    (r"Answer: 3, but formally \boxed{4}", "4"),  # a boxed answer outranks prose
    ("nothing marked here", None),
])
def test_extract_final(text: str, expected: str | None) -> None:
    assert extract_final(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("The correct answer is **B**.", "B"),
    ("Answer: (C)", "C"),
    (r"\boxed{D}", "D"),
    (r"\boxed{\text{(B)}}", "B"),
    ("After weighing the options, option A is right.", "A"),
    ("Reasoning here.\n\n**C**\n", "C"),
    ("Answer: C. Because the reaction is exothermic", "C"),
    ("I think a good choice is hard to make.", None),  # capitals only: "I" and "a" are words
    ("The answer is (E)", None),  # out of range for 4 options
])
def test_extract_choice(text: str, expected: str | None) -> None:
    assert extract_choice(text, 4) == expected


def test_choice_by_option_text_and_gold_forms() -> None:
    options = ["London", "Paris", "Rome", "Oslo"]
    assert verify("Answer: Paris", "B", "choice", options=options).correct
    assert verify("Answer: paris.", 1, "choice", options=options).correct  # gold as index
    assert verify("The answer is (B)", "Paris", "choice", options=options).correct  # gold as option text
    assert not verify("The answer is (C)", "B", "choice", num_options=4).correct
    with pytest.raises(ValueError, match="num_options"):
        verify("A", "A", "choice")
    with pytest.raises(ValueError, match="not an option"):
        verify("A", "Z", "choice", num_options=4)


@pytest.mark.parametrize("pred,gold,ok", [
    ("0.5", r"\frac{1}{2}", True),
    (r"\dfrac12", "1/2", True),
    (r"\sqrt{18}", r"3\sqrt{2}", True),
    ("1+x^2", "x^2+1", True),
    ("1,000", "1000", True),
    ("10.0", "10", True),
    ("11", "10", False),
    (r"\pi", "3.14159", False),
    ("", "1", False),
])
def test_math_equal(pred: str, gold: str, ok: bool) -> None:
    assert math_equal(pred, gold) is ok


def test_math_verify_from_full_responses() -> None:
    assert verify(r"Thus the area is $\boxed{\frac{3}{4}}$.", "0.75", "math").correct
    assert verify("Adding them, we get 3 + 9 = 12.", "12", "math").correct  # no marker: last lines
    assert not verify(r"\boxed{13}", "12", "math").correct
    assert verify(r"\boxed{6}", ["7", "6"], "math").correct  # aliases


def test_exact_match_normalization_and_aliases() -> None:
    assert normalize_text("  The  Beatles!! ") == "beatles"
    assert verify("<answer> The Beatles </answer>", ["the fab four", "Beatles"], "exact").correct
    assert verify("Long reasoning.\nJohn Lennon", "john lennon", "exact").correct  # last line fallback
    assert not verify("<answer>Paul McCartney</answer>", "John Lennon", "exact").correct
    assert not verify("", "x", "exact").correct


def test_kind_for() -> None:
    assert kind_for(Domain.MATH) is AnswerKind.MATH
    assert kind_for(Domain.SCIENCE, 4) is AnswerKind.CHOICE
    assert kind_for(Domain.KNOWLEDGE) is AnswerKind.EXACT
    assert kind_for(Domain.CODE) is AnswerKind.CODE
    with pytest.raises(ValueError, match="verify_code"):
        verify("print(1)", "1", "code")
    with pytest.raises(ValueError):
        AnswerKind("regex")


@pytest.mark.parametrize("junk", [None, 17, b"bytes", "\\boxed{" * 2000, "}" * 5000 + r"\boxed{1",
                                  "\x00\ud800 <answer>", "$$$$" * 1000, r"\frac{\frac{\frac{", "9" * 10000,
                                  "answer:" + " " * 20000, "answer is" + " \n" * 10000, "\n" * 20000,
                                  "answer is " * 2000, "(A" * 10000])
@pytest.mark.timeout(60)  # a hang guard: quadratic regexes once took 14 s on 20k blanks (now milliseconds)
def test_junk_never_raises(junk: object) -> None:
    for kind, kw in (("math", {}), ("exact", {}), ("choice", {"num_options": 4})):
        verdict = verify(junk, "1" if kind != "choice" else "A", kind, **kw)  # type: ignore[arg-type]
        assert verdict.correct is False


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(list("\\{}$()<>/ABCD0123 ")),
                    max_size=300))
def test_fuzzed_text_never_raises(text: str) -> None:
    for kind, kw in (("math", {}), ("exact", {}), ("choice", {"num_options": 10})):
        verdict = verify(text, "7" if kind != "choice" else "B", kind, **kw)
        assert isinstance(verdict.correct, bool)


@pytest.mark.parametrize("text,expected", [
    ("Here:\n```python\nprint(1)\n```\nand a test\n```\nprint(2)\n```", "print(1)\n"),  # python tag wins
    ("```\nx = 1\n```", "x = 1\n"),
    ("```py\nfirst\n```\n```python3\nsecond\n```", "second\n"),
    ("```python\nunclosed = True\n", "unclosed = True\n"),
    ("no code at all", None),
    ("```python\n```", None),
])
def test_extract_code(text: str, expected: str | None) -> None:
    assert extract_code(text) == expected


def test_output_comparison() -> None:
    assert _same_output("1 2\n3  \n\n", "1 2\n3")
    assert _same_output("0.3333333", "0.33333333")
    assert not _same_output("1 2", "1 3")
    assert not _same_output("1\n2", "1")
    assert not _same_output("yes", "Yes")


@pytest.mark.sandbox
@pytest.mark.skipif(probe_bwrap() is not None, reason=f"sandbox unavailable: {probe_bwrap()}")
def test_verify_code_runs_tests_in_the_sandbox() -> None:
    sandbox = Sandbox(SandboxConfig(timeout_s=3))
    tests = [("1 2\n", "3\n"), ("10 -4\n", "6\n"), ("0 0\n", "0\n")]
    right = "Read two ints.\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    hangs = "```python\nwhile True:\n    pass\n```"
    verdicts = asyncio.run(_verify_all(sandbox, [right, wrong, hangs, "no code"], tests))
    assert [v.correct for v in verdicts] == [True, False, False, False]
    assert verdicts[1].reason == "test 0: wrong output"
    assert "TIMEOUT" in verdicts[2].reason
    assert verdicts[3].reason == "no code block found"


async def _verify_all(sandbox: Sandbox, responses: list[str], tests: list[tuple[str, str]]) -> list:
    return [await verify_code(r, tests, sandbox) for r in responses]
