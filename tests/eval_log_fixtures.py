"""Eval-log files laid out exactly as lm-evaluation-harness and lighteval write them, for the readers' tests.

lm-evaluation-harness (EleutherAI/lm-evaluation-harness at 4e7e0d4): ``lm_eval/evaluator.py`` ``evaluate`` builds
each logged sample (keys in this order: doc_id, doc, target, arguments, resps, filtered_resps, filter, metrics,
doc_hash, prompt_hash, target_hash, then each metric's value); ``lm_eval/loggers/evaluation_tracker.py``
``save_results_samples`` turns ``arguments`` into ``{"gen_args_i": {"arg_j": ...}}``, stringifies ``resps`` /
``filtered_resps`` with ``sanitize_list`` and ``target`` with ``str``, and appends one ``json.dumps(...,
ensure_ascii=False)`` line per sample to ``<output_path>/<model_name_sanitized>/samples_<task>_<date_id>.jsonl``;
``save_results_aggregated`` writes ``results_<date_id>.json`` (indent 2) beside it with the run's ``results``,
``configs``, ``n-samples``, ``config`` and the ``GeneralConfigTracker`` fields (``model_name``,
``model_name_sanitized``, ...). ``lm_eval/utils.py`` ``sanitize_model_name`` maps ``/`` to ``__``.

lighteval (huggingface/lighteval at 3fd1526): ``src/lighteval/logging/evaluation_tracker.py`` ``save`` /
``save_details`` write ``Dataset.from_list([asdict(detail)])`` with its columns sorted (``doc``, ``metric``,
``model_response``) to ``<output_dir>/details/<model_name>/<date_id>/details_<task>_<date_id>.parquet``;
``Dataset.to_parquet`` stores the Arrow table that ``pyarrow.Table.from_pylist`` builds from the same rows (it adds
only a ``huggingface`` schema-metadata entry, written here too). The ``Doc`` and ``ModelResponse`` fields are those
of ``src/lighteval/tasks/requests.py`` and ``src/lighteval/models/model_output.py``.

``python tests/eval_log_fixtures.py DIR`` writes the small lm-eval run that README.md calibrates on.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATE_ID = "2025-06-01T12-00-00.000000"  # datetime.now().isoformat().replace(":", "-")
LETTERS = "ABCD"


def _hash(text: str) -> str:  # lm_eval.utils.hash_string
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lm_eval_generate_sample(doc_id: int, question: str, target: str, responses: list[str], extracted: list[str],
                            metric: str, value: float, filter_key: str = "strict-match",
                            keep_all: bool = False) -> dict[str, Any]:
    """One logged generate_until sample (``repeats`` = len(responses)); ``keep_all``: the filter kept every answer."""
    doc = {"question": question, "answer": f"#### {target}"}
    prompt = f"Question: {question}\nAnswer:"
    args = (prompt, {"until": ["Question:"], "do_sample": False})
    sample = {"doc_id": doc_id, "doc": doc, "target": target, "arguments": [args], "resps": [responses],
              "filtered_resps": [extracted if keep_all else extracted[0]], "filter": filter_key, "metrics": [metric],
              "doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False)), "prompt_hash": _hash(prompt),
              "target_hash": _hash(target), metric: value}
    return sample


def lm_eval_choice_sample(doc_id: int, question: str, choices: list[str], gold: int, lls: list[float],
                          extra_metrics: dict[str, float] | None = None) -> dict[str, Any]:
    """One logged multiple_choice sample: one loglikelihood request per choice, ``acc`` (and ``acc_norm``)."""
    doc = {"question": question, "choices": choices, "answer": gold}
    prompt = f"{question}\n" + "".join(f"{LETTERS[i]}. {c}\n" for i, c in enumerate(choices)) + "Answer:"
    args = [(prompt, f" {LETTERS[i]}") for i in range(len(choices))]
    resps = [[(ll, False)] for ll in lls]  # one (loglikelihood, is_greedy) per request
    filtered = [(ll, False) for ll in lls]  # take_first
    metrics = {"acc": float(int(np.argmax(lls)) == gold), **(extra_metrics or {})}
    return {"doc_id": doc_id, "doc": doc, "target": gold, "arguments": args, "resps": resps,
            "filtered_resps": filtered, "filter": "none", "metrics": list(metrics),
            "doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False)), "prompt_hash": _hash(prompt),
            "target_hash": _hash(str(gold)), **metrics}


def _sanitize_list(sub: Any) -> Any:  # lm_eval.utils.sanitize_list
    if isinstance(sub, list):
        return [_sanitize_list(item) for item in sub]
    if isinstance(sub, tuple):
        return tuple(_sanitize_list(item) for item in sub)
    return str(sub)


def write_lm_eval_run(output_path: Path, model_name: str, samples: dict[str, list[dict[str, Any]]],
                      date_id: str = DATE_ID) -> Path:
    """Write one lm-eval run's results_<date_id>.json and samples_<task>_<date_id>.jsonl as lm-eval does."""
    sanitized = re.sub(r"[\"<>:/|\\?*\[\]]+", "__", model_name)  # lm_eval.utils.sanitize_model_name
    folder = output_path / sanitized
    folder.mkdir(parents=True, exist_ok=True)
    results = {
        "results": {task: {"alias": task, **{f"{m},{rows[0]['filter']}": float(np.mean([r[m] for r in rows]))
                                             for m in rows[0]["metrics"]}} for task, rows in samples.items()},
        "group_subtasks": {task: [] for task in samples},
        "configs": {task: {"task": task, "output_type": "generate_until" if isinstance(rows[0]["target"], str)
                           else "multiple_choice", "repeats": len(rows[0]["resps"][0])}
                    for task, rows in sorted(samples.items())},
        "versions": dict.fromkeys(sorted(samples), 1.0), "n-shot": dict.fromkeys(sorted(samples), 0),
        "higher_is_better": {task: dict.fromkeys(rows[0]["metrics"], True) for task, rows in sorted(samples.items())},
        "n-samples": {task: {"original": len(rows), "effective": len(rows)} for task, rows in samples.items()},
        "config": {"model": "hf", "model_args": f"pretrained={model_name}", "batch_size": 1, "batch_sizes": [],
                   "device": None, "use_cache": None, "limit": None, "bootstrap_iters": 100000,
                   "gen_kwargs": None, "random_seed": 0, "numpy_seed": 1234, "torch_seed": 1234,
                   "fewshot_seed": 1234},
        "git_hash": "4e7e0d4", "date": 1748779200.0,
        "task_hashes": {}, "model_source": "hf", "model_name": model_name, "model_name_sanitized": sanitized,
        "system_instruction": None, "system_instruction_sha": None, "fewshot_as_multiturn": False,
        "chat_template": None, "chat_template_sha": None, "start_time": 1.0, "end_time": 2.0,
        "total_evaluation_time_seconds": "1.0",
    }
    (folder / f"results_{date_id}.json").write_text(json.dumps(results, indent=2, ensure_ascii=False),
                                                     encoding="utf-8")
    for task, rows in samples.items():
        # lm-eval appends ("a") to a file named by a fresh date_id; "w" here, so that rewriting a fixture is idempotent
        with open(folder / f"samples_{task}_{date_id}.jsonl", "w", encoding="utf-8") as f:
            for sample in rows:
                sample = dict(sample)
                sample["arguments"] = {f"gen_args_{i}": {f"arg_{j}": tmp for j, tmp in enumerate(arg)}
                                       for i, arg in enumerate(sample["arguments"])}
                sample["resps"] = _sanitize_list(sample["resps"])
                sample["filtered_resps"] = _sanitize_list(sample["filtered_resps"])
                sample["target"] = str(sample["target"])
                f.write(json.dumps(sample, default=str, ensure_ascii=False) + "\n")
    return folder


def lighteval_detail(query: str, choices: list[str], gold: int, metric: dict[str, float], *, doc_id: str = "",
                     text: list[str] | None = None, output_tokens: list[list[int]] | None = None,
                     logprobs: list[float] | None = None, num_samples: int = 1) -> dict[str, Any]:
    """``asdict(DetailsLogger.Detail(doc, model_response, metric))`` of one evaluated sample."""
    doc = {"query": query, "choices": choices, "gold_index": gold, "instruction": None, "images": None,
           "specific": None, "unconditioned_query": None, "original_query": None, "id": doc_id,
           "task_name": "", "fewshot_samples": [], "sampling_methods": [], "fewshot_sorting_class": None,
           "generation_size": 256 if text else None, "stop_sequences": None, "use_logits": logprobs is not None,
           "num_samples": num_samples, "generation_grammar": None}
    response = {"input": query, "input_tokens": [1, 2, 3], "text": text or [], "output_tokens": output_tokens or [],
                "text_post_processed": None, "reasonings": [], "logprobs": logprobs or [],
                "argmax_logits_eq_gold": [], "logits": None, "unconditioned_logprobs": None,
                "truncated_tokens_count": 0, "padded_tokens_count": 0}
    return {"doc": doc, "model_response": response, "metric": metric}


def write_lighteval_details(output_dir: Path, model_name: str, task: str, details: list[dict[str, Any]],
                            date_id: str = DATE_ID) -> Path:
    """Write ``details_<task>_<date_id>.parquet`` where ``EvaluationTracker.save_details`` puts it."""
    folder = output_dir / "details" / model_name.strip("/") / date_id
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{k: d[k] for k in sorted(d)} for d in details]  # dataset.select_columns(sorted(column_names))
    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": {}}})})
    path = folder / f"details_{task}_{date_id}.parquet"
    pq.write_table(table, path)
    return path


def readme_example(output_path: Path, seed: int = 0) -> list[Path]:
    """A small lm-eval ``--log_samples`` run of three models on a generation task and a multiple-choice task."""
    rng = np.random.default_rng(seed)
    docs = 40
    difficulty = rng.normal(0.0, 1.0, docs)
    folders = []
    for name, skill in (("org/model-small", -0.5), ("org/model-mid", 0.3), ("org/model-big", 1.2)):
        gen, mc = [], []
        for d in range(docs):
            p = 1.0 / (1.0 + np.exp(-(skill - difficulty[d])))
            right = bool(rng.random() < p)
            target = str(10 + d)
            answer = target if right else str(10 + d + 1 + int(rng.integers(0, 3)))
            gen.append(lm_eval_generate_sample(d, f"What is {d} + 10?", target, [f"The answer is {answer}."],
                                               [answer], "exact_match", float(right)))
            gold = d % 4
            pick = gold if rng.random() < p else int((gold + 1 + rng.integers(0, 3)) % 4)
            lls = [-3.0 - float(rng.random()) for _ in range(4)]
            lls[pick] = -1.0
            mc.append(lm_eval_choice_sample(d, f"Question {d}?", [f"option {c}" for c in LETTERS], gold, lls))
        folders.append(write_lm_eval_run(output_path, name, {"arith_gen": gen, "quiz_mc": mc}, date_id=DATE_ID))
    return folders


if __name__ == "__main__":
    for folder in readme_example(Path(sys.argv[1])):
        print(folder)
