"""A stray response on a kept-alive connection never answers a later call.

A loopback HTTP/1.1 server (a thread of this process) answers every request, and on the second request of a
connection first sends an extra, stray completion: one for another model, or (when it echoes request ids, as
vLLM's ``chatcmpl-<X-Request-Id>`` does) the answer to the connection's first request. Before the client matched
responses to requests, the second call came back OK with the stray's text ("INJECTED"), even for another model;
now the stray is an EXEC_ERR naming the mismatch, its connection is dropped, and a retry gets the true answer on a
fresh connection.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from loopback_http import serve

from parasim.protocol.schema import Status
from parasim.real.client import ChatClient, Completion
from parasim.real.endpoints import parse_endpoint_map

pytestmark = pytest.mark.timeout(60)  # a hang guard: the module runs in about a second
REQUEST_ID_HEADER = "X-Request-Id"  # what vLLM (--enable-request-id-headers) and proxies echo


@dataclass
class Script:
    """What the server sends ahead of the second response of its first connection: a stray for ``stray_model``; with
    ``echo``, every response carries its request's id (header and ``chatcmpl-<id>``) and the stray the first's."""

    stray_model: str = "model-a"
    echo: bool = False
    connections: int = 0
    requests: list[str] = field(default_factory=list)


def _completion(model: str, text: str, request_id: str | None) -> bytes:
    cid = f"chatcmpl-{request_id}" if request_id else "chatcmpl-1"
    return json.dumps({"id": cid, "object": "chat.completion", "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 2}}).encode()


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses the connection

        def setup(self) -> None:
            super().setup()
            script.connections += 1
            self.seen: list[str] = []

        def _send(self, body: bytes, request_id: str | None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if request_id is not None:
                self.send_header(REQUEST_ID_HEADER, request_id)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            rid = self.headers.get(REQUEST_ID_HEADER) if script.echo else None
            script.requests.append(request["model"])
            self.seen.append(rid or "")
            if len(self.seen) == 2 and script.connections == 1:  # once: a stray first, as if owed to request 1
                stray_id = self.seen[0] or None
                self._send(_completion(script.stray_model, "Final answer: INJECTED", stray_id), stray_id)
            self._send(_completion(request["model"], f"Final answer: {request['model']}", rid), rid)

        def log_message(self, *args: object) -> None:
            pass

    with serve(Handler) as url:
        yield url, script


def _calls(url: str, models: list[str], retries: int) -> list[Completion]:
    """``models`` called one after the other through one client (one kept-alive connection)."""
    emap = parse_endpoint_map({m: {"base_url": url, "model": m, "retries": retries, "timeout_s": 20,
                                   "backoff_s": 0.0} for m in set(models)})

    async def go() -> list[Completion]:
        client = ChatClient(emap)
        try:
            return [await client.chat(m, [{"role": "user", "content": "q"}]) for m in models]
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_stray_for_another_model_is_an_error_not_its_answer(server: tuple[str, Any]) -> None:
    url, _ = server
    first, second = _calls(url, ["model-a", "model-b"], retries=0)
    assert first.status is Status.OK and first.texts == ["Final answer: model-a"]
    assert second.status is Status.EXEC_ERR, second
    assert "does not answer this request" in second.detail and "'model-a', asked 'model-b'" in second.detail
    assert second.texts == []


def test_a_stray_with_another_request_id_is_an_error_even_for_the_same_model(server: tuple[str, Any]) -> None:
    url, script = server
    script.echo, script.stray_model = True, "model-a"
    first, second = _calls(url, ["model-a", "model-a"], retries=0)
    assert first.status is Status.OK
    assert second.status is Status.EXEC_ERR and REQUEST_ID_HEADER in second.detail, second


@pytest.mark.parametrize("echo", [False, True])
def test_the_retry_runs_on_a_fresh_connection_and_gets_the_true_answer(server: tuple[str, Any], echo: bool) -> None:
    url, script = server
    script.echo = echo
    results = _calls(url, ["model-a", "model-b", "model-b"], retries=1)
    assert [r.status for r in results] == [Status.OK] * 3
    assert [r.texts for r in results] == [["Final answer: model-a"], ["Final answer: model-b"],
                                          ["Final answer: model-b"]]
    assert results[1].attempts == 2  # the stray's attempt failed, the retry answered
    assert script.connections == 2  # the stray's connection was dropped; the third call reused the fresh one
    assert all("INJECTED" not in t for r in results for t in r.texts)
