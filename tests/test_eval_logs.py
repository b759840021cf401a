"""The lm-evaluation-harness and lighteval readers, on files laid out as those tools write them (eval_log_fixtures)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_log_fixtures import (
    DATE_ID,
    lighteval_detail,
    lm_eval_choice_sample,
    lm_eval_generate_sample,
    readme_example,
    write_lighteval_details,
    write_lm_eval_run,
)

from parasim.calibration.per_query import PerQueryError, read_per_query, sniff_format

ROOT = Path(__file__).resolve().parents[1]


def _gsm8k(n: int = 3) -> list[dict]:
    rows = []
    for d in range(n):
        right = d % 2 == 0
        answer = str(d) if right else "99"
        for flt in ("strict-match", "flexible-extract"):  # gsm8k logs one line per document and filter
            rows.append(lm_eval_generate_sample(d, f"q{d}", str(d), [f"... #### {answer}"], [answer], "exact_match",
                                                float(right if flt == "strict-match" else True), filter_key=flt))
    return rows


def test_lm_eval_output_dir(tmp_path: Path) -> None:
    out = tmp_path / "lm_out"
    write_lm_eval_run(out, "meta-llama/Llama-3-8B", {"gsm8k": _gsm8k()})
    mc = [lm_eval_choice_sample(d, f"m{d}", ["a", "b", "c", "d"], gold=1, lls=[-2.0, -1.0 - d, -1.5, -3.0],
                                extra_metrics={"acc_norm": 0.0}) for d in range(2)]
    write_lm_eval_run(out, "Qwen/Qwen3-4B", {"mmlu_college_math": mc})
    assert (out / "meta-llama__Llama-3-8B" / f"samples_gsm8k_{DATE_ID}.jsonl").is_file()  # sanitize_model_name
    assert sniff_format(out) == "lm_eval"
    t = read_per_query(out)
    gsm = t.benchmark == "gsm8k"
    assert set(t.model[gsm]) == {"meta-llama/Llama-3-8B"}  # results_<date>.json's model_name, not the folder
    assert t.question[gsm].tolist() == ["0", "1", "2"]  # the first filter (strict-match) only
    assert t.correct[gsm].tolist() == [1.0, 0.0, 1.0] and t.answer[gsm].tolist() == ["0", "99", "2"]
    m = t.benchmark == "mmlu_college_math"
    assert t.correct[m].tolist() == [1.0, 0.0]  # acc preferred over acc_norm
    assert t.answer[m].tolist() == ["1", "2"]  # the most likely choice's index
    assert np.isnan(t.output_tokens).all() and (t.n_samples == 1).all()
    flex = read_per_query(out / "meta-llama__Llama-3-8B", filter_name="flexible-extract")
    assert flex.correct.tolist() == [1.0, 1.0, 1.0]
    norm = read_per_query(out / "Qwen__Qwen3-4B" / f"samples_mmlu_college_math_{DATE_ID}.jsonl", metric="acc_norm")
    assert norm.correct.tolist() == [0.0, 0.0] and norm.model.tolist() == ["Qwen/Qwen3-4B"] * 2


def test_lm_eval_repeats_kept_by_the_filter_become_samples(tmp_path: Path) -> None:
    """repeats: 4 with a filter that keeps every answer (no take_first): one row per sample, graded against target."""
    rows = [lm_eval_generate_sample(0, "q", "7", ["r1", "r2", "r3", "r4"], ["7", " 7", "8", "7"], "exact_match",
                                    1.0, keep_all=True)]
    write_lm_eval_run(tmp_path, "m", {"aime": rows})
    t = read_per_query(tmp_path)
    assert t.sample.tolist() == [0, 1, 2, 3] and t.correct.tolist() == [1.0, 1.0, 0.0, 1.0]
    assert t.answer.tolist() == ["7", "7", "8", "7"]


def test_lm_eval_latest_run_of_a_task(tmp_path: Path) -> None:
    old = [lm_eval_generate_sample(0, "q", "1", ["x"], ["2"], "exact_match", 0.0)]
    new = [lm_eval_generate_sample(0, "q", "1", ["x"], ["1"], "exact_match", 1.0)]
    write_lm_eval_run(tmp_path, "m", {"t": old}, date_id="2025-01-01T00-00-00.000000")
    write_lm_eval_run(tmp_path, "m", {"t": new}, date_id="2025-02-01T00-00-00.000000")
    assert read_per_query(tmp_path).correct.tolist() == [1.0]


def _bad_line(path: Path, n: int, edit) -> None:
    lines = path.read_text().splitlines()
    rec = json.loads(lines[n - 1])
    edit(rec)
    lines[n - 1] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("edit,expected", [
    (lambda r: r.pop("doc_id"), "doc_id: required field is missing"),
    (lambda r: r.update(doc_id="3"), "doc_id: expected an integer"),
    (lambda r: r.update(exact_match=2.0), "exact_match: expected a number in [0, 1], got 2.0"),
    (lambda r: r.update(metrics=["bleu"], bleu=3.0), "metrics: none of"),
    (lambda r: r.update(filtered_resps=[{"x": 1}]), "filtered_resps: expected a response string"),
    (lambda r: r.update(filtered_resps=[]), "filtered_resps: expected one entry per request"),
])
def test_lm_eval_bad_lines_name_file_line_and_field(tmp_path: Path, edit, expected: str) -> None:
    folder = write_lm_eval_run(tmp_path, "m", {"gsm8k": _gsm8k()})
    path = folder / f"samples_gsm8k_{DATE_ID}.jsonl"
    _bad_line(path, 3, edit)
    with pytest.raises(PerQueryError) as err:
        read_per_query(tmp_path)
    assert str(err.value).startswith(f"{path}:3: ") and expected in str(err.value) and "\n" not in str(err.value)


def test_lm_eval_not_json_and_empty(tmp_path: Path) -> None:
    folder = write_lm_eval_run(tmp_path, "m", {"gsm8k": _gsm8k()})
    path = folder / f"samples_gsm8k_{DATE_ID}.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(PerQueryError, match=rf"{path}:7: not valid JSON"):
        read_per_query(tmp_path)
    write_lm_eval_run(tmp_path, "m", {"gsm8k": _gsm8k()})
    with pytest.raises(PerQueryError, match="no lines with filter 'nope'"):
        read_per_query(tmp_path, fmt="lm_eval", filter_name="nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PerQueryError, match="not a per-query input"):
        read_per_query(tmp_path / "empty")


def test_lighteval_details(tmp_path: Path) -> None:
    out = tmp_path / "lighteval_out"
    gen = [lighteval_detail(f"Problem {d}", [str(d)], 0, {"extractive_match": float(d != 1)}, text=[f"\\boxed{{{d}}}"],
                            output_tokens=[[1] * (10 + d)]) for d in range(3)]
    write_lighteval_details(out, "Qwen/Qwen3-4B", "lighteval|math_500|0", gen)
    mc = [lighteval_detail(f"Q{d}", ["A", "B", "C", "D"], 2, {"acc": float(d == 0), "acc_norm": 1.0},
                           doc_id=f"id{d}", logprobs=[-3.0, -2.0 + d, -1.5, -4.0]) for d in range(2)]
    write_lighteval_details(out, "Qwen/Qwen3-4B", "mmlu|0", mc)
    avg = [lighteval_detail("P", ["5"], 0, {"avg@n:n=4": 0.75, "pass@k:k=1&n=4": 0.75}, text=["a", "b", "c", "d"],
                            output_tokens=[[1] * 8, [1] * 4, [1] * 6, [1] * 2], num_samples=4)]
    write_lighteval_details(out, "gpt2", "aime25|0", avg)
    assert sniff_format(out) == "lighteval"
    t = read_per_query(out)
    m = t.benchmark == "lighteval|math_500|0"
    assert set(t.model[m]) == {"Qwen/Qwen3-4B"} and t.correct[m].tolist() == [1.0, 0.0, 1.0]
    assert t.output_tokens[m].tolist() == [10.0, 11.0, 12.0] and set(t.answer[m]) == {""}
    assert len(set(t.question[m])) == 3 and all(q.startswith("q") for q in t.question[m])  # hashed doc.query
    c = t.benchmark == "mmlu|0"
    assert t.question[c].tolist() == ["id0", "id1"] and t.correct[c].tolist() == [1.0, 0.0]
    assert t.answer[c].tolist() == ["2", "1"] and np.isnan(t.output_tokens[c]).all()
    a = t.benchmark == "aime25|0"
    assert t.correct[a].tolist() == [0.75] and t.n_samples[a].tolist() == [4] and t.output_tokens[a].tolist() == [5.0]
    # the same question hashes to the same id in another model's file
    write_lighteval_details(tmp_path / "other", "m2", "lighteval|math_500|0", gen[:1])
    assert read_per_query(tmp_path / "other").question[0] == t.question[m][0]


def test_lighteval_bad_rows_name_file_row_and_field(tmp_path: Path) -> None:
    rows = [lighteval_detail("Q", ["A"], 0, {"acc": 1.0}, logprobs=[-1.0]),
            lighteval_detail("Q2", ["A"], 0, {"acc": 1.5}, logprobs=[-1.0])]
    path = write_lighteval_details(tmp_path, "m", "mmlu|0", rows)
    with pytest.raises(PerQueryError) as err:
        read_per_query(tmp_path)
    assert str(err.value) == f"{path}: row 1: metric.acc: expected a number in [0, 1], got 1.5"
    path = write_lighteval_details(tmp_path / "b", "m", "bleu|0", [lighteval_detail("Q", ["A"], 0, {"bleu": 0.3})])
    with pytest.raises(PerQueryError, match=r"row 0: metric: none of"):
        read_per_query(path)
    (tmp_path / "c" / "details" / "m" / DATE_ID).mkdir(parents=True)
    bad = tmp_path / "c" / "details" / "m" / DATE_ID / f"details_x|0_{DATE_ID}.parquet"
    bad.write_bytes(b"PAR1 not parquet")
    with pytest.raises(PerQueryError, match="cannot read as Parquet"):
        read_per_query(tmp_path / "c")


def test_readme_example_is_what_the_fixture_writes(tmp_path: Path) -> None:
    """README.md calibrates on the run ``python tests/eval_log_fixtures.py DIR`` writes: three models, two tasks."""
    readme_example(tmp_path)
    t = read_per_query(tmp_path)
    assert sorted(t.models()) == ["org/model-big", "org/model-mid", "org/model-small"]
    assert sorted(t.benchmarks()) == ["arith_gen", "quiz_mc"] and len(t) == 3 * 2 * 40
    acc = {m: t.correct[t.model == m].mean() for m in t.models()}
    assert acc["org/model-small"] < acc["org/model-mid"] < acc["org/model-big"]
