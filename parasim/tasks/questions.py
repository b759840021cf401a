"""The text of a simulated task: a real public question where a licence lets parasim ship one, else generated text.

The simulator draws a task as (suite row, difficulty, distractor weights); what the manager of ParaOrchText-v0
reads is its question. Real questions come from the banks shipped in ``parasim/tasks/banks/`` (sources and
licences in ``banks/SOURCES.md``):

- ``MMLU-Pro`` rows: the 12,020 MMLU-Pro test questions (MIT), each with its options; a row of ``k`` options takes
  a question with exactly ``k`` (9,971 have 10).
- math rows (``AIME24``, ``AIME25``, ``AMC``, ``HMMT25``, ``generic_math``) with free-form answers: the 721 MATH
  level-5 problems (MIT) of ZeroEval's set. The AIME / HMMT problems themselves are not in the banks, so these rows
  read MATH problems while the simulator keeps each benchmark's own difficulty and accuracies.
- everything else (GPQA, whose authors ask that its questions not be republished in plain text; LiveCodeBench,
  whose problem statements the banks do not carry; other domains and option counts): a question generated from a
  template of the row's domain with drawn numbers, whose options (when the row has options) hold the computed
  answer and wrong values near it.

A question's ``options`` are in answer-id order: ``options[0]`` is the gold answer's text and ``options[j]`` the
text of distractor ``j`` (the simulator's answer ids, ``parasim.tasks.suites.NUM_ANSWERS``), so a text env that
shows answer id ``j`` under its label shows this text beside it. Which question a task gets is drawn from the
generator the caller passes (the task's own stream), so the same task seed gives the same question.
"""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from parasim.protocol.schema import Domain

BANK_DIR = Path(__file__).with_name("banks")
MATH_BENCHMARKS = ("AIME24", "AIME25", "AMC", "HMMT25", "generic_math")


@dataclass(frozen=True)
class Question:
    """One task's question: its text, its options in answer-id order (gold first; empty when free-form), the
    gold answer's text, and where it comes from (``"mmlu_pro:<question_id>"``, ``"math_l5:<id>"``,
    ``"generated:<template>"``)."""

    text: str
    options: tuple[str, ...]
    answer: str
    source: str


@cache
def _bank(name: str) -> tuple[dict[str, Any], ...]:
    """A shipped bank's records (read once per process)."""
    path = BANK_DIR / f"{name}.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@cache
def _mmlu_by_options() -> dict[int, tuple[int, ...]]:
    """MMLU-Pro record indices by their number of options."""
    groups: dict[int, list[int]] = {}
    for i, rec in enumerate(_bank("mmlu_pro")):
        groups.setdefault(len(rec["options"]), []).append(i)
    return {k: tuple(v) for k, v in groups.items()}


def task_question(benchmark: str, domain: int, options: int, rng: np.random.Generator) -> Question:
    """The question of a task of ``benchmark`` (a ``parasim.tasks.suites.BENCHMARKS`` name) in ``domain`` with
    ``options`` answer options (0: free-form), drawn with ``rng``: from a bank where one fits (module docstring),
    else generated."""
    if benchmark == "MMLU-Pro" and options in _mmlu_by_options():
        pick = _mmlu_by_options()[options]
        rec = _bank("mmlu_pro")[pick[int(rng.integers(len(pick)))]]
        gold = int(rec["answer_index"])
        ordered = [rec["options"][gold]] + [o for j, o in enumerate(rec["options"]) if j != gold]
        return Question(rec["question"], tuple(ordered), ordered[0], f"mmlu_pro:{rec['question_id']}")
    if benchmark in MATH_BENCHMARKS and options == 0:
        bank = _bank("math_l5")
        rec = bank[int(rng.integers(len(bank)))]
        return Question(rec["problem"], (), str(rec["answer"]), f"math_l5:{rec['id']}")
    return generated_question(Domain(int(domain)), options, rng)


# ------------------------------------------------------------------------------------------- generated questions
def _gas(rng: np.random.Generator) -> tuple[str, float, str]:
    t, p, v = int(rng.integers(250, 600)), int(rng.integers(50, 500)), round(float(rng.uniform(1, 50)), 1)
    text = (f"An ideal gas at {t} K and {p} kPa occupies {v} L. How many moles of gas does the sample hold? "
            "Use R = 8.314 J/(mol K).")
    return text, p * v / (8.314 * t), "mol"


def _fall(rng: np.random.Generator) -> tuple[str, float, str]:
    h, v0 = int(rng.integers(5, 200)), round(float(rng.uniform(0, 20)), 1)
    text = (f"A stone is thrown straight down at {v0} m/s from a height of {h} m. Ignoring air resistance, how long "
            "does it take to reach the ground? Use g = 9.81 m/s^2.")
    return text, (-v0 + math.sqrt(v0 * v0 + 2 * 9.81 * h)) / 9.81, "s"


def _modpow(rng: np.random.Generator) -> tuple[str, float, str]:
    a, b, m = int(rng.integers(2, 60)), int(rng.integers(10, 2000)), int(rng.integers(7, 500))
    return f"What is the remainder when {a}^{b} is divided by {m}?", float(pow(a, b, m)), ""


def _divisors(rng: np.random.Generator) -> tuple[str, float, str]:
    n = int(rng.integers(100, 100_000))
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return f"What is the sum of all positive divisors of {n}?", float(sum({*small, *(n // d for d in small)})), ""


def _duration(rng: np.random.Generator) -> tuple[str, float, str]:
    d, h, m = int(rng.integers(1, 40)), int(rng.integers(0, 24)), int(rng.integers(0, 60))
    seconds = float(((d * 24 + h) * 60 + m) * 60)
    return f"How many seconds are there in {d} days, {h} hours and {m} minutes?", seconds, ""


def _distance(rng: np.random.Generator) -> tuple[str, float, str]:
    mi = round(float(rng.uniform(1, 500)), 1)
    return (f"A route is {mi} statute miles long. How long is it in kilometres (1 mile = 1.609344 km)?",
            mi * 1.609344, "km")


def _expression(rng: np.random.Generator) -> tuple[str, float, str]:
    a = int(rng.integers(0, 50))
    b, m = a + int(rng.integers(20, 400)), int(rng.integers(2, 9))
    r = int(rng.integers(0, m))
    text = f"What does the Python expression `sum(x * x for x in range({a}, {b}) if x % {m} == {r})` evaluate to?"
    return text, float(sum(x * x for x in range(a, b) if x % m == r)), ""


_CODE_TASKS = (
    "the length of the longest strictly increasing contiguous run",
    "the number of pairs i < j with nums[i] + nums[j] divisible by k",
    "the maximum sum of a contiguous subarray of length exactly k",
    "the smallest number of elements to delete so that no two adjacent elements are equal",
    "the number of distinct values among all sums of k consecutive elements",
    "the k-th smallest absolute difference between two elements",
)


def _function(rng: np.random.Generator) -> tuple[str, float, str]:
    task = _CODE_TASKS[int(rng.integers(len(_CODE_TASKS)))]
    n, v = int(rng.integers(2, 7)), int(rng.integers(3, 10))
    text = (f"Write a Python function `solve(nums: list[int], k: int) -> int` that returns {task}. Constraints: "
            f"1 <= len(nums) <= 10^{n}, |nums[i]| <= 10^{v}, 1 <= k <= len(nums). It must run within 2 seconds.")
    return text, math.nan, ""  # judged by tests, not by a value


# per domain: the templates of free-form tasks and of option tasks (a numeric answer and values near it)
_TEMPLATES = {
    Domain.MATH: ((_modpow, _divisors), (_modpow, _divisors)),
    Domain.SCIENCE: ((_gas, _fall), (_gas, _fall)),
    Domain.KNOWLEDGE: ((_duration, _distance), (_duration, _distance)),
    Domain.CODE: ((_function,), (_expression,)),
}


def _fmt(value: float, unit: str) -> str:
    text = f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"
    return f"{text} {unit}".strip()


def generated_question(domain: Domain, options: int, rng: np.random.Generator) -> Question:
    """A question generated for ``domain``: a template drawn with ``rng``, its numbers drawn too; with ``options``
    > 0 its options are the computed answer and ``options - 1`` distinct wrong values near it (answer-id order)."""
    free, choice = _TEMPLATES[domain]
    pool = choice if options else free
    make = pool[int(rng.integers(len(pool)))]
    text, value, unit = make(rng)
    source = f"generated:{make.__name__.lstrip('_')}"
    if not options:
        return Question(text, (), "" if math.isnan(value) else _fmt(value, unit), source)
    shown = [_fmt(value, unit)]
    while len(shown) < options:  # wrong values: the answer scaled or shifted, each shown once
        shift = float(rng.integers(-3 * options, 3 * options + 1))  # enough distinct values even for a 0 answer
        wrong = value * float(rng.choice([0.5, 0.8, 0.9, 1.1, 1.25, 1.5, 2.0])) + shift
        if _fmt(wrong, unit) not in shown and (wrong >= 0 or value < 0):  # a positive quantity stays positive
            shown.append(_fmt(wrong, unit))
    return Question(text, tuple(shown), shown[0], source)
