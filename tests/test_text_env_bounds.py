"""ParaOrchText-v0's limits: no manager text and no tool output grows the observation or info["messages"] without bound,
the system prompt and the question are always shown, and a non-str action is a TypeError."""
from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import parasim  # noqa: F401  (registers the envs)
from envs.paraorch_text import MAX_ERRORS_SHOWN, ParaOrchTextEnv, render_chatml
from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView
from parasim.protocol.schema import CallResult, Status, ToolCall

# Tight limits, so that a few turns reach every cut: the smallest max_feedback_chars for this max_result_chars and
# the smallest max_obs_chars for these.
TIGHT = {"max_turn_chars": 4_096, "max_result_chars": 256, "max_feedback_chars": 8 * 256 + 4_096,
         "max_obs_chars": 4_096 + 8 * 256 + 4_096 + 32_768}
STATUS_NAMES = set(Status.__members__)


def call_text(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def many_calls(n: int) -> str:
    """One turn of ``n`` search calls (10,000 of them are 739 KB)."""
    return "".join(call_text("search", query=f"q{i}") for i in range(n))


def head(env: ParaOrchTextEnv, question: str) -> str:
    """The rendered system prompt and question every observation starts with."""
    return f"<|im_start|>system\n{env.system_prompt}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"


def check_bounded(env: ParaOrchTextEnv, obs: str, question: str) -> None:
    """The observation renders exactly env.messages, fits its space, starts with the head and ends with the prompt."""
    assert len(obs) <= env.max_obs_chars and env.observation_space.contains(obs)
    assert obs == render_chatml(env.messages)
    assert obs.startswith(head(env, question)) and obs.endswith("<|im_start|>assistant\n")
    for message in env.messages[2:]:
        if message["role"] == "user" and message["content"].startswith("<tool_response>"):
            assert len(message["content"]) <= env.max_feedback_chars


class _Engine(EpisodeEngineBase):
    """A real-tools engine whose question, model ids and call outputs the test chooses."""

    def __init__(self, question: str = "What is 3 + 4?", models: tuple[str, ...] = ("m1",), output: str = "7",
                 detail: str = "") -> None:
        self.question, self.model_names, self.output, self.detail = question, models, output, detail
        self.calls: list[ToolCall] = []

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> TaskView:
        self.calls = []
        return TaskView("t1", self.question, 0)

    def run_round(self, calls: list[ToolCall], **_: Any) -> list[CallResult]:
        self.calls += calls
        return [CallResult(Status.EXEC_ERR, output=self.output, detail=self.detail) for _ in calls]

    def finish(self, manager_answer: str | None = None, lead: str | None = None) -> EpisodeOutcome:
        return EpisodeOutcome(answer=manager_answer or "", correct=True)


@pytest.mark.timeout(300)  # a hang guard on a loaded machine; the test takes seconds
def test_a_ten_thousand_call_turn_gets_bounded_feedback_with_a_summary_line() -> None:
    env = ParaOrchTextEnv()
    obs, info = env.reset(seed=0)
    question = info["messages"][1]["content"]
    feedback_of = {}
    for n in (100, 10_000):
        env.reset(seed=0)
        text = many_calls(n)
        obs, _, terminated, _, info = env.step(text)
        assert not terminated and len(info["results"]) == env.max_parallel
        feedback_of[n] = env.messages[-1]["content"]
        check_bounded(env, obs, question)
    assert len(text) > 700_000
    feedback = feedback_of[10_000]
    assert f"{10_000 - 4 - MAX_ERRORS_SHOWN} further calls ignored (INVALID_TOOL, not run): at most max_parallel=4 " \
           "calls per round." in feedback
    assert feedback.count('"status": "INVALID_TOOL"') == MAX_ERRORS_SHOWN
    assert abs(len(feedback) - len(feedback_of[100])) < 10  # the ignored calls cost one line, not one response each
    shown_turn = env.messages[-2]["content"]
    assert shown_turn == text[:env.max_turn_chars] + f"[... {len(text) - env.max_turn_chars} more characters truncated]"
    assert len(obs) < len(head(env, question)) + env.max_turn_chars + 2 * len(feedback)


@pytest.mark.timeout(300)  # a hang guard on a loaded machine; the test takes seconds
@pytest.mark.parametrize("limits", [{}, TIGHT], ids=["defaults", "tight"])
def test_twelve_such_turns_keep_the_system_prompt_and_the_question(limits: dict[str, int]) -> None:
    env = ParaOrchTextEnv(max_rounds=12, **limits)
    obs, info = env.reset(seed=1)
    question = info["messages"][1]["content"]
    text = many_calls(10_000)
    for turn in range(12):
        obs, _, terminated, _, info = env.step(text)
        check_bounded(env, obs, question)
        assert terminated == (turn == 11)
    assert info["messages"] == env.messages and render_chatml(info["messages"]) == obs
    assert sum(len(m["content"]) for m in info["messages"]) <= env.max_obs_chars
    assert env.messages[-1]["content"].endswith("Rounds left: 0.")  # the latest tool responses, verbatim
    if not limits:
        return
    marker = env.messages[2]["content"]
    dropped = int(re.fullmatch(r"\[(\d+) earlier turns not shown: the observation is limited to "
                               rf"max_obs_chars={env.max_obs_chars} characters and keeps .*\]", marker)[1])
    kept = env.messages[3:]
    assert [m["role"] for m in kept] == ["assistant", "user"] * (len(kept) // 2) and dropped + len(kept) // 2 == 12
    assert kept[0]["content"].startswith("<tool_call>")  # a whole turn after the marker, not the middle of one
    elided = [m["content"] for m in kept if m["content"].startswith("[tool responses of round")]
    assert elided and f"max_feedback_chars={env.max_feedback_chars}" in elided[0]


@pytest.mark.parametrize("action", [None, b"<tool_call>{}</tool_call>", 7, ["text"], np.array(["text"])])
def test_a_non_str_action_raises_type_error_and_uses_no_round(action: Any) -> None:
    env = ParaOrchTextEnv()
    env.reset(seed=2)
    assert not env.action_space.contains(action)
    with pytest.raises(TypeError, match=rf"action: expected a str .*, got {type(action).__name__}$"):
        env.step(action)
    obs, *_ = env.step(call_text("search", query="x"))
    assert "Rounds left: 11." in obs


def test_an_over_long_str_action_is_still_parsed_in_full() -> None:
    env = ParaOrchTextEnv()
    env.reset(seed=2)
    text = "x" * 70_000 + call_text("search", query="late")
    assert not env.action_space.contains(text)
    obs, *_, info = env.step(text)
    assert len(info["results"]) == 1 and "more characters truncated]" in obs


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"max_turn_chars": 0}, ValueError, r"max_turn_chars: expected an int in \[1, 65536\], got 0"),
    ({"max_turn_chars": 65_537}, ValueError, r"max_turn_chars: expected an int in \[1, 65536\], got 65537"),
    ({"max_turn_chars": 100.0}, TypeError, r"max_turn_chars: expected an int in \[1, 65536\], got 100.0 \(float\)"),
    ({"max_result_chars": True}, TypeError, r"max_result_chars: expected an int in \[64, 65536\], got True \(bool\)"),
    ({"max_result_chars": 63}, ValueError, r"max_result_chars: expected an int in \[64, 65536\], got 63"),
    ({"max_feedback_chars": 36_863}, ValueError,
     r"max_feedback_chars: expected an int in \[36864, 1000000\] \(the low end is 8 \* max_result_chars \+ 4096.*"
     r"max_result_chars=4096\), got 36863"),
    ({"max_feedback_chars": 1_000_001}, ValueError, r"max_feedback_chars: .*\[36864, 1000000\].*got 1000001"),
    ({"max_obs_chars": 311_295}, ValueError,
     r"max_obs_chars: expected an int in \[311296, 2000000\] \(the low end is max_turn_chars \+ max_feedback_chars "
     r"\+ 32768.*max_turn_chars=16384, max_feedback_chars=262144\), got 311295"),
    ({"max_obs_chars": 2_000_001}, ValueError, r"max_obs_chars: .*\[311296, 2000000\].*got 2000001"),
])
def test_limit_options_are_range_checked(options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ParaOrchTextEnv(**options)


def test_tight_limits_pass_check_env() -> None:
    env = ParaOrchTextEnv(**TIGHT)
    check_env(env, skip_render_check=True)
    assert env.observation_space.max_length == TIGHT["max_obs_chars"]


def test_each_call_text_is_cut_and_responses_fit_one_turn() -> None:
    """Outputs and reasons of a megabyte (quotes and backslashes, which JSON escapes double) are cut with a
    marker; the responses that do not fit max_feedback_chars are counted, run calls' results first."""
    hostile = '"\\' * 500_000
    limits = {"max_result_chars": 1_000, "max_feedback_chars": 12_096, "max_obs_chars": 16_384 + 12_096 + 32_768}
    env = ParaOrchTextEnv(tools="real", engine=_Engine(output=hostile, detail=hostile), **limits)
    obs, info = env.reset()
    question = info["messages"][1]["content"]
    text = "".join(call_text("standard_reasoner", model="m1", subtask=f"s{i}") for i in range(6))
    obs, *_, info = env.step(text)
    check_bounded(env, obs, question)
    assert len(info["results"]) == 4  # every run call still reports its status in info
    feedback = env.messages[-1]["content"]
    shown = [json.loads(x) for x in re.findall(r"<tool_response>\n(.*)\n</tool_response>", feedback)]
    assert shown and all(r["status"] == "EXEC_ERR" for r in shown)  # run results before the rejected calls
    for response in shown:
        for key in ("output", "reason"):
            assert response[key] == hostile[:1_000] + "[... 999000 more characters truncated]"
    assert f"({4 + 2 - len(shown)} more tool responses not shown: one turn's feedback is limited to " \
           "max_feedback_chars=12096 characters)" in feedback


def test_a_huge_question_is_cut_to_fit_beside_the_latest_turn() -> None:
    question = "Q" * 3_000_000
    env = ParaOrchTextEnv(tools="real", engine=_Engine(question=question))
    obs, info = env.reset()
    shown = info["messages"][1]["content"]
    assert shown.startswith("Q" * 1_000_000) and shown.endswith("more characters truncated]")
    for _ in range(3):
        obs, *_ = env.step(many_calls(100))
        check_bounded(env, obs, shown)


def test_reset_rejects_an_obs_limit_that_leaves_no_room_for_the_question() -> None:
    # the pool's most models (16, the action's model dimension), with ids long enough for a 32k system prompt
    models = tuple(f"model-{i:02d}-" + "with-a-long-id-" * 160 for i in range(16))
    env = ParaOrchTextEnv(tools="real", engine=_Engine(models=models), max_obs_chars=16_384 + 262_144 + 32_768)
    assert len(env.system_prompt) > 32_768
    message = (r"max_obs_chars: 311296 leaves -?\d+ characters for the question beside the system prompt "
               r"\(\d+ characters\).*expected max_obs_chars in \[\d+, 2000000\]")
    with pytest.raises(ValueError, match=message):
        env.reset()


@pytest.mark.timeout(300)  # a hang guard on a loaded machine; the test takes seconds
def test_every_hostile_corpus_text_is_a_bounded_turn() -> None:
    try:
        from hostile_corpus import hostile_texts
    except ModuleNotFoundError as err:
        if err.name != "hostile_corpus":
            raise
        pytest.skip("tests/hostile_corpus.py (hostile_texts) is not in this checkout yet")
    env = ParaOrchTextEnv(max_rounds=4, **TIGHT)
    episode = 0
    obs, info = env.reset(seed=episode)
    question = info["messages"][1]["content"]
    corpus = hostile_texts(seed=0)
    assert corpus
    for name, text in corpus:
        obs, reward, terminated, truncated, info = env.step(text)
        check_bounded(env, obs, question)
        assert np.isfinite(reward), name
        assert all(isinstance(r.status, Status) for r in info.get("results", [])), name
        feedback = env.messages[-1]["content"] if env.messages[-1]["role"] == "user" else ""
        assert set(re.findall(r'"status": "([A-Z_]+)"', feedback)) <= STATUS_NAMES, name
        if terminated or truncated:
            episode += 1
            obs, info = env.reset(seed=episode)
            question = info["messages"][1]["content"]
