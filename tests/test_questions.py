"""Simulated tasks carry question text: real MMLU-Pro and MATH questions from the banks shipped in the package (with
their sources and licences), generated text elsewhere, the same text for the same task seed, the gold option's text
under the gold label; and the bridges' datasets get as many distinct rows as asked, each naming its seeds."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import parasim  # noqa: F401  (registers the envs)
from parasim.protocol.schema import Domain
from parasim.tasks.questions import BANK_DIR, generated_question
from parasim.tasks.suites import load_suite
from training.llm.rollout import reset_for_group

ROOT = Path(__file__).resolve().parents[1]


def _bank(name: str) -> dict[str, dict]:
    with gzip.open(BANK_DIR / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
        return {str(r.get("question_id", r.get("id"))): r for r in map(json.loads, fh)}


def _play(suite: str, task_seed: int, tool_seed: int | None = None) -> tuple[str, object, list[str]]:
    env = gym.make("ParaOrchText-v0", suite=suite)
    obs, info = reset_for_group(env, task_seed, task_seed if tool_seed is None else tool_seed)
    text_env = env.unwrapped
    return info["messages"][1]["content"], text_env.question, list(text_env.labels)


def test_mmlu_pro_tasks_read_a_real_question_with_the_gold_option_under_the_gold_label() -> None:
    bank = _bank("mmlu_pro")
    seen = set()
    for seed in range(4):
        text, question, labels = _play("MMLU-Pro", seed)
        kind, qid = question.source.split(":")
        record = bank[qid]
        assert kind == "mmlu_pro" and record["question"] in text and len(record["options"]) == 10
        gold_line = next(line for line in text.splitlines() if line.startswith(f"{labels[0]}. "))
        assert gold_line == f"{labels[0]}. {record['options'][record['answer_index']]}"  # answer id 0 is the gold
        assert sorted(line.split(". ", 1)[1] for line in text.splitlines() if re.match(r"^[A-J]\. ", line)) == sorted(
            record["options"])
        seen.add(qid)
    assert len(seen) == 4


def test_math_tasks_read_math_level_5_problems_and_others_get_generated_text() -> None:
    bank = _bank("math_l5")
    text, question, _ = _play("AIME24", 3)
    assert question.source.startswith("math_l5:") and bank[question.source.split(":")[1]]["problem"] in text
    assert question.answer == bank[question.source.split(":")[1]]["answer"] and "free-form" in text
    texts = {_play("GPQA", seed)[0] for seed in range(6)} | {_play("LiveCodeBench", seed)[0] for seed in range(6)}
    assert len(texts) == 12  # generated text differs per task
    _, gpqa, labels = _play("GPQA", 1)
    assert gpqa.source.startswith("generated:") and len(gpqa.options) == 4 == len(set(gpqa.options))
    assert gpqa.answer == gpqa.options[0]
    assert "Simulated" not in _play("LiveCodeBench", 1)[0]


def test_a_task_seed_names_one_question_whatever_the_tool_seed() -> None:
    a = _play("paramanager", 11, tool_seed=1)
    b = _play("paramanager", 11, tool_seed=99)
    assert a[0] == b[0] and a[1] == b[1]
    assert _play("paramanager", 12)[0] != a[0]


def test_generated_questions_compute_their_answer_and_suite_rows_are_checked() -> None:
    rng = np.random.default_rng(0)
    for domain in Domain:
        for options in (0, 2, 10, 16):
            q = generated_question(domain, options, rng)
            assert len(q.options) == options and len(set(q.options)) == options
            assert q.text and (not options or q.answer == q.options[0])
    suite = load_suite("paramanager")
    with pytest.raises(ValueError, match=r"row: expected an int in \[0, 7\), got 7"):
        suite.question(7, rng)
    assert suite.question(5, np.random.default_rng(1)) == suite.question(5, np.random.default_rng(1))


def test_the_banks_ship_in_the_package_with_sources_and_licences() -> None:
    assert {p.name for p in BANK_DIR.iterdir()} == {"mmlu_pro.jsonl.gz", "math_l5.jsonl.gz", "SOURCES.md"}
    assert BANK_DIR.is_relative_to(ROOT / "parasim")
    assert len(_bank("mmlu_pro")) == 12_020 and len(_bank("math_l5")) == 721
    sources = (BANK_DIR / "SOURCES.md").read_text()
    assert "MIT" in sources and "TIGER-Lab" in sources and "Hendrycks" in sources and "GPQA" in sources
    code = [p for name in ("parasim", "envs", "training") for p in (ROOT / name).rglob("*.py")]
    assert not [p for p in code if "/work/shared" in p.read_text()]


def test_task_dataset_and_the_parquet_export_give_as_many_distinct_rows_as_asked(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    import pyarrow.parquet as pq

    from parasim.integrations.trl import task_dataset
    from parasim.integrations.verl import export_verl_parquet

    rows = task_dataset(64, env_kwargs={"max_rounds": 2})
    assert len(rows) == 64 and len({json.dumps(p) for p in rows["prompt"]}) == 64
    assert len(set(rows["task_seed"])) == 64
    path = export_verl_parquet("paramanager", tmp_path / "train.parquet", 64, env_kwargs={"max_rounds": 2}, seed=2)
    table = pq.read_table(path).to_pylist()
    assert len(table) == 64 and len({json.dumps(r["prompt"]) for r in table}) == 64
    seeds = [(r["extra_info"]["task_seed"], r["extra_info"]["tool_seed"]) for r in table]
    assert len(set(seeds)) == 64 and all(isinstance(s, int) for pair in seeds for s in pair)
