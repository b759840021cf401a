"""lm-evaluation-harness ``--log_samples`` output as a ``PerQueryTable``.

The layout and record schema read here are lm-evaluation-harness's own (EleutherAI/lm-evaluation-harness at
4e7e0d4): ``lm_eval/loggers/evaluation_tracker.py`` (``save_results_aggregated`` writes
``<output_path>/<model_name_sanitized>/results_<date_id>.json``, ``save_results_samples`` writes
``samples_<task>_<date_id>.jsonl`` beside it, ``date_id`` being ``datetime.now().isoformat()`` with ``:`` as ``-``;
an ``--output_path`` ending in ``.json`` puts both in its folder instead), ``lm_eval/evaluator.py``
(``evaluate``: one line per document and filter with ``doc_id``, ``doc``, ``target``, ``arguments``, ``resps``,
``filtered_resps``, ``filter``, ``metrics`` (the metric names) and each metric's value under its name, e.g.
``exact_match`` or ``acc``), ``lm_eval/utils.py`` (``sanitize_list``: every response is stored as a string;
``get_file_task_name`` / ``get_file_datetime``: the task is the file name between the first and the last ``_``).

How a line becomes rows:

- one filter per task: ``filter_name`` if given, else the first filter of the file (tasks such as gsm8k log
  ``strict-match`` and ``flexible-extract``);
- correctness: ``metric`` if given, else the first of ``PREFERRED_METRICS`` the line names; a value in [0, 1];
- the answer: a generation's filtered response (normalized), or for a multiple-choice task (one ``[loglikelihood,
  is_greedy]`` pair per choice) the index of the most likely choice;
- repeats: when the filter keeps several responses of one request (``repeats: K`` without ``take_first``), each
  becomes a sample row graded by normalized exact match against ``target`` (lm-eval grades the list as a whole);
  with ``take_first`` or a majority vote the log holds one graded answer, one row;
- the model: ``model_name`` of the folder's ``results_<date_id>.json`` (the run that wrote the samples), else the
  folder's name; the latest ``date_id`` of each task in a folder is read (as lm-eval's ``get_latest_filename``);
- the benchmark is the task name; lm-eval logs no token counts, so ``output_tokens`` is NaN.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from parasim.calibration.per_query_table import PerQueryError, PerQueryTable, make_table, normalize_answer
from parasim.config.jsonl import iter_json_objects

PREFERRED_METRICS = ("exact_match", "acc", "acc_norm", "pass@1", "pass_at_1", "em", "correct")
SAMPLES_PREFIX = "samples_"


def samples_files(path: Path) -> list[Path]:
    """The latest ``samples_<task>_<date_id>.jsonl`` of each (folder, task) under ``path`` (a folder or one file)."""
    found = [path] if path.is_file() else sorted(path.rglob(f"{SAMPLES_PREFIX}*.jsonl"))
    latest: dict[tuple[Path, str], Path] = {}
    for f in found:
        task, date = _task_and_date(f)
        key = (f.parent, task)
        if key not in latest or _task_and_date(latest[key])[1] < date:
            latest[key] = f
    return sorted(latest.values())


def _task_and_date(path: Path) -> tuple[str, str]:
    """(task, date_id) from a samples file name, as ``lm_eval.utils.get_file_task_name`` / ``get_file_datetime``."""
    name = path.name
    if not name.startswith(SAMPLES_PREFIX) or not name.endswith(".jsonl") or name.count("_") < 2:
        raise PerQueryError(f"{path}: not an lm-eval samples file name (samples_<task>_<date_id>.jsonl)")
    return name[name.find("_") + 1:name.rfind("_")], name[name.rfind("_") + 1:].removesuffix(".jsonl")


def _model_name(folder: Path, date: str) -> str:
    """The run's ``model_name`` from ``results_<date>.json`` beside the samples, else the folder's name."""
    results = folder / f"results_{date}.json"
    if results.is_file():
        try:
            data = json.loads(results.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise PerQueryError(f"{results}: not valid JSON ({err})") from None
        name = data.get("model_name") if isinstance(data, dict) else None
        if isinstance(name, str) and name.strip():
            return name
        config = data.get("config") if isinstance(data, dict) else None
        if isinstance(config, dict) and isinstance(config.get("model_args"), str):
            for part in config["model_args"].split(","):
                key, _, value = part.partition("=")
                if key.strip() in ("pretrained", "model") and value.strip():
                    return value.strip()
    return folder.name


def read_lm_eval(path: str | Path, *, metric: str | None = None, filter_name: str | None = None) -> PerQueryTable:
    """Read an lm-eval ``--output_path`` folder (or one samples file) written with ``--log_samples``."""
    path = Path(path)
    files = samples_files(path)
    if not files:
        raise PerQueryError(f"{path}: no samples_<task>_<date_id>.jsonl files (run lm_eval with --log_samples)")
    cols: dict[str, list[Any]] = {k: [] for k in ("model", "question", "benchmark", "sample", "correct", "answer",
                                                  "where")}
    for f in files:
        task, date = _task_and_date(f)
        model = _model_name(f.parent, date)
        chosen = filter_name
        kept = 0
        try:
            for where, rec in iter_json_objects(f):
                flt = _field(rec, "filter", where, str)
                chosen = flt if chosen is None else chosen
                if flt != chosen:
                    continue
                kept += 1
                for sample, (correct, answer) in enumerate(_outcomes(rec, where, metric)):
                    for key, value in (("model", model), ("question", str(_doc_id(rec, where))),
                                       ("benchmark", task), ("sample", sample), ("correct", correct),
                                       ("answer", answer), ("where", where)):
                        cols[key].append(value)
        except PerQueryError:
            raise
        except (ValueError, OSError, UnicodeDecodeError) as err:  # iter_json_objects: a line that is not JSON
            raise PerQueryError(str(err)) from None
        if kept == 0:
            raise PerQueryError(f"{f}: no lines" + (f" with filter {filter_name!r}" if filter_name else ""))
    return make_table(model=cols["model"], question=cols["question"], benchmark=cols["benchmark"],
                      correct=cols["correct"], sample=cols["sample"], answer=cols["answer"],
                      source=str(path), where=cols["where"])


def _field(rec: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in rec:
        raise PerQueryError(f"{where}: {key}: required field is missing")
    value = rec[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise PerQueryError(f"{where}: {key}: expected {_kind_name(kind)}, got {value!r:.80}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", list: "a list", float: "a number"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _doc_id(rec: dict[str, Any], where: str) -> int:
    doc_id = _field(rec, "doc_id", where, int)
    if doc_id < 0:
        raise PerQueryError(f"{where}: doc_id: expected an integer >= 0, got {doc_id}")
    return doc_id


def _metric_value(rec: dict[str, Any], where: str, metric: str | None) -> float:
    names = _field(rec, "metrics", where, list)
    if metric is None:
        metric = next((m for m in PREFERRED_METRICS if m in names), None)
        if metric is None:
            raise PerQueryError(f"{where}: metrics: none of {list(PREFERRED_METRICS)} among {names}; name the "
                                "correctness metric (metric=...)")
    elif metric not in names:
        raise PerQueryError(f"{where}: metrics: {metric!r} is not among the line's metrics {names}")
    value = rec.get(metric)
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise PerQueryError(f"{where}: {metric}: expected a number in [0, 1], got {value!r:.80}")
    return float(value)


def _outcomes(rec: dict[str, Any], where: str, metric: str | None) -> list[tuple[float, str]]:
    """(correct, answer) per sample of one logged document."""
    value = _metric_value(rec, where, metric)
    resps = _field(rec, "filtered_resps", where, list)
    if not resps:
        raise PerQueryError(f"{where}: filtered_resps: expected one entry per request, got []")
    if len(resps) > 1 or _is_loglikelihood(resps[0]):  # one request per choice: [[loglikelihood, is_greedy], ...]
        if not all(_is_loglikelihood(r) for r in resps):
            raise PerQueryError(f"{where}: filtered_resps: expected one [loglikelihood, is_greedy] pair per choice, "
                                f"got {resps!r:.80}")
        lls = [float(r[0]) for r in resps]
        return [(value, str(lls.index(max(lls))) if len(resps) > 1 else "")]
    first = resps[0]
    if isinstance(first, str):
        return [(value, first)]
    if isinstance(first, list) and first and all(isinstance(a, str) for a in first):
        target = normalize_answer(_field(rec, "target", where, str))
        if len(first) == 1:
            return [(value, first[0])]
        return [(float(normalize_answer(a) == target and target != ""), a) for a in first]
    raise PerQueryError(f"{where}: filtered_resps: expected a response string or a list of them per request, got "
                        f"{first!r:.80}")


def _is_loglikelihood(resp: Any) -> bool:
    """Whether ``resp`` is a stored ``(loglikelihood, is_greedy)`` pair (``sanitize_list`` made both strings)."""
    if not (isinstance(resp, list) and len(resp) == 2 and all(isinstance(x, str) for x in resp)):
        return False
    try:
        return math.isfinite(float(resp[0])) and resp[1] in ("True", "False")
    except ValueError:
        return False
