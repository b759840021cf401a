"""ParaOrch-v0 with tools="real": the structured env over RealEpisodeEngine and the scripted OpenAI-compatible server.

The server (``tests/fake_server.py``) is a real process on loopback: "good" answers 42 (the gold answer),
"other" answers 7, "split" samples 41, 42, 42. Covers the shared spaces, the call each slot becomes, candidates
grouped by verifier equivalence, budgets and the reward from the CallResults, the simulator's protocol
statuses, and a server killed mid-episode.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from test_real_backend import (
    _control,
    _emap,
    _exact,
    _free_port,
    _start_fake,
    _stop,
    _task,
)

import parasim  # noqa: F401  (registers the envs)
from envs.real_evidence import AnswerIds, answer_kind, real_params
from parasim import TrajectoryBatch, compute_rewards
from parasim.pools.pool import load_pool
from parasim.protocol.engine import EpisodeEngineBase
from parasim.protocol.schema import NUM_STATUSES, Domain, Status, Tool
from parasim.real.backend import RealToolBackend
from parasim.real.engine import RealEpisodeEngine
from parasim.sim.tables import MD_LLR_CONFIRM, MD_LLR_FLAG, build_tables, episode_params, kernel_params
from parasim.tasks.suites import BENCHMARK_INDEX, load_suite

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
EMPTY = [7, 0, 0]
NO_CALL = NUM_STATUSES


def _make(backend: RealToolBackend, **options) -> gym.Env:
    engine = RealEpisodeEngine(backend, [_task()], verifier=_exact, seed=0)
    return gym.make("ParaOrch-v0", tools="real", engine=engine, **options)


def _act(*slots: list[int], stop: int = 0, k: int = 4) -> np.ndarray:
    rows = list(slots) + [EMPTY] * (k - len(slots))
    return np.array([stop] + [x for s in rows for x in s], np.int64)


def test_real_env_has_the_sim_spaces_and_passes_check_env(backend):
    env = _make(backend)
    sim = gym.make("ParaOrch-v0")  # paramanager: 3 pool models, as the 3 endpoints here
    assert env.observation_space == sim.observation_space and env.action_space == sim.action_space
    assert env.unwrapped.spec.nondeterministic and not sim.spec.nondeterministic
    # the close check rebuilds the env from a deep copy of its spec, which would copy the live engine
    check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)


def test_episode_end_to_end_calls_candidates_budgets_reward(backend):
    env = _make(backend, serial=True)
    obs, info = env.reset(seed=0)
    assert info["task"].question == "What is six times seven?"
    assert obs["task"].tolist()[:7] == [1, 0, 0, 0, 1, 0, 1] and obs["evidence"].tolist() == [0, 0, 1]
    mask = obs["action_mask"]
    assert mask[2 + Tool.CRITICAL_REVIEWER] == 0 and mask[2 + 8 + 3 + 1] == 0  # no lead: no review, no carry

    obs, reward, term, _, info = env.step(_act([0, 0, 0], [0, 1, 0], [4, 2, 0]))  # good 42, other 7, split ens 42
    assert not term and reward == 0.0
    assert [c.model for c in info["calls"]] == ["good", "other", "split"]
    assert all(c.subtask == "What is six times seven?" and c.target == -1 for c in info["calls"])
    assert [r.status for r in info["results"]] == [Status.OK] * 3
    assert obs["last_status"].tolist() == [0, 0, 0, NO_CALL]
    cands = obs["candidates"]
    assert cands[:, 0].tolist() == [1, 1, 0, 0] and cands[:2, 2].tolist() == [2, 1]  # 42 twice, 7 once
    assert cands[0, 1] > cands[1, 1] > 0 and obs["evidence"].tolist() == [3, 2, 0]
    results = info["results"]
    pool = load_pool("paramanager")
    # the rules' trajectory length: the manager's tokens, and the share of each OK call's output fed back to it
    fed = sum(r.tokens_out * pool.feedback_frac[c.tool] for c, r in zip(info["calls"], results))
    tokens = pool.manager_tokens_round + 3 * pool.manager_tokens_call + fed
    assert obs["budget"][0] == pytest.approx(tokens)
    assert obs["budget"][1] == pytest.approx(sum(r.cost_units for r in results))
    assert obs["budget"][3] == pytest.approx(sum(r.latency_s for r in results), rel=1e-5)  # serial: summed
    assert obs["action_mask"][2 + Tool.CRITICAL_REVIEWER] == 1

    obs, _, _, _, info = env.step(_act([1, 1, 2], [0, 1, 1]))  # review the lead, carry it
    review, carry = info["calls"]
    assert review.subtask == "Verify this answer: 42" and review.target == 0 and carry.target == 0
    assert obs["candidates"][0, 2:].tolist() == [2, 0, 1]  # 42: a confirmation; "other" answers 7 again
    assert obs["candidates"][1, 2:].tolist() == [2, 0, 0] and obs["tool_counts"].tolist()[:5] == [3, 1, 0, 0, 1]

    obs, reward, term, _, info = env.step(_act(stop=1))
    traj = info["trajectory"]
    assert term and info["correct"] and info["answer"] == "42"
    assert (info["task_index"], info["benchmark"]) == (0, BENCHMARK_INDEX["generic_math"])
    assert (traj["rounds"], traj["tool_calls"], traj["ended_with_final"], traj["format_violations"]) == (2, 5, 1, 0)
    assert traj["tokens"] == pytest.approx(obs["budget"][0])
    rec = {k: v for k, v in traj.items()}
    expected = compute_rewards(TrajectoryBatch.from_records([rec]), "paramanager").total[0]
    assert reward == pytest.approx(expected) and reward == info["reward_components"]["total"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(_act(stop=1))


def test_default_task_info_names_the_task_list_index_and_the_benchmark_index():
    """As the simulated env's terminal info: the task's index in the engine's list (-1 for a task from outside
    it), its catalogue benchmark's index, and the domain's generic benchmark for tasks that carry none."""
    tasks = [_task(id="a"), _task(id="b", benchmark="AIME24", question="x?"), _task(id="c", domain="knowledge")]
    engine = EpisodeEngineBase()
    engine.tasks, engine.task = tasks, tasks[1]
    assert engine.task_info(tasks[1].view()) == {"task_index": 1, "benchmark": BENCHMARK_INDEX["AIME24"]}
    engine.task = _task(id="c", domain="knowledge")  # equal by value to tasks[2]
    assert engine.task_info(engine.task.view())["task_index"] == 2
    engine.task = _task(id="outside", domain="science")
    assert engine.task_info(engine.task.view()) == {"task_index": -1, "benchmark": BENCHMARK_INDEX["generic_science"]}
    view = SimpleNamespace(domain=int(Domain.CODE))  # an engine without tasks or a task object
    assert EpisodeEngineBase().task_info(view) == {"task_index": -1, "benchmark": BENCHMARK_INDEX["generic_code"]}


def test_protocol_errors_get_the_simulator_statuses_without_a_call(backend, server):
    env = _make(backend, max_rounds=2)
    env.reset(seed=0)
    import httpx

    before = httpx.get(f"{server}/stats").json()["requests"]
    # reviewer without a lead, unknown tool 9, model 5 of 3, carry without a lead
    obs, reward, term, _, info = env.step(_act([1, 0, 2], [9, 0, 0], [0, 5, 0], [0, 0, 1]))
    assert obs["last_status"].tolist() == [Status.INVALID_TOOL] * 3 + [Status.FORMAT_ERR]
    assert info["calls"] == [] and httpx.get(f"{server}/stats").json()["requests"] == before
    obs, reward, term, _, info = env.step(_act(stop=3))  # a stop flag other than 0/1, no call: a violation
    assert term and info["trajectory"]["format_violations"] == 2 and info["trajectory"]["ended_with_final"] == 0
    assert info["reward_components"]["protocol"] < 0 and np.isfinite(reward)


def test_token_budget_gives_budget_exceeded(backend):
    env = _make(backend, token_budget=1)
    env.reset(seed=0)
    obs, *_ = env.step(_act([0, 0, 0]))
    assert obs["last_status"][0] == Status.OK
    obs, *_ = env.step(_act([0, 0, 0], [5, 0, 0]))
    assert obs["last_status"].tolist()[:2] == [Status.BUDGET_EXCEEDED] * 2


def _documented_status(tool: int, model: int, target: int, slot: int, *, allowed: int, num_models: int,
                       has_lead: bool, tokens: float, token_budget: float) -> Status | None:
    """The protocol rules as ParaOrch-v0's docstring states them, written out independently of the compiled rules:
    the status a malformed or over-budget slot gets without a call, None for one that runs."""
    if not 0 <= tool < 7 or slot >= allowed or (tool <= 4 and not 0 <= model < num_models) or (
            tool == Tool.CRITICAL_REVIEWER and not has_lead):
        return Status.INVALID_TOOL
    if not 0 <= target < 3 or (target != 0 and not has_lead) or ((tool == Tool.CRITICAL_REVIEWER) != (target == 2)):
        return Status.FORMAT_ERR
    if tokens >= token_budget:
        return Status.BUDGET_EXCEEDED
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2, 9), min_size=13, max_size=13), st.integers(0, 3), st.booleans())
def test_slot_rules_match_the_simulator(action, warmup, budget):
    """Every protocol status the documented rules predict is the compiled simulator's; runnable calls run there."""
    env = gym.make("ParaOrch-v0", token_budget=3000 if budget else None).unwrapped
    obs, _ = env.reset(seed=warmup)
    for _ in range(warmup):  # some evidence first, so that the lead-dependent rules are exercised
        obs, *_ = env.step(_act([0, 0, 0], [2, 1, 0]))
    a = np.array(action, np.int64)
    a[0] = 0
    has_lead, tokens = bool(obs["evidence"][1] > 0), float(obs["budget"][0])
    obs, *_ = env.step(a)
    for k in range(4):
        tool, model, target = a[1 + 3 * k: 4 + 3 * k]
        if tool == 7:
            assert obs["last_status"][k] == NO_CALL
            continue
        want = _documented_status(int(tool), int(model), int(target), k, allowed=4, num_models=3, has_lead=has_lead,
                                  tokens=tokens, token_budget=3000 if budget else np.inf)
        got = Status(obs["last_status"][k])
        ran = (Status.OK, Status.EXEC_ERR, Status.TIMEOUT, Status.TRUNCATED)
        assert got == want if want is not None else got in ran


@pytest.mark.parametrize("domain, options, same, other", [
    (Domain.MATH, (), ["1/2", "0.5", "\\frac{1}{2}"], "2"),
    (Domain.SCIENCE, ("Mars", "Venus", "Earth"), ["(B)", "B", "Venus"], "A"),
    (Domain.KNOWLEDGE, (), ["The Eiffel Tower", "eiffel tower."], "Louvre"),
])
def test_answers_that_verify_as_equal_share_an_id(domain, options, same, other):
    ids = AnswerIds(answer_kind(int(domain), len(options)), options)
    got = [ids.id_for(answer, i) for i, answer in enumerate(same + [other, ""])]
    assert got == [0] * len(same) + [1, -1]  # first-seen order; an empty answer is none
    assert ids.texts == [same[0], other] and ids.sources == [0, len(same)]


def test_answers_past_the_id_space_get_none():
    """16 distinct answers take the 16 ids; a 17th new one gets none (its call adds no candidate), a known one
    still gets its id."""
    ids = AnswerIds(answer_kind(int(Domain.KNOWLEDGE), 0), ())
    assert [ids.id_for(f"answer {i}", i) for i in range(17)] == [*range(16), -1]
    assert ids.id_for("Answer 3", 20) == 3 and len(ids.texts) == 16


def _params(model_ids: tuple[str, ...]) -> np.ndarray:
    pool = load_pool("paramanager")
    env = episode_params(12, False, None)
    return real_params(pool, build_tables(pool, load_suite("paramanager")), model_ids, env, 4)[0]


def test_named_models_get_the_simulators_parameter_rows():
    """The engine's ids in the pool's order give the simulator's own parameter record (what the rules read)."""
    from parasim.sim import Simulator

    pool = load_pool("paramanager")
    sim = Simulator("paramanager", "paramanager", 1)
    want = kernel_params(sim.tables, sim.env, sim.slots)[0][0]  # the simulator's parameter record
    got = _params(tuple(pool.model_names[:-1]))
    for field in ("nm", "slots", "proto", "tt", "rel_logit", "md"):
        np.testing.assert_array_equal(got[field], want[field])


def test_unknown_models_get_the_pool_mean_prior():
    pool = load_pool("paramanager")
    named = _params(tuple(pool.model_names[:-1]))
    unknown = _params(("endpoint-x",))
    t, bench = Tool.STANDARD_REASONER, BENCHMARK_INDEX["generic_math"]
    scores = [named["rel_logit"][t, m, bench] for m in range(pool.num_models)]
    assert min(scores) <= unknown["rel_logit"][t, 0, bench] <= max(scores)
    assert unknown["md"][0, 0, MD_LLR_FLAG] < 0 < unknown["md"][0, 0, MD_LLR_CONFIRM]
    # the basic tools use the manager's row, the row after the engine's models
    manager = named["rel_logit"][Tool.PYTHON, pool.num_models]
    np.testing.assert_array_equal(unknown["rel_logit"][Tool.PYTHON, 1], manager)


def test_killed_server_gives_timeouts_and_the_episode_still_ends_with_a_reward():
    port = _free_port()
    proc = _start_fake(port)
    url = f"http://127.0.0.1:{port}"
    try:
        with RealToolBackend(_emap(url, timeout_s=2)) as b:
            env = _make(b)
            env.reset(seed=0)
            obs, *_ = env.step(_act([0, 0, 0], [0, 1, 0]))
            assert obs["last_status"].tolist()[:2] == [Status.OK] * 2
            _stop(proc)
            obs, reward, term, _, info = env.step(_act([0, 0, 0], [1, 2, 2]))
            assert [r.status for r in info["results"]] == [Status.TIMEOUT] * 2
            assert obs["status_counts"][Status.TIMEOUT] == 2 and obs["evidence"][0] == 2  # earlier answers kept
            obs, reward, term, _, info = env.step(_act(stop=1))
    finally:
        _stop(proc)
    assert term and np.isfinite(reward) and reward == info["reward_components"]["total"]
    assert info["answer"] == "42"  # the termination model is down: the vote over 42 and 7, first seen on ties


def test_real_tools_need_an_engine_and_the_sim_takes_none():
    with pytest.raises(NotImplementedError, match="RealEpisodeEngine"):
        gym.make("ParaOrch-v0", tools="real")
    with pytest.raises(ValueError, match="engine: only with tools='real'"):
        gym.make("ParaOrch-v0", engine=object())
    with pytest.raises(ValueError, match="AsyncVectorEnv"):
        gym.make_vec("ParaOrch-v0", num_envs=2, tools="real")


def test_sync_vector_env_over_real_envs_sharing_one_backend(backend):
    venv = gym.vector.SyncVectorEnv([lambda: _make(backend, max_rounds=2) for _ in range(2)])
    obs, _ = venv.reset(seed=0)
    assert obs in venv.observation_space
    for _ in range(2):
        obs, reward, term, _, _ = venv.step(np.stack([_act([0, 0, 0])] * 2))
    assert term.all() and np.isfinite(reward).all() and obs in venv.observation_space
    venv.close()


def _make_in_worker(url: str, seed: int) -> gym.Env:
    """An env with its own backend: what an AsyncVectorEnv worker process builds (a live backend cannot be sent)."""
    engine = RealEpisodeEngine(RealToolBackend(_emap(url)), [_task(), _task(id="t1", answer="7")], verifier=_exact)
    return gym.make("ParaOrch-v0", tools="real", engine=engine, max_rounds=2, seed=seed)


def test_async_vector_env_of_real_envs(server):
    _control(server)
    venv = gym.vector.AsyncVectorEnv([lambda i=i: _make_in_worker(server, i) for i in range(2)])
    try:
        obs, _ = venv.reset()
        obs, reward, term, _, _ = venv.step(np.stack([_act([0, 0, 0], [0, 1, 0])] * 2))
        assert obs["last_status"][:, :2].tolist() == [[Status.OK] * 2] * 2 and not term.any()
        assert obs["evidence"][:, 1].tolist() == [2, 2]  # 42 and 7 in each sub-env
        obs, reward, term, _, info = venv.step(np.stack([_act([0, 2, 0])] * 2))
        assert term.all() and np.isfinite(reward).all()
        assert info["trajectory"]["group_id"].tolist() == [1, 1]  # each sub-env's first episode since seeded
    finally:
        venv.close()


def test_task_options_offer_a_tool_subset_at_episode_prices_with_real_tools(backend, server, tmp_path):
    """The reset options of docs/task_options.md in real mode: an unoffered tool is masked and its call is
    INVALID_TOOL without a request; an episode price replaces the engine's USD of the tool's calls; the drawn options
    (``task_options="random"``) follow the reset seed, as in the simulator."""
    from parasim.real.calllog import CallLogger
    from parasim.sim.state import episode_tools

    log = tmp_path / "calls.jsonl"
    with CallLogger(log) as logger:
        engine = RealEpisodeEngine(backend, [_task()], verifier=_exact, seed=0, logger=logger)
        _check_task_options(gym.make("ParaOrch-v0", tools="real", engine=engine), server)
    ensemble_calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(c["tool"], c["usd"]) for c in ensemble_calls] == [("ensemble_solver", 0.5)]  # the log shows the price
    drawn = _make(backend, task_options="random")
    names = drawn.unwrapped.source.tool_spec.names
    tools = []
    for _ in range(2):
        drawn.reset(seed=7, options={"preference": list(range(len(names) + 3))})
        tools.append(episode_tools(drawn.unwrapped.source.lanes, len(names)))
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(*tools, strict=True))
    assert tools[0].preference[0].tolist() == list(range(len(names) + 3)) and np.isfinite(tools[0].price_usd).all()


class _EngineWithoutPrices(RealEpisodeEngine):
    """An engine whose ``run_round`` predates episode prices."""

    def run_round(self, calls, *, action=None, slots=None):
        return super().run_round(calls, action=action, slots=slots)


def test_an_engine_that_cannot_charge_episode_prices_is_refused_at_the_reset(backend):
    engine = _EngineWithoutPrices(backend, [_task()], verifier=_exact, seed=0)
    env = gym.make("ParaOrch-v0", tools="real", engine=engine)
    env.reset(seed=0)  # no prices: it plays
    with pytest.raises(ValueError, match="takes no prices="):
        env.reset(seed=0, options={"tool_prices": {env.unwrapped.source.tool_spec.names[0]: 0.5}})


def _check_task_options(env: gym.Env, server: str) -> None:
    import httpx

    names = env.unwrapped.source.tool_spec.names
    reasoner, ensemble = names[Tool.STANDARD_REASONER], names[Tool.ENSEMBLE_SOLVER]
    obs, _ = env.reset(seed=0, options={"tools_available": [n for n in names if n != reasoner],
                                        "tool_prices": {ensemble: 0.5}})
    assert obs["action_mask"][2 + Tool.STANDARD_REASONER] == 0 and obs["action_mask"][2 + Tool.ENSEMBLE_SOLVER] == 1
    before = httpx.get(f"{server}/stats").json()["requests"]
    obs, _, _, _, info = env.step(_act([0, 0, 0]))
    assert obs["last_status"][0] == Status.INVALID_TOOL and info["calls"] == []
    assert httpx.get(f"{server}/stats").json()["requests"] == before
    obs, _, _, _, info = env.step(_act([4, 2, 0]))  # the ensemble on "split": the episode's price, not the engine's
    res = info["results"][0]
    assert res.status is Status.OK and res.usd == 0.5 and res.extra["backend_usd"] != 0.5 and obs["budget"][2] == 0.5
    obs, _, term, _, info = env.step(_act(stop=1))
    termination_usd = env.unwrapped.source.engine.backend.termination_usd(env.unwrapped.source.engine.last_synthesis)
    assert term and info["trajectory"]["usd"] == pytest.approx(0.5 + termination_usd)
    assert info["trajectory"]["has_preference"] == 0


def test_default_verifier_matches_a_code_task_file_answer_as_the_expected_output():
    """A task file's code answer is the program's output: exact match, as the answer ids compare it (no crash for
    want of tests and a sandbox)."""
    from parasim.real.engine import default_verifier
    from parasim.real.tasks import parse_task

    task = parse_task({"id": "c0", "question": "What does x = 2; print(x * 3) print?", "answer": "6",
                       "domain": "code", "benchmark": "generic_code"})
    assert default_verifier("6", task) and default_verifier(" 6.", task)
    assert not default_verifier("7", task) and not default_verifier("", task)
    assert answer_kind(int(Domain.CODE), 0) is answer_kind(int(Domain.KNOWLEDGE), 0)


def test_the_router_signal_is_refused_with_real_tools(backend):
    with pytest.raises(ValueError, match="router_signal: simulated tools only"):
        _make(backend, router_signal="calibrated")
    with pytest.raises(ValueError, match="router_signal"):
        _make(backend, router_signal=2.0)
    assert "router" not in _make(backend, router_signal="off").observation_space.spaces
