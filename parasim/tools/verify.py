"""Answer extraction and verification: what scores an episode's final answer against the gold one.

Four kinds, chosen per task (:func:`kind_for`): ``math`` answers are compared as mathematical
objects by math-verify (``1/2`` = ``0.5`` = ``\\frac12``, ``x^2+1`` = ``1+x^2``); ``choice`` answers
by option letter (or the option's text); ``exact`` answers by exact match after SQuAD / Search-R1
normalization (case, punctuation, articles, whitespace), against any of the gold aliases; ``code``
answers (LiveCodeBench-style stdin/stdout problems) by running the response's program on the tests
in the python sandbox (:func:`verify_code`).

Extraction looks, in order, for the last ``<answer>...</answer>`` (Search-R1), the last
``\\boxed{...}`` (math benchmarks, braces matched), and the last "Answer:" / "the answer is" phrase;
multiple choice then reads an option letter out of that. Model text is untrusted: every function
here returns a value for any input and never raises on it (malformed LaTeX, unbalanced braces,
megabytes of text); configuration mistakes (an unknown kind) still raise.

math-verify bounds its own work with SIGALRM, which only the main thread may use; elsewhere it runs
without a timeout, so callers in worker threads should keep answers short (extraction already cuts
a response down to its final answer).
"""
from __future__ import annotations

import enum
import re
import string
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parasim.protocol.schema import Domain, Status

if TYPE_CHECKING:
    from parasim.tools.sandbox import Sandbox

MAX_SCAN_CHARS = 20000  # only the end of a response can hold its final answer; bounds regex cost
MAX_MATH_CHARS = 1000  # longer "answers" are prose, not a final answer: never handed to math-verify
LETTERS = string.ascii_uppercase


class AnswerKind(str, enum.Enum):  # noqa: UP042 (StrEnum would change str(kind), which messages print)
    """How a task's answer is checked."""

    MATH = "math"
    CHOICE = "choice"
    EXACT = "exact"
    CODE = "code"


@dataclass(frozen=True)
class Verdict:
    """A verification: whether it is right, what was read from the response, and why."""

    correct: bool
    extracted: str | None
    kind: AnswerKind
    reason: str = ""


def kind_for(domain: Domain | int, num_options: int = 0) -> AnswerKind:
    """The checking rule of a task: options make it multiple choice, math is math, code runs tests,
    the rest is exact match."""
    if num_options > 1:
        return AnswerKind.CHOICE
    return {Domain.MATH: AnswerKind.MATH, Domain.CODE: AnswerKind.CODE}.get(Domain(domain), AnswerKind.EXACT)


def answer_kind(domain: Domain | int, num_options: int = 0) -> AnswerKind:
    """How the answers of a task with a gold answer string are compared: ``kind_for``, but exact match for code (a
    task file's code answer is the program's expected output, not a test suite)."""
    kind = kind_for(domain, num_options)
    return AnswerKind.EXACT if kind is AnswerKind.CODE else kind


# ---------------------------------------------------------------------------------------------- extraction

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Every run of blanks is one quantifier next to a literal: two adjacent ones over the same characters
# backtrack quadratically, and a response of 20k spaces or newlines would stall scoring for seconds.
_ANSWER_PHRASE = re.compile(r"answer[ \t]*(?:is|:)[ \t*]*(\S.*)", re.IGNORECASE)


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces, or None."""
    if not isinstance(text, str):
        return None
    text = text[-MAX_SCAN_CHARS:]
    closing: dict[int, int] = {}  # brace pairs in one pass, so a thousand \boxed{ cost no more than one
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closing[stack.pop()] = i
    for match in reversed(list(_BOXED.finditer(text))):
        end = closing.get(match.end() - 1)
        if end is not None:
            return text[match.end():end].strip()
    return None


_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}")


def _clean(candidate: str) -> str:
    """Strip what wraps a final answer in prose: markdown emphasis, $...$, a trailing period."""
    s, prev = candidate.strip(), None
    while s != prev:
        prev = s
        s = s.strip("*_` ").rstrip(".").strip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s[1:-1].strip()
        wrapped = _TEXT_WRAPPER.fullmatch(s)
        if wrapped:
            s = wrapped.group(1).strip()
    return s


def extract_final(text: str) -> str | None:
    """The response's final answer as a string (answer tag, then boxed, then an "Answer:" phrase)."""
    if not isinstance(text, str):
        return None
    text = text[-MAX_SCAN_CHARS:]
    tags = _ANSWER_TAG.findall(text)
    if tags:
        inner = tags[-1]
        return _clean(extract_boxed(inner) or inner)
    boxed = extract_boxed(text)
    if boxed is not None:
        return _clean(boxed)
    phrases = _ANSWER_PHRASE.findall(text)
    if phrases:
        line = phrases[-1].strip().splitlines()[0] if phrases[-1].strip() else ""
        return _clean(line) or None
    return None


def _letter_pattern(n: int) -> str:
    return f"[A-{LETTERS[max(n, 1) - 1]}]"


def extract_choice(text: str, num_options: int, options: Sequence[str] = ()) -> str | None:
    """The option letter a response picks (``A``..), or None.

    The final answer is read first (a bare letter, "(B)", "B. text", or an option's exact text); then
    prose such as "the answer is (C)" / "Option C"; then a line holding only a letter. Letters must be
    capitals, so the article "a" or the pronoun "I" in prose never count as a pick.
    """
    if not isinstance(text, str) or num_options < 1:
        return None
    letter = _letter_pattern(min(num_options, len(LETTERS)))
    final = extract_final(text)
    if final is not None:
        m = re.fullmatch(rf"\(?({letter})\)?(?:[.):]\s*.*)?", final.strip("* "), re.DOTALL)
        if m:
            return m.group(1)
        norm = normalize_text(final)
        for i, option in enumerate(options[:num_options]):
            if norm and norm == normalize_text(option):
                return LETTERS[i]
    tail = text[-MAX_SCAN_CHARS:]
    for pattern in (rf"(?i:answer|option|choice)[ \t]*(?:(?i:is)|:)?[ \t*]*\(?({letter})\)?(?![A-Za-z])",
                    rf"(?m)^[ \t*]*\(?({letter})\)?[.):]?[ \t*]*$"):
        hits = re.findall(pattern, tail)
        if hits:
            return hits[-1]
    return None


# ---------------------------------------------------------------------------------------------- matching

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_text(s: str) -> str:
    """SQuAD / Search-R1 answer normalization: lowercase, no punctuation or articles, single spaces."""
    s = "".join(ch for ch in str(s).lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def _timeout() -> int | None:
    return 5 if threading.current_thread() is threading.main_thread() else None


def _parse_answer(s: str) -> list:
    """math-verify parse of an answer string; wrapping it in \\boxed{} makes bare LaTeX parse as LaTeX."""
    from math_verify import parse

    return parse(f"\\boxed{{{s}}}", parsing_timeout=_timeout()) or parse(s, parsing_timeout=_timeout())


def _math_match(prediction: list, gold: str) -> bool:
    from math_verify import verify as mv_verify

    try:
        gold_parsed = _parse_answer(gold)
        return bool(gold_parsed and prediction and mv_verify(gold_parsed, prediction, timeout_seconds=_timeout()))
    except Exception:  # noqa: BLE001 -- sympy / math-verify failures on odd input mean a wrong answer
        return False


def math_equal(prediction: str, gold: str) -> bool:
    """Whether two answer strings are the same mathematical object (False when either fails to parse)."""
    try:
        return _math_match(_parse_answer(prediction), gold)
    except Exception:  # noqa: BLE001 -- as above, for parsing the prediction
        return False


def _gold_letter(gold: str | int, num_options: int, options: Sequence[str]) -> str | None:
    if isinstance(gold, int) and not isinstance(gold, bool):
        return LETTERS[gold] if 0 <= gold < num_options else None
    g = str(gold).strip().strip("()").upper()
    if len(g) == 1 and g in LETTERS[:num_options]:
        return g
    for i, option in enumerate(options[:num_options]):
        if normalize_text(option) == normalize_text(str(gold)):
            return LETTERS[i]
    return None


def verify(response: str, gold: str | int | Sequence[str], kind: AnswerKind | str, *,
           num_options: int = 0, options: Sequence[str] = ()) -> Verdict:
    """Score a model response against the gold answer (aliases allowed for exact match).

    ``num_options`` (or ``options``, the option texts in letter order) is required for ``choice``.
    """
    kind = AnswerKind(kind)
    if kind is AnswerKind.CODE:
        raise ValueError("verify: code answers need tests and a sandbox; use verify_code")
    want = None
    if kind is AnswerKind.CHOICE:
        num_options = num_options or len(options)
        if num_options < 2:
            raise ValueError(f"verify: kind=choice needs num_options >= 2, got {num_options}")
        want = _gold_letter(gold if isinstance(gold, (str, int)) else gold[0], num_options, options)
        if want is None:
            raise ValueError(f"verify: gold {gold!r} is not an option letter, index or option text")
    if not isinstance(response, str):
        return Verdict(False, None, kind, f"response is {type(response).__name__}, not text")
    try:
        if want is not None:
            got = extract_choice(response, num_options, options)
            return Verdict(got == want, got, kind, "" if got else "no option letter found")
        return _verify_free(response, gold, kind)
    except Exception as exc:  # noqa: BLE001 -- last line of defence: model text never crashes scoring
        return Verdict(False, None, kind, f"verification failed: {type(exc).__name__}")


def _verify_free(response: str, gold: str | int | Sequence[str], kind: AnswerKind) -> Verdict:
    golds = [gold] if isinstance(gold, (str, int)) else list(gold)
    extracted = extract_final(response)
    if kind is AnswerKind.MATH:
        if extracted is None:  # no marked answer: let math-verify's own extraction read the last lines
            from math_verify import parse

            tail = "\n".join(response[-MAX_SCAN_CHARS:].strip().splitlines()[-3:])[-MAX_MATH_CHARS:]
            parsed = parse(tail, parsing_timeout=_timeout()) if tail else []
            ok = any(_math_match(parsed, str(g)) for g in golds)
            return Verdict(ok, str(parsed[-1]) if parsed else None, kind,
                           "no marked final answer; parsed the last lines")
        if len(extracted) > MAX_MATH_CHARS:
            return Verdict(False, extracted[:MAX_MATH_CHARS], kind, "final answer too long to be one")
        return Verdict(any(math_equal(extracted, str(g)) for g in golds), extracted, kind)
    lines = response.strip().splitlines()
    candidate = extracted if extracted is not None else (lines[-1] if lines else "")
    norm = normalize_text(candidate)
    ok = bool(norm) and any(norm == normalize_text(str(g)) for g in golds)
    return Verdict(ok, candidate or None, kind, "" if extracted is not None else "no marked answer; used last line")


# ---------------------------------------------------------------------------------------------- code

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The program in a response: its last fenced block tagged python (else its last fenced block),
    an unclosed final fence included, since models often stop before closing it."""
    if not isinstance(text, str):
        return None
    blocks = _FENCE.findall(text[-4 * MAX_SCAN_CHARS:])
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    chosen = (python or [body for _, body in blocks] or [None])[-1]
    return chosen if chosen and chosen.strip() else None


def _same_output(got: str, expected: str, tol: float = 1e-6) -> bool:
    """LiveCodeBench-style comparison: line by line, surrounding whitespace ignored, numbers within ``tol``."""
    got_lines, want_lines = got.strip().splitlines(), expected.strip().splitlines()
    if len(got_lines) != len(want_lines):
        return False
    for g_line, w_line in zip(got_lines, want_lines):
        g_tok, w_tok = g_line.split(), w_line.split()
        if len(g_tok) != len(w_tok):
            return False
        for g, w in zip(g_tok, w_tok):
            if g == w:
                continue
            try:
                if abs(float(g) - float(w)) > tol * max(1.0, abs(float(w))):
                    return False
            except ValueError:
                return False
    return True


async def verify_code(response: str, tests: Sequence[tuple[str, str]], sandbox: Sandbox, *,
                      max_concurrency: int = 4) -> Verdict:
    """Run the response's program on each ``(stdin, expected stdout)`` test; right only if all pass.

    Each test is a separate sandboxed run with the sandbox's limits, so a program that hangs or
    crashes fails its test (the reason names the first failing test and how it failed).
    """
    import asyncio

    if not tests:
        raise ValueError("verify_code: needs at least one (stdin, expected) test")
    code = extract_code(response)
    if code is None:
        return Verdict(False, None, AnswerKind.CODE, "no code block found")
    gate = asyncio.Semaphore(max_concurrency)

    async def run(stdin: str) -> tuple[Status, str]:
        async with gate:
            res = await sandbox.arun(code, stdin=stdin)
            return res.status, res.output

    outcomes = await asyncio.gather(*(run(stdin) for stdin, _ in tests))
    for i, ((status, output), (_, expected)) in enumerate(zip(outcomes, tests)):
        if status is not Status.OK:
            return Verdict(False, code, AnswerKind.CODE, f"test {i}: {status.name}")
        if not _same_output(output, expected):
            return Verdict(False, code, AnswerKind.CODE, f"test {i}: wrong output")
    return Verdict(True, code, AnswerKind.CODE, f"passed {len(tests)} tests")
