"""Per-query evaluation outcomes: one table type for what eval logs record, and the plain-table reader.

A call log (``calls.py``) records an orchestration's calls; most people instead have evaluation results: for each
model, each question of a benchmark and each sample, whether the answer was right (and often the answer itself).
Those are what the call model's joint structure is fitted and checked on (how repeated samples of one model agree,
how different models fail on the same questions and with the same wrong answer), so every reader of such results
(the plain table here, lm-evaluation-harness ``--log_samples`` files, lighteval details) returns one
``PerQueryTable``.

The plain table is CSV (optionally gzipped) or Parquet, one row per (model, question, sample), columns:

- ``model``, ``question_id``, ``benchmark`` (required, non-empty strings; a question id is unique within a
  benchmark),
- ``correct`` (0/1 per sample, or a pass rate over ``n_samples`` samples: ``correct * n_samples`` must be a whole
  number of successes) or, without it, ``answer`` and ``gold`` (graded by exact match of the normalized strings,
  ``normalize_answer``; grade with a real verifier first where exact match is not the benchmark's rule),
- optional: ``sample`` (int >= 0, default 0), ``answer`` (kept, normalized, for same-wrong-answer statistics),
  ``output_tokens`` (>= 0, empty where unknown), ``n_samples`` (int >= 1, default 1).

Other columns are ignored. A bad cell is a ``PerQueryError`` naming the file, the row (and CSV line) and the column.
"""
from __future__ import annotations

import gzip
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from parasim.calibration.per_query_table import (
    PerQueryError,
    PerQueryTable,
    make_table,
    normalize_answer,
)

FORMATS = ("table", "lm_eval", "lighteval")
TABLE_SUFFIXES = (".csv", ".csv.gz", ".parquet")
_STRING_COLUMNS = ("model", "question_id", "benchmark", "answer", "gold")

__all__ = ["FORMATS", "PerQueryError", "PerQueryTable", "make_table", "normalize_answer", "read_per_query",
           "read_table", "sniff_format", "write_table"]


def read_per_query(path: str | Path, *, fmt: str | None = None, metric: str | None = None,
                   filter_name: str | None = None) -> PerQueryTable:
    """Read per-query outcomes from ``path``: ``fmt`` is one of ``FORMATS``, sniffed from the path when None.

    ``table``: a plain table file; ``lm_eval``: an lm-evaluation-harness ``--output_path`` folder or samples file
    (``parasim.calibration.lm_eval_logs``); ``lighteval``: a lighteval ``--output-dir`` or details file
    (``parasim.calibration.lighteval_details``). ``metric`` names the correctness metric of an eval log (each reader
    has a preference order), ``filter_name`` the lm-eval filter to read.
    """
    path = Path(path)
    if not path.exists():
        raise PerQueryError(f"{path}: no such file or directory")
    fmt = sniff_format(path) if fmt is None else fmt
    if fmt not in FORMATS:
        raise PerQueryError(f"{path}: format {fmt!r}: expected one of {list(FORMATS)}")
    if fmt != "lm_eval" and filter_name is not None:
        raise PerQueryError(f"{path}: filter_name is an lm-eval setting; this input reads as {fmt!r}")
    if fmt == "lm_eval":
        from parasim.calibration.lm_eval_logs import read_lm_eval

        return read_lm_eval(path, metric=metric, filter_name=filter_name)
    if fmt == "lighteval":
        from parasim.calibration.lighteval_details import read_lighteval

        return read_lighteval(path, metric=metric)
    if metric is not None:
        raise PerQueryError(f"{path}: metric is an eval-log setting; a plain table has its own correct column")
    return read_table(path)


def sniff_format(path: Path) -> str:
    """The per-query format of ``path`` from its name and contents (a clear error when none fits).

    A samples_*.jsonl file, or a folder holding one, is lm-eval's; a details_*.parquet file, or a folder holding one,
    lighteval's; a .csv / .csv.gz / .parquet file otherwise a plain table.
    """
    name = path.name.lower()
    if path.is_file():
        if name.startswith("samples_") and name.endswith(".jsonl"):
            return "lm_eval"
        if name.startswith("details_") and name.endswith(".parquet"):
            return "lighteval"
        if name.endswith(TABLE_SUFFIXES):
            return "table"
    elif path.is_dir():
        found = {fmt for fmt, pattern in (("lm_eval", "samples_*.jsonl"), ("lighteval", "details_*.parquet"))
                 if next(path.rglob(pattern), None) is not None}
        if len(found) == 1:
            return found.pop()
        if found:
            raise PerQueryError(f"{path}: holds both lm-eval samples and lighteval details files; pass fmt "
                                "(--format) or one of its folders")
    raise PerQueryError(f"{path}: not a per-query input: expected a plain table ({', '.join(TABLE_SUFFIXES)}), an "
                        "lm-eval --log_samples folder (samples_<task>_<date>.jsonl) or a lighteval details folder "
                        "(details_<task>_<date>.parquet)")


def read_table(path: str | Path) -> PerQueryTable:
    """Read a plain per-query table (CSV, CSV.gz or Parquet; the columns are in this module's docstring)."""
    path = Path(path)
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            data, line0 = pq.read_table(path), None
        elif name.endswith((".csv", ".csv.gz")):
            # ids and answers stay text ("007" is not 7); empty text cells stay "" (not null)
            convert = pacsv.ConvertOptions(column_types={c: pa.string() for c in _STRING_COLUMNS},
                                           strings_can_be_null=False)
            data, line0 = pacsv.read_csv(path, convert_options=convert), 2
        else:
            raise PerQueryError(f"{path}: expected a {', '.join(TABLE_SUFFIXES)} file")
    except (pa.ArrowInvalid, OSError, EOFError, gzip.BadGzipFile) as err:
        raise PerQueryError(f"{path}: cannot read as a table ({str(err).splitlines()[0]})") from None
    columns = set(data.column_names)
    missing = [c for c in ("model", "question_id", "benchmark") if c not in columns]
    if "correct" not in columns and not {"answer", "gold"} <= columns:
        missing.append("correct (or answer and gold)")
    if missing:
        raise PerQueryError(f"{path}: missing column(s) {', '.join(missing)}; found {sorted(columns)}")
    n = data.num_rows
    if n == 0:
        raise PerQueryError(f"{path}: no rows")
    where = [f"{path}: row {i + 1}" + (f" (line {i + line0})" if line0 else "") for i in range(n)]
    col = {c: data.column(c).to_pylist() for c in data.column_names}
    for c in ("model", "question_id", "benchmark", "answer", "gold"):
        for i, v in enumerate(col.get(c, ())):
            if v is not None and not isinstance(v, str):
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool):  # Parquet integer ids are ids
                    col[c][i] = str(v)
                else:
                    raise PerQueryError(f"{where[i]}: {c}: expected text, got {v!r}")
    if "correct" in columns:
        correct = []
        for i, v in enumerate(col["correct"]):
            if isinstance(v, bool):
                v = float(v)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise PerQueryError(f"{where[i]}: correct: expected a number in [0, 1], got {v!r}")
            correct.append(float(v))
    else:
        if "n_samples" in columns and any(v not in (None, 1) for v in col["n_samples"]):
            i = next(i for i, v in enumerate(col["n_samples"]) if v not in (None, 1))
            raise PerQueryError(f"{where[i]}: n_samples: graded from answer and gold, a row is one sample "
                                f"(n_samples 1), got {col['n_samples'][i]!r}")
        correct = [float(normalize_answer(a) == normalize_answer(g) and normalize_answer(a) != "")
                   for a, g in zip(col["answer"], col["gold"])]
    n_samples = None if "n_samples" not in columns else [1 if v is None else v for v in col["n_samples"]]
    sample = None if "sample" not in columns else [0 if v is None else v for v in col["sample"]]
    return make_table(model=col["model"], question=col["question_id"], benchmark=col["benchmark"], correct=correct,
                      sample=sample, n_samples=n_samples, answer=col.get("answer"),
                      output_tokens=col.get("output_tokens"), source=str(path), where=where)


def write_table(table: PerQueryTable, path: str | Path) -> Path:
    """Write ``table`` as a plain table (``.csv``, ``.csv.gz`` or ``.parquet`` by suffix), atomically.

    ``read_table`` reads it back to the same table (the normalized answers are what is stored).
    """
    path = Path(path)
    data = pa.table({"model": pa.array(table.model.tolist(), pa.string()),
                     "question_id": pa.array(table.question.tolist(), pa.string()),
                     "benchmark": pa.array(table.benchmark.tolist(), pa.string()),
                     "sample": pa.array(table.sample, pa.int64()),
                     "correct": pa.array(table.correct, pa.float64()),
                     "n_samples": pa.array(table.n_samples, pa.int64()),
                     "answer": pa.array(table.answer.tolist(), pa.string()),
                     "output_tokens": pa.array(table.output_tokens, pa.float64(), from_pandas=True)})
    name = path.name.lower()
    if not name.endswith(TABLE_SUFFIXES):
        raise PerQueryError(f"{path}: expected a {', '.join(TABLE_SUFFIXES)} file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if name.endswith(".parquet"):
            pq.write_table(data, tmp)
        elif name.endswith(".gz"):
            # no name and mtime 0 in the gzip header: the same table gives the same bytes
            with open(tmp, "wb") as handle, gzip.GzipFile(filename="", fileobj=handle, mode="wb", mtime=0) as raw:
                pacsv.write_csv(data, raw)
        else:
            pacsv.write_csv(data, tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a data file is as readable as any other
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
