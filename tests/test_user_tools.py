"""Tools as data, end to end: a user's ``verifier`` agent tool (reviewer behaviour) and a user's basic tool, added
in a tool spec file that a pool references, run in sim mode (the compiled simulator and its envs) and in real mode
(the scripted OpenAI-compatible server for the agent tool, the user's Python function for the basic tool)."""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from test_real_backend import _control, _emap, _exact, _task
from user_tools import EXPLODER, SLEEPER, UNIT_CONVERTER, VERIFIER, pool_with

import parasim  # noqa: F401  (registers the envs)
from parasim import RewardConfig, TrajectoryBatch, compute_rewards
from parasim.pools.pool import load_pool
from parasim.protocol.parser import parse_tool_calls
from parasim.protocol.schema import NUM_STATUSES, Status, Tool, ToolCall
from parasim.real.backend import BackendConfig, CallInput, RealToolBackend
from parasim.real.engine import RealEpisodeEngine
from parasim.tools.spec import SpecTool

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]
VERIFIER_T, CONVERTER_T, EMPTY_T = 7, 8, 9  # the user tools' indices; T = 9 is the empty slot
NO_CALL = NUM_STATUSES


@pytest.fixture(scope="module")
def pool_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pool_with(tmp_path_factory.mktemp("user_tools"), VERIFIER, UNIT_CONVERTER)


def _act(*slots: tuple[int, int, int], stop: int = 0, k: int = 4) -> np.ndarray:
    rows = list(slots) + [(EMPTY_T, 0, 0)] * (k - len(slots))
    return np.array([stop] + [x for s in rows for x in s], np.int64)


def _reward(num_tools: int = 9) -> RewardConfig:
    return RewardConfig(formula="toolorchestra", num_tools=num_tools, pref_tools=(0.1,) * num_tools)


def test_sim_spaces_mask_and_rules_use_the_pools_tools(pool_path: Path) -> None:
    env = gym.make("ParaOrch-v0", pool=str(pool_path))
    nvec = env.action_space.nvec
    assert nvec[1] == 10 and env.observation_space["tool_counts"].shape == (9,)
    obs, _ = env.reset(seed=0)
    mask = obs["action_mask"]
    # no lead yet: neither reviewer (critical_reviewer, verifier) may run; the user's basic tool may
    assert mask[2 + int(Tool.CRITICAL_REVIEWER)] == 0 and mask[2 + VERIFIER_T] == 0
    assert mask[2 + CONVERTER_T] == 1 and mask[2 + EMPTY_T] == 1
    obs, *_ = env.step(_act((0, 0, 0), (CONVERTER_T, 2, 0), (VERIFIER_T, 0, 2), (10, 0, 0)))
    # verifier with nothing to review, tool 10 outside the spec: INVALID_TOOL; the model of a basic tool is ignored
    assert obs["last_status"].tolist()[2:] == [Status.INVALID_TOOL] * 2
    assert obs["tool_counts"][CONVERTER_T] == 1 and obs["tool_counts"][VERIFIER_T] == 0
    if obs["evidence"][1] > 0:  # a lead exists: the reviewers' mask entries open, in every allowed slot
        assert all(obs["action_mask"][2 + j * 16 + t] == 1 for j in range(4) for t in (1, VERIFIER_T))
    obs, *_ = env.step(_act((VERIFIER_T, 0, 0), (0, 0, 2)))  # reviewer without target 2, target 2 on a solver
    assert obs["last_status"].tolist()[:2] == [Status.FORMAT_ERR] * 2


def _episode(pool: str, reviewer: int, seed: int) -> tuple[dict, list[dict]]:
    env = gym.make("ParaOrch-v0", pool=pool, reward=_reward())
    env.reset(seed=seed)
    env.step(_act((0, 0, 0), (0, 1, 0), (0, 2, 0), (CONVERTER_T, 0, 0)))
    obs, *_ = env.step(_act((reviewer, 0, 2), (reviewer, 1, 2), (reviewer, 2, 2), (CONVERTER_T, 0, 0)))
    rnd = env.unwrapped.source.sim.last_round(0)
    obs2, reward, term, _, info = env.step(_act(stop=1))
    assert term
    return {"obs": obs, "reward": reward, "info": info}, rnd


def test_sim_episode_verifier_votes_like_the_critical_reviewer(pool_path: Path) -> None:
    """Same seed, same calls, the verifier in place of the critical_reviewer: the same verdicts enter the vote
    (same model's sensitivity / specificity and log-likelihood ratios, same random draws), counted in column 7."""
    for seed in range(4):
        ver, ver_round = _episode(str(pool_path), VERIFIER_T, seed)
        crit, crit_round = _episode(str(pool_path), int(Tool.CRITICAL_REVIEWER), seed)
        kinds = [r["kind"] for r in ver_round[:3]]
        assert kinds == [r["kind"] for r in crit_round[:3]] and set(kinds) <= {"flag", "confirm", None}
        assert any(k is not None for k in kinds)
        cand_v, cand_c = ver["obs"]["candidates"], crit["obs"]["candidates"]
        np.testing.assert_array_equal(cand_v, cand_c)  # flags, confirms and the scores they move
        assert cand_v[:, 3].sum() + cand_v[:, 4].sum() == sum(k is not None for k in kinds)
        ran = sum(r["status"] <= Status.TIMEOUT for r in ver_round[:3])
        traj = ver["info"]["trajectory"]
        assert traj["tool_counts"].shape == (9,) and traj["tool_counts"][VERIFIER_T] == ran
        assert traj["tool_counts"][CONVERTER_T] == 2 and traj["tool_counts"][1] == 0
        assert crit["info"]["trajectory"]["tool_counts"][1] == ran
        # the env's reward is compute_rewards of the row under the 9-tool config (pref_tools sized 9)
        batch = TrajectoryBatch.from_records([traj], num_tools=9)
        assert ver["reward"] == pytest.approx(float(compute_rewards(batch, _reward()).total[0]))


def test_sim_basic_user_tool_runs_on_the_managers_row(pool_path: Path) -> None:
    """The basic solver answers with the manager's skill and its own output distribution: its calls give answers,
    with its spec's cost units, whatever model index the action holds."""
    env = gym.make("ParaOrch-v0", pool=str(pool_path), max_parallel=2)
    env.reset(seed=3)
    obs, *_ = env.step(np.array([0, CONVERTER_T, 0, 0, CONVERTER_T, 1, 0]))
    rnd = env.unwrapped.source.sim.last_round(0)
    assert [r["status"] for r in rnd] == [Status.OK] * 2 and all(r["kind"] == "answer" for r in rnd)
    assert [r["cost_units"] for r in rnd] == [0.1, 0.1] and obs["tool_counts"][CONVERTER_T] == 2
    board = gym.make("ParaOrch-v0", pool=str(pool_path), max_parallel=2, render_mode="ansi")
    board.reset(seed=3)
    board.step(np.array([0, CONVERTER_T, 0, 0, VERIFIER_T, 0, 0]))
    lines = board.render().splitlines()
    assert any("unit_converter" in ln and "OK" in ln for ln in lines)
    assert any("verifier" in ln and "INVALID_TOOL" in ln for ln in lines)


def test_vector_env_lane_is_the_single_env_with_user_tools(pool_path: Path) -> None:
    vec = gym.make_vec("ParaOrch-v0", num_envs=2, vectorization_mode="vector_entry_point", pool=str(pool_path))
    single = gym.make("ParaOrch-v0", pool=str(pool_path))
    obs_v, _ = vec.reset(seed=5)
    obs_s, _ = single.reset(seed=6)
    act = _act((0, 0, 0), (CONVERTER_T, 0, 0))
    for _ in range(2):
        obs_v, *_ = vec.step(np.stack([act, act]))
        obs_s, *_ = single.step(act)
    for key in obs_s:
        np.testing.assert_array_equal(obs_v[key][1], obs_s[key])


def test_text_env_lists_parses_and_runs_the_user_tools(pool_path: Path) -> None:
    env = gym.make("ParaOrchText-v0", pool=str(pool_path))
    text, _ = env.reset(seed=0)
    assert '"name": "verifier"' in text and '"name": "unit_converter"' in text
    turn = '<tool_call>{"name": "unit_converter", "arguments": {"quantity": "3 mi in km"}}</tool_call>'
    text, _, _, _, info = env.step(turn)
    call = info["parsed"].calls[0]
    assert isinstance(call.tool, SpecTool) and int(call.tool) == CONVERTER_T and call.subtask == "3 mi in km"
    assert info["results"][0].status is Status.OK and '"tool": "unit_converter"' in text
    model = env.unwrapped.model_names[0]
    turn = f'<tool_call>{{"name": "verifier", "arguments": {{"model": "{model}", "subtask": "check"}}}}</tool_call>'
    _, _, _, _, info = env.step(turn)
    assert info["results"][0].status is Status.OK and info["results"][0].output.startswith("review: ")


def test_parser_reads_a_specs_tools_and_keeps_the_default_values() -> None:
    spec = load_pool(pool_with_tmp()).tools
    parsed = parse_tool_calls('<tool_call>{"name": "verifier", "arguments": {"model": "m", "subtask": "x"}}'
                              '</tool_call><tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>',
                              ["m"], spec)
    assert [c.tool.wire_name for c in parsed.calls] == ["verifier", "python"]
    assert parsed.calls[1].tool is Tool.PYTHON and parsed.calls[0].tool.is_agent
    unknown = parse_tool_calls('<tool_call>{"name": "verifier", "arguments": {"model": "m"}}</tool_call>', ["m"])
    assert unknown.errors[0].status is Status.INVALID_TOOL  # the default spec has no verifier


def pool_with_tmp() -> Path:
    import tempfile

    return pool_with(Path(tempfile.mkdtemp()), VERIFIER, UNIT_CONVERTER)


# ---------------------------------------------------------------------------------------------------- real mode
@pytest.fixture
def user_backend(server: str, tmp_path: Path):
    _control(server)
    pool = pool_with(tmp_path, VERIFIER, UNIT_CONVERTER, EXPLODER, SLEEPER)
    with RealToolBackend(_emap(server), pool, config=BackendConfig(user_tool_timeout_s=0.2)) as b:
        yield b


def test_real_backend_runs_user_tools_with_statuses(user_backend: RealToolBackend) -> None:
    spec = user_backend.tools
    calls = [ToolCall(spec.call_tool(spec.index(name)), "good" if name == "verifier" else "", arg)
             for name, arg in (("unit_converter", "3 mi in km"), ("exploder", "x"), ("sleeper", "x"),
                               ("verifier", "Verify this answer: 42"), ("unit_converter", "three miles"))]
    results = user_backend.run_round(calls, [CallInput("What is six times seven?")] * len(calls))
    ok, boom, hung, verdict, bad = results
    assert ok.status is Status.OK and ok.output == "4.8280" and ok.extra["answer"] == "4.8280"
    assert ok.cost_units == 0.1 and ok.tokens_out > 0
    assert boom.status is Status.EXEC_ERR and "exploder raised RuntimeError: cannot handle 'x'" in boom.detail
    assert hung.status is Status.TIMEOUT and "within 0.2 s" in hung.detail and hung.latency_s == 0.2
    assert verdict.status is Status.OK and verdict.extra["flagged"] is False  # the server's "Verdict: CORRECT"
    assert bad.status is Status.EXEC_ERR and "ValueError" in bad.detail


def test_real_env_episode_with_user_tools(server: str, tmp_path: Path) -> None:
    _control(server)
    pool = pool_with(tmp_path, VERIFIER, UNIT_CONVERTER)
    task = _task(question="3 mi in km", answer="4.8280")
    with RealToolBackend(_emap(server), pool) as backend:
        engine = RealEpisodeEngine(backend, [task], verifier=_exact, seed=0)
        env = gym.make("ParaOrch-v0", tools="real", engine=engine, pool=str(pool), reward=_reward())
        assert env.observation_space == gym.make("ParaOrch-v0", pool=str(pool)).observation_space
        obs, _ = env.reset(seed=0)
        obs, _, term, _, info = env.step(_act((CONVERTER_T, 0, 0)))
        assert not term and info["results"][0].status is Status.OK and info["calls"][0].subtask == "3 mi in km"
        assert obs["candidates"][0, :3].tolist()[::2] == [1, 1] and obs["action_mask"][2 + VERIFIER_T] == 1
        obs, _, _, _, info = env.step(_act((VERIFIER_T, 0, 2)))  # the server's verifier confirms the lead
        assert info["calls"][0].subtask == "Verify this answer: 4.8280" and info["results"][0].extra["flagged"] is False
        assert obs["candidates"][0, 4] == 1 and obs["tool_counts"].tolist() == [0] * 7 + [1, 1]
        obs, reward, term, _, info = env.step(_act(stop=1))
        assert term  # the scripted termination model answers as its model does (42): the outcome is its verdict
        traj = info["trajectory"]
        assert traj["tool_counts"].tolist() == [0] * 7 + [1, 1]
        batch = TrajectoryBatch.from_records([traj], num_tools=9)
        assert reward == pytest.approx(float(compute_rewards(batch, _reward()).total[0]))
