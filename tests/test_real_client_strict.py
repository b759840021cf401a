"""The real-tools chat client reads a server's answer strictly, and task files refuse text that is not UTF-8.

Against a scripted HTTP server on loopback (a thread of this process) whose next answer each test sets as raw
bytes: a completion body nested past the recursion limit, usage counts that are strings, floats, booleans,
``Infinity`` or out of range, a ``content`` that is not a string, a reply with a lone surrogate, and bodies larger
than the client's cap. Each was, before these checks, cast (``int("12")``, ``str(5)``), taken as is, read whole into
memory, or an exception that escaped ``ChatClient.chat``; now each is an EXEC_ERR naming the field, the value and
the range (or the cap). Task files with a lone surrogate in a text field fail at load, naming file, line and field.
"""
from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from loopback_http import serve

from parasim.protocol.schema import Status
from parasim.real.client import MAX_RESPONSE_BYTES, MAX_USAGE_TOKENS, ChatClient, Completion
from parasim.real.endpoints import parse_endpoint_map
from parasim.real.tasks import load_real_tasks, parse_task

pytestmark = pytest.mark.timeout(60)  # a hang guard: the module runs in a few seconds

_CHUNK = 64 * 1024


@dataclass
class Reply:
    """The server's next answers: ``body`` (raw bytes, sent ``repeat`` times in a row as one body)."""

    body: bytes = b""
    status: int = 200
    repeat: int = 1
    requests: int = 0


@pytest.fixture
def server() -> Iterator[tuple[str, Reply]]:
    reply = Reply()

    class Handler(BaseHTTPRequestHandler):  # HTTP/1.0: no Content-Length needed, the body ends at close
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            reply.requests += 1
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                for _ in range(reply.repeat):
                    self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what a cap must do
                pass

        def log_message(self, *args: object) -> None:
            pass

    with serve(Handler) as url:
        yield url, reply


def _chat(url: str, n: int = 1, **client_kw: Any) -> Completion:
    """One call of ``n`` choices through a fresh client (no retries, so each test's body is answered once)."""
    emap = parse_endpoint_map({"m": {"base_url": url, "retries": 0, "timeout_s": 30}})

    async def go() -> Completion:
        client = ChatClient(emap, **client_kw)
        try:
            return await client.chat("m", [{"role": "user", "content": "q"}], n=n)
        finally:
            await client.aclose()

    return asyncio.run(go())


def _body(content: Any = "Final answer: 42", usage: Any = None) -> bytes:
    """A chat completion, encoded as a server may send it (``Infinity`` and ``\\ud800`` escapes included)."""
    done = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4} if usage is None else usage}
    return json.dumps(done).encode("ascii")


# ---------------------------------------------------------------------------------------------- the body
def test_json_nested_past_the_recursion_limit_is_exec_err(server: tuple[str, Reply]):
    """Was: ``RecursionError`` from the JSON decoder escaped ``chat`` (only ``ValueError`` was caught)."""
    url, reply = server
    reply.body = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    comp = _chat(url)
    assert comp.status is Status.EXEC_ERR and comp.attempts == 1
    assert "response is not JSON" in comp.detail and "nested too deeply" in comp.detail


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("prompt_tokens", "12", "'12'"),
    ("completion_tokens", 1.5, "1.5"),
    ("prompt_tokens", True, "True"),
    ("completion_tokens", float("inf"), "inf"),  # was: OverflowError from int(inf), escaping ``chat``
    ("prompt_tokens", -7, "-7"),
    ("completion_tokens", MAX_USAGE_TOKENS + 1, str(MAX_USAGE_TOKENS + 1)),
    ("prompt_tokens", [3], "[3]"),
])
def test_usage_counts_must_be_integers_in_range(server: tuple[str, Reply], field: str, value: Any, shown: str):
    """Was: cast with ``int()`` (``"12"`` -> 12, ``1.5`` -> 1, ``true`` -> 1), or taken as is when negative."""
    url, reply = server
    reply.body = _body(usage={"prompt_tokens": 3, "completion_tokens": 4, field: value})
    comp = _chat(url)
    assert comp.status is Status.EXEC_ERR and (comp.tokens_in, comp.tokens_out, comp.texts) == (0, 0, [])
    assert f"usage.{field}: expected an integer in [0, {MAX_USAGE_TOKENS}], got {shown}" in comp.detail


@pytest.mark.parametrize(("content", "shown"), [(5, "5"), (["42"], "['42']"), ({"text": "42"}, "{'text': '42'}"),
                                                (False, "False")])
def test_content_must_be_a_string_or_null(server: tuple[str, Reply], content: Any, shown: str):
    """Was: ``str(content)`` (``5`` -> ``"5"``), or ``""`` for a falsy non-string such as ``false``."""
    url, reply = server
    reply.body = _body(content=content)
    comp = _chat(url)
    assert comp.status is Status.EXEC_ERR and comp.texts == []
    assert f"choices[0].message.content: expected a string or null, got {shown}" in comp.detail


def test_choice_index_must_be_an_integer_in_range(server: tuple[str, Reply]):
    """Was: any value sortable with 0 accepted (``1.5``, ``-3``), a string a TypeError of ``sorted``."""
    url, reply = server
    reply.body = json.dumps({"choices": [{"index": -3, "message": {"content": "42"}}]}).encode()
    comp = _chat(url)
    assert comp.status is Status.EXEC_ERR and "choices[0].index: expected an integer in [0, 0], got -3" in comp.detail


def _choices(*finish: Any) -> bytes:
    """A completion of one choice per ``finish_reason`` given (None: the key is left out)."""
    choices = [{"index": i, "message": {"content": f"Final answer: {i}"}, **({} if f is None else {"finish_reason": f})}
               for i, f in enumerate(finish)]
    return json.dumps({"choices": choices, "usage": {"prompt_tokens": 3, "completion_tokens": 900}}).encode()


@pytest.mark.parametrize(("finish", "status", "cut"), [
    (("stop",), Status.OK, [False]),
    ((None,), Status.OK, [False]),
    (("length",), Status.TRUNCATED, [True]),
    (("stop", "length", "stop"), Status.OK, [False, True, False]),
    (("length", "length", "length"), Status.TRUNCATED, [True, True, True]),
])
def test_choices_stopped_at_the_cap_are_cut_and_all_cut_is_truncated(server: tuple[str, Reply], finish: tuple,
                                                                     status: Status, cut: list[bool]):
    """The simulator's harness rule on real servers: a choice that stopped at the generation cap answers nothing,
    and a call whose every choice did is TRUNCATED; its tokens are still counted (the server generated them)."""
    url, reply = server
    reply.body = _choices(*finish)
    comp = _chat(url, n=len(finish))
    assert (comp.status, comp.cut, comp.tokens_out) == (status, cut, 900)


def test_finish_reason_must_be_a_string_or_null(server: tuple[str, Reply]):
    url, reply = server
    reply.body = _choices(7)
    comp = _chat(url)
    assert comp.status is Status.EXEC_ERR
    assert "choices[0].finish_reason: expected a string or null, got 7" in comp.detail


def test_lone_surrogates_in_a_reply_become_replacement_characters(server: tuple[str, Reply]):
    """Was: returned as is, so the termination model's answer (which no backend cleaned) could not be encoded."""
    url, reply = server
    reply.body = _body(content="Final answer: 42\ud800")
    comp = _chat(url)
    assert comp.status is Status.OK and comp.texts == ["Final answer: 42\ufffd"]
    assert comp.texts[0].encode("utf-8")


# ---------------------------------------------------------------------------------------------- the size cap
def test_a_body_past_the_default_cap_is_cut_off_while_streaming(server: tuple[str, Reply]):
    """Was: read whole into memory, however large (here 4x the cap; a server could send without end)."""
    url, reply = server
    reply.body, reply.repeat = b" " * _CHUNK, 4 * MAX_RESPONSE_BYTES // _CHUNK
    comp = _chat(url)
    assert comp.status is Status.EXEC_ERR and comp.attempts == 1
    assert f"response larger than {MAX_RESPONSE_BYTES} bytes" in comp.detail


def test_a_smaller_cap_applies_to_error_answers_too(server: tuple[str, Reply]):
    """A valid completion over the cap is refused; one within it is read; an error status keeps its status."""
    url, reply = server
    reply.body = _body(content="x" * 3000)
    comp = _chat(url, max_response_bytes=2048)
    assert comp.status is Status.EXEC_ERR and "response larger than 2048 bytes" in comp.detail
    reply.body = _body(content="x" * 1000)
    assert _chat(url, max_response_bytes=2048).texts == ["x" * 1000]
    reply.status, reply.body, reply.repeat = 503, b"e" * _CHUNK, 64  # 4 MiB of error page
    comp = _chat(url, max_response_bytes=2048)
    assert comp.status is Status.EXEC_ERR and comp.detail.startswith("m: HTTP 503: eeee")


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "16", 2**40])
def test_the_cap_is_a_checked_count(value: Any):
    emap = parse_endpoint_map({"m": {"base_url": "http://127.0.0.1:9"}})
    with pytest.raises(ValueError, match=rf"ChatClient\.max_response_bytes: expected an integer in "
                                         rf"\[1, 1073741824\], got {value!r}"):
        ChatClient(emap, max_response_bytes=value)


# ---------------------------------------------------------------------------------------------- task files
@pytest.mark.parametrize(("key", "value", "field"), [
    ("question", "What is 6\ud800 x 7?", "question"),
    ("id", "t\udfff", "id"),
    ("answer", "4\ud8002", "answer"),
    ("options", ["fine", "bad\udc00"], "options[1]"),
])
def test_task_text_that_is_not_utf8_is_refused_at_load(tmp_path: Path, key: str, value: Any, field: str):
    """Was: loaded, then the first prompt with it failed in httpx's strict UTF-8 request encoding, every episode."""
    good = {"id": "ok", "question": "What is six times seven?", "answer": "42", "domain": "math"}
    bad = {**good, "id": "bad", key: value}
    if key == "options":
        bad.update(domain="science", benchmark="GPQA", answer="A")
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="ascii")  # \ud800 escapes: valid JSON
    with pytest.raises(ValueError, match=rf"tasks\.jsonl:2\.{re.escape(field)}: expected text that encodes as "
                                         r"UTF-8, got a lone surrogate U\+D[89A-F][0-9A-F]{2} at character \d+"):
        load_real_tasks(path)
    with pytest.raises(ValueError, match=rf"^task\.{re.escape(field)}: "):
        parse_task(bad)
