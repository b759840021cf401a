"""docs/simulator.md's simulated figures agree with a fresh simulation of the shipped pools.

``scripts/simulator_stats.py`` writes the page's marked section from
``parasim.calibration.simulate.simulated_calls``. Here a smaller sample with another seed is simulated and every
``value ± se`` on the page must lie within the script's tolerance (``Z_TOLERANCE`` joint standard errors, plus
rounding) of the fresh figure, while every other cell of every table (targets, formulas, chance levels, published
figures, names) must be equal. A pool or simulator change that moves a figure fails here until the page is
regenerated: ``python scripts/simulator_stats.py --update docs/simulator.md``. The targeted statistics (direct-call
accuracy, cross-model wrong-answer agreement, the per-query oracle gain) must also lie within their stated
tolerances of their targets, on the page and in the fresh simulation.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from parasim.pools.pool import KNOWN_SOURCES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "simulator.md"
FRESH_SCALE = 0.05  # about 5% of the page's samples: a few seconds of simulation after numba's compile


def _stats() -> ModuleType:
    spec = importlib.util.spec_from_file_location("simulator_stats", ROOT / "scripts" / "simulator_stats.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["simulator_stats"] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


stats = _stats()


@pytest.fixture(scope="module")
def page_section() -> str:
    return stats.extract_section(PAGE.read_text(encoding="utf-8"))


@pytest.mark.timeout(300)
def test_page_figures_match_a_fresh_simulation(page_section: str) -> None:
    fresh = stats.section(scale=FRESH_SCALE, seed=1)
    problems = stats.compare_sections(page_section, fresh)
    hint = "regenerate it with `python scripts/simulator_stats.py --update docs/simulator.md`"
    assert not problems, f"docs/simulator.md disagrees with a fresh simulation; {hint}:\n" + "\n".join(problems[:20])
    unexpected = [line for pool, table, line in stats.misses(fresh) if (pool, table) not in stats.KNOWN_MISSES]
    assert unexpected == [], "a fresh simulation misses a target:\n" + "\n".join(unexpected)


def test_page_meets_every_target_it_states_but_the_known_misses(page_section: str) -> None:
    assert {(pool, table) for pool, table, _ in stats.misses(page_section)} == stats.KNOWN_MISSES
    within = [ln for ln in page_section.splitlines() if ln.startswith("| ") and "within" in ln]
    # accuracy, agreement, oracle (no oracle for one model), truncation, latency against concurrency
    assert len(within) == 5 * len(stats.POOLS) - 1
    oracle_rows = [ln for ln in page_section.splitlines() if "LLMRouterBench)" in ln]
    assert [ln.count("| yes |") for ln in oracle_rows] == [0, 1, 1]  # paramanager's is the known miss
    kim_rows = [ln for ln in page_section.splitlines() if ln.startswith("| GPQA |") and "Kim et al." in ln]
    assert [ln.count("| yes |") for ln in kim_rows] == [1, 0, 1, 1]  # the one-model pool has no cross-model pair
    # a pool that states its temperature is checked at the source's (Kim et al. 0, LLMRouterBench 0.2), toolorchestra
    # at its own
    for rows, temperature in ((kim_rows, stats.KIM_TEMPERATURE), (oracle_rows, stats.ROUTERBENCH_TEMPERATURE)):
        at = [ln for ln in rows if f"| {temperature:g} (the source's) |" in ln]
        assert len(at) == len(rows) - 1 - (rows is kim_rows)
        assert sum("| the pool's (none stated) |" in ln for ln in rows) == 1
    assert len(stats.unmet(page_section.replace("| yes |", "| no |", 1))) == len(stats.KNOWN_MISSES) + 1


def test_targets_and_their_tolerances() -> None:
    target = stats.Target(60.0, 12.0)
    assert str(target) == "60.0 [48.0, 72.0]"
    assert target.met(stats.Estimate(71.9, 0.5)) == "yes" and target.met(stats.Estimate(47.9, 0.5)) == "no"
    acc = np.array([0.7, 0.6, 0.5])
    assert stats.copula_oracle(acc, 1e-9) == pytest.approx(1 - np.prod(1 - acc), abs=1e-6)  # independent errors
    by_r = [stats.copula_oracle(acc, r) for r in (0.2, 0.5, 0.9)]  # more shared, less complementary
    assert by_r[0] > by_r[1] > by_r[2] > 0.7  # and never below the best model
    best = stats.REF_CEILING / (1 + stats.REF_GAIN)
    ref = np.linspace(best, best - stats.REF_SPREAD, stats.REF_MODELS)
    assert stats.copula_oracle(ref, stats.reference_correlation()) / best == pytest.approx(1 + stats.REF_GAIN)


def test_page_has_every_table_of_every_pool(page_section: str) -> None:
    for pool in stats.POOLS:
        assert f"### Pool `{pool}`" in page_section
    titles = re.findall(r"^#### (.+)$", page_section, re.M)
    per_pool = ["Parameter sources", "Direct-call accuracy", "Wrong-answer agreement", "Per-query oracle",
                "Router signal", "Majority vote", "Truncation under the 24,576-token cap", "Latency of parallel calls",
                "Latency against concurrency"]
    assert titles == ["Task suite"] + per_pool * len(stats.POOLS)
    assert "±" in page_section


def test_harness_rows_are_targeted(page_section: str) -> None:
    """GPT-OSS-20B's AIME calls are truncated at a targeted share (its card's lengths), and each self-hosted
    paramanager model's speed at 1 and 10 concurrent requests is checked against MSA's published points."""
    pool = page_section.split("### Pool `paramanager`")[1].split("### Pool")[0]
    cut = pool.split("#### Truncation under")[1].split("####")[0]
    oss = next(ln for ln in cut.splitlines() if ln.startswith("| GPT-OSS-20B |"))
    first = oss.split("|")[2].strip()
    assert not first.startswith("(") and float(first.split(" / ")[0]) > 15.0 and oss.rstrip().endswith("| OSS | yes |")
    speed = pool.split("#### Latency against concurrency")[1]
    rows = [ln for ln in speed.splitlines() if ln.startswith("| ") and "self-hosted" in ln]
    assert len(rows) == 3 and all(ln.rstrip().endswith("| MSA | yes |") for ln in rows)
    assert "| API |" in page_section.split("### Pool `toolorchestra`")[1].split("#### Latency against concurrency")[1]


def test_openweight_rows_are_its_deployment(page_section: str) -> None:
    """The unseen pool's tables: six self-hosted models on one to four H200s, GPT-OSS-120B checked against MSA's points
    (it reads no more bytes per token than MSA's model), the others at their derived speeds (MSA+NVH200), and its
    thinking models' AIME calls truncated at targeted shares under the harness's cap."""
    pool = page_section.split("### Pool `openweight`")[1]
    speed = pool.split("#### Latency against concurrency")[1]
    rows = [ln for ln in speed.splitlines() if ln.startswith("| ") and "self-hosted" in ln]
    deployments = [ln.split("|")[2].strip() for ln in rows]
    assert deployments == [f"self-hosted, H200 x{g}, 1 replica" for g in (4, 4, 1, 1, 1, 2)]
    assert next(ln for ln in rows if ln.startswith("| GPT-OSS-120B |")).rstrip().endswith("| MSA | yes |")
    assert sum(ln.rstrip().endswith("| MSA+NVH200 | yes |") for ln in rows) == 5
    cut = pool.split("#### Truncation under")[1].split("####")[0]
    thinking = next(ln for ln in cut.splitlines() if ln.startswith("| Qwen3-235B-A22B-Thinking-2507 |"))
    aime25 = thinking.split("|")[3].strip()
    assert not aime25.startswith("(") and float(aime25.split(" / ")[0]) > 15.0 and thinking.rstrip().endswith("| yes |")


def test_comparison_catches_a_moved_figure_and_changed_text(page_section: str) -> None:
    assert stats.compare_sections(page_section, page_section) == []
    line = next(ln for ln in page_section.splitlines() if ln.startswith("| GPT-5 |") and "±" in ln)
    value, se = re.search(r"(\d+\.\d+) ± (\d+\.\d+)", line).groups()
    moved = line.replace(f"{value} ± {se}", f"{float(value) + 20 * float(se) + 1:.2f} ± {se}", 1)
    problems = stats.compare_sections(page_section.replace(line, moved), page_section)
    assert len(problems) == 1 and "on the page vs" in problems[0]
    renamed = page_section.replace("| GPT-5 |", "| GPT-6 |", 1)
    assert "text differs" in stats.compare_sections(renamed, page_section)[0]
    assert "heading and table lines" in stats.compare_sections(page_section + "| extra |\n", page_section)[0]


def test_update_rewrites_only_the_marked_section(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text(f"before\n{stats.BEGIN}\nold\n{stats.END}\nafter\n", encoding="utf-8")
    text = stats.replace_section(doc.read_text(encoding="utf-8"), "new table\n")
    assert text == f"before\n{stats.BEGIN}\nnew table\n{stats.END}\nafter\n"
    with pytest.raises(ValueError, match="stats:begin"):
        stats.extract_section("no markers here")


def test_plurality_votes_like_the_ensemble_solver() -> None:
    answers = np.array([[0, 0, 1],     # majority right
                        [1, 0, 0],     # majority right, first sample wrong
                        [2, 0, 1],     # three-way tie: the earliest sample (wrong) wins
                        [0, 1, 2],     # three-way tie: the earliest sample (right) wins
                        [-1, -1, 0],   # unanswered samples do not vote
                        [-1, -1, -1],  # nothing answered: wrong
                        [1, 1, 0]])    # majority wrong
    assert stats.plurality_right(answers).tolist() == [True, True, False, True, True, False, False]


def test_estimates_print_two_digits_of_their_standard_error() -> None:
    assert str(stats.Estimate(61.2345, 0.1234)) == "61.23 ± 0.12"
    assert str(stats.Estimate(93.4, 1.6)) == "93.4 ± 1.6"
    assert str(stats.Estimate(0.0, 0.0)) == "0.00 ± 0.00"
    est = stats.share(np.array([True, False, False, False]))
    assert est.value == 25.0 and est.se == pytest.approx(100 * (0.25 * 0.75 / 4) ** 0.5)


def test_page_describes_every_source_key() -> None:
    text = PAGE.read_text(encoding="utf-8")
    missing = [key for key in sorted(KNOWN_SOURCES) if f"| `{key}` |" not in text]
    assert not missing, f"docs/simulator.md has no row for the source keys {missing}"


def test_page_cites_nothing_outside_the_repository() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for link in re.findall(r"\]\(([^)#]+)", text):
        if "://" not in link:
            assert (PAGE.parent / link).exists(), f"docs/simulator.md links to {link}, which is not in the repository"
    assert "shared/" not in text
