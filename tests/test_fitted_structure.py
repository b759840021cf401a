"""The fitted joint structure reaches the simulator through one file: the catalogue's difficulty spreads and Zipf
exponents and the shipped pools' errors and interaction groups are the ones
``parasim/calibration/data/fitted_structure.json`` states (``scripts/joint_structure.py`` writes it, the regen
test checks it is what the fit gives), and only the pools that state its temperature carry it."""
from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest

from parasim.calibration.fitted_structure import (
    SOURCE_KEY,
    FittedStructure,
    load_fitted_structure,
    write_fitted_structure,
)
from parasim.calibration.model_groups import REASONING, family_of, kind_of, pool_family
from parasim.config.jsonl import read_json_file
from parasim.pools.pool import load_pool, pool_file, shipped_pools
from parasim.tasks.suites import BENCHMARK_INDEX, BENCHMARKS

DATA = Path(__file__).resolve().parents[1] / "parasim" / "calibration" / "data"
FITTED_POOLS = ("paramanager", "paramanager_mono", "openweight")


def test_the_catalogue_holds_the_fitted_spreads_and_exponents() -> None:
    fs = load_fitted_structure()
    assert {"AIME24", "MMLU-Pro", "LiveCodeBench", "generic_code"} <= set(fs.benchmarks)
    for name, params in fs.benchmarks.items():
        b = BENCHMARKS[BENCHMARK_INDEX[name]]
        assert b.sigma == params["sigma"], name
        if "zipf_s" in params:
            assert b.zipf_s == params["zipf_s"], name


@pytest.mark.parametrize("name", FITTED_POOLS)
def test_the_pools_at_the_fitted_temperature_carry_the_fitted_groups(name: str) -> None:
    fs = load_fitted_structure()
    raw = read_json_file(pool_file(name))
    assert raw["protocol"]["temperature"] == fs.temperature
    for m in raw["models"] + [raw["manager"]]:
        groups = fs.model_groups(m["name"], m["interaction"]["kind"])
        assert m["errors"] == groups["errors"] and m["interaction"] == groups["interaction"], m["name"]
        assert m["interaction"]["source"] == SOURCE_KEY
    pool = load_pool(name)
    assert (pool.tau == fs.sd).all() and (pool.kappa == fs.kappa).all()


def test_a_pool_without_a_temperature_keeps_its_assumed_structure() -> None:
    raw = read_json_file(pool_file("toolorchestra"))
    assert "temperature" not in raw["protocol"]
    assert all(m["errors"]["source"] == "assumed" and m["interaction"]["source"] == "assumed"
               for m in raw["models"] + [raw["manager"]])
    assert set(shipped_pools()) == {*FITTED_POOLS, "toolorchestra"}


def test_the_pools_group_models_by_maker_within_kind() -> None:
    families = {m: f for p in FITTED_POOLS for m, f in zip(load_pool(p).model_names,
                                                          _families(p), strict=True)}
    assert families["GPT-OSS-20B"] == "openai/reasoning"
    assert families["Qwen3-30B-A3B-Instruct-2507"] == families["Qwen3-Coder-30B-A3B-Instruct"] == "qwen/chat"
    assert families["Qwen3-235B-A22B-Thinking-2507"] == "qwen/reasoning"
    assert families["Qwen3-32B"] == "qwen/reasoning"  # served in thinking mode (scripts/build_pools.py)
    assert families["Llama-3.3-70B-Instruct"] == "meta/chat"


def _families(pool: str) -> list[str]:
    raw = read_json_file(pool_file(pool))
    return [m["interaction"]["family"] for m in raw["models"] + [raw["manager"]]]


def test_the_thinking_rule_moves_no_model_of_the_fitted_tables() -> None:
    """kind_of's "thinking" word was added after the fit; on the tables' models it agrees with the prefixes
    alone, so the fit is the one the prefixes gave."""
    names: set[str] = set()
    for table in ("livecodebench", "math_l5", "mmlu_pro"):
        with gzip.open(DATA / f"{table}.csv.gz", "rt", encoding="utf-8", newline="") as fh:
            names |= {row["model"] for row in csv.DictReader(fh)}
    assert len(names) > 30
    for name in names:
        assert kind_of(name) == ("reasoning" if name.lower().startswith(REASONING) else "chat"), name


def test_family_labels() -> None:
    assert family_of("Meta-Llama-3.1-70B") == "meta" and family_of("Mystery-7B") is None
    assert pool_family("Mystery-7B") == "Mystery-7B/chat"
    assert pool_family("Qwen3-32B", "reasoning") == "qwen/reasoning"


def test_the_file_round_trips_rounded(tmp_path: Path) -> None:
    fs = FittedStructure(1.0, "law", 1.23456, 0.0001, 0.5, 0.2, 0.3, {"AIME24": {"sigma": 1.11119}}, {"sd": "x"})
    write_fitted_structure(fs, tmp_path / "s.json")
    back = load_fitted_structure(tmp_path / "s.json")
    assert back == fs.rounded() and back.sd == 1.235 and back.kappa == 0.0
    assert back.benchmarks["AIME24"]["sigma"] == 1.111
