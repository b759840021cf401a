"""The per-query outcome table every eval-result reader returns, and its one checked constructor.

Kept apart from the readers (``per_query`` reads plain tables and dispatches to the lm-eval and lighteval readers,
which build tables here), so that no reader imports the module that imports it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_WHOLE_TOL = 1e-6  # how far correct * n_samples may sit from a whole number (float rounding of k / n)


class PerQueryError(ValueError):
    """A per-query input that cannot be read as written; the message names the file, the line or row, the field."""


def normalize_answer(value: object) -> str:
    """The form answers are compared in: stripped, lower-cased text (``""`` for none), as call logs compare them."""
    return "" if value is None else str(value).strip().lower()


@dataclass(frozen=True)
class PerQueryTable:
    """Per-query outcomes, one row per (model, question, sample); numpy arrays of equal length.

    ``correct`` is 1/0 for one sample or the pass rate over ``n_samples`` samples (rows of both kinds may mix, e.g.
    LiveCodeBench's 10-sample pass rates beside one-sample models). ``answer`` is the normalized answer, ``""`` where
    unknown; ``output_tokens`` NaN where unknown. ``source`` names the file(s) read.
    """

    model: np.ndarray  # object[N] str
    question: np.ndarray  # object[N] str, unique within a benchmark
    benchmark: np.ndarray  # object[N] str
    sample: np.ndarray  # int64[N]
    correct: np.ndarray  # float64[N] in [0, 1]
    n_samples: np.ndarray  # int64[N] >= 1
    answer: np.ndarray  # object[N] str
    output_tokens: np.ndarray  # float64[N], NaN when unknown
    source: str

    def __post_init__(self) -> None:
        n = len(self.model)
        for name in ("question", "benchmark", "sample", "correct", "n_samples", "answer", "output_tokens"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"PerQueryTable.{name}: {len(getattr(self, name))} rows, model has {n}")
        for name, kind in (("sample", np.int64), ("n_samples", np.int64), ("correct", np.float64),
                           ("output_tokens", np.float64)):
            if getattr(self, name).dtype != kind:
                raise ValueError(f"PerQueryTable.{name}: dtype {getattr(self, name).dtype}, expected {kind.__name__}")

    def __len__(self) -> int:
        return len(self.model)

    @property
    def successes(self) -> np.ndarray:
        """int64[N]: correct samples behind each row (``correct * n_samples``, a whole number by construction)."""
        return np.rint(self.correct * self.n_samples).astype(np.int64)

    def models(self) -> list[str]:
        """Model names in first-seen order."""
        return list(dict.fromkeys(self.model.tolist()))

    def benchmarks(self) -> list[str]:
        """Benchmark names in first-seen order."""
        return list(dict.fromkeys(self.benchmark.tolist()))

    def select(self, mask: np.ndarray) -> PerQueryTable:
        """The rows where ``mask`` (bool[N] or an index array) selects, same source."""
        return PerQueryTable(**{k: getattr(self, k)[mask] for k in _ARRAYS}, source=self.source)

    @staticmethod
    def concat(tables: Sequence[PerQueryTable]) -> PerQueryTable:
        """The rows of all ``tables`` in order; sources joined with ``"; "``."""
        if not tables:
            raise ValueError("PerQueryTable.concat: no tables")
        return PerQueryTable(**{k: np.concatenate([getattr(t, k) for t in tables]) for k in _ARRAYS},
                             source="; ".join(t.source for t in tables))


_ARRAYS = ("model", "question", "benchmark", "sample", "correct", "n_samples", "answer", "output_tokens")


def make_table(*, model: Sequence[str], question: Sequence[str], benchmark: Sequence[str], correct: Sequence[float],
               sample: Sequence[int] | None = None, n_samples: Sequence[int] | None = None,
               answer: Sequence[str] | None = None, output_tokens: Sequence[float] | None = None,
               source: str = "(in memory)", where: Sequence[str] | None = None) -> PerQueryTable:
    """A checked ``PerQueryTable`` from columns (the readers' one constructor); ``where[i]`` names row ``i`` in errors.

    Checks what every reader must hold: non-empty names, ``sample >= 0``, ``n_samples >= 1``, ``correct`` in [0, 1]
    with a whole number of successes, ``output_tokens >= 0`` or NaN, and each (model, benchmark, question, sample)
    once.
    """
    n = len(model)
    label = list(where) if where is not None else [f"{source}: row {i}" for i in range(n)]
    cols = {"model": list(model), "question": list(question), "benchmark": list(benchmark)}
    for name, values in cols.items():
        for i, v in enumerate(values):
            if not isinstance(v, str) or not v.strip():
                raise PerQueryError(f"{label[i]}: {_COLUMN_OF.get(name, name)}: expected a non-empty string, got {v!r}")
    sample_arr = np.zeros(n, np.int64) if sample is None else _ints(sample, "sample", 0, label)
    n_arr = np.ones(n, np.int64) if n_samples is None else _ints(n_samples, "n_samples", 1, label)
    correct_arr = np.asarray(correct, np.float64)
    for i in np.flatnonzero(~(np.isfinite(correct_arr) & (correct_arr >= 0.0) & (correct_arr <= 1.0))):
        raise PerQueryError(f"{label[i]}: correct: expected a number in [0, 1], got {correct[i]!r}")
    k = correct_arr * n_arr
    for i in np.flatnonzero(np.abs(k - np.rint(k)) > _WHOLE_TOL):
        raise PerQueryError(f"{label[i]}: correct: {correct[i]!r} over n_samples = {n_arr[i]} is not a whole number "
                            "of correct samples (a pass rate must be k / n_samples)")
    tokens = np.full(n, np.nan) if output_tokens is None else np.asarray(
        [math.nan if t is None else t for t in output_tokens], np.float64)
    for i in np.flatnonzero(~np.isnan(tokens) & ~(np.isfinite(tokens) & (tokens >= 0.0))):
        raise PerQueryError(f"{label[i]}: output_tokens: expected a number >= 0 or empty, got {output_tokens[i]!r}")
    answers = [""] * n if answer is None else [normalize_answer(a) for a in answer]
    seen: dict[tuple[str, str, str, int], int] = {}
    for i, key in enumerate(zip(cols["model"], cols["benchmark"], cols["question"], sample_arr.tolist())):
        if seen.setdefault(key, i) != i:
            raise PerQueryError(f"{label[i]}: sample: model {key[0]!r}, benchmark {key[1]!r}, question {key[2]!r}, "
                                f"sample {key[3]} already given in {label[seen[key]]}")
    obj = {name: np.asarray(values, dtype=object) for name, values in cols.items()}
    return PerQueryTable(model=obj["model"], question=obj["question"], benchmark=obj["benchmark"],
                         sample=sample_arr, correct=correct_arr, n_samples=n_arr,
                         answer=np.asarray(answers, dtype=object), output_tokens=tokens, source=source)


_COLUMN_OF = {"question": "question_id"}


def _ints(values: Sequence[object], name: str, low: int, label: list[str]) -> np.ndarray:
    """Integers >= ``low`` (a float only when whole: CSV readers give floats to columns with blanks)."""
    out = np.empty(len(values), np.int64)
    for i, v in enumerate(values):
        ok = (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or (
            isinstance(v, (float, np.floating)) and math.isfinite(v) and v == int(v))
        if not ok or int(v) < low:
            raise PerQueryError(f"{label[i]}: {name}: expected an integer >= {low}, got {v!r}")
        out[i] = int(v)
    return out
