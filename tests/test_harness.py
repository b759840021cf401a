"""The deployment and harness model (parasim.pools.harness): where models are served, the generation cap, truncation."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from parasim.calibration.joint_fit import StructureModel, structure_pool
from parasim.calibration.simulate import simulated_calls, simulated_outcomes
from parasim.config.env_options import check_harness
from parasim.config.jsonl import read_json_file
from parasim.pools.harness import capped_accuracy, solve_capped_skill, truncation_share, with_harness
from parasim.pools.pool import (
    PoolError,
    accuracy_under_cap,
    load_pool,
    parse_pool,
    pool_file,
    read_pool_file,
    reliability,
)
from parasim.protocol.schema import NUM_STATUSES, PROTOCOL_FAILURES, Status, Tool
from parasim.sim import Simulator
from parasim.sim.kernel import C_LAT, C_TOK_OUT, I_FMT
from parasim.sim.tables import TM_LAT_BASE, TM_LAT_PER_TOK, TT_TIMEOUT


def _raw(name: str = "paramanager") -> dict:
    return copy.deepcopy(read_pool_file(f"parasim/pools/files/{name}.json")[0])


def test_truncated_is_appended_and_is_a_tool_failure() -> None:
    assert int(Status.TRUNCATED) == NUM_STATUSES - 1 == 6
    assert Status.TRUNCATED not in PROTOCOL_FAILURES


def test_shipped_deployments() -> None:
    pm = load_pool("paramanager")
    assert all(d.self_hosted and d.gpu == "H200" and d.engine == "vLLM" for d in pm.deployments[:-1])
    oss = pm.model_names.index("GPT-OSS-20B")
    assert 1.0 / pm.lat_per_tok[Tool.STANDARD_REASONER, oss] == pytest.approx(210.8)  # the deployment's, not an API's
    assert pm.lat_slope[Tool.STANDARD_REASONER, :-1] == pytest.approx((1 / 0.56 - 1) / 9, abs=1e-4)
    assert pm.lat_slope[Tool.PYTHON].max() == 0.0  # basic tools have no model server
    to = load_pool("toolorchestra")
    assert not any(d.self_hosted for d in to.deployments) and to.lat_slope.max() == 0.0
    assert pm.sampling.temperature == 1.0 and pm.sampling.reasoning_effort == "high"


@pytest.mark.parametrize("edit,needle", [
    (lambda r: r["models"][0]["deployment"].update(kind="cloud"), "deployment.kind: expected one of"),
    (lambda r: r["models"][0]["deployment"].pop("replicas"), "deployment.replicas: missing"),
    (lambda r: r["models"][0]["deployment"].update(replicas=0), "deployment.replicas: expected a number in [1, 64]"),
    (lambda r: r["models"][0]["deployment"].update(active_params_b=40), "exceeds total_params_b"),
    (lambda r: r["models"][0].update(deployment={"kind": "api", "source": "assumed"}),
     "concurrency_slope: 0.0873 needs a self_hosted deployment"),
    (lambda r: r["models"][0]["accuracy"]["AIME25"].update(cap_tokens=0), "cap_tokens: expected a number in [1,"),
    (lambda r: r["models"][0]["accuracy"]["AIME25"].update(cap_tokens=500), "leaves untruncated under cap_tokens"),
    (lambda r: r["protocol"].update(reasoning_effort="max"), "protocol.reasoning_effort: expected one of"),
])
def test_bad_deployment_and_harness_fields_are_refused(edit, needle) -> None:
    raw = _raw()
    edit(raw)
    with pytest.raises(PoolError) as err:
        parse_pool(raw)
    assert needle in str(err.value)


def test_capped_accuracy_and_its_solve() -> None:
    args = (1.5, 2.0, 1.0, 24576.0, math.log(8000), 0.25, 0.8)
    acc = capped_accuracy(2.0, *args)
    uncapped = capped_accuracy(2.0, 1.5, 2.0, 1.0, math.inf, math.log(8000), 0.25, 0.8)
    assert 0 < acc < uncapped
    theta, ceiling = solve_capped_skill(np.array(acc), *args)
    assert float(theta) == pytest.approx(2.0, abs=1e-9) and acc < ceiling
    # the truncation share is a lognormal tail, 0 without a cap and a step without spread
    assert truncation_share(np.inf, 9.0, 0.25, 0.8, 1.0) == 0.0
    assert truncation_share(100.0, math.log(200), 0.0, 0.0, 0.0) == 1.0


def test_harness_option_checks_and_overrides() -> None:
    pool = load_pool("paramanager")
    assert with_harness(pool, None) is pool
    assert with_harness(pool, {"max_output_tokens": 4096}).max_output_tokens == 4096
    assert with_harness(pool, {"temperature": 1.0, "reasoning_effort": "high"}) is pool
    with pytest.raises(ValueError, match="harness.reasoning_effort: pool 'paramanager' is calibrated at 'high' only"):
        with_harness(pool, {"reasoning_effort": "low"})
    with pytest.raises(ValueError, match=r"harness.temperature: expected a number in \[0, 2\], got 2.5"):
        check_harness({"temperature": 2.5})
    with pytest.raises(TypeError, match="harness.temperature"):
        check_harness({"temperature": "0.6"})
    with pytest.raises(ValueError, match=r"harness.max_output_tokens: expected an integer in \[1, 10000000\]"):
        check_harness({"max_output_tokens": 0})
    with pytest.raises(TypeError, match="harness.max_output_tokens"):
        check_harness({"max_output_tokens": 2.5})
    with pytest.raises(ValueError, match="unknown key"):
        check_harness({"max_tokens": 10})
    # a lower cap truncates more calls and leaves the corrected accuracy lower
    low = with_harness(pool, {"max_output_tokens": 8192})
    assert np.all(accuracy_under_cap(low, 8192) <= accuracy_under_cap(pool, 24576) + 1e-12)


def test_a_temperature_carries_the_pool_by_the_softmax_law() -> None:
    """At T the log-odds scale by T_p / T and kappa becomes kappa^(T / T_p); a pool stating no temperature refuses."""
    pool = load_pool("paramanager")
    cool = with_harness(pool, {"temperature": 0.5})
    assert cool.logit_scale == pytest.approx(2.0) and cool.sampling.temperature == 0.5
    assert np.allclose(cool.kappa, pool.kappa ** 0.5)
    greedy = with_harness(pool, {"temperature": 0})
    assert greedy.logit_scale == pytest.approx(1e6) and np.all(greedy.kappa == 1.0)
    # the vote's prior follows the calls: cooler calls are surer, so a model above 1/2 rises and one below falls
    base, cold = reliability(pool), reliability(cool)
    assert np.all(cold[base > 0.55] > base[base > 0.55]) and np.all(cold[base < 0.45] < base[base < 0.45])
    raw = read_json_file(pool_file("paramanager"))
    del raw["protocol"]["temperature"]
    with pytest.raises(ValueError, match="harness.temperature: pool 'paramanager' states no temperature"):
        with_harness(parse_pool(raw), {"temperature": 0.6})
    raw["protocol"]["temperature"] = 0.0
    with pytest.raises(ValueError, match="stated at temperature 0"):
        with_harness(parse_pool(raw), {"temperature": 0.6})


def test_sampling_colder_makes_repeated_calls_agree() -> None:
    """At temperature 0 a model's repeated calls on a task are all right or all wrong; at the pool's own 1.0 they
    often differ, hotter more often still (outputs kept short, so that no call is cut at the cap: token counts are
    drawn per call at every temperature)."""
    raw = read_json_file(pool_file("paramanager"))
    models = [StructureModel("m", 0.5, 1.0, 0.7, 0.8), StructureModel("mgr", 0.0, 1.0, 0.7, 0.8)]
    pool = parse_pool(structure_pool(raw, "GPQA", models, "assumed"))

    def mixed(t: float) -> float:
        om = simulated_outcomes(with_harness(pool, {"temperature": t}), "GPQA", 3000, 5, models=["m"], seed=2)
        return float(np.mean((om.hits > 0) & (om.hits < 5)))

    assert mixed(0.0) == 0.0
    assert 0.05 < mixed(1.0) < mixed(2.0)


def test_truncated_calls_cost_the_cap_and_return_no_answer() -> None:
    calls = simulated_calls("paramanager", n_tasks=4000, calls_per_task=1, tools=["standard_reasoner"], models=[2])
    cut = calls["status"] == Status.TRUNCATED
    assert 0.05 < cut.mean() < 0.4
    assert np.all(calls["tokens_out"][cut] == 24576) and np.all(calls["correct"][cut] == -1)
    assert np.all(calls["tokens_out"][~cut] < 24576)


def _round(sim: Simulator, calls: int, model: int) -> np.ndarray:
    """One round of ``calls`` fresh standard_reasoner calls to ``model`` in every lane."""
    a = np.zeros((sim.num_lanes, len(sim.nvec)), np.int64)
    a[:, 1::3] = len(Tool) - 1  # empty slots
    for k in range(calls):
        a[:, 1 + 3 * k: 4 + 3 * k] = int(Tool.STANDARD_REASONER), model, 0
    return a


@pytest.mark.parametrize("serial", [False, True])
def test_a_rounds_calls_to_one_model_share_its_server(serial: bool) -> None:
    """Lanes with the same seed draw the same first call; with four calls to the model in the round its latency is
    the same tokens decoded 1 + 3 beta times slower (serial rounds run one call at a time: no slowdown)."""
    lanes, m = 64, 0
    sims = [Simulator("paramanager", "AIME25", lanes, serial=serial) for _ in range(2)]
    for sim, n in zip(sims, (1, 4), strict=True):
        sim.seed(np.arange(lanes))
        sim.reset()
        sim.step(_round(sim, n, m), np.zeros(lanes, np.uint8))
    one, four = (s.state.call_f[:, 0] for s in sims)
    assert np.array_equal(one[:, C_TOK_OUT], four[:, C_TOK_OUT])
    t = sims[0].tables
    base, pt = t.tm[TM_LAT_BASE, Tool.STANDARD_REASONER, m], t.tm[TM_LAT_PER_TOK, Tool.STANDARD_REASONER, m]
    slow = 1.0 if serial else 1.0 + 3 * load_pool("paramanager").lat_slope[Tool.STANDARD_REASONER, m]
    tok = one[:, C_TOK_OUT]
    ok = one[:, C_LAT] < t.tt[TT_TIMEOUT, Tool.STANDARD_REASONER]  # not timed out
    np.testing.assert_allclose(four[ok, C_LAT] * (base + tok[ok] * pt), one[ok, C_LAT] * (base + tok[ok] * pt * slow),
                               rtol=1e-9)


def test_truncation_is_counted_as_a_call_not_a_format_violation() -> None:
    sim = Simulator("paramanager", "AIME25", 32, harness={"max_output_tokens": 1})
    sim.seed(np.arange(32))
    sim.reset()
    sim.step(_round(sim, 2, 2), np.zeros(32, np.uint8))
    assert np.all(sim.state.counts_s[:, Status.TRUNCATED] == 2)
    assert np.all(sim.state.st_i[:, I_FMT] == 0)  # no format violation
    assert sim.obs.status_counts.shape[1] == NUM_STATUSES
