"""The task family of the CPU pool (``scripts/cpu_pool.py``): four domains of generated questions with a gold answer
that a program checks, each at difficulty levels, and the texts the pool's models are trained to write for them.

Kept out of the wheel with ``cpu_pool.py``. Every task comes from ``random.Random`` seeded by (seed, domain, level,
index), so a seed gives the same tasks on every machine:

- math (``generic_math``): column addition; level 1 is 2-digit + 1-digit, 2 is 2 + 2 digits, 3 is 3 + 3, 4 is 4 + 4.
  The worked solution adds column by column from the right (``7+5+1=13``), so it grows with the digits.
- code (``generic_code``): tracing a straight-line program on one variable (``x = 3; x = x * 2; print(x)``); the
  level is the number of updates (1-4). The worked solution writes the value after each statement.
- knowledge (``generic_knowledge``): a made-up fact table (entity name -> 3-digit registry number) that the models
  memorize. The level is the fact's rarity: level 1 facts are shown 4 times as often in training as level 3 ones,
  and each model is trained on a different part of the table (``Mix.facts``), so what one model knows another
  does not. These are closed-book questions: a fact has to be in training to be known, so the eval questions ask
  about facts the models were trained on (phrased the same way); only math, code and science eval questions are
  unseen.
- science (``generic_science``): which of four numbers is largest (or smallest), as multiple choice; the level
  sets how alike the numbers are (1: different lengths, 4: 3-digit numbers a few apart).

``solution`` writes the worked text ending in ``Final answer: X`` (what ``parasim.real.prompts.extract_answer``
reads); ``program`` the Python that prints the answer (what code_reasoner's sandbox runs).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

DOMAINS: tuple[str, ...] = ("math", "code", "knowledge", "science")
LEVELS: dict[str, tuple[int, ...]] = {"math": (1, 2, 3, 4), "code": (1, 2, 3, 4), "knowledge": (1, 2, 3),
                                      "science": (1, 2, 3, 4)}
# a task's ``difficulty`` (a logit, as RealTask reads it) per level: the levels evenly spaced around 0
DIFFICULTY_LOGIT: dict[int, float] = {1: -1.5, 2: -0.5, 3: 0.5, 4: 1.5}
MATH_DIGITS: dict[int, tuple[int, int]] = {1: (2, 1), 2: (2, 2), 3: (3, 3), 4: (4, 4)}
# knowledge: facts per level (rarity tier) and their relative frequency in training
FACTS_PER_LEVEL: dict[int, int] = {1: 50, 2: 60, 3: 80}
FACT_WEIGHT: dict[int, int] = {1: 4, 2: 2, 3: 1}
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "da", "fo", "gu", "ha", "ji", "pe", "qua",
              "ro", "ti", "bu", "xe")
_OPS = ("+", "-", "*")


@dataclass(frozen=True)
class GenTask:
    """One generated task: the RealTask fields plus what the worked solution needs (``steps``)."""

    task_id: str
    domain: str
    level: int
    question: str
    answer: str
    options: tuple[str, ...] = ()
    steps: tuple[str, ...] = field(default=(), compare=False)  # the worked lines before the final answer
    expression: str = field(default="", compare=False)  # Python that evaluates to the answer (math, code)

    @property
    def question_key(self) -> str:
        """What makes two tasks the same question: the text and the options."""
        return self.question + "\n" + "|".join(self.options)

    def record(self) -> dict:
        """The task as a line of a RealTask JSONL file (``parasim.real.tasks``), with its level."""
        rec = {"id": self.task_id, "question": self.question, "answer": self.answer, "domain": self.domain,
               "benchmark": f"generic_{self.domain}", "difficulty": DIFFICULTY_LOGIT[self.level],
               "level": self.level}
        if self.options:
            rec["options"] = list(self.options)
        return rec


def solution(task: GenTask) -> str:
    """The worked answer a model is trained to write: the steps, then ``Final answer: X``."""
    return "\n".join((*task.steps, f"Final answer: {task.answer}"))


def program(task: GenTask) -> str:
    """The program code_reasoner is trained to write: the question's own computation, printed."""
    if task.domain == "code":
        return task.expression.replace("; ", "\n")
    if task.domain == "math":
        return f"print({task.expression})"
    return f"print({task.answer!r})"


def _rng(seed: int, *key: object) -> random.Random:
    return random.Random(f"{seed}:" + ":".join(map(str, key)))


def _number(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10 ** digits - 1)


def column_steps(a: int, b: int) -> tuple[str, ...]:
    """The column additions of ``a + b`` from the right, each with the carry in: ``7+5=12``, ``4+8+1=13``."""
    steps, carry, xs, ys = [], 0, str(a)[::-1], str(b)[::-1]
    for i in range(max(len(xs), len(ys))):
        terms = [xs[i] if i < len(xs) else "0", ys[i] if i < len(ys) else "0"] + (["1"] if carry else [])
        total = sum(int(t) for t in terms)
        steps.append(f"{'+'.join(terms)}={total}")
        carry = total // 10
    return tuple(steps)


def math_task(seed: int, level: int, index: int) -> GenTask:
    rng = _rng(seed, "math", level, index)
    da, db = MATH_DIGITS[level]
    a, b = _number(rng, da), _number(rng, db)
    if rng.random() < 0.5 and da == db:
        a, b = b, a
    return GenTask(f"math-L{level}-{index:05d}", "math", level, f"What is {a} + {b}?", str(a + b),
                   steps=column_steps(a, b), expression=f"{a} + {b}")


def code_task(seed: int, level: int, index: int) -> GenTask:
    """A program of ``level`` updates of x whose values stay in [0, 99]."""
    rng = _rng(seed, "code", level, index)
    x = rng.randint(1, 20)
    statements, steps = [f"x = {x}"], [f"x = {x}"]
    while len(statements) <= level:
        op = rng.choice(_OPS)
        k = rng.randint(2, 3) if op == "*" else rng.randint(1, 9)
        value = x * k if op == "*" else x + k if op == "+" else x - k
        if not 0 <= value <= 99:
            continue
        x = value
        statements.append(f"x = x {op} {k}")
        steps.append(f"x = {x}")
    source = "; ".join(statements) + "; print(x)"
    return GenTask(f"code-L{level}-{index:05d}", "code", level, f"What does this program print? {source}",
                   str(x), steps=tuple(steps), expression=source)


def fact_table(seed: int) -> list[tuple[str, int, int]]:
    """(entity, registry number, level) of every fact, distinct names, in a fixed order."""
    rng = _rng(seed, "facts")
    names: list[str] = []
    seen: set[str] = set()
    total = sum(FACTS_PER_LEVEL.values())
    while len(names) < total:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
        if name not in seen:
            seen.add(name)
            names.append(name)
    facts, i = [], 0
    for level, count in FACTS_PER_LEVEL.items():
        for _ in range(count):
            facts.append((names[i], rng.randint(100, 999), level))
            i += 1
    return facts


def knowledge_task(seed: int, fact: tuple[str, int, int], index: int) -> GenTask:
    name, number, level = fact
    return GenTask(f"knowledge-L{level}-{index:05d}", "knowledge", level,
                   f"What is the registry number of {name}?", str(number),
                   steps=(f"{name} is registered as {number}.",))


_SCIENCE_SPREAD: dict[int, tuple[int, int]] = {2: (10, 99), 3: (10, 99), 4: (100, 999)}


def science_task(seed: int, level: int, index: int) -> GenTask:
    """Four distinct numbers; level 1 of different lengths, 2 two-digit, 3 two-digit in one decade band
    (within 9 of each other), 4 three-digit within 12."""
    rng = _rng(seed, "science", level, index)
    largest = rng.random() < 0.5
    values: set[int] = set()
    while len(values) < 4:
        if level == 1:
            values = {_number(rng, d) for d in rng.sample((1, 2, 3, 4), 4)}
            continue
        lo, hi = _SCIENCE_SPREAD[level]
        span = {2: hi - lo, 3: 9, 4: 12}[level]
        base = rng.randint(lo, hi - span)
        values = set(rng.sample(range(base, base + span + 1), 4))
    options = [str(v) for v in values]
    rng.shuffle(options)
    pick = max(values) if largest else min(values)
    letter = "ABCD"[options.index(str(pick))]
    word = "largest" if largest else "smallest"
    return GenTask(f"science-L{level}-{index:05d}", "science", level, f"Which number is the {word}?", letter,
                   options=tuple(options), steps=(f"The {word} is {pick}.",))


def generate(seed: int, domain: str, level: int, index: int, facts: list[tuple[str, int, int]] | None = None
             ) -> GenTask:
    """Task ``index`` of a domain and level; knowledge tasks cycle through that level's facts."""
    if domain == "math":
        return math_task(seed, level, index)
    if domain == "code":
        return code_task(seed, level, index)
    if domain == "science":
        return science_task(seed, level, index)
    if domain == "knowledge":
        tier = [f for f in (facts or fact_table(seed)) if f[2] == level]
        return knowledge_task(seed, tier[index % len(tier)], index)
    raise ValueError(f"domain: expected one of {DOMAINS}, got {domain!r}")


def suite(seed: int, per_cell: int, offset: int = 0, exclude: frozenset[str] = frozenset()) -> list[GenTask]:
    """``per_cell`` tasks of every domain and level, from index ``offset`` on, none asking a question of
    ``exclude`` or one asked before in the suite (small cells such as 2-digit + 1-digit would repeat). Knowledge
    cells hold each fact of their level once, so at most ``FACTS_PER_LEVEL`` tasks."""
    facts = fact_table(seed)
    tasks: list[GenTask] = []
    for domain in DOMAINS:
        for level in LEVELS[domain]:
            if domain == "knowledge":
                tier = [f for f in facts if f[2] == level][:per_cell]
                tasks += [knowledge_task(seed, fact, offset + i) for i, fact in enumerate(tier)]
                continue
            asked, index, count = set(exclude), offset, 0
            while count < per_cell:
                task = generate(seed, domain, level, index, facts)
                index += 1
                if task.question_key in asked:
                    continue
                asked.add(task.question_key)
                tasks.append(task)
                count += 1
    return tasks
