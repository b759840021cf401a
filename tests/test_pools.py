"""Pool files and task suites: validation errors name the field, skills reproduce the accuracy targets."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parasim.pools.pool import (
    KNOWN_SOURCES,
    POOL_DIR,
    PoolError,
    accuracy_under_cap,
    effective_spread,
    expected_accuracy,
    load_pool,
    parse_pool,
    reliability,
    shipped_pools,
    solve_skill,
)
from parasim.protocol.schema import NUM_DOMAINS, NUM_TOOLS, Tool
from parasim.tasks.suites import BENCHMARKS, NUM_BENCHMARKS, SUITES, load_suite, load_tasks


def _raw(name: str = "paramanager") -> dict:
    return json.loads((POOL_DIR / f"{name}.json").read_text())


SHIPPED = ["openweight", "paramanager", "paramanager_mono", "toolorchestra"]


def test_shipped_pools_are_the_three_of_the_issue_and_the_unseen_one():
    assert shipped_pools() == SHIPPED
    assert load_pool("paramanager").num_models == 3
    assert load_pool("paramanager_mono").num_models == 1
    assert load_pool("toolorchestra").num_models == 8
    assert load_pool("openweight").num_models == 6


@pytest.mark.parametrize("name", SHIPPED)
def test_every_parameter_group_names_a_known_source(name):
    pool = load_pool(name)
    assert pool.sources, "no parameter groups recorded"
    bad = {path: src for path, src in pool.sources.items() if not set(src.split("+")) <= KNOWN_SOURCES}
    assert not bad
    for i in range(pool.num_models + 1):
        prefix = "manager" if i == pool.num_models else f"models[{i}]"
        for group in ("skill", "errors", "anchoring", "long_context", "review", "tokens_out", "latency", "price"):
            assert f"{prefix}.{group}" in pool.sources


@pytest.mark.parametrize("name", SHIPPED)
def test_solved_skills_reproduce_targets_exactly(name):
    pool = load_pool(name)
    mu = np.array([b.mu for b in BENCHMARKS])
    sigma = np.array([b.sigma for b in BENCHMARKS])
    dom = np.array([b.domain for b in BENCHMARKS])
    theta = pool.skill + pool.bonus[Tool.STANDARD_REASONER, dom]
    # a call's difficulty is the shared z minus its model's per-task effect: spread sqrt(sigma^2 + tau^2)
    acc = expected_accuracy(theta, np.broadcast_to(mu, theta.shape), effective_spread(sigma, pool.tau[:, None]))
    has = ~np.isnan(pool.accuracy_target)
    assert has.sum() >= 5
    uncapped = has & np.isinf(pool.accuracy_cap)
    np.testing.assert_allclose(acc[uncapped], pool.accuracy_target[uncapped], atol=1e-9)
    # targets published under a generation cap: truncated calls count wrong at that cap (parasim.pools.harness)
    at_card = accuracy_under_cap(pool, pool.accuracy_cap)
    np.testing.assert_allclose(at_card[has], pool.accuracy_target[has], atol=1e-6)
    assert np.all(acc[has & ~uncapped] > pool.accuracy_target[has & ~uncapped])  # the cap cost them accuracy
    rel = reliability(pool)
    assert rel.shape == (NUM_BENCHMARKS, NUM_TOOLS, pool.num_models + 1)
    assert np.all((rel > 0) & (rel < 1))


def test_pool_shapes():
    pool = load_pool("toolorchestra")
    m1 = pool.num_models + 1
    assert pool.skill.shape == (m1, NUM_BENCHMARKS)
    assert pool.bonus.shape == (NUM_TOOLS, NUM_DOMAINS)
    assert pool.tok_mu.shape == (NUM_TOOLS, m1, NUM_DOMAINS)
    assert pool.p_exec[Tool.PYTHON, 0] == pytest.approx(0.15)
    assert pool.p_exec[Tool.STANDARD_REASONER].max() == 0
    assert pool.usd_call[Tool.SEARCH] == pytest.approx(0.01)


@given(st.floats(0.01, 0.99), st.floats(-3, 3), st.floats(0.1, 4))
@settings(max_examples=60, deadline=None)
def test_solve_skill_inverts_expected_accuracy(target, mu, sigma):
    theta = solve_skill(np.array(target), np.array(mu), np.array(sigma))
    assert float(expected_accuracy(theta, np.array(mu), np.array(sigma))) == pytest.approx(target, abs=1e-9)


def _edit(path: list, value, name: str = "paramanager") -> dict:
    raw = _raw(name)
    node = raw
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize("path,value,message", [
    (["models", 1, "skill", "math"], "x", "models[1].skill.math: expected a number in [-30, 30], got 'x'"),
    (["models", 0, "errors", "kappa"], 1.5, "models[0].errors.kappa: expected a number in [0, 1], got 1.5"),
    (["models", 0, "skill", "source"], KeyError,
     "models[0].skill.source: expected a source key"),
    (["models", 2, "accuracy", "AIME26"], {"value": 50, "source": "x"}, "models[2].accuracy.AIME26: unknown benchmark"),
    (["models", 0, "accuracy", "GPQA", "value"], 20,
     "models[0].accuracy.GPQA.value: expected a number in [25.1, 99.9]"),
    (["manager", "latency"], KeyError, "manager.latency: missing"),
    (["tools", "python"], KeyError, "tools.python: missing"),
    (["tools", "grep"], {}, "tools.grep: unknown tool"),
    (["tools", "search", "runtime", "timeout_s"], -1,
     "tools.search.runtime.timeout_s: expected a number in [0.1, 100000], got -1"),
    (["protocol", "ensemble_k"], 2.5, "protocol.ensemble_k: expected an integer"),
    (["models"], [], "models: expected a list of 1..16 models"),
    (["models", 1, "name"], "Qwen3-30B-A3B-Instruct-2507", "models: duplicate model names"),
])
def test_invalid_pool_errors_name_the_field(path, value, message):
    with pytest.raises(PoolError) as err:
        parse_pool(_edit(path, copy.deepcopy(value)))
    assert message in str(err.value)


def test_load_pool_errors(tmp_path):
    with pytest.raises(PoolError, match="expected one of .*paramanager"):
        load_pool("no_such_pool")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(PoolError, match="not valid JSON"):
        load_pool(bad)
    good = tmp_path / "mine.json"
    good.write_text(json.dumps(_raw("paramanager_mono")))
    assert load_pool(good).model_names == load_pool("paramanager_mono").model_names
    assert load_pool(_raw("paramanager_mono")).num_models == 1


def test_named_suites():
    for name in SUITES:
        suite = load_suite(name)
        assert suite.weight_cdf[-1] == 1.0 and np.all(np.isnan(suite.difficulty))
    assert len(load_suite("paramanager")) == 7
    with pytest.raises(ValueError, match="suite: expected one of"):
        load_suite("nope")


def test_task_file_loader(tmp_path):
    f = tmp_path / "tasks.jsonl"
    f.write_text('{"id": "a", "domain": "math", "difficulty": 1.5}\n\n'
                 '{"id": "b", "domain": "science", "benchmark": "GPQA", "weight": 3}\n'
                 '{"id": "c", "domain": "knowledge", "options": ["x", "y", "z"]}\n')
    suite = load_tasks(f)
    assert suite.task_ids == ("a", "b", "c")
    assert suite.options.tolist() == [0, 4, 3]
    assert suite.difficulty[0] == 1.5 and math.isnan(suite.difficulty[1])
    np.testing.assert_allclose(suite.weight_cdf, [0.2, 0.8, 1.0])
    tables = suite.tables()
    assert tables["row_bench"].dtype == np.int32 and len(tables["row_mu"]) == 3


@pytest.mark.parametrize("line,message", [
    ('{"domain": "poetry"}', ":1.domain: expected one of"),
    ('{"domain": "math", "benchmark": "GPQA"}', ":1.domain: benchmark GPQA is science"),
    ('{"domain": "math", "difficulty": "hard"}', ":1.difficulty: expected a number in [-10, 10]"),
    ('{"domain": "math", "options": 40}', ":1.options: expected 0 (free-form) or an integer in [2, 16]"),
    ('{"domain": "math", "weight": 0}', ":1.weight: expected a positive number"),
    ("[1, 2]", ":1: expected a JSON object"),
    ("{oops", ":1: not valid JSON"),
])
def test_task_file_errors_name_line_and_field(tmp_path, line, message):
    f = tmp_path / "t.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(ValueError) as err:
        load_tasks(f)
    assert message in str(err.value)


def test_assumed_parameters_are_listed():
    from parasim.pools.pool import assumed_parameters

    listed = assumed_parameters("paramanager")
    assert "models[0].anchoring" in listed and "tools.search.cost" not in listed and "models[0].price" not in listed
    assert all(load_pool("paramanager").sources[p] == "assumed" for p in listed)


def test_openweight_pool_is_the_unseen_pool_it_describes():
    """The pool-shift pool loads, lists what it assumes, cites only known sources, and serves paramanager's manager
    and tools on H200s (GPUs per replica from the checkpoints' sizes), with its targets at their cards' caps."""
    from parasim.pools.pool import assumed_parameters

    pool, train = load_pool("openweight"), load_pool("paramanager")
    raw = _raw("openweight")
    assert "pool shift" in raw["description"] and "trained on paramanager" in raw["description"]
    assert not set(pool.model_names[:-1]) & set(train.model_names[:-1])  # unseen models
    assert pool.model_names[-1] == train.model_names[-1] and raw["tools"] == _raw("paramanager")["tools"]
    assert raw["protocol"] == _raw("paramanager")["protocol"]
    listed = assumed_parameters("openweight")
    assert all(pool.sources[p] == "assumed" for p in listed)
    # published: every Qwen and gpt-oss accuracy target, the Qwen skills solved from cards, two TOc prices
    for path in ("models[0].skill", "models[1].skill", "models[2].skill", "models[3].accuracy.AIME24",
                 "models[4].price", "models[5].price", "models[3].latency"):
        assert path not in listed and pool.sources[path] != "assumed"
    # assumed: GPT-OSS-120B's knowledge and code skill, every output length, every replica count, the other prices
    for path in ("models[3].skill", *(f"models[{i}].{g}" for i in range(6) for g in ("tokens_out", "deployment")),
                 "models[0].price", "models[3].price"):
        assert path in listed
    cited = {part for src in pool.sources.values() for part in src.split("+")}
    assert cited <= KNOWN_SOURCES and {"Q235T", "Q235I", "Q30T", "OSS", "QTR", "LLB", "MSA", "NVH200"} <= cited
    assert [d.gpus_per_replica for d in pool.deployments[:-1]] == [4, 4, 1, 1, 1, 2]
    assert all(d.self_hosted and d.gpu == "H200" for d in pool.deployments[:-1])
    np.testing.assert_allclose(pool.lat_slope[Tool.STANDARD_REASONER, :-1], train.lat_slope[Tool.STANDARD_REASONER, 0])
    speed = 1 / pool.lat_per_tok[Tool.STANDARD_REASONER, :-1]
    assert speed[3] == pytest.approx(210.8) and np.all(speed[[0, 1, 2, 4, 5]] < 210.8)  # more bytes per token
    caps = dict(zip(("AIME25", "HMMT25", "GPQA", "MMLU-Pro", "LiveCodeBench"), (81920, 81920, 32768, 32768, 81920),
                    strict=True))
    for bench, cap in caps.items():
        assert raw["models"][0]["accuracy"][bench]["cap_tokens"] == cap  # Qwen3-235B-A22B-Thinking-2507's card
        assert raw["models"][1]["accuracy"][bench]["cap_tokens"] == 16384  # the Instruct card's output length
    assert "cap_tokens" not in raw["models"][3]["accuracy"]["AIME24"]  # the gpt-oss card states no cap


def test_shipped_files_are_what_the_builder_builds():
    import importlib.util

    builder = Path(__file__).resolve().parents[1] / "scripts" / "build_pools.py"
    spec = importlib.util.spec_from_file_location("build_pools", builder)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, pool in module.build().items():
        assert json.loads(json.dumps(pool)) == _raw(name), f"{name}.json is stale: run scripts/build_pools.py"
