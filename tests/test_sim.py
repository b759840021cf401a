"""The compiled simulator: per-call model rates, protocol statuses, accounting, determinism."""
from __future__ import annotations

import numpy as np
import pytest

from parasim.calibration.simulate import CALL_FIELDS, simulated_calls
from parasim.pools.pool import load_pool
from parasim.protocol.schema import NUM_TOOLS, Status, Tool
from parasim.sim import TARGET_CARRY, TARGET_QUESTION, TARGET_VERIFY, Simulator
from parasim.sim.kernel import EMPTY_SLOT, F_Z, I_ROW, NO_CALL
from parasim.sim.rng import seed_state
from parasim.tasks.suites import BENCHMARK_INDEX

SR, CR, CODE, ENS, PY = (int(Tool.STANDARD_REASONER), int(Tool.CRITICAL_REVIEWER), int(Tool.CODE_REASONER),
                         int(Tool.ENSEMBLE_SOLVER), int(Tool.PYTHON))


def test_seed_streams_differ_and_are_reproducible():
    states = {int(seed_state(s)) for s in range(1000)}
    assert len(states) == 1000
    a = simulated_calls("paramanager", "paramanager", 50, 4, carry_prob=0.5, seed=3)
    b = simulated_calls("paramanager", "paramanager", 50, 4, carry_prob=0.5, seed=3)
    c = simulated_calls("paramanager", "paramanager", 50, 4, carry_prob=0.5, seed=4)
    assert set(a) == set(CALL_FIELDS)
    for k in CALL_FIELDS:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["tokens_out"], c["tokens_out"])


def test_direct_calls_hit_the_accuracy_target():
    pool = load_pool("paramanager")
    b = BENCHMARK_INDEX["GPQA"]
    calls = simulated_calls(pool, "GPQA", 20000, 2, tools=["standard_reasoner"], models=[0, 2], seed=1)
    for m in (0, 2):
        acc = (calls["correct"][calls["model"] == m] == 1).mean()
        # two calls per task share z: the standard error is at most sqrt(2) times the binomial one
        assert abs(acc - pool.accuracy_target[m, b]) < 4 * np.sqrt(2 * 0.25 / 20000)


def test_failure_rates_and_accounting():
    pool = load_pool("paramanager")
    calls = simulated_calls(pool, "paramanager", 6000, 4, tools=["code_reasoner", "python", "search"], seed=2)
    code = calls["tool"] == CODE
    assert abs((calls["status"][code] == Status.EXEC_ERR).mean() - 0.15) < 0.02
    assert (calls["status"][calls["tool"] == int(Tool.SEARCH)] != Status.EXEC_ERR).all()
    search = calls["tool"] == int(Tool.SEARCH)
    np.testing.assert_allclose(calls["usd"][search], 0.01)  # per-call price, no token price
    assert (calls["model"][search] == pool.num_models).all()  # basic tools run on the manager row
    timed_out = calls["status"] == Status.TIMEOUT
    assert np.all(calls["latency_s"][timed_out] == pool.timeout[calls["tool"][timed_out]])
    assert np.all(calls["tokens_out"] <= pool.max_output_tokens)
    ok_code = code & (calls["status"] == Status.OK)
    expect = calls["tokens_in"] * pool.price_in[CODE, 0] + calls["tokens_out"] * pool.price_out[CODE, 0]
    sel = ok_code & (calls["model"] == 0)
    np.testing.assert_allclose(calls["usd"][sel], expect[sel])


def test_reviewer_sensitivity_and_specificity():
    pool = load_pool("paramanager_mono")
    # each task's second call reviews its first (a task's first critical_reviewer call has nothing to review and
    # becomes a standard_reasoner call)
    calls = simulated_calls(pool, "GPQA", 30000, 2, tools=["critical_reviewer"], seed=5)
    answered = calls["answer"][0::2] >= 0
    assert (calls["tool"][0::2] == SR).all() and (calls["tool"][1::2] == np.where(answered, CR, SR)).all()
    assert (calls["target"][1::2] == np.where(answered, 0, -1)).all() and answered.mean() > 0.9
    ok = (calls["status"] == Status.OK) & (calls["target"] == 0)
    wrong = ok & (calls["reviewed_correct"] == 0)
    right = ok & (calls["reviewed_correct"] == 1)
    d = 1  # science
    assert abs(calls["flagged"][wrong].mean() - pool.sens[0, d]) < 0.02
    assert abs(1 - calls["flagged"][right].mean() - pool.spec[0, d]) < 0.02


def _wrong_answer_agreement(pool: str, models: list[int], seed: int) -> tuple[float, float]:
    """(same-model, cross-model) agreement of two wrong answers to one task."""
    calls = simulated_calls(pool, "AIME25", 20000, 2, tools=["standard_reasoner"], models=models, seed=seed)
    ans = calls["answer"].reshape(-1, 2)
    mod = calls["model"].reshape(-1, 2)
    both_wrong = (ans > 0).all(1)
    same = both_wrong & (mod[:, 0] == mod[:, 1])
    cross = both_wrong & (mod[:, 0] != mod[:, 1])
    return float((ans[same, 0] == ans[same, 1]).mean()), float((ans[cross, 0] == ans[cross, 1]).mean())


def test_same_model_errors_agree_more_than_cross_model_errors_where_kappa_is_positive():
    # toolorchestra's assumed kappa (0.75 for Qwen3-8B and Llama-3.3-70B): a model's preferred wrong answer
    agree_same, agree_cross = _wrong_answer_agreement("toolorchestra", [3, 4], seed=7)
    assert agree_same > agree_cross + 0.1


def test_at_the_fitted_kappa_of_zero_a_models_wrong_answers_agree_as_two_models_do():
    # paramanager's fitted kappa at temperature 1 is 0: no preferred wrong answer, both at the distractors' chance
    agree_same, agree_cross = _wrong_answer_agreement("paramanager", [0, 1], seed=7)
    assert abs(agree_same - agree_cross) < 0.03


def test_anchoring_copies_the_carried_answer_and_context_costs_skill():
    calls = simulated_calls("paramanager_mono", "AIME25", 20000, 2, tools=["standard_reasoner"], carry_prob=1.0,
                           max_context=1.0, seed=8)
    wrong_carry = (calls["carried_answer"] > 0) & (calls["answer"] >= 0)  # a call cut at the cap copies nothing
    copied = (calls["answer"][wrong_carry] == calls["carried_answer"][wrong_carry]).mean()
    assert copied > load_pool("paramanager_mono").rho[0]  # copies plus wrong answers that match by chance
    # calls that carry the task's first answer (right or wrong), with a context of up to 1 and up to 60,000 tokens:
    # the carried answers follow the same law, so only the context penalty differs
    short, long = (simulated_calls("paramanager_mono", "AIME25", 60000, 2, tools=["standard_reasoner"], carry_prob=1.0,
                                   max_context=ctx, seed=9) for ctx in (1.0, 60000.0))
    for carried in ("right", "wrong"):
        right = [(c["correct"][c["carried_answer"] == 0 if carried == "right" else c["carried_answer"] > 0] == 1)
                 .mean() for c in (short, long)]
        assert right[1] < right[0] - 0.01, (carried, right)


def _actions(sim: Simulator, calls: list[tuple[int, int, int]], stop: int = 0) -> np.ndarray:
    a = np.zeros((sim.num_lanes, len(sim.nvec)), np.int64)
    a[:, 0] = stop
    a[:, 1::3] = EMPTY_SLOT
    for k, (t, m, g) in enumerate(calls):
        a[:, 1 + 3 * k], a[:, 2 + 3 * k], a[:, 3 + 3 * k] = t, m, g
    return a


def test_protocol_statuses_never_crash():
    sim = Simulator("paramanager", "math", 1, max_parallel=4)
    sim.seed([0])
    sim.reset()
    keep = np.zeros(1, np.uint8)
    sim.step(_actions(sim, [(99, 0, 0), (SR, 7, 0), (SR, 0, 9), (CR, 0, TARGET_VERIFY)]), keep)
    last = sim.obs.last_status[0].tolist()
    # unknown tool, unknown model, bad target, reviewer with nothing to review
    assert last == [Status.INVALID_TOOL, Status.INVALID_TOOL, Status.FORMAT_ERR, Status.INVALID_TOOL]
    traj = sim.trajectory(0)
    assert traj["format_violations"] == 1 and traj["tool_calls"] == 4 and traj["tool_counts"].sum() == 0
    sim.step(_actions(sim, []), keep)  # a round with no call
    assert sim.trajectory(0)["format_violations"] == 2
    assert sim.obs.last_status[0].tolist() == [NO_CALL] * 4
    sim.step(_actions(sim, [(SR, 0, TARGET_CARRY), (SR, 1, TARGET_QUESTION)]), keep)  # carry without a lead
    assert sim.obs.last_status[0, 0] == Status.FORMAT_ERR
    neg = _actions(sim, [(SR, -3, -1)])
    neg[0, 0] = 5
    sim.step(neg, keep)
    assert sim.obs.last_status[0, 0] == Status.INVALID_TOOL
    assert sim.trajectory(0)["format_violations"] == 4


def test_parallel_latency_is_the_slowest_call_and_serial_the_sum():
    calls = [(SR, 0, 0), (SR, 1, 0), (SR, 2, 0), (PY, 0, 0)]
    lat = {}
    for serial in (False, True):
        sim = Simulator("paramanager", "math", 64, serial=serial)
        sim.seed(np.arange(64))
        sim.reset()
        sim.step(_actions(sim, calls), np.zeros(64, np.uint8))
        lat[serial] = sim.trajectory()["latency_s"]
    assert np.all(lat[True] >= lat[False]) and np.mean(lat[True]) > 1.2 * np.mean(lat[False])


def test_episode_ends_at_max_rounds_with_the_termination_vote():
    sim = Simulator("paramanager", "paramanager", 200, max_rounds=3)
    sim.seed(np.arange(200))
    sim.reset()
    keep = np.zeros(200, np.uint8)
    act = _actions(sim, [(SR, 0, 0), (ENS, 2, 0)])
    for r in range(3):
        done = sim.step(act, keep).copy()
        assert done.all() == (r == 2)
    traj = sim.trajectory()
    assert (traj["rounds"] == 3).all() and (traj["ended_with_final"] == 0).all()
    assert (traj["tool_counts"][:, SR] == 3).all() and (traj["distinct_tools"] == 2).all()
    assert (traj["cost_units"] == 3 * (1 + 3)).all()
    assert set(np.unique(traj["outcome"])) <= {0.0, 1.0}
    assert np.array_equal(traj["outcome"] == 1, sim.final_answers() == 0)
    assert traj["tool_counts"].shape == (200, NUM_TOOLS)


def test_token_budget_blocks_calls():
    sim = Simulator("paramanager", "math", 1, token_budget=1.0)
    sim.seed([0])
    sim.reset()
    keep = np.zeros(1, np.uint8)
    sim.step(_actions(sim, [(SR, 0, 0)]), keep)  # the first round starts with 0 tokens: allowed
    sim.step(_actions(sim, [(SR, 0, 0)]), keep)
    assert sim.obs.last_status[0, 0] == Status.BUDGET_EXCEEDED


@pytest.mark.parametrize("bad", [{"max_rounds": 0}, {"max_parallel": 17}, {"token_budget": -1}])
def test_simulator_option_errors(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        Simulator("paramanager", "math", 1, **bad)


def test_seed_states_are_seed_state_of_each_seed():
    from parasim.sim.rng import seed_state, seed_states

    seeds = [0, 1, 7, 2**31 - 1, 2**32, 2**62 + 3, 2**63, 2**64 - 1, *np.random.default_rng(0).integers(0, 2**62, 50)]
    assert seed_states(seeds).dtype == np.uint64
    assert [int(v) for v in seed_states(seeds)] == [int(seed_state(int(s))) for s in seeds]


def test_num_threads_is_checked_against_numbas_threads():
    import numba

    with pytest.raises(ValueError, match=r"num_threads: expected an integer in \[1, "):
        Simulator("paramanager", "math", 1, num_threads=numba.config.NUMBA_NUM_THREADS + 1)
    with pytest.raises(TypeError, match="num_threads"):
        Simulator("paramanager", "math", 1, num_threads=True)


def test_threaded_step_equals_the_serial_loop():
    from parasim.sim import PARALLEL_MIN_LANES

    n = PARALLEL_MIN_LANES
    sims = [Simulator("toolorchestra", "paramanager", n, max_rounds=3, num_threads=t) for t in (2, 1)]
    assert sims[0]._threaded and not sims[1]._threaded
    rng = np.random.default_rng(0)
    for sim in sims:
        sim.seed(np.arange(n))
        sim.reset()
    for _ in range(8):
        a = rng.integers(0, sims[0].nvec, size=(n, len(sims[0].nvec)))
        a[:, 0] = rng.random(n) < 0.2
        done = [sim.step(a, np.zeros(n, np.uint8)).copy() for sim in sims]
        np.testing.assert_array_equal(done[0], done[1])
        for x, y in zip(sims[0].state, sims[1].state, strict=False):
            np.testing.assert_array_equal(x, y)
        for sim in sims:
            sim.reset(done[0])


def test_trajectory_fields_satisfy_the_batch_contract():
    from parasim.scoring.batch import TrajectoryBatch

    sim = Simulator("paramanager", "paramanager", 32, max_rounds=2)
    sim.seed(np.arange(32))
    sim.reset()
    for _ in range(2):
        sim.step(_actions(sim, [(SR, 0, 0), (PY, 0, 0), (99, 0, 0)]), np.zeros(32, np.uint8))
    traj = sim.trajectory()
    checked = TrajectoryBatch.from_arrays(**traj)
    for k, v in traj.items():
        got = getattr(checked, k)
        assert got.dtype == v.dtype and got.shape == v.shape, k
        np.testing.assert_array_equal(got, v)


def test_user_task_file_fixes_domain_options_and_difficulty(tmp_path):
    from parasim.sim.kernel import F_Z, I_DOMAIN, I_NANS

    f = tmp_path / "tasks.jsonl"
    f.write_text('{"id": "q1", "domain": "knowledge", "options": 5, "difficulty": 2.5}\n')
    sim = Simulator("paramanager", str(f), 16)
    sim.seed(np.arange(16))
    sim.reset()
    assert (sim.state.st_f[:, F_Z] == 2.5).all()
    assert (sim.state.st_i[:, I_DOMAIN] == 2).all() and (sim.state.st_i[:, I_NANS] == 5).all()
    assert (sim.obs.task[:, 2] == 1).all() and np.allclose(sim.obs.task[:, 6], 5 / 16)


def test_candidates_are_the_top_answers_by_termination_score():
    from parasim.sim.kernel import E_SCORE, E_SUPPORT, leading_answer

    n = 64
    sim = Simulator("paramanager", "paramanager", n, max_rounds=5)
    sim.seed(np.arange(n))
    sim.reset()
    rng = np.random.default_rng(3)
    for _ in range(4):
        a = _actions(sim, [(SR, 0, 0), (ENS, 1, 0), (CR, 2, TARGET_VERIFY), (PY, 0, TARGET_CARRY)])
        a[:, 0] = rng.random(n) < 0.1
        sim.step(a, np.zeros(n, np.uint8))
        for i in range(n):
            ev = sim.state.ev[i]
            supported = ev[E_SUPPORT] > 0
            cand = sim.obs.candidates[i]
            k = min(int(supported.sum()), 4)
            assert cand[:, 0].sum() == k and sim.obs.evidence[i, 1] == supported.sum()
            top = np.sort(ev[E_SCORE][supported])[::-1][:k].astype(np.float32)
            np.testing.assert_allclose(cand[:k, 1], top)
            assert cand[:k, 2].sum() <= sim.obs.evidence[i, 0]
            lead = leading_answer(sim.state.ev, sim.state.arrival, i, sim.state.st_i[i, 3])
            if k:
                assert cand[0, 1] == np.float32(ev[E_SCORE, lead])
            mask = sim.obs.action_mask[i]
            assert mask[2 + CR] == (k > 0) and mask[2 + 8 + 3 + 1] == (k > 0)


def test_last_round_records_each_call_and_sums_to_the_totals():
    sim = Simulator("paramanager", "GPQA", 8, max_rounds=4)
    sim.seed(np.arange(8))
    sim.reset()
    keep = np.zeros(8, np.uint8)
    sim.step(_actions(sim, [(SR, 0, 0), (CODE, 1, 0), (99, 0, 0), (PY, 0, 0)]), keep)
    for lane in range(8):
        calls = sim.last_round(lane)
        assert [c["slot"] for c in calls] == [0, 1, 2, 3]
        assert calls[2]["status"] == Status.INVALID_TOOL and calls[2]["kind"] is None and calls[2]["cost_units"] == 0
        traj = sim.trajectory(lane)
        assert sum(c["cost_units"] for c in calls) == pytest.approx(traj["cost_units"])
        assert sum(c["usd"] for c in calls) == pytest.approx(traj["usd"])
        assert max(c["latency_s"] for c in calls) == pytest.approx(traj["latency_s"])
        for c in calls:
            assert (c["kind"] == "answer") == (c["status"] == Status.OK)
            assert (c["answer"] >= 0) == (c["kind"] == "answer")
    sim.step(_actions(sim, [(CR, 2, TARGET_VERIFY)]), keep)
    reviews = [sim.last_round(lane)[0] for lane in range(8)]
    assert all(r["kind"] in ("flag", "confirm") for r in reviews if r["status"] == Status.OK)


def test_task_requests_share_the_task_and_keep_each_lanes_stream():
    sim = Simulator("paramanager", "paramanager", 6)
    sim.seed(np.arange(6) + 100)
    before = sim.state.rng.copy()
    sim.reset(task_index=np.array([1, 1, 1, 4, 4, 0]), task_seeds=np.array([8, 8, 8, 8, 8, 9]))
    st = sim.state
    np.testing.assert_array_equal(st.st_i[:, I_ROW], [1, 1, 1, 4, 4, 0])
    # equal requests: the identical task (drawn difficulty, preferred wrong answers) ...
    assert len(set(st.st_f[:3, F_Z])) == 1 and (st.pref[:3] == st.pref[0]).all()
    assert st.st_f[0, F_Z] != st.st_f[5, F_Z]
    # ... while the lanes' own streams (their tool randomness) were not touched by the task's draws
    np.testing.assert_array_equal(st.rng, before)
    np.testing.assert_array_equal(sim.tasks()["benchmark"], sim.suite.benchmark[[1, 1, 1, 4, 4, 0]])
    # requests hold for that reset only: the next one draws by weight from each lane's stream
    sim.reset()
    assert (st.rng != before).all() and len(set(st.st_f[:, F_Z])) == 6
    # a task index without a task seed fixes the row; difficulty then comes from the lane's stream
    sim.reset(task_index=np.full(6, 2))
    assert (st.st_i[:, I_ROW] == 2).all() and len(set(st.st_f[:, F_Z])) == 6
    np.testing.assert_allclose(sim.task_weights(), np.full(7, 1 / 7))
    with pytest.raises(ValueError, match=r"task_index: expected 6 integers in \[0, 7\)"):
        sim.reset(task_index=np.full(6, 7))
    with pytest.raises(ValueError, match="task_seeds"):
        sim.reset(task_seeds=np.zeros(5, np.int64))
