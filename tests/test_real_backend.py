"""The real-tools backend against a real OpenAI-compatible server process on loopback (tests/fake_server.py).

Covers what the real loop relies on: statuses instead of exceptions (timeouts, 5xx, 4xx, refused connections,
a server SIGKILLed mid-round), per-endpoint concurrency limits, retries, usage-based token counts and prices,
the termination model and its vote fallback, and a call log that loses nothing and that ``parasim calibrate``
reads back.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parasim.calibration.calls import read_calls
from parasim.protocol.engine import EpisodeEngine
from parasim.protocol.schema import Status, Tool, ToolCall
from parasim.real import prompts
from parasim.real.backend import BackendConfig, CallInput, RealToolBackend
from parasim.real.calllog import CallLogger
from parasim.real.client import Completion
from parasim.real.endpoints import EndpointError, load_endpoint_map, parse_endpoint_map
from parasim.real.engine import RealEpisodeEngine
from parasim.real.tasks import RealTask, load_real_tasks

FAKE_SERVER = Path(__file__).with_name("fake_server.py")  # the scripted OpenAI-compatible server (a test tool)
ANSWERS = {"good": "42", "other": "7", "split": "41,42,42"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_fake(port: int) -> subprocess.Popen:
    argv = [sys.executable, str(FAKE_SERVER), "--port", str(port)]
    argv += [f"--model={name}={answers}" for name, answers in ANSWERS.items()]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("fake server did not come up in 30 s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _control(url: str, **body) -> None:
    reset = {"delay_s": 0, "fail_next": 0, "fail_status": 500, "extension": True, "device": "cpu"}
    httpx.post(f"{url}/control", json={**reset, **body}).raise_for_status()


def _emap(url: str, **policy) -> dict:
    entry = {"base_url": url, "timeout_s": 5, "retries": 0, "backoff_s": 0.01, **policy}
    return {"endpoints": {name: {**entry, "model": name} for name in ANSWERS},
            "termination": {"model": "good"}}


def _task(**kw) -> RealTask:
    base = {"id": "t0", "question": "What is six times seven?", "answer": "42", "domain": "math"}
    from parasim.real.tasks import parse_task

    return parse_task({**base, **kw})


def _exact(answer: str, task: RealTask) -> bool:
    return prompts.normalize_answer(answer) == prompts.normalize_answer(task.answer)


# ---------------------------------------------------------------------------------------------- config
def test_endpoint_map_parses_normalizes_and_names_bad_fields(tmp_path: Path):
    emap = parse_endpoint_map({"m": {"base_url": "http://127.0.0.1:9/"}})
    assert emap["m"].base_url == "http://127.0.0.1:9/v1" and emap["m"].server_root == "http://127.0.0.1:9"
    assert emap["m"].model == "m" and emap.termination.model == "m"
    path = tmp_path / "e.yaml"
    path.write_text("endpoints:\n  a: {base_url: 'http://h:1/v1', max_concurrency: 3}\ntermination: {model: a}\n")
    assert load_endpoint_map(path)["a"].max_concurrency == 3
    bad = [
        ({"m": {"base_url": "ftp://x"}}, "endpoints.m.base_url"),
        ({"m": {"base_url": "http://x", "timeout_s": 0}}, "endpoints.m.timeout_s"),
        ({"m": {"base_url": "http://x", "retries": 1.5}}, "endpoints.m.retries"),
        ({"m": {"base_url": "http://x", "max_conc": 2}}, "endpoints.m.max_conc"),
        ({"endpoints": {"m": {"base_url": "http://x"}}, "termination": {"model": "z"}}, "termination.model"),
        ({}, "endpoints"),
    ]
    for raw, field in bad:
        with pytest.raises(EndpointError, match=field.replace(".", r"\.")):
            parse_endpoint_map(raw)


def test_tasks_file_validation(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "q", "answer": "B", "domain": "science",
                                "options": ["x", "y"], "benchmark": "GPQA"}) + "\n")
    (task,) = load_real_tasks(path)
    assert task.options == ("x", "y") and task.view().domain == 1 and "answer" not in vars(task.view())
    path.write_text(json.dumps({"id": "a", "question": "q", "answer": "1", "domain": "math", "benchmark": "GPQA"}))
    with pytest.raises(ValueError, match=r"tasks\.jsonl:1\.domain"):
        load_real_tasks(path)


# --------------------------------------------------------------------------------------------- prompts
def test_answer_extraction_and_vote():
    assert prompts.extract_answer("work\nFinal answer: 12\n") == "12"
    assert prompts.extract_answer("so \\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}"
    assert prompts.extract_answer("Answer: (C)\n") == "(C)"
    assert prompts.extract_answer("a\n\nlast line  ") == "last line"
    assert prompts.review_verdict("Verdict: WRONG") is True and prompts.review_verdict("Verdict: correct") is False
    assert prompts.review_verdict("no verdict") is None
    assert prompts.majority_vote(["41", "42 ", "$42$", ""]) == ("42", 2)
    assert prompts.majority_vote(["a", "b"]) == ("a", 1) and prompts.majority_vote([]) == ("", 0)
    assert prompts.extract_code("x\n```python\nprint(1)\n```\n") == "print(1)\n"


@given(st.text())
def test_answer_extraction_never_raises(text: str):
    assert isinstance(prompts.extract_answer(text), str)
    prompts.review_verdict(text)
    prompts.extract_code(text)


# --------------------------------------------------------------------------------------------- backend
def test_round_runs_every_agent_tool_with_usage_prices_and_vote(backend: RealToolBackend, server: str):
    calls = [ToolCall(Tool.STANDARD_REASONER, "good", "compute 6*7"),
             ToolCall(Tool.CRITICAL_REVIEWER, "other", "check 42"),
             ToolCall(Tool.ENSEMBLE_SOLVER, "split", "compute"),
             ToolCall(Tool.KNOWLEDGE_SEARCHER, "good", "recall")]
    results = backend.run_round(calls, [CallInput("What is six times seven?", seed=i) for i in range(4)])
    assert [r.status for r in results] == [Status.OK] * 4
    assert [r.extra["answer"] for r in results] == ["42", "7", "42", "42"]
    assert results[1].extra["flagged"] is False
    assert results[2].extra["votes"] == 2 and results[2].extra["samples"] == ["41", "42", "42"]
    seen = httpx.get(f"{server}/stats").json()["seen"][-4:]
    assert sorted(s["n"] for s in seen) == [1, 1, 1, backend.ensemble_k]
    assert sorted(s["seed"] for s in seen) == [0, 1, 2, 3]
    for res, msg in zip(results, sorted(seen, key=lambda s: s["seed"])):
        assert res.tokens_in == sum(len(m["content"].split()) for m in msg["messages"])  # the server's usage
        assert res.tokens_out > 0 and res.latency_s > 0
        assert res.usd == 0.0  # endpoints unknown to the pool and without prices
    assert results[2].cost_units == backend.pool.cost_units[Tool.ENSEMBLE_SOLVER]


def test_outputs_past_the_generation_cap_are_truncated(server: str):
    """The harness's cap on a real server: the fake server stops at ``max_tokens`` with finish_reason "length",
    so every tool's call answers nothing and is TRUNCATED (the ensemble's samples are all cut), its tokens
    counted."""
    with RealToolBackend(_emap(server, max_tokens=3)) as b:
        calls = [ToolCall(Tool.STANDARD_REASONER, "good", "compute 6*7"),
                 ToolCall(Tool.ENSEMBLE_SOLVER, "split", "compute")]
        results = b.run_round(calls, [CallInput("What is six times seven?", seed=i) for i in range(2)])
    assert [r.status for r in results] == [Status.TRUNCATED] * 2
    assert [r.tokens_out for r in results] == [3, 3 * b.ensemble_k]
    assert all("answer" not in r.extra for r in results)


def test_ensemble_samples_cut_at_the_cap_do_not_vote(server: str, monkeypatch: pytest.MonkeyPatch):
    """An ensemble whose samples are partly cut at the cap votes over the whole ones only (the simulator's rule):
    the two cut samples' "7" would otherwise outvote the whole sample's "42"."""
    texts = ["Final answer: 7", "Final answer: 42", "Final answer: 7"]

    async def chat(*args: object, **kw: object) -> Completion:
        return Completion(Status.OK, texts, 5, 30, 0.1, 1, cut=[True, False, True])

    with RealToolBackend(_emap(server), config=BackendConfig(ensemble_k=3)) as b:
        monkeypatch.setattr(b.chat, "chat", chat)
        (res,) = b.run_round([ToolCall(Tool.ENSEMBLE_SOLVER, "good", "compute")], [CallInput("6*7?", seed=0)])
    assert res.status is Status.OK
    assert (res.extra["answer"], res.extra["votes"], res.extra["samples"]) == ("42", 1, ["42"])


def test_backend_config_validation():
    with pytest.raises(ValueError, match="ensemble_k"):
        BackendConfig(ensemble_k=0)
    with pytest.raises(ValueError, match="max_output_chars"):
        BackendConfig(max_output_chars=0)


def test_long_outputs_are_cut_with_a_marker(server: str):
    _control(server)
    with RealToolBackend(_emap(server), config=BackendConfig(max_output_chars=10, ensemble_k=5)) as b:
        calls = [ToolCall(Tool.STANDARD_REASONER, "good", "x"), ToolCall(Tool.ENSEMBLE_SOLVER, "split", "x")]
        std, ens = b.run_round(calls, [CallInput("q")] * 2)
    assert std.output.startswith("Step 1: th") and "[truncated" in std.output and std.extra["answer"] == "42"
    assert ens.extra["samples"] == ["41", "42", "42", "41", "42"] and ens.extra["votes"] == 3


def test_prices_from_endpoint_map(server: str):
    emap = _emap(server)
    emap["endpoints"]["good"].update(input_per_mtok=2.0, output_per_mtok=10.0)
    with RealToolBackend(emap) as b:
        (res,) = b.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "x")], [CallInput("q")])
    assert res.usd == pytest.approx(res.tokens_in * 2e-6 + res.tokens_out * 1e-5)


def test_concurrency_limit_is_per_endpoint_and_shared(server: str):
    _control(server, delay_s=0.3)
    with RealToolBackend(_emap(server, max_concurrency=2)) as b:
        before = httpx.get(f"{server}/stats").json()["requests"]
        calls = [ToolCall(Tool.STANDARD_REASONER, "good", str(i)) for i in range(6)]
        results = b.run_round(calls, [CallInput("q")] * 6)
    stats = httpx.get(f"{server}/stats").json()
    _control(server)
    assert all(r.status is Status.OK for r in results)
    assert stats["requests"] - before == 6
    assert stats["peak_in_flight"] == 2  # concurrent, but never more than the endpoint allows


def test_timeouts_and_server_errors_become_statuses(server: str):
    with RealToolBackend(_emap(server, timeout_s=0.2, retries=1)) as b:
        call, inp = [ToolCall(Tool.STANDARD_REASONER, "good", "x")], [CallInput("q")]
        _control(server, delay_s=5.0)
        (res,) = b.run_round(call, inp)
        assert res.status is Status.TIMEOUT and res.extra["attempts"] == 2 and res.latency_s < 5.0
        _control(server, fail_next=1, fail_status=503)  # one 5xx, then fine: the retry succeeds
        (res,) = b.run_round(call, inp)
        assert res.status is Status.OK and res.extra["attempts"] == 2
        _control(server, fail_next=5, fail_status=500)
        (res,) = b.run_round(call, inp)
        assert res.status is Status.EXEC_ERR and "HTTP 500" in res.detail and res.extra["attempts"] == 2
        _control(server, fail_next=5, fail_status=400)  # a client error is not retried
        (res,) = b.run_round(call, inp)
        assert res.status is Status.EXEC_ERR and res.extra["attempts"] == 1
        _control(server)
        (res,) = b.run_round([ToolCall(Tool.STANDARD_REASONER, "nobody", "x")], inp)
        assert res.status is Status.INVALID_TOOL


def test_refused_connection_is_timeout_not_exception():
    emap = {"dead": {"base_url": f"http://127.0.0.1:{_free_port()}", "retries": 2, "backoff_s": 0.01}}
    with RealToolBackend(emap, pool=None) as b:
        results = b.run_round([ToolCall(Tool.STANDARD_REASONER, "dead", "x"), ToolCall(Tool.PYTHON, "", "print(1)")],
                              [CallInput("q")] * 2)
    assert results[0].status is Status.TIMEOUT and results[0].extra["attempts"] == 3
    assert "ConnectError" in results[0].detail
    assert results[1].status is Status.EXEC_ERR and "not configured" in results[1].detail


def test_code_reasoner_runs_the_model_program(server: str):
    from parasim.tools.sandbox import Sandbox, SandboxConfig

    sandbox = Sandbox(SandboxConfig(mode="unsafe-subprocess", timeout_s=20))
    with RealToolBackend(_emap(server), python_tool=sandbox.arun) as b:
        code_call = ToolCall(Tool.CODE_REASONER, "good", "compute")
        py_ok, py_err = ToolCall(Tool.PYTHON, "", "print(6 * 7)"), ToolCall(Tool.PYTHON, "", "1 / 0")
        res, ok, err = b.run_round([code_call, py_ok, py_err], [CallInput("q")] * 3)
    assert res.status is Status.OK and res.extra["executed"] and res.extra["answer"] == "42"
    assert "Program output:\n42" in res.output
    assert ok.status is Status.OK and ok.output.strip() == "42" and ok.tokens_out > 0
    assert err.status is Status.EXEC_ERR and ok.cost_units == pytest.approx(0.2)


def test_backend_from_config_wires_the_sandbox_and_the_retriever(server: str):
    emap = _emap(server)
    emap["python"] = {"mode": "unsafe-subprocess", "timeout_s": 20}
    emap["search"] = {"base_url": server, "topk": 2, "timeout_s": 5}  # no /retrieve there: an EXEC_ERR status
    with RealToolBackend.from_config(emap) as b:
        ok, missing = b.run_round([ToolCall(Tool.PYTHON, "", "print('hi')"), ToolCall(Tool.SEARCH, "", "q")],
                                  [CallInput("q")] * 2)
    assert ok.status is Status.OK and ok.output.strip() == "hi"
    assert missing.status is Status.EXEC_ERR and "404" in missing.detail
    emap["python"] = {"mode": "unsafe-subprocess", "timeout": 3}
    with pytest.raises(EndpointError, match="python"):
        RealToolBackend.from_config(emap)


async def _search_stub(query: str):
    from parasim.protocol.schema import CallResult

    return CallResult(Status.OK, output=f"Doc 1(Title: T) passage about {query}", latency_s=0.01)


def test_knowledge_searcher_reads_retrieved_passages(server: str):
    with RealToolBackend(_emap(server), search_tool=_search_stub) as b:
        (res,) = b.run_round([ToolCall(Tool.KNOWLEDGE_SEARCHER, "good", "capital of Peru")], [CallInput("q")])
    assert res.status is Status.OK
    last = httpx.get(f"{server}/stats").json()["seen"][-1]
    assert "passage about capital of Peru" in last["messages"][-1]["content"]


# ---------------------------------------------------------------------------------------------- engine
def test_engine_episode_context_termination_and_log(server: str, tmp_path: Path):
    _control(server)
    log = tmp_path / "calls.jsonl"
    tasks = [_task(), _task(id="t1", answer="7")]
    with RealToolBackend(_emap(server)) as b, CallLogger(log) as logger:
        engine: EpisodeEngine = RealEpisodeEngine(b, tasks, logger=logger, verifier=_exact, seed=0)
        view = engine.reset(options={"task_index": 0})
        assert view.task_id == "t0" and not hasattr(view, "answer")
        r1 = engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "solve"),
                               ToolCall(Tool.STANDARD_REASONER, "other", "solve")])
        assert [r.extra["correct"] for r in r1] == [True, False]
        engine.run_round([ToolCall(Tool.CRITICAL_REVIEWER, "good", "check it", target=1)])
        seen = httpx.get(f"{server}/stats").json()["seen"]
        assert "Earlier result:\nStep 1: think.\nFinal answer: 7" in seen[-1]["messages"][-1]["content"]
        out = engine.finish("42")
        assert out.answer == "42" and out.correct and engine.last_synthesis.method == "model"
        # the engine keeps no trajectory (the call source's rules account the episode): it reports only what its
        # own termination call cost
        assert out.termination_latency_s == engine.last_synthesis.latency_s > 0
        assert out.termination_usd == b.termination_usd(engine.last_synthesis)
        assert [c.tool for c in engine.calls] == [Tool.STANDARD_REASONER] * 2 + [Tool.CRITICAL_REVIEWER]
        engine.reset(options={"task_index": 1})
        engine.run_round([ToolCall(Tool.STANDARD_REASONER, "other", "solve")])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 4 and [r["episode"] for r in records] == [0, 0, 0, 1]
    assert records[2]["target"] == 1 and records[2]["flagged"] is False and records[2]["context_tokens"] > 0
    assert records[3]["correct"] is True  # "other" answers 7 = task t1's gold
    table = read_calls(log)
    assert len(table) == 4 and list(table.carried) == [-1, -1, 0, -1] and table.models == ("good", "other")
    with CallLogger(log) as again:  # appending continues the episode numbering
        assert again.new_episode() == 2


def test_paraorch_text_env_runs_on_real_tools(server: str, tmp_path: Path):
    import gymnasium as gym

    _control(server)
    log = tmp_path / "calls.jsonl"
    with RealToolBackend(_emap(server)) as b, CallLogger(log) as logger:
        engine = RealEpisodeEngine(b, [_task()], logger=logger, verifier=_exact, seed=0)
        env = gym.make("ParaOrchText-v0", tools="real", engine=engine)
        obs, info = env.reset(seed=0)
        assert "What is six times seven?" in obs and '"good"' in obs  # the endpoint ids are the model enum
        turn = ('<tool_call>{"name": "standard_reasoner", "arguments": {"model": "good", "subtask": "6*7"}}'
                '</tool_call><tool_call>{"name": "critical_reviewer", "arguments": {"model": "other", '
                '"subtask": "check", "context_from": 0}}</tool_call>')
        obs, reward, terminated, _, info = env.step(turn)
        # every call of a round sees the round-start lead (the rules' isolation): nothing to review yet, so the
        # reviewer is INVALID_TOOL without running, as in the simulator, and the round is a format violation
        assert not terminated and [r.status for r in info["results"]] == [Status.OK, Status.INVALID_TOOL]
        assert '"status": "OK"' in obs and "Final answer: 42" in obs and "needs an answer to review" in obs
        review = ('<tool_call>{"name": "critical_reviewer", "arguments": {"model": "other", "subtask": "check", '
                  '"context_from": 0}}</tool_call>')
        obs, reward, terminated, _, info = env.step(review)
        assert not terminated and [r.status for r in info["results"]] == [Status.OK]
        obs, reward, terminated, _, info = env.step(
            '<tool_call>{"name": "final_answer", "arguments": {"answer": "42"}}</tool_call>')
    assert terminated and info["correct"] and info["answer"] == "42"
    assert info["trajectory"]["tool_calls"] == 3 and info["trajectory"]["format_violations"] == 1
    assert reward == info["reward_components"]["total"] and np.isfinite(reward)
    records = [json.loads(line) for line in log.read_text().splitlines()]  # the rejected call never ran
    assert [r["tool"] for r in records] == ["standard_reasoner", "critical_reviewer"] and records[1]["target"] == 0


def test_engine_draws_are_deterministic(server: str):
    """The same engine seed draws the same task and sends the same sampling seeds (the round limit is the rules',
    checked through the envs: tests/test_env_real.py)."""
    _control(server)
    with RealToolBackend(_emap(server)) as b:
        seeds = []
        for _ in range(2):
            engine = RealEpisodeEngine(b, [_task(), _task(id="t1")], verifier=_exact, seed=5)
            engine.reset()
            engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "x")])
            engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "x")])
            seeds.append((engine.task.task_id, httpx.get(f"{server}/stats").json()["seen"][-1]["seed"]))
    assert seeds[0] == seeds[1]


def test_call_log_is_line_atomic_under_concurrent_writers(tmp_path: Path):
    from parasim.protocol.schema import CallResult

    log = tmp_path / "c.jsonl"
    task = _task().log_fields()
    with CallLogger(log) as logger:
        def write(worker: int) -> None:
            for i in range(200):
                logger.log(episode=worker, call_index=i, round_index=0, task=task,
                           call=ToolCall(Tool.STANDARD_REASONER, "m", "x" * 500),
                           result=CallResult(Status.OK, output="y" * 3000, tokens_in=1, tokens_out=2), correct=True)
        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = log.read_text().splitlines()
    assert len(lines) == 800 and all(json.loads(line)["status"] == "OK" for line in lines)


# ------------------------------------------------------------------------------------- killed server
def test_server_killed_mid_episode_gives_timeouts_and_loses_no_log_line(tmp_path: Path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_fake(port)
    log = tmp_path / "calls.jsonl"
    try:
        emap = _emap(url, timeout_s=3, retries=1, backoff_s=0.05)
        with RealToolBackend(emap, config=BackendConfig()) as b, CallLogger(log) as logger:
            engine = RealEpisodeEngine(b, [_task()], logger=logger, verifier=_exact, seed=0)
            engine.reset()
            first = engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "a"),
                                      ToolCall(Tool.ENSEMBLE_SOLVER, "split", "b")])
            assert [r.status for r in first] == [Status.OK, Status.OK]
            _control(url, delay_s=30)  # the next round hangs in the server ...
            killer = threading.Timer(0.5, lambda: os.killpg(proc.pid, signal.SIGKILL))  # ... which dies mid-round
            killer.start()
            start = time.monotonic()
            second = engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "c"),
                                       ToolCall(Tool.CRITICAL_REVIEWER, "other", "d", target=0)])
            killer.join()
            assert [r.status for r in second] == [Status.TIMEOUT, Status.TIMEOUT]
            assert time.monotonic() - start < 10
            third = engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "e")])  # refused now
            assert third[0].status is Status.TIMEOUT
            out = engine.finish("42", lead="42")  # the termination endpoint is dead too: the rules' vote lead
            assert engine.last_synthesis.method == "vote" and out.answer == "42" and out.correct
            assert len(engine.calls) == 5
    finally:
        _stop(proc)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["status"] for r in records] == ["OK", "OK", "TIMEOUT", "TIMEOUT", "TIMEOUT"]
    assert [r["call_index"] for r in records] == [0, 1, 2, 3, 4]
    assert len(read_calls(log)) == 5


# ------------------------------------------------------------------------------------- weight reloads
def _admin(url: str) -> list[str]:
    return httpx.get(f"{url}/stats").json()["admin"]


def test_reload_weights_protocol_and_cpu_refusal_without_extension(server: str, tmp_path: Path):
    import torch

    from parasim.real.vllm_client import WeightReloadError, push_weights, reload_weights

    with pytest.raises(WeightReloadError, match="no \\*.safetensors"):
        reload_weights(server, tmp_path)
    embed = torch.randn(8, 4)
    state = {"model.embed_tokens.weight": embed, "lm_head.weight": embed, "model.norm.weight": torch.ones(4)}
    _control(server)
    before = len(_admin(server))
    loaded = push_weights(f"{server}/v1", state, tmp_path / "w", step=3)
    path = json.dumps({"weights_path": str(loaded)}, sort_keys=True)
    assert _admin(server)[before:] == ["pause", f"rpc:parasim_reload_weights:{path}", "reset_prefix_cache", "resume"]
    from safetensors.torch import load_file

    saved = load_file(str(loaded / "model.safetensors"))
    assert sorted(saved) == ["model.embed_tokens.weight", "model.norm.weight"]  # the tied alias written once
    assert torch.equal(saved["model.embed_tokens.weight"], embed)
    from parasim.real.vllm_client import save_state_dict

    half = load_file(str(save_state_dict({**state, "step": torch.tensor(3)}, tmp_path / "bf16", dtype=torch.bfloat16)
                         / "model.safetensors"))
    assert half["model.norm.weight"].dtype == torch.bfloat16 and half["step"].dtype == torch.int64

    _control(server, extension=False, device="cpu")
    with pytest.raises(WeightReloadError, match="worker extension"):
        reload_weights(server, loaded)
    assert _admin(server)[-1] == "resume"  # never left paused
    _control(server, extension=False, device="cuda")  # GPU servers fall back to vLLM's own reload
    reload_weights(server, loaded)
    assert _admin(server)[-3:] == [f"rpc:reload_weights:{path}", "reset_prefix_cache", "resume"]
    _control(server)
    push_weights(server, state, tmp_path / "w", step=4)
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["step_00000004"]


def test_serve_config_validation_and_commands(tmp_path: Path):
    from parasim.real.serve_pool import load_serve_config, parse_serve_config, server_command, server_env

    raw = {"python": "/opt/vllm/bin/python", "base_port": 9000, "gpus": [0, 1, 2], "env": {"A": "1"},
           "endpoint": {"max_concurrency": 32}, "models": [
               {"id": "big", "path": "/ckpt/big", "num_gpus": 2, "args": ["--max-model-len", "4096"]},
               {"id": "small", "path": "/ckpt/small", "reloadable": True, "endpoint": {"timeout_s": 9}}]}
    cfg = parse_serve_config(raw)
    big, small = cfg.models
    assert (big.port, big.gpus, small.port, small.gpus) == (9000, (0, 1), 9001, (2,))
    cmd = server_command(cfg, big)
    assert cmd[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2" and cmd[-2:] == ["--max-model-len", "4096"]
    assert "--worker-extension-cls" in server_command(cfg, small) and "--worker-extension-cls" not in cmd
    env = server_env(cfg, small)
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["VLLM_SERVER_DEV_MODE"] == "1" and env["A"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("vllm_ext")
    assert server_env(cfg, big).get("VLLM_SERVER_DEV_MODE") == os.environ.get("VLLM_SERVER_DEV_MODE")
    assert dict(small.endpoint) == {"max_concurrency": 32, "timeout_s": 9}
    bad = [
        ({**raw, "modles": []}, "modles"),
        ({**raw, "models": [{"id": "a"}]}, r"models\[0\]\.path"),
        ({**raw, "models": [{"id": "a", "path": "p", "port": 1}, {"id": "b", "path": "p", "port": 1}]}, "port"),
        ({**raw, "models": [{"id": "a", "path": "p", "num_gpus": 4}]}, "num_gpus"),
        ({**raw, "endpoint": {"timeout_s": -1}}, "timeout_s"),
    ]
    for cfg_raw, field in bad:
        with pytest.raises(EndpointError, match=field):
            parse_serve_config(cfg_raw)
    path = tmp_path / "serve.yaml"
    path.write_text("models:\n  - {id: m, path: /x}\n")
    assert load_serve_config(path).models[0].port == 8100
    out = subprocess.run([sys.executable, "-m", "parasim.cli", "serve-pool", "--config", str(path), "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--served-model-name m" in out.stdout and "--port 8100" in out.stdout


_FAKE_VLLM = """
import argparse
import sys
sys.path.insert(0, {tests!r})
from fake_server import main
p = argparse.ArgumentParser()
p.add_argument("--port"); p.add_argument("--served-model-name"); p.add_argument("--host")
args, _ = p.parse_known_args()
if args.served_model_name == "crash":
    raise SystemExit("stand-in server: cannot load the model")
main(["--port", args.port, "--host", args.host, "--model", args.served_model_name + "=42"])
"""


def _fake_vllm(root: Path) -> Path:
    """A ``vllm`` package whose OpenAI entry point is the scripted server: serve-pool's process handling, health
    checks and shutdown run for real, in seconds, without vLLM."""
    pkg = root / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (root / "vllm", root / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(_FAKE_VLLM.format(tests=str(FAKE_SERVER.parent)))
    return root


def test_serve_pool_lifecycle_with_a_stand_in_server(tmp_path: Path):
    fake = _fake_vllm(tmp_path / "stub")
    config = {"python": sys.executable, "base_port": _free_port(), "log_dir": str(tmp_path / "logs"),
              "env": {"PYTHONPATH": os.pathsep.join([str(fake), *sys.path])}, "startup_timeout_s": 60,
              "models": [{"id": "m1", "path": str(tmp_path / "model-marker")}]}
    path = tmp_path / "serve.json"
    path.write_text(json.dumps(config))
    proc = subprocess.Popen([sys.executable, "-m", "parasim.cli", "serve-pool", "--config", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        endpoints = json.loads(proc.stdout.readline())
        url = endpoints["endpoints"]["m1"]["base_url"]
        with RealToolBackend(endpoints) as b:
            (res,) = b.run_round([ToolCall(Tool.STANDARD_REASONER, "m1", "x")], [CallInput("q")])
        assert res.status is Status.OK and res.extra["answer"] == "42"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "all servers stopped" in proc.stderr.read()
        with pytest.raises(httpx.TransportError):
            httpx.get(url.removesuffix("/v1") + "/health", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    config["models"].append({"id": "crash", "path": "/x"})  # a server that dies while loading stops them all
    path.write_text(json.dumps(config))
    out = subprocess.run([sys.executable, "-m", "parasim.cli", "serve-pool", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "crash exited with code 1" in out.stderr and "cannot load the model" in out.stderr
    assert out.stdout == ""  # no endpoint map for a pool that is not fully up
    config["python"] = str(tmp_path / "no-such-python")
    path.write_text(json.dumps(config))
    out = subprocess.run([sys.executable, "-m", "parasim.cli", "serve-pool", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "cannot start" in out.stderr


def test_vllm_extension_module_has_no_parasim_imports():
    """The extension runs inside vLLM's own environment, where parasim is not installed."""
    from parasim.real.vllm_client import EXTENSION_CLS, EXTENSION_DIR

    module, cls = EXTENSION_CLS.split(".")
    source = (EXTENSION_DIR / f"{module}.py").read_text()
    assert f"class {cls}" in source and "parasim." not in source.replace("parasim_", "")
