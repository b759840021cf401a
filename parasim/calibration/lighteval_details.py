"""lighteval ``--save-details`` files as a ``PerQueryTable``.

The layout and columns read here are lighteval's own (huggingface/lighteval at 3fd1526):
``src/lighteval/logging/evaluation_tracker.py`` (``save`` builds one ``datasets.Dataset`` per task from
``asdict(detail)`` rows, columns sorted; ``save_details`` writes it to
``<output_dir>/details/<model_name>/<date_id>/details_<task>_<date_id>.parquet``, ``date_id`` being
``datetime.now().isoformat()`` with ``:`` as ``-``; ``load_details_datasets`` recovers the task from the file name
the same way as here), ``src/lighteval/logging/info_loggers.py`` (``DetailsLogger.Detail``: the columns ``doc``,
``metric`` and ``model_response``), ``src/lighteval/tasks/requests.py`` (``Doc``: ``id``, ``query``, ``choices``,
``gold_index``, ``num_samples``, ...), ``src/lighteval/models/model_output.py`` (``ModelResponse``: ``text``,
``output_tokens``, ``logprobs``, ...) and ``src/lighteval/metrics/utils/metric_utils.py`` (a metric with sample
parameters is named ``name:k=v&...``, e.g. ``pass@k:k=1&n=16``, ``avg@n:n=4``).

How a row becomes a per-query row:

- the model is the folder path between ``details/`` and the date folder (``org/name`` keeps its slash); the latest
  date folder of each (model, task) is read; the benchmark is the task name (``gsm8k|0``);
- the question is ``doc.id``, or where a task leaves it empty, ``q`` + a hash of ``doc.query`` (the same question
  gets the same id in every model's file);
- correctness: ``metric`` if given, else the first of ``PREFERRED_METRICS`` in the ``metric`` column, else the first
  ``pass@k:k=1...`` or ``avg@n...`` metric; a value in [0, 1]. A metric computed over ``n=N`` samples (its
  parameters name ``n``) is a pass rate over N samples (``n_samples`` N); any other is one outcome;
- the answer: for a log-probability task (``logprobs`` per choice, no text) the index of the most likely choice;
  generations are free text and are not an extracted answer, so ``""``;
- ``output_tokens``: the mean length of ``model_response.output_tokens`` over the generations, NaN without text.
"""
from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from parasim.calibration.per_query_table import PerQueryError, PerQueryTable, make_table

PREFERRED_METRICS = ("acc", "em", "exact_match", "extractive_match", "quasi_exact_match", "prefix_exact_match",
                     "acc_norm")
DETAILS_PREFIX = "details_"
_N_PARAM = re.compile(r"(?:^|[:&])n=(\d+)(?:&|$)")


def details_files(path: Path) -> list[Path]:
    """The latest ``details_<task>_<date_id>.parquet`` of each (model, task) under ``path`` (a folder or a file)."""
    found = [path] if path.is_file() else sorted(path.rglob(f"{DETAILS_PREFIX}*.parquet"))
    latest: dict[tuple[str, str], Path] = {}
    for f in found:
        key = (_model_of(f), _task_of(f))
        if key not in latest or latest[key].parent.name < f.parent.name:
            latest[key] = f
    return sorted(latest.values())


def _task_of(path: Path) -> str:
    """The task of a details file, as ``EvaluationTracker.load_details_datasets`` reads it."""
    date_id = path.parent.name
    stem = path.name.removesuffix(".parquet")
    if not stem.startswith(DETAILS_PREFIX) or not stem.endswith(f"_{date_id}"):
        raise PerQueryError(f"{path}: not a lighteval details file (details/<model>/<date_id>/"
                            f"details_<task>_<date_id>.parquet)")
    return stem[len(DETAILS_PREFIX):-len(date_id) - 1]


def _model_of(path: Path) -> str:
    """The model name: the folders between ``details`` and the date folder (else the date folder's parent)."""
    parts = path.parent.parent.parts
    if "details" in parts:
        i = len(parts) - 1 - parts[::-1].index("details")
        if i + 1 < len(parts):
            return "/".join(parts[i + 1:])
    return path.parent.parent.name


def read_lighteval(path: str | Path, *, metric: str | None = None) -> PerQueryTable:
    """Read lighteval details (an ``--output-dir``, its ``details/`` folder or one details file)."""
    path = Path(path)
    files = details_files(path)
    if not files:
        raise PerQueryError(f"{path}: no details_<task>_<date_id>.parquet files (run lighteval with --save-details)")
    cols: dict[str, list[Any]] = {k: [] for k in ("model", "question", "benchmark", "correct", "n_samples", "answer",
                                                  "output_tokens", "where")}
    for f in files:
        try:
            data = pq.read_table(f)
        except (pa.ArrowInvalid, OSError) as err:
            raise PerQueryError(f"{f}: cannot read as Parquet ({str(err).splitlines()[0]})") from None
        missing = [c for c in ("doc", "metric", "model_response") if c not in data.column_names]
        if missing:
            raise PerQueryError(f"{f}: missing column(s) {', '.join(missing)} of lighteval's details "
                                f"(found {data.column_names})")
        model, task = _model_of(f), _task_of(f)
        for i, (doc, scores, response) in enumerate(zip(*(data.column(c).to_pylist()
                                                          for c in ("doc", "metric", "model_response")))):
            where = f"{f}: row {i}"
            correct, n = _correct(scores, where, metric)
            for key, value in (("model", model), ("question", _question(doc, where)), ("benchmark", task),
                               ("correct", correct), ("n_samples", n), ("answer", _answer(response, where)),
                               ("output_tokens", _tokens(response, where)), ("where", where)):
                cols[key].append(value)
    return make_table(model=cols["model"], question=cols["question"], benchmark=cols["benchmark"],
                      correct=cols["correct"], n_samples=cols["n_samples"], answer=cols["answer"],
                      output_tokens=cols["output_tokens"], source=str(path), where=cols["where"])


def _struct(value: Any, where: str, column: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PerQueryError(f"{where}: {column}: expected a struct, got {value!r:.80}")
    return value


def _question(doc: Any, where: str) -> str:
    doc = _struct(doc, where, "doc")
    doc_id = doc.get("id")
    if isinstance(doc_id, str) and doc_id.strip():
        return doc_id
    query = doc.get("query")
    if not isinstance(query, str):
        raise PerQueryError(f"{where}: doc.query: expected a string (doc.id is empty), got {query!r:.80}")
    return "q" + hashlib.sha1(query.encode("utf-8")).hexdigest()[:16]


def _choose_metric(names: list[str], where: str, metric: str | None) -> str:
    if metric is not None:
        if metric not in names:
            raise PerQueryError(f"{where}: metric: {metric!r} is not among the row's metrics {names}")
        return metric
    chosen = next((m for m in PREFERRED_METRICS if m in names), None)
    chosen = chosen or next((m for m in names if m.startswith("pass@k:k=1&") or m.startswith("avg@")), None)
    if chosen is None:
        raise PerQueryError(f"{where}: metric: none of {list(PREFERRED_METRICS)}, pass@k:k=1&... or avg@... among "
                            f"{names}; name the correctness metric (metric=...)")
    return chosen


def _correct(scores: Any, where: str, metric: str | None) -> tuple[float, int]:
    """(correct, n_samples) from the row's metric struct (columns other rows' metrics leave null are skipped)."""
    scores = {k: v for k, v in _struct(scores, where, "metric").items() if v is not None}
    name = _choose_metric(list(scores), where, metric)
    value = scores[name]
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise PerQueryError(f"{where}: metric.{name}: expected a number in [0, 1], got {value!r:.80}")
    found = _N_PARAM.search(name.partition(":")[2])
    return float(value), int(found.group(1)) if found else 1


def _answer(response: Any, where: str) -> str:
    response = _struct(response, where, "model_response")
    logprobs, text = response.get("logprobs") or [], response.get("text") or []
    if logprobs and not text:
        if not all(isinstance(x, (int, float)) for x in logprobs):
            raise PerQueryError(f"{where}: model_response.logprobs: expected numbers, got {logprobs!r:.80}")
        return str(max(range(len(logprobs)), key=logprobs.__getitem__))
    return ""


def _tokens(response: dict[str, Any], where: str) -> float:
    text, tokens = response.get("text") or [], response.get("output_tokens") or []
    if not text or not tokens:
        return math.nan
    if not all(isinstance(t, list) for t in tokens):
        raise PerQueryError(f"{where}: model_response.output_tokens: expected a list of token lists, got "
                            f"{tokens!r:.80}")
    return sum(len(t) for t in tokens) / len(tokens)
