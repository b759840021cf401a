"""ParaOrchText-v0: a well-behaved Gymnasium env, the same episodes as ParaOrch-v0, clear statuses for bad text."""
from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch_text import ParaOrchTextEnv, to_charset
from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView
from parasim.protocol.schema import MAX_PARALLEL, CallResult, Status, Tool, ToolCall
from parasim.tasks.suites import BENCHMARK_INDEX

EMPTY = len(Tool) - 1  # the structured env's empty-slot tool value (NUM_TOOLS)


def call_text(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def to_text(action: np.ndarray, models: tuple[str, ...]) -> str:
    """The manager text equivalent to a structured ParaOrch-v0 action (reviewers verify; target 1 carries)."""
    if action[0] == 1:
        return "Done. " + call_text("final_answer", answer="42")
    parts = []
    for k in range(MAX_PARALLEL):
        tool, model, target = (int(x) for x in action[1 + 3 * k: 4 + 3 * k])
        if tool == EMPTY:
            continue
        t = Tool(tool)
        if t in (Tool.PYTHON, Tool.SEARCH):
            args: dict[str, Any] = {"code": "print(1)"} if t is Tool.PYTHON else {"query": "q"}
        else:
            args = {"model": models[model], "subtask": "work on it"}
        if target == 1:
            args["context_from"] = 0
        parts.append(call_text(t.wire_name, **args))
    return "Plan.\n" + "\n".join(parts)


def scripted_actions(rng: np.random.Generator, nvec: np.ndarray, rounds: int) -> list[np.ndarray]:
    """Random structured rounds that the text protocol can express, then a stop."""
    out = []
    for _ in range(rounds):
        a = np.zeros(len(nvec), np.int64)
        for k in range(MAX_PARALLEL):
            tool = int(rng.integers(0, EMPTY + 1))
            target = 2 if tool == Tool.CRITICAL_REVIEWER else int(rng.integers(0, 2))
            a[1 + 3 * k: 4 + 3 * k] = (tool, int(rng.integers(0, nvec[2])), target)
        out.append(a)
    stop = np.zeros(len(nvec), np.int64)
    stop[0] = 1
    stop[1::3] = EMPTY
    return out + [stop]


def test_check_env_passes() -> None:
    check_env(gym.make("ParaOrchText-v0").unwrapped, skip_render_check=True)
    check_env(gym.make("ParaOrchText-v0", pool="paramanager_mono", max_parallel=2, render_mode="ansi").unwrapped)


@pytest.mark.parametrize(("seed", "options"), [(0, None), (1, None), (7, None),
                                               (3, {"task_index": 2, "task_seed": 9}), (4, {"task_seed": 5})])
def test_same_episodes_as_structured_env(seed: int, options: dict[str, int] | None) -> None:
    structured = gym.make("ParaOrch-v0").unwrapped
    text_env = gym.make("ParaOrchText-v0").unwrapped
    models = text_env.model_names
    rng = np.random.default_rng(seed)
    actions = scripted_actions(rng, structured.action_space.nvec, rounds=int(rng.integers(1, 6)))
    structured.reset(seed=seed, options=options)
    text_env.reset(seed=seed, options=options)
    for action in actions:
        obs_s, reward_s, term_s, _, info_s = structured.step(action)
        _, reward_t, term_t, _, info_t = text_env.step(to_text(action, models))
        assert term_s == term_t
        if not term_t:
            statuses = [r.status for r in info_t["results"]]
            assert statuses == [Status(s) for s in obs_s["last_status"] if s < len(Status)]
    assert reward_t == pytest.approx(reward_s)
    for key, value in info_s["trajectory"].items():
        np.testing.assert_allclose(info_t["trajectory"][key], value, err_msg=key)
    assert (info_t["task_index"], info_t["benchmark"]) == (info_s["task_index"], info_s["benchmark"])
    if options and "task_index" in options:
        assert info_t["task_index"] == options["task_index"]


def test_task_options_show_every_lane_the_same_question_and_option_letters() -> None:
    """GRPO groups: equal task_index / task_seed under different tool seeds give the same question with the same
    answer-label permutation (drawn from the task's stream, not the lane's), while the tool outcomes stay the
    lanes' own; other task seeds permute the labels differently."""
    lanes = [ParaOrchTextEnv() for _ in range(3)]
    np.testing.assert_allclose(lanes[0].task_weights(), gym.make("ParaOrch-v0").unwrapped.task_weights())
    multiple_choice = []
    for task_index in range(lanes[0].num_tasks):
        options = {"task_index": np.int64(task_index), "task_seed": 100 + task_index}
        views = [env.reset(seed=10 + k, options=options)[1]["task"] for k, env in enumerate(lanes)]
        assert all(v == views[0] for v in views)
        assert all(env.labels == lanes[0].labels for env in lanes)
        if views[0].options:
            multiple_choice.append(task_index)
    assert multiple_choice
    row = multiple_choice[0]
    outputs = set()
    for k, env in enumerate(lanes):
        env.reset(seed=10 + k, options={"task_index": row, "task_seed": 1})
        text = "".join(call_text("ensemble_solver", model=m, subtask="solve") for m in env.model_names)
        *_, info = env.step(text)
        outputs.add(tuple((r.status, r.output) for r in info["results"]))
        *_, info = env.step(call_text("final_answer", answer="A"))
        assert info["task_index"] == row
    assert len(outputs) > 1  # the tool calls draw from each lane's own stream
    permutations = set()
    for task_seed in range(8):
        lanes[0].reset(seed=0, options={"task_index": row, "task_seed": task_seed})
        permutations.add(tuple(lanes[0].labels))
    assert len(permutations) > 1


def test_same_seed_same_transcript() -> None:
    def run(seed: int) -> list[str]:
        env = ParaOrchTextEnv()
        obs, _ = env.reset(seed=seed)
        models = env.model_names
        out = [obs]
        for text in (call_text("standard_reasoner", model=models[0], subtask="a")
                     + call_text("ensemble_solver", model=models[2], subtask="b"),
                     call_text("critical_reviewer", model=models[1], subtask="check"),
                     call_text("final_answer", answer="x")):
            obs, reward, *_ = env.step(text)
            out += [obs, str(reward)]
        return out

    assert run(11) == run(11)
    assert run(11) != run(12)


@pytest.mark.parametrize(("text", "needle"), [
    ("", "no <tool_call> block"),
    ("I think the answer is 7.", "no <tool_call> block"),
    ("<tool_call>{'name': 'standard_reasoner', 'arguments': {'subtask': 'x'", "missing required argument 'model'"),
    (call_text("teleport", x=1), "unknown tool 'teleport'"),
    (call_text("standard_reasoner", model="GPT-9", subtask="x"), "unknown model 'GPT-9'"),
    ("\x00\ud800\U0001F600<tool_call>", "no JSON object"),
])
def test_malformed_text_gets_format_status_and_penalty(text: str, needle: str) -> None:
    env = ParaOrchTextEnv()
    env.reset(seed=3)
    obs, reward, terminated, _, _ = env.step(text)
    assert not terminated and reward == 0.0
    assert needle in obs and env.observation_space.contains(obs)
    assert re.search(r'"status": "(FORMAT_ERR|INVALID_TOOL)"', obs)
    assert "Rounds left: 11." in obs
    *_, final = env.step(call_text("final_answer", answer="x"))
    assert final["trajectory"]["format_violations"] == 1 and final["reward_components"]["protocol"] < 0


def test_extra_parallel_calls_are_rejected() -> None:
    env = ParaOrchTextEnv(max_parallel=2)
    env.reset(seed=4)
    text = "".join(call_text("search", query=f"q{i}") for i in range(4))
    obs, *_, info = env.step(text)
    assert len(info["results"]) == 2
    assert obs.count("more than max_parallel=2 calls") == 2 and obs.count('"status": "INVALID_TOOL"') == 2


def test_round_limit_ends_the_episode() -> None:
    env = ParaOrchTextEnv(max_rounds=2)
    env.reset(seed=5)
    assert not env.step(call_text("search", query="a"))[2]
    *_, terminated, _, info = env.step(call_text("search", query="b"))
    assert terminated and info["trajectory"]["ended_with_final"] == 0 and info["trajectory"]["rounds"] == 2
    with pytest.raises(RuntimeError, match="reset"):
        env.step("")


def test_answer_labels_do_not_reveal_the_gold_answer() -> None:
    env = ParaOrchTextEnv(suite="AMC")
    gold_labels = set()
    for seed in range(20):
        env.reset(seed=seed)
        *_, info = env.step(call_text("standard_reasoner", model=env.model_names[0], subtask="solve"))
        res = info["results"][0]
        if res.status is Status.OK and res.extra["answer_id"] == 0:
            gold_labels.add(res.output)
    assert len(gold_labels) > 3


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=200), min_size=1, max_size=4))
def test_any_text_never_crashes(turns: list[str]) -> None:
    env = ParaOrchTextEnv(max_rounds=3)
    env.reset(seed=0)
    for text in turns:
        obs, reward, terminated, _, _ = env.step(text)
        assert env.observation_space.contains(obs) and np.isfinite(reward)
        if terminated:
            break


class _FakeEngine(EpisodeEngineBase):
    """A minimal real-tools engine: every call answers "7"; shows the env adds violations and manager tokens."""

    model_names = ("m1",)

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        self.calls = []
        return TaskView("t1", "What is 3 + 4?", 0)

    def run_round(self, calls: list[ToolCall], **_: Any) -> list[CallResult]:
        self.calls += calls
        return [CallResult(Status.OK, output="7", tokens_out=10, cost_units=1.0, latency_s=0.5) for _ in calls]

    def finish(self, manager_answer: str | None = None, lead: str | None = None) -> EpisodeOutcome:
        return EpisodeOutcome(answer=manager_answer or "", correct=True)


def test_real_tools_need_an_engine() -> None:
    with pytest.raises(NotImplementedError, match="engine="):
        gym.make("ParaOrchText-v0", tools="real")
    with pytest.raises(ValueError, match="tools"):
        ParaOrchTextEnv(tools="cloud")
    with pytest.raises(TypeError, match="engine: object has no method 'reset'; an EpisodeEngine needs"):
        ParaOrchTextEnv(tools="real", engine=object())
    with pytest.raises(TypeError, match="engine: NoModels has no attribute 'model_names'"):
        gym.make("ParaOrch-v0", tools="real", engine=type("NoModels", (EpisodeEngineBase,), {
            "reset": _FakeEngine.reset, "run_round": _FakeEngine.run_round, "finish": _FakeEngine.finish})())
    env = ParaOrchTextEnv(tools="real", engine=_FakeEngine())
    obs, _ = env.reset()
    assert "What is 3 + 4?" in obs and "m1" in obs
    env.step("<tool_call>{bad</tool_call>" + call_text("standard_reasoner", model="m1", subtask="add"))
    *_, info = env.step(call_text("final_answer", answer="7"))
    assert info["answer"] == "7" and info["final_answer_text"] == "7"
    assert (info["task_index"], info["benchmark"]) == (-1, BENCHMARK_INDEX["generic_math"])  # no task list
    assert env.num_tasks is None
    assert info["trajectory"]["format_violations"] == 1 and info["trajectory"]["tokens"] > 10.0


def test_to_charset_replaces_only_unrepresentable_characters() -> None:
    assert to_charset("héllo\n\tok") == "héllo\n\tok"
    assert to_charset("a\x00b\U0001F600") == "a\ufffdb\ufffd"


def test_standard_wrappers_and_sync_vector_env() -> None:
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("ParaOrchText-v0", max_rounds=2))
    env.reset(seed=1)
    env.step(call_text("search", query="x"))
    *_, terminated, _, info = env.step(call_text("search", query="y"))
    assert terminated and info["episode"]["l"] == 2
    venv = gym.make_vec("ParaOrchText-v0", num_envs=2, vectorization_mode="sync", max_rounds=1)
    obs, _ = venv.reset(seed=3)
    assert len(obs) == 2 and all(isinstance(o, str) for o in obs)
    _, rewards, terminated, _, _ = venv.step((call_text("search", query="x"), "junk"))
    assert terminated.all() and rewards.shape == (2,)
    assert "BMP" in repr(venv.single_observation_space)


def test_each_observation_extends_the_previous_one_by_the_turn() -> None:
    """Trainers tokenize the conversation incrementally: obs_{t+1} = obs_t + turn + "<|im_end|>\\n" + feedback."""
    env = ParaOrchTextEnv()
    obs, _ = env.reset(seed=2)
    for turn in (call_text("search", query="x") + " and some prose", "not a call at all"):
        nxt, *_ = env.step(turn)
        assert nxt.startswith(obs + turn + "<|im_end|>\n<|im_start|>user\n<tool_response>")
        assert nxt.endswith("<|im_start|>assistant\n")
        obs = nxt


def test_rejected_calls_give_the_rules_reason():
    """A reviewer with nothing to review, a carry from no earlier call, and a spent budget: the statuses and the
    reasons come from the compiled rules' ``slot_rule`` (no second copy of the checks in the simulator engine)."""
    env = ParaOrchTextEnv(token_budget=1.0)
    env.reset(seed=0)
    m = env.model_names[0]
    _, _, _, _, info = env.step(call_text("critical_reviewer", model=m, subtask="check")
                                + call_text("standard_reasoner", model=m, subtask="go", context_from=5))
    first, second = info["results"]
    assert first.status is Status.INVALID_TOOL and "needs an answer to review" in first.detail
    assert second.status is Status.FORMAT_ERR and "names no earlier call" in second.detail
    _, _, _, _, info = env.step(call_text("standard_reasoner", model=m, subtask="again"))
    assert info["results"][0].status is Status.BUDGET_EXCEEDED
    assert info["results"][0].detail == "the token budget is spent"


def test_harness_option_caps_the_simulated_calls() -> None:
    """``harness`` reaches the text env's simulator: under a 1-token cap every agent call is TRUNCATED (and says so
    in the feedback); real tools refuse it (their cap is the endpoint map's)."""
    env = ParaOrchTextEnv(suite="AIME25", harness={"max_output_tokens": 1})
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(call_text("standard_reasoner", model=env.model_names[0], subtask="solve"))
    assert "TRUNCATED" in obs
    *_, info = env.step(call_text("final_answer", answer="1"))
    assert info["trajectory"]["format_violations"] == 0
    with pytest.raises(ValueError, match="harness: simulated tools only"):
        ParaOrchTextEnv(tools="real", engine=_FakeEngine(), harness={"max_output_tokens": 8})
    with pytest.raises(ValueError, match="harness: simulated tools only"):  # and the structured env alike
        gym.make("ParaOrch-v0", tools="real", engine=_FakeEngine(), harness={"max_output_tokens": 8})


def test_every_step_carries_the_messages_and_rgb_array_draws_the_core_board() -> None:
    """``info["messages"]`` at every step (not only at reset and the end), and ``render_mode="rgb_array"``: the board
    of the same episode as ParaOrch-v0 draws it."""
    env = gym.make("ParaOrchText-v0", render_mode="rgb_array", max_rounds=3).unwrapped
    obs, info = env.reset(seed=4)
    model = env.model_names[0]
    turn = ('<tool_call>{"name": "standard_reasoner", "arguments": {"model": "' + model
            + '", "subtask": "solve"}}</tool_call>')
    obs, _, terminated, _, info = env.step(turn)
    assert not terminated and info["messages"] == env.messages and info["messages"][-2]["content"] == turn
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8 and frame.std() > 0
    assert np.array_equal(frame, env.core.render())
    with pytest.raises(ValueError, match="render_mode: expected None, 'ansi' or 'rgb_array'"):
        ParaOrchTextEnv(render_mode="human")
