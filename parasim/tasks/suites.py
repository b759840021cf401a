"""Task suites: the benchmarks an episode's task is drawn from, and users' own task files.

A task is (benchmark, domain, answer format, hidden difficulty z). Difficulty follows the item-response
model of the simulator (``parasim.sim.kernel.sample_call``): z ~ Normal(mu_b, sigma_b) per benchmark. Only skill minus
difficulty is identified by accuracies, so mu_b fixes the scale across benchmarks (harder benchmarks get
larger mu_b) and the pools' per-(model, benchmark) skills are solved against it (``parasim.pools.pool``).
The mu_b values are assumed; sigma_b and, on the math benchmarks, the distractor weights' Zipf exponent are the
joint-structure fit's on the shipped per-query tables where one covers the benchmark (MATH-L5 for the math rows,
MMLU-Pro, LiveCodeBench; ``parasim.calibration.fitted_structure``, docs/simulator.md section 8; a test checks the
values below against its file), assumed elsewhere (GPQA, generic_science, the other Zipf exponents). They matter for
how token counts grow with difficulty and how correlated two calls on the same task are, and ``parasim calibrate``
refits them from logged calls.

A suite is a flat table of rows, each a benchmark (difficulty drawn per episode) or a fixed task
(difficulty given), with sampling weights: the simulator only ever sees these arrays.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parasim.config.jsonl import iter_json_objects
from parasim.protocol.schema import Domain
from parasim.tasks.questions import Question, task_question

FREE_FORM = 0  # answer format: free-form answer (math, code); k > 1 means k options
NUM_ANSWERS = 16  # answer ids 0..15: 0 is the gold answer, 1.. are wrong answers (distractors)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: its domain, answer format and difficulty distribution (fitted or assumed, see module doc)."""

    name: str
    domain: Domain
    options: int  # FREE_FORM or the number of answer options
    mu: float  # mean difficulty (logits)
    sigma: float  # item spread (logits)
    zipf_s: float = 1.0  # Zipf exponent of the distractor weights (shared misconceptions)
    question_tokens: float = 200.0  # median prompt length of a question


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("AIME24", Domain.MATH, FREE_FORM, 1.5, 1.386, 0.85, 180.0),
    Benchmark("AIME25", Domain.MATH, FREE_FORM, 1.6, 1.386, 0.85, 180.0),
    Benchmark("AMC", Domain.MATH, FREE_FORM, 0.0, 1.386, 0.85, 150.0),
    Benchmark("HMMT25", Domain.MATH, FREE_FORM, 2.2, 1.386, 0.85, 160.0),
    Benchmark("GPQA", Domain.SCIENCE, 4, 1.0, 2.0, 1.0, 350.0),
    Benchmark("MMLU-Pro", Domain.KNOWLEDGE, 10, 0.0, 1.409, 1.0, 250.0),
    Benchmark("LiveCodeBench", Domain.CODE, FREE_FORM, 1.0, 2.285, 1.5, 600.0),
    # Generic per-domain rows for users' tasks that name no benchmark: skill = the pool's per-domain skill.
    Benchmark("generic_math", Domain.MATH, FREE_FORM, 0.0, 1.386, 0.85, 200.0),
    Benchmark("generic_science", Domain.SCIENCE, 4, 0.0, 2.0, 1.0, 300.0),
    Benchmark("generic_knowledge", Domain.KNOWLEDGE, FREE_FORM, 0.0, 1.409, 1.0, 200.0),
    Benchmark("generic_code", Domain.CODE, FREE_FORM, 0.0, 2.285, 1.5, 500.0),
)
BENCHMARK_INDEX: dict[str, int] = {b.name: i for i, b in enumerate(BENCHMARKS)}
NUM_BENCHMARKS = len(BENCHMARKS)
GENERIC = {d: BENCHMARK_INDEX[f"generic_{d.name.lower()}"] for d in Domain}

_MATH = ("AIME24", "AIME25", "AMC", "HMMT25")
SUITES: dict[str, tuple[str, ...]] = {
    "math": _MATH,
    "paramanager": _MATH + ("GPQA", "MMLU-Pro", "LiveCodeBench"),
    "reasoning": _MATH + ("GPQA",),
    **{b.name: (b.name,) for b in BENCHMARKS},
}


@dataclass(frozen=True)
class TaskSuite:
    """Flat rows the simulator samples from. ``difficulty`` is NaN where it is drawn per episode."""

    name: str
    benchmark: np.ndarray  # int32[R], index into BENCHMARKS
    domain: np.ndarray  # int32[R]
    options: np.ndarray  # int32[R], FREE_FORM or k
    difficulty: np.ndarray  # float64[R], NaN = draw Normal(mu_b, sigma_b)
    weight_cdf: np.ndarray  # float64[R], cumulative sampling weights ending at 1
    task_ids: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.benchmark)

    def question(self, row: int, rng: np.random.Generator) -> Question:
        """The question text of a task of suite row ``row``, drawn with ``rng`` (the task's own stream, so one task
        seed gives one question): a real question of the row's benchmark where a shipped bank has one, else
        generated text of its domain (``parasim.tasks.questions``); options in answer-id order, gold first."""
        if not 0 <= row < len(self):
            raise ValueError(f"row: expected an int in [0, {len(self)}), got {row!r}")
        return task_question(BENCHMARKS[int(self.benchmark[row])].name, int(self.domain[row]),
                             int(self.options[row]), rng)

    def tables(self) -> dict[str, np.ndarray]:
        """Per-row arrays the compiled simulator reads (benchmark constants joined in)."""
        b = self.benchmark
        return {
            "row_bench": b.astype(np.int32),
            "row_domain": self.domain.astype(np.int32),
            "row_options": self.options.astype(np.int32),
            "row_z": self.difficulty.astype(np.float64),
            "row_cdf": self.weight_cdf.astype(np.float64),
            "row_mu": np.array([BENCHMARKS[i].mu for i in b], np.float64),
            "row_sigma": np.array([BENCHMARKS[i].sigma for i in b], np.float64),
            "row_qtok": np.array([BENCHMARKS[i].question_tokens for i in b], np.float64),
            "row_zipf": np.array([BENCHMARKS[i].zipf_s for i in b], np.float64),
        }


def _suite_from_rows(name: str, bench: Sequence[int], domain: Sequence[int], options: Sequence[int],
                     difficulty: Sequence[float], weights: Sequence[float], ids: Sequence[str]) -> TaskSuite:
    w = np.asarray(weights, np.float64)
    cdf = np.cumsum(w) / w.sum()
    cdf[-1] = 1.0
    return TaskSuite(name, np.asarray(bench, np.int32), np.asarray(domain, np.int32), np.asarray(options, np.int32),
                     np.asarray(difficulty, np.float64), cdf, tuple(ids))


def benchmark_suite(names: Sequence[str], weights: Sequence[float] | None = None, name: str = "custom") -> TaskSuite:
    """A mixture of benchmarks (difficulty drawn per episode); equal weights unless given."""
    unknown = [n for n in names if n not in BENCHMARK_INDEX]
    if unknown or not names:
        raise ValueError(f"suite benchmarks: unknown {unknown or 'empty list'}; known: {sorted(BENCHMARK_INDEX)}")
    idx = [BENCHMARK_INDEX[n] for n in names]
    w = [1.0] * len(idx) if weights is None else list(weights)
    if len(w) != len(idx) or any(not (x > 0) for x in w):
        raise ValueError(f"suite weights: expected {len(idx)} positive numbers, got {weights!r}")
    return _suite_from_rows(name, idx, [BENCHMARKS[i].domain for i in idx], [BENCHMARKS[i].options for i in idx],
                            [math.nan] * len(idx), w, names)


def load_tasks(path: str | Path) -> TaskSuite:
    """Load a user's JSONL task file, one task a line.

    Fields: ``id`` (str), ``domain`` (math|science|knowledge|code), optional ``benchmark`` (a catalogue name:
    the task then uses the pool's skill for that benchmark, else the pool's per-domain skill), optional
    ``options`` (0 = free-form, else 2..16), optional ``difficulty`` (logits, |z| <= 10; drawn from the
    benchmark when absent), optional ``weight`` (> 0). Errors name the line and the field.
    """
    rows: dict[str, list] = {k: [] for k in ("bench", "domain", "options", "z", "w", "ids")}
    for where, rec in iter_json_objects(path):
        dom_name = rec.get("domain")
        if not isinstance(dom_name, str) or dom_name.upper() not in Domain.__members__:
            raise ValueError(f"{where}.domain: expected one of {[d.name.lower() for d in Domain]}, got {dom_name!r}")
        dom = Domain[dom_name.upper()]
        bname = rec.get("benchmark")
        if bname is None:
            b = GENERIC[dom]
        elif bname not in BENCHMARK_INDEX:
            raise ValueError(f"{where}.benchmark: expected one of {sorted(BENCHMARK_INDEX)}, got {bname!r}")
        else:
            b = BENCHMARK_INDEX[bname]
            if BENCHMARKS[b].domain != dom:
                raise ValueError(f"{where}.domain: benchmark {bname} is {BENCHMARKS[b].domain.name.lower()}, "
                                 f"got {dom_name!r}")
        opts = rec.get("options", BENCHMARKS[b].options)
        if isinstance(opts, list):
            opts = len(opts)
        if not isinstance(opts, int) or isinstance(opts, bool) or not (opts == FREE_FORM or 2 <= opts <= NUM_ANSWERS):
            raise ValueError(
                f"{where}.options: expected 0 (free-form) or an integer in [2, {NUM_ANSWERS}], got {opts!r}")
        z = rec.get("difficulty", math.nan)
        if z is None:
            z = math.nan
        if not isinstance(z, (int, float)) or isinstance(z, bool) or (math.isfinite(z) and abs(z) > 10):
            raise ValueError(f"{where}.difficulty: expected a number in [-10, 10], got {z!r}")
        w = rec.get("weight", 1.0)
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not (w > 0 and math.isfinite(w)):
            raise ValueError(f"{where}.weight: expected a positive number, got {w!r}")
        rows["bench"].append(b)
        rows["domain"].append(int(dom))
        rows["options"].append(opts)
        rows["z"].append(float(z))
        rows["w"].append(float(w))
        rows["ids"].append(str(rec.get("id", f"line{where.rsplit(':', 1)[1]}")))
    if not rows["bench"]:
        raise ValueError(f"{path}: no tasks")
    return _suite_from_rows(str(path), rows["bench"], rows["domain"], rows["options"], rows["z"], rows["w"],
                            rows["ids"])


def load_suite(name_or_path: str | TaskSuite) -> TaskSuite:
    """A named suite (see ``SUITES``), a benchmark name, or a path to a JSONL task file."""
    if isinstance(name_or_path, TaskSuite):
        return name_or_path
    if not isinstance(name_or_path, str | os.PathLike):  # a Path(3) TypeError would not name the option
        raise TypeError(f"suite: expected one of {sorted(SUITES)}, a path to a JSONL task file or a TaskSuite, got "
                        f"{type(name_or_path).__name__} {name_or_path!r}")
    if name_or_path in SUITES:
        return benchmark_suite(SUITES[name_or_path], name=name_or_path)
    if Path(name_or_path).is_file():
        return load_tasks(name_or_path)
    raise ValueError(f"suite: expected one of {sorted(SUITES)} or a path to a JSONL task file, got {name_or_path!r}")

