"""Calibration: the likelihood's gradients, the call-log schema, and recovery of a known pool from simulated calls."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2

from parasim.calibration import (
    calibrate,
    calls_from_records,
    fitted_pool,
    format_report,
    read_calls,
    report_dict,
    simulated_records,
    true_parameters,
)
from parasim.calibration.fit import FitError
from parasim.calibration.irt import (
    CorrectRows,
    DifficultyModel,
    TokenRows,
    same_wrong_probability,
    vote_polynomial,
)
from parasim.calibration.poolfile import read_raw
from parasim.calibration.quadrature import Marginal
from parasim.calibration.runtime import normal_terms
from parasim.cli import main
from parasim.config.jsonl import read_json_file
from parasim.pools.pool import effective_spread, expected_accuracy, load_pool, pool_file
from parasim.protocol.schema import Tool
from parasim.tasks.suites import BENCHMARKS

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recovery_pool(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The paramanager pool with a structure the calibration fit represents: each model's own interaction sd and no
    families or kinds (the fit has none), and kappa 0.75 with affinity 0.8 (at the shipped fitted kappa of 0 the
    affinity is not identified: no wrong answer is a preferred one)."""
    raw = read_json_file(pool_file("paramanager"))
    for m in raw["models"] + [raw["manager"]]:
        m["interaction"] = {"sd": m["interaction"]["sd"], "source": "assumed"}
        m["errors"] = {"kappa": 0.75, "affinity": 0.8, "source": "assumed"}
    path = tmp_path_factory.mktemp("recovery") / "paramanager_recovery.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def recovery(recovery_pool: str):
    """One fit of that pool to 50,000 simulated calls (difficulty hidden) in rounds of four, so calls to one
    self-hosted model run concurrently and its concurrency slope is fitted, shared by the tests below."""
    records = simulated_records(recovery_pool, calls=50_000, calls_per_round=4, seed=3)
    return calibrate(calls_from_records(records), recovery_pool)


def _truth_z(cal, pool: str) -> list[tuple[str, float, float, float, float]]:
    """(label, truth, estimate, se, z) for every fitted parameter, rates included."""
    raw, _ = read_raw(pool)
    truth = true_parameters(pool, raw)
    spec = load_pool(pool)
    rows = []
    for part in cal.parts:
        values = np.concatenate([truth[name][block.free] for name, block in part.layout.blocks.items()])
        for label, t, v, s in zip(part.labels, values, part.value, part.se):
            rows.append((label, float(t), float(v), float(s), float((v - t) / s)))
    domains = ("math", "science", "knowledge", "code")
    for rate in cal.rates:
        kind, _, rest = rate.label.partition("[")
        parts = rest.rstrip("]").split(",")
        if kind == "python_exec_error":
            t = spec.p_exec[Tool.PYTHON, -1]
        elif kind == "code_exec_error":
            t = spec.p_exec[Tool.CODE_REASONER, spec.model_names.index(parts[0])]
        else:
            table = spec.sens if kind == "sensitivity" else spec.spec
            t = table[spec.model_names.index(parts[0]), domains.index(parts[1])]
        rows.append((rate.label, float(t), rate.value, rate.se, (rate.value - t) / rate.se if rate.se else 0.0))
    for label, value, se in cal.moments:
        kind, _, name = label.rstrip("]").partition("[")
        t = (spec.kappa if kind == "kappa" else spec.affinity)[spec.model_names.index(name)]
        rows.append((label, float(t), value, se, (value - t) / se))
    return rows


def test_recovers_known_pool_within_confidence_intervals(recovery, recovery_pool: str) -> None:
    """Every identifiable parameter (about 130) against the pool that generated the calls.

    Rules, stated up front. Joint: the Wald statistic (estimate - truth)' I (estimate - truth), summed over
    the fitted parts (and z^2 of the rates), is chi-square with one degree of freedom per parameter at the
    truth; we require its p-value above 0.001. Marginal: with honest 95% intervals about 5% of parameters
    fall outside; estimates are correlated (skills and bonuses of a domain move together, which makes the
    count overdispersed), so we allow up to 12%, and no |z| above 4 (probability about 0.01 under the
    model for this many parameters). kappa and the shared-distractor affinity are moment estimates with bootstrap
    SEs (``parasim.calibration.agreement``); the per-(task, model) interaction sd of every model is fitted
    (asserted below), so its recovery is part of the same rules.
    """
    rows = _truth_z(recovery, recovery_pool)
    z = np.array([r[4] for r in rows])
    raw, _ = read_raw(recovery_pool)
    truth = true_parameters(recovery_pool, raw)
    wald = sum(part.wald(part.layout.pack(truth)) for part in recovery.parts)
    rate_z2 = float(np.sum(z[len(z) - len(recovery.rates) - len(recovery.moments):] ** 2))
    dof = len(rows)
    p_value = float(chi2.sf(wald + rate_z2, dof))
    outside = float(np.mean(np.abs(z) > 1.96))
    print(f"\n{dof} parameters: Wald chi2 {wald + rate_z2:.1f} on {dof} dof (p = {p_value:.3f}); "
          f"{100 * outside:.1f}% outside their 95% CI; max |z| {np.abs(z).max():.2f}")
    for label, t, v, s, zz in rows[::9]:
        print(f"  {label:58s} true {t:9.4f}  fit {v:9.4f} +- {s:.4f}  z {zz:+.2f}")
    assert dof > 100 and all(p.converged and p.info is not None for p in recovery.parts)
    labels = [r[0] for r in rows]
    pool = load_pool(recovery_pool)
    for name in pool.model_names:
        assert {f"interaction_sd[{name}]", f"kappa[{name}]", f"affinity[{name}]"} <= set(labels), name
    for name in pool.model_names[:-1]:  # the self-hosted pool models ran concurrently: their slopes are fitted
        assert f"lat_slope[{name}]" in labels, name
    assert p_value > 0.001
    assert outside <= 0.12
    assert np.abs(z).max() < 4.0


def test_fitted_pool_loads_and_keeps_the_fitted_accuracies(recovery, tmp_path: Path) -> None:
    """The written pool's accuracy under the catalogue's difficulty spread (what the simulator draws) is the fitted
    model's under the spread it fitted, per fitted skill; the skill itself moves only as far as the spreads differ."""
    pool, clipped = fitted_pool(recovery, source="fit:test")
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    spec = load_pool(path)
    free = recovery.free["skill"]
    v = recovery.values
    bonus = v["bonus"][int(Tool.STANDARD_REASONER)]
    checked = 0
    for m, b in zip(*np.nonzero(free)):
        bench = BENCHMARKS[b]
        fitted = expected_accuracy(np.array(v["skill"][m, b] + bonus[bench.domain]), np.array(v["mu"][b]),
                                   effective_spread(v["sigma"][b], v["interaction_sd"][m]))
        written = expected_accuracy(np.array(spec.skill[m, b] + spec.bonus[int(Tool.STANDARD_REASONER), bench.domain]),
                                    np.array(bench.mu), effective_spread(bench.sigma, spec.tau[m]))
        assert abs(float(written) - float(fitted)) < 1e-4, (m, bench.name)
        checked += 1
    assert checked > 20
    at_catalogue = free & np.isclose(v["sigma"], [b.sigma for b in BENCHMARKS])[None, :]
    np.testing.assert_allclose(spec.skill[at_catalogue], v["skill"][at_catalogue], atol=1e-3)
    assert spec.model_names == recovery.models
    assert pool["models"][0]["anchoring"]["source"] == "fit:test"
    assert clipped == []


def test_calibration_table_and_report(recovery) -> None:
    cells = recovery.calibration_rows
    assert len(cells) > 50
    assert np.mean([abs(c["z"]) > 1.96 for c in cells]) < 0.15
    text = format_report(recovery)
    assert "AIC" in text and "skill[GPT-OSS-20B,AIME25]" in text
    data = report_dict(recovery)
    assert data["num_params"] + len(recovery.moments) == len(data["parameters"]) and math.isfinite(data["aic"])
    assert "kappa[GPT-OSS-20B]" in text


def test_difficulty_model_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    tasks, models, benches, tools, rows = 60, 2, 3, 5, 400
    task_bench = rng.integers(0, benches, tasks)
    known = np.full(tasks, np.nan)
    known[:10] = rng.normal(size=10)
    marginal = Marginal(task_bench, known, 6)
    marginal.place(rng.normal(size=tasks), rng.random(tasks) + 0.3)
    task, model, tool = rng.integers(0, tasks, rows), rng.integers(0, models, rows), rng.integers(0, tools, rows)
    bench, dom = task_bench[task], task_bench[task] % 2
    poly = np.array([vote_polynomial(3, 0.3) if t == 4 else vote_polynomial(1, 0.0) for t in tool])
    c = CorrectRows(task, model, bench, tool, dom, rng.random(rows), rng.integers(0, 2, rows), poly,
                    rng.integers(-1, 2, rows))
    t = TokenRows(task, model, tool, dom, rng.normal(7, 1, rows), (rng.random(rows) < 0.2).astype(np.int64))
    dm = DifficultyModel(marginal, c, t, benches)
    P = {"skill": rng.normal(size=(models, benches)), "bonus": 0.3 * rng.normal(size=(tools, 2)),
         "lam": 0.2 * rng.random(models), "rho": 0.2 + 0.5 * rng.random(models), "tau": 0.3 + rng.random(models),
         "mu": rng.normal(size=benches), "sigma": 1 + rng.random(benches), "tok_mu": rng.normal(7, 0.3, (models, 2)),
         "tok_scale": rng.normal(0, 0.2, tools), "tok_sd": 0.5 + rng.random(models),
         "alpha": rng.normal(0, 0.3, models)}
    _, grads = dm(P)
    for name, value in P.items():
        for idx in np.ndindex(value.shape):
            up = {k: v.copy() for k, v in P.items()}
            down = {k: v.copy() for k, v in P.items()}
            up[name][idx] += 1e-6
            down[name][idx] -= 1e-6
            numeric = (dm(up)[0] - dm(down)[0]) / 2e-6
            assert grads[name][idx] == pytest.approx(numeric, rel=1e-4, abs=1e-4), (name, idx)


def test_censored_and_truncated_normal_gradients() -> None:
    rng = np.random.default_rng(1)
    y, mean, sd = rng.normal(size=50), rng.normal(size=50), 0.5 + rng.random(50)
    censored, upper = rng.random(50) < 0.3, y + rng.random(50)
    _, d_mean, d_sd = normal_terms(y, mean, sd, censored, upper)
    for i in range(0, 50, 7):
        for arr, grad in ((mean, d_mean), (sd, d_sd)):
            hi, lo = arr.copy(), arr.copy()
            hi[i] += 1e-6
            lo[i] -= 1e-6
            args = [(hi if arr is mean else mean), (hi if arr is sd else sd)]
            f_hi = normal_terms(y, *args, censored, upper)[0]
            args = [(lo if arr is mean else mean), (lo if arr is sd else sd)]
            f_lo = normal_terms(y, *args, censored, upper)[0]
            assert grad[i] == pytest.approx((f_hi - f_lo) / 2e-6, rel=1e-5, abs=1e-6)


def test_vote_polynomial_matches_the_simulated_plurality_vote() -> None:
    rng = np.random.default_rng(2)
    p, kappa, n = 0.4, 0.5, 200_000
    d = np.arange(1, 16, dtype=float) ** -1.2
    d /= d.sum()
    pref = rng.choice(15, n, p=d) + 1
    right = rng.random((n, 3)) < p
    own = np.where(rng.random((n, 3)) < kappa, pref[:, None], rng.choice(15, (n, 3), p=d) + 1)
    answers = np.where(right, 0, own)
    counts = (answers[:, :, None] == answers[:, None, :]).sum(-1)
    winner = answers[np.arange(n), np.argmax(counts, axis=1)]  # plurality, ties to the earliest sample
    c1, c2, c3 = vote_polynomial(3, same_wrong_probability(kappa, 1.2, 16))
    assert np.mean(winner == 0) == pytest.approx(p * (c1 + p * (c2 + p * c3)), abs=0.004)
    assert vote_polynomial(1, 0.3) == (1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="k <= 3"):
        vote_polynomial(5, 0.3)


@pytest.mark.parametrize(("line", "needle"), [
    ("{not json", "not valid JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"benchmark": "AMC"}', ".tool: required field is missing"),
    (('{"task_id": "t", "benchmark": "AMC", "domain": "math", "tool": "teleport", "model": "m", "status": "OK", '
      '"tokens_in": 1, "tokens_out": 1, "latency_s": 1}'), ".tool: expected one of"),
    (('{"task_id": "t", "benchmark": "AMC", "domain": "math", "tool": "search", "model": "", "status": "OK", '
      '"tokens_in": -1, "tokens_out": 1, "latency_s": 1}'), ".tokens_in: expected a finite number in [0, 1000000000], got -1"),  # noqa: E501
    (('{"task_id": "t", "benchmark": "AMC", "domain": "math", "tool": "standard_reasoner", "model": "", '
      '"status": "OK", "tokens_in": 1, "tokens_out": 1, "latency_s": 1}'), ".model: agent tool"),
    (('{"task_id": "t", "benchmark": "AMC", "domain": "math", "tool": "search", "model": "", "status": "WEIRD", '
      '"tokens_in": 1, "tokens_out": 1, "latency_s": 1}'), ".status: expected one of"),
    (('{"task_id": "t", "benchmark": "AMC", "domain": "math", "tool": "search", "model": "", "status": "OK", '
      '"tokens_in": 1, "tokens_out": 1, "latency_s": 1, "target": 5}'), ".target: no earlier call 5"),
])
def test_call_log_errors_name_line_and_field(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"calls\.jsonl:1") as err:
        read_calls(path)
    assert needle in str(err.value)


def test_targets_give_the_carried_answers_correctness() -> None:
    base = {"task_id": "t", "benchmark": "AMC", "domain": "math", "model": "m", "status": "OK",
            "tokens_in": 10, "tokens_out": 10, "latency_s": 1.0, "episode": 4}
    table = calls_from_records([
        {**base, "tool": "standard_reasoner", "correct": False, "call_index": 0},
        {**base, "tool": "critical_reviewer", "flagged": True, "call_index": 1, "target": 0},
        {**base, "tool": "code_reasoner", "correct": True, "call_index": 2, "target": 0, "carried_correct": True},
    ])
    assert table.carried.tolist() == [-1, 0, 1]
    assert table.models == ("m",) and table.task_bench.tolist() == [0]


def test_cli_simulate_log_then_calibrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Small end to end through the command line: a log of 4,000 calls, fitted, written and loadable."""
    log, pool, report = tmp_path / "calls.jsonl", tmp_path / "pool.json", tmp_path / "report.json"
    assert main(["simulate-log", "--pool", "paramanager", "--calls", "4000", "--seed", "5", "-o", str(log)]) == 0
    assert sum(1 for _ in log.open()) == 4000
    assert main(["calibrate", str(log), "-o", str(pool), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "log-likelihood" in out and "wrote" in out
    spec = load_pool(pool)
    assert spec.name == "paramanager-fit"
    assert json.loads(report.read_text())["num_params"] > 50


def test_partial_log_with_new_model_and_unknown_benchmark() -> None:
    """A log like a real harness writes: few tools, python without a model, a model and a benchmark the base
    pool does not know. The fit works, says what it assumed, and the pool it writes loads."""
    records = simulated_records("paramanager", calls=4000, seed=6,
                                tools=["standard_reasoner", "python", "critical_reviewer"])
    for rec in records:
        rec["model"] = "" if rec["tool"] == "python" else rec["model"].replace("GPT-OSS-20B", "my-model")
        rec["benchmark"] = rec["benchmark"].replace("GPQA", "MyScience")
    for status in ("FORMAT_ERR", "INVALID_TOOL", "BUDGET_EXCEEDED"):  # manager-side: never ran, never fitted
        for rec in records[:40:8]:
            records.append({**rec, "status": status, "correct": None, "tokens_out": 0, "latency_s": 0.0,
                            "call_index": rec["call_index"] + 100})
    cal = calibrate(calls_from_records(records), "paramanager")
    assert all(p.converged for p in cal.parts)
    assert any("'my-model' is not in the base pool" in n for n in cal.notes)
    assert any("'MyScience' is not in the task catalogue" in n for n in cal.notes)
    pool, _ = fitted_pool(cal)
    spec = load_pool(pool)
    assert "my-model" in spec.model_names and spec.model_names[-1] == "Qwen3-4B-Instruct-2507"
    labels = [name for name, _, _ in cal.parameters()]
    assert "skill[my-model,generic_science]" in labels
    assert not any(name.startswith("bonus[code_reasoner") for name in labels)


def test_cli_reports_a_bad_log_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"task_id": "t", "benchmark": "AMC", "domain": "maths", "tool": "search", "model": "", '
                   '"status": "OK", "tokens_in": 1, "tokens_out": 1, "latency_s": 1}\n')
    assert main(["calibrate", str(log), "-o", str(tmp_path / "pool.json")]) == 2
    assert "bad.jsonl:1.domain: expected one of" in capsys.readouterr().err
    assert main(["simulate-log", "--calls", "0", "-o", str(tmp_path / "calls.jsonl")]) == 2
    assert "calls and calls_per_task" in capsys.readouterr().err


def test_a_model_whose_every_output_reached_the_cap_is_a_clear_fit_error() -> None:
    """A served model that never stops before max_tokens (every call TRUNCATED) leaves nothing to fit: the fit says
    so, naming the model, instead of dividing by a zero spread somewhere in the optimizer."""
    records = simulated_records("paramanager", calls=600, seed=7, tools=["standard_reasoner"])
    for rec in records:
        if rec["model"] == "GPT-OSS-20B":
            rec.update(status="TRUNCATED", correct=None, answer=None)
    with pytest.raises(FitError, match="model 'GPT-OSS-20B': all .* reached the generation cap"):
        calibrate(calls_from_records(records), "paramanager")


def test_a_floored_log_block_never_goes_below_its_floor():
    """A spread the data push to 0 (equal output lengths) stops at the block's floor: the natural value is
    lower + exp(u), so even an unconstrained value the optimizer drives to -inf cannot divide by 0."""
    from parasim.calibration.params import Block, Layout

    layout = Layout([Block("sd", [0.5, 0.8], [True, True], "log", lower=1e-3)])
    start = layout.initial()
    values, jac = layout.unpack(start)
    np.testing.assert_allclose(values["sd"], [0.5, 0.8])
    values, jac = layout.unpack(np.array([-1000.0, 0.0]))
    assert values["sd"][0] == 1e-3 and values["sd"][1] == pytest.approx(1.001)
    assert jac["sd"][0] == 0.0
    with pytest.raises(ValueError, match="must be > 0.001"):
        Block("sd", [1e-4], [True], "log", lower=1e-3)
    with pytest.raises(ValueError, match="only a log-scale block has a floor"):
        Block("p", [0.5], [True], "logit", lower=0.1)
