"""``VLLMEngine`` retries transient failures of the vLLM server instead of failing the GRPO step.

Against a scripted ``/v1/completions`` server on loopback (a thread of this process): the answers to come
are scripted per test (HTTP statuses, or a delay past the client's timeout), then a valid completion. The
engine waits on a fake clock (its ``sleep`` records the wait and moves the clock on), with a seeded jitter
rng, so the schedule and the deadline are checked exactly and the tests never sleep on the backoff.
"""
from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from loopback_http import serve

from parasim.real.client import backoff_delay, retryable_status
from training.llm.rollout import SamplingParams, VLLMEngine, VLLMRequestError

STOP = 7
COMPLETION = {"choices": [{"index": 0, "token_ids": [5, 6, STOP], "finish_reason": "stop",
                           "logprobs": {"token_logprobs": [-0.5, -0.25, -0.125]}}]}


@dataclass
class Script:
    """What the server answers next: ``steps`` pop one per request (an HTTP status, or ``"slow"``: answer
    after ``slow_s``), then ``then`` for every request after them (None: the valid completion)."""

    steps: list[int | str] = field(default_factory=list)
    then: int | None = None
    slow_s: float = 1.0
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> int | str | None:
        with self.lock:
            self.requests += 1
            return self.steps.pop(0) if self.steps else self.then


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            step = script.next() if self.path == "/v1/completions" else 404
            if step == "slow":
                time.sleep(script.slow_s)
                step = None
            body = json.dumps(COMPLETION if step is None else {"error": {"message": f"scripted {step}"}}).encode()
            self.send_response(200 if step is None else int(step))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up on a slow answer
                pass

        def log_message(self, *args: object) -> None:
            pass

    with serve(Handler) as url:
        yield f"{url}/v1", script


def engine(url: str, tmp_path: Path, waits: list[float], **kw: object) -> VLLMEngine:
    """An engine whose waits are appended to ``waits`` and advance its clock by as much, without sleeping."""

    def sleep(seconds: float) -> None:
        waits.append(seconds)

    def clock() -> float:
        return time.monotonic() + sum(waits)

    opts: dict[str, object] = {"retries": 3, "backoff_s": 0.5, "jitter": 0.5, "rng": random.Random(0),
                               "sleep": sleep, "clock": clock, "timeout_s": 5.0, **kw}
    return VLLMEngine(url, "tiny", [STOP], tmp_path / "weights", concurrency=2, **opts)  # type: ignore[arg-type]


def generate(eng: VLLMEngine) -> list:
    return eng.generate([[1, 2, 3]], SamplingParams(max_new_tokens=8), seed=0)


@pytest.mark.timeout(60)
def test_two_503s_then_success(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.steps = [503, 503]
    waits: list[float] = []
    (gen,) = generate(engine(url, tmp_path, waits))
    assert (gen.token_ids, gen.logprobs, gen.finished) == ([5, 6, STOP], [-0.5, -0.25, -0.125], True)
    assert script.requests == 3
    rng = random.Random(0)  # the same seed: the waits are the shared schedule, exponential with jitter
    assert waits == [backoff_delay(0.5, 1, 0.5, rng), backoff_delay(0.5, 2, 0.5, rng)]
    assert 0.5 <= waits[0] <= 0.75 and 1.0 <= waits[1] <= 1.5


@pytest.mark.timeout(60)
def test_always_failing_server_raises_after_the_last_attempt(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.then = 503
    waits: list[float] = []
    with pytest.raises(VLLMRequestError) as info:
        generate(engine(url, tmp_path, waits, retries=2))
    err = info.value
    assert (err.status, err.attempts, script.requests, len(waits)) == (503, 3, 3, 2)
    message = str(err)
    assert f"{url.removesuffix('/v1')}/v1/completions" in message and "HTTP 503" in message
    assert "3 attempt(s)" in message and "retries exhausted" in message


@pytest.mark.timeout(60)
def test_client_errors_are_not_retried(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.then = 400
    waits: list[float] = []
    with pytest.raises(VLLMRequestError, match="not retryable") as info:
        generate(engine(url, tmp_path, waits))
    assert (info.value.status, info.value.attempts, script.requests, waits) == (400, 1, 1, [])


@pytest.mark.timeout(60)
def test_429_and_timeouts_are_retried(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.steps, script.slow_s = [429, "slow"], 1.0
    waits: list[float] = []
    (gen,) = generate(engine(url, tmp_path, waits, timeout_s=0.2))  # the slow answer times out: one more try
    assert gen.token_ids == [5, 6, STOP]
    assert script.requests == 3 and len(waits) == 2


@pytest.mark.timeout(60)
def test_refused_connection_raises_naming_url_and_attempts(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    waits: list[float] = []
    with pytest.raises(VLLMRequestError) as info:
        generate(engine(f"http://127.0.0.1:{port}/v1", tmp_path, waits, retries=2))
    assert (info.value.status, info.value.attempts, len(waits)) == (None, 3, 2)
    assert f"http://127.0.0.1:{port}/v1/completions" in str(info.value) and "ConnectError" in str(info.value)


@pytest.mark.timeout(60)
def test_deadline_stops_retrying_before_the_retries_run_out(server: tuple[str, Script], tmp_path: Path) -> None:
    url, script = server
    script.then = 503
    waits: list[float] = []
    with pytest.raises(VLLMRequestError, match="deadline") as info:  # 1 + 2 + 4 s of waits would pass 5 s
        generate(engine(url, tmp_path, waits, retries=20, backoff_s=1.0, jitter=0.0, deadline_s=5.0))
    assert waits == [1.0, 2.0] and info.value.attempts == 3 == script.requests


def test_retry_rule_is_the_real_tools_clients() -> None:
    assert [code for code in (400, 401, 404, 408, 422, 429, 500, 502, 503, 504) if retryable_status(code)] == [
        408, 429, 500, 502, 503, 504]
    assert [backoff_delay(0.5, k) for k in (1, 2, 3)] == [0.5, 1.0, 2.0]  # no jitter: ChatClient's schedule


@pytest.mark.parametrize("field,value", [("retries", -1), ("retries", 2.0), ("retries", True), ("backoff_s", -0.1),
                                         ("jitter", 1.5), ("deadline_s", 0), ("timeout_s", float("nan"))])
def test_engine_options_are_checked(field: str, value: object, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"VLLMEngine {field}="):
        VLLMEngine("http://127.0.0.1:9/v1", "tiny", [STOP], tmp_path, **{field: value})  # type: ignore[arg-type]
