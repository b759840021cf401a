"""The per-query table: the plain-table reader, its errors, the writer's round trip and the shipped public tables."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parasim.calibration.per_query import (
    PerQueryError,
    PerQueryTable,
    make_table,
    read_per_query,
    read_table,
    write_table,
)

DATA = Path(__file__).resolve().parents[1] / "parasim" / "calibration" / "data"


def _write_csv(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_csv_with_correct_and_optional_columns(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv.gz", "model,question_id,benchmark,sample,correct,answer,output_tokens\n"
                                             "a,007,math,0,1,  42 ,120\n"
                                             "a,007,math,1,0,41,\n"
                                             "b,007,math,0,1,42,80.5\n")
    t = read_per_query(path)
    assert t.question.tolist() == ["007"] * 3  # ids stay text
    assert t.sample.tolist() == [0, 1, 0] and t.correct.tolist() == [1.0, 0.0, 1.0]
    assert t.answer.tolist() == ["42", "41", "42"]  # normalized
    assert t.output_tokens[0] == 120 and np.isnan(t.output_tokens[1]) and t.output_tokens[2] == 80.5
    assert t.n_samples.tolist() == [1, 1, 1] and t.models() == ["a", "b"] and t.source == str(path)


def test_answer_and_gold_are_graded_by_normalized_exact_match(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", "model,question_id,benchmark,answer,gold\n"
                                          "a,q1,mc,B,b\na,q2,mc,C,D\na,q3,mc,,A\n")
    t = read_table(path)
    assert t.correct.tolist() == [1.0, 0.0, 0.0]  # an empty answer is never right
    assert t.answer.tolist() == ["b", "c", ""]


def test_pass_rates_over_samples(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "t.csv", "model,question_id,benchmark,correct,n_samples\na,q1,code,0.3,10\n"
                                          "a,q2,code,1.0,10\nb,q1,code,0,1\n")
    t = read_table(path)
    assert t.successes.tolist() == [3, 10, 0] and t.n_samples.tolist() == [10, 10, 1]


def test_parquet_round_trip_and_integer_ids(tmp_path: Path) -> None:
    pq.write_table(pa.table({"model": ["m", "m"], "question_id": [1, 2], "benchmark": ["b", "b"],
                             "correct": [True, False]}), tmp_path / "t.parquet")
    t = read_per_query(tmp_path / "t.parquet")
    assert t.question.tolist() == ["1", "2"] and t.correct.tolist() == [1.0, 0.0]
    for name in ("back.parquet", "back.csv.gz", "back.csv"):
        back = read_table(write_table(t, tmp_path / name))
        for field in ("model", "question", "benchmark", "sample", "correct", "n_samples", "answer"):
            assert getattr(back, field).tolist() == getattr(t, field).tolist(), (name, field)
        assert np.isnan(back.output_tokens).all()


def test_write_is_deterministic(tmp_path: Path) -> None:
    t = make_table(model=["a"], question=["q"], benchmark=["b"], correct=[1.0], output_tokens=[3.0])
    assert write_table(t, tmp_path / "x.csv.gz").read_bytes() == write_table(t, tmp_path / "y.csv.gz").read_bytes()


@pytest.mark.parametrize("text,expected", [
    ("model,question_id\na,q\n", "missing column(s) benchmark, correct (or answer and gold)"),
    ("model,question_id,benchmark,correct\na,q,b,1.5\n",
     "row 1 (line 2): correct: expected a number in [0, 1], got 1.5"),
    ("model,question_id,benchmark,correct\na,q,b,\n", "row 1 (line 2): correct: expected a number in [0, 1], got None"),
    ("model,question_id,benchmark,correct\na,q,b,1\n,q,b,0\n", "row 2 (line 3): model: expected a non-empty string"),
    ("model,question_id,benchmark,correct,n_samples\na,q,b,0.25,10\n",
     "row 1 (line 2): correct: 0.25 over n_samples = 10 is not a whole number"),
    ("model,question_id,benchmark,correct,n_samples\na,q,b,0,0\n",
     "row 1 (line 2): n_samples: expected an integer >= 1"),
    ("model,question_id,benchmark,correct,sample\na,q,b,0,-1\n", "row 1 (line 2): sample: expected an integer >= 0"),
    ("model,question_id,benchmark,correct\na,q,b,1\na,q,b,0\n",
     "row 2 (line 3): sample: model 'a', benchmark 'b', question 'q', sample 0 already given in"),
    ("model,question_id,benchmark,correct,output_tokens\na,q,b,1,-3\n", "row 1 (line 2): output_tokens: expected a"),
    ("model,question_id,benchmark,answer,gold,n_samples\na,q,b,x,x,4\n", "row 1 (line 2): n_samples: graded from"),
    ("model,question_id,benchmark,correct\n", "no rows"),
])
def test_bad_tables_name_file_row_and_column(tmp_path: Path, text: str, expected: str) -> None:
    path = _write_csv(tmp_path / "bad.csv", text)
    with pytest.raises(PerQueryError) as err:
        read_per_query(path)
    message = str(err.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message


def test_unreadable_and_unknown_inputs(tmp_path: Path) -> None:
    (tmp_path / "x.csv.gz").write_bytes(b"not gzip")
    with pytest.raises(PerQueryError, match="cannot read as a table"):
        read_per_query(tmp_path / "x.csv.gz")
    with pytest.raises(PerQueryError, match="no such file"):
        read_per_query(tmp_path / "missing.csv")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(PerQueryError, match="not a per-query input"):
        read_per_query(tmp_path / "x.txt")
    with pytest.raises(PerQueryError, match="format 'nope'"):
        read_per_query(tmp_path / "x.txt", fmt="nope")


def test_table_checks_lengths_and_selects() -> None:
    t = make_table(model=["a", "b"], question=["q", "q"], benchmark=["b", "b"], correct=[1.0, 0.0])
    assert len(t.select(t.model == "b")) == 1 and len(PerQueryTable.concat([t, t.select([0])])) == 3
    with pytest.raises(ValueError, match="PerQueryTable.sample: 1 rows"):
        PerQueryTable(**{**{k: getattr(t, k) for k in ("model", "question", "benchmark", "correct", "n_samples",
                                                        "answer", "output_tokens")},
                         "sample": np.zeros(1, np.int64)}, source="x")


def test_shipped_public_tables_read_as_documented() -> None:
    """The three converted tables (scripts/import_outcomes.py) read back with the models and samples SOURCES.md
    describes."""
    mmlu = read_per_query(DATA / "mmlu_pro.csv.gz")
    assert len(mmlu.models()) == 13 and mmlu.benchmarks() == ["MMLU-Pro"] and (mmlu.n_samples == 1).all()
    assert set(np.unique(mmlu.answer)) <= set("abcdefghij") | {""}
    math = read_per_query(DATA / "math_l5.csv.gz")
    assert len(math.models()) == 23 and len(math) == 23 * 721 and np.isfinite(math.output_tokens).all()
    lcb = read_per_query(DATA / "livecodebench.csv.gz")
    assert len(lcb.models()) == 12
    tens = {m for m in lcb.models() if (lcb.n_samples[lcb.model == m] == 10).all()}
    assert "GPT-4O-2024-05-13" in tens and not any("N=1" in m for m in tens)
    for t in (mmlu, math, lcb):  # every model is neither always right nor always wrong
        acc = np.array([t.correct[t.model == m].mean() for m in t.models()])
        assert ((acc > 0.05) & (acc < 0.98)).all()
    sources = (DATA / "SOURCES.md").read_text()
    for name in ("mmlu_pro.csv.gz", "math_l5.csv.gz", "livecodebench.csv.gz"):
        assert name in sources
