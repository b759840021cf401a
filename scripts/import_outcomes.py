"""Convert the three public per-query result tables into parasim's plain per-query format (run once).

``python scripts/import_outcomes.py SRC_DIR`` reads ``mmlu_pro.csv.gz``, ``math_l5.csv.gz`` and
``livecodebench.csv.gz`` from SRC_DIR (tables built from the public result files named in
``parasim/calibration/data/SOURCES.md``) and writes ``parasim/calibration/data/<name>.csv.gz``, which
``parasim.calibration.per_query.read_table`` reads. A developer's converter, not part of the installed package.

What each conversion decides (and SOURCES.md repeats):

- MMLU-Pro: ``correct`` is the predicted letter equal to that row's gold letter (an empty prediction, no letter
  extracted, is wrong; its answer stays unknown, ``""``); ``answer`` is the letter.
- MATH level 5: the stated answer is graded against the gold one with math-verify (``parasim.tools.verify.math_equal``,
  the verifier the real tools use), since exact match would fail ``\\frac{1}{2}`` against ``1/2``; ``answer`` is the
  stated answer; ``output_tokens`` is the response length in characters / 4 (an estimate: the source logged
  characters, not tokens).
- LiveCodeBench: ``correct`` is the pass rate over the samples; ``n_samples`` is 10 for a model whose pass rates take
  values strictly between 0% and 100% (all multiples of 10%: the 2024 models' ~10 samples) and 1 for a model whose
  rates are only 0% or 100% (one sample: the 2025 reasoning models and those named N=1).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from parasim.calibration.per_query import PerQueryTable, make_table, write_table
from parasim.tools.verify import math_equal

OUT = Path(__file__).resolve().parents[1] / "parasim" / "calibration" / "data"
CHARS_PER_TOKEN = 4.0


def _read(path: Path) -> dict[str, list]:
    text_columns = ("model", "question_id", "id", "answer", "pred", "gold", "category")
    convert = pacsv.ConvertOptions(column_types=dict.fromkeys(text_columns, pa.string()), strings_can_be_null=False)
    return pacsv.read_csv(path, convert_options=convert).to_pydict()


def mmlu_pro(src: Path) -> PerQueryTable:
    d = _read(src / "mmlu_pro.csv.gz")
    correct = [float(p != "" and p == a) for p, a in zip(d["pred"], d["answer"])]
    return make_table(model=d["model"], question=d["question_id"], benchmark=["MMLU-Pro"] * len(correct),
                      correct=correct, answer=d["pred"], source="mmlu_pro.csv.gz")


def math_l5(src: Path) -> PerQueryTable:
    d = _read(src / "math_l5.csv.gz")
    correct = [float(bool(p.strip()) and math_equal(p, g)) for p, g in zip(d["pred"], d["gold"])]
    tokens = (np.asarray(d["output_chars"], np.float64) / CHARS_PER_TOKEN).tolist()
    return make_table(model=d["model"], question=d["id"], benchmark=["MATH-L5"] * len(correct), correct=correct,
                      answer=d["pred"], output_tokens=tokens, source="math_l5.csv.gz")


def livecodebench(src: Path) -> PerQueryTable:
    d = _read(src / "livecodebench.csv.gz")
    rate = np.asarray(d["pass_at_1"], np.float64) / 100.0
    models = np.asarray(d["model"], dtype=object)
    graded = {m: bool(np.any((rate[models == m] > 0) & (rate[models == m] < 1))) for m in set(d["model"])}
    n = [10 if graded[m] else 1 for m in d["model"]]
    return make_table(model=d["model"], question=d["question_id"], benchmark=["LiveCodeBench"] * len(n),
                      correct=rate.tolist(), n_samples=n, source="livecodebench.csv.gz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="folder holding mmlu_pro.csv.gz, math_l5.csv.gz, livecodebench.csv.gz")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for name, convert in (("mmlu_pro", mmlu_pro), ("math_l5", math_l5), ("livecodebench", livecodebench)):
        table = convert(args.src)
        path = write_table(table, args.out / f"{name}.csv.gz")
        acc = {m: round(float(table.correct[table.model == m].mean()), 3) for m in table.models()}
        print(f"{path}: {len(table)} rows, {len(acc)} models, {path.stat().st_size} bytes; accuracy {acc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
