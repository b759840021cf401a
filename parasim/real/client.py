"""Async calls to OpenAI-compatible ``/v1/chat/completions`` endpoints, with failures as statuses.

Why its own small client instead of the ``openai`` package: the backend needs a per-endpoint concurrency
limit shared by every episode in flight, a hard per-attempt deadline (httpx's timeouts are per socket
operation, so a server trickling bytes could hold a call forever), bounded retries with exponential backoff,
and a result that is always a value: a dead server mid-episode must become a TIMEOUT in the manager's
feedback, not an exception that ends a GRPO step.

Status mapping: no answer in time (deadline, refused or dropped connection) is
TIMEOUT; an answer that is an error (HTTP 4xx/5xx, a body that is not a completion) is EXEC_ERR; a completion
whose every choice stopped at the generation cap (``finish_reason`` "length") is TRUNCATED, the simulator's rule
for a call whose output passes the harness's cap (a choice cut at the cap answers nothing: ``Completion.cut``).
Timeouts, dropped connections, 408/429 and 5xx are retried; other 4xx are not (a retry cannot fix them).
That rule and the backoff schedule are :func:`retryable_status` and :func:`backoff_delay`, shared with the
trainer's vLLM rollout client.

A server's body is untrusted input, read strictly here so that no caller has to re-check it: it is streamed and
refused past ``max_response_bytes`` (a broken or hostile server could otherwise fill the memory every episode
shares); JSON nested past the recursion limit is "not JSON"; usage counts must be integers in
[0, ``MAX_USAGE_TOKENS``] (a negative one would lower an episode's token cost, a huge one overflow its USD) and
``content`` a string or null, never cast; and lone UTF-16 surrogates in a reply (legal JSON, not UTF-8) become
U+FFFD, so that every caller can log the text and send it on in a request body (httpx encodes strict UTF-8).
Each refusal is an EXEC_ERR naming the field, the value and the allowed range, and is not retried (the same
request gets the same body).

A response must answer its own request. A server (or proxy) that sends an extra response on a kept-alive
connection would otherwise have it read as the answer to the next request on that connection, even one for
another model. So each attempt carries a fresh ``X-Request-Id`` (``parasim-<hex>``), and a 200 whose ``model``
is not the model asked for, whose ``X-Request-Id`` header is another request's, or whose ``id`` carries another
parasim request id (vLLM builds ``chatcmpl-<X-Request-Id>``) is an EXEC_ERR naming both; its connection is
closed at once (the answer that request is still owed would arrive on it) and the attempt is retried on a fresh
one. A server that echoes neither the id nor the model cannot be checked beyond ``model``.
"""
from __future__ import annotations

import asyncio
import json
import random
import re
import reprlib
import time
import uuid
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx

from parasim.protocol.schema import Status
from parasim.real.endpoints import Endpoint, EndpointMap

MAX_RESPONSE_BYTES = 16 * 2**20  # default body cap: 8x the ~2 MB of 16 choices of 32k tokens (~4 bytes each)
MAX_RESPONSE_BYTES_LIMIT = 2**30  # the largest cap a client accepts
MAX_USAGE_TOKENS = 10**9  # more than any context window times any n: a larger usage count is a broken server
_RETRY_HTTP = frozenset({408, 429})
_DETAIL_CHARS = 300
_DETAIL_BYTES = 4 * _DETAIL_CHARS  # what is read of an error body: enough UTF-8 for the detail
_SURROGATES = re.compile("[\ud800-\udfff]")
REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID_PREFIX = "parasim-"  # in a str these are always lone: JSON decoding joins valid pairs


@dataclass
class Completion:
    """The result of one logical call (all its attempts): texts of the ``n`` choices, usage and timing."""

    status: Status
    texts: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0  # issue to result, retries and waiting for a concurrency slot included
    attempts: int = 0
    detail: str = ""
    cut: list[bool] = field(default_factory=list)  # per choice: stopped at the generation cap, so no answer


def utf8_safe(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, so that it can be encoded as UTF-8 (logged, sent on)."""
    return _SURROGATES.sub("\ufffd", text)


def retryable_status(status_code: int) -> bool:
    """Whether an HTTP error status may clear on another attempt: 408 / 429 (come back later) and 5xx."""
    return status_code >= 500 or status_code in _RETRY_HTTP


def backoff_delay(backoff_s: float, attempt: int, jitter: float = 0.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1 for the first): ``backoff_s`` doubled each retry, stretched by a
    uniform fraction of at most ``jitter`` so that clients that failed together do not retry together."""
    delay = backoff_s * 2 ** (attempt - 1)
    if not jitter:
        return delay
    return delay * (1 + jitter * (rng.random() if rng is not None else random.random()))


class _Failure(Exception):
    """One failed attempt: its status if it is the last, and whether another attempt may help."""

    def __init__(self, status: Status, detail: str, retryable: bool) -> None:
        super().__init__(detail)
        self.status, self.detail, self.retryable = status, detail, retryable


class ChatClient:
    """Chat completions against the endpoints of an ``EndpointMap``.

    Semaphores are created lazily on the running loop, so one client serves all episodes of the loop it
    is used on (the backend runs a single loop thread). ``max_response_bytes`` caps each response body (see the
    module docstring).
    """

    def __init__(self, endpoints: EndpointMap, http: httpx.AsyncClient | None = None, *,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        cap = max_response_bytes
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_RESPONSE_BYTES_LIMIT:
            raise ValueError(f"ChatClient.max_response_bytes: expected an integer in [1, {MAX_RESPONSE_BYTES_LIMIT}], "
                             f"got {cap!r}")
        self.endpoints = endpoints
        self.max_response_bytes = cap
        self._http = http
        self._sem: dict[str, asyncio.Semaphore] = {}

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
            self._http = httpx.AsyncClient(limits=limits, timeout=None)
        return self._http

    def _semaphore(self, ep: Endpoint) -> asyncio.Semaphore:
        sem = self._sem.get(ep.model_id)
        if sem is None:
            sem = self._sem[ep.model_id] = asyncio.Semaphore(ep.max_concurrency)
        return sem

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def chat(self, model_id: str, messages: Sequence[dict[str, str]], *, n: int = 1,
                   max_tokens: int | None = None, temperature: float | None = None,
                   seed: int | None = None) -> Completion:
        """One chat completion with ``n`` choices; never raises for server or network trouble."""
        ep = self.endpoints.endpoints.get(model_id)
        if ep is None:
            return Completion(Status.EXEC_ERR, detail=f"no endpoint for model {model_id!r}")
        body: dict[str, Any] = {
            "model": ep.model, "messages": list(messages), "n": n,
            "max_tokens": max_tokens or ep.max_tokens,
            "temperature": ep.temperature if temperature is None else temperature,
        }
        if seed is not None:
            body["seed"] = seed
        start = time.perf_counter()
        failure = _Failure(Status.EXEC_ERR, "no attempt made", False)
        for attempt in range(ep.retries + 1):
            if attempt:
                await asyncio.sleep(backoff_delay(ep.backoff_s, attempt))
            try:
                async with self._semaphore(ep):
                    data = await asyncio.wait_for(self._post(ep, body), timeout=ep.timeout_s)
                texts, tokens_in, tokens_out, cut = _parse_completion(data, n)
                status = Status.TRUNCATED if all(cut) else Status.OK
                return Completion(status, texts, tokens_in, tokens_out, time.perf_counter() - start, attempt + 1,
                                  cut=cut)
            except _Failure as err:
                failure = err
            except TimeoutError:  # asyncio.wait_for's deadline
                failure = _Failure(Status.TIMEOUT, f"no answer within {ep.timeout_s:g} s", True)
            if not failure.retryable:
                break
        return Completion(failure.status, latency_s=time.perf_counter() - start, attempts=attempt + 1,
                          detail=f"{ep.model_id}: {failure.detail} (after {attempt + 1} attempt(s))")

    async def _post(self, ep: Endpoint, body: dict[str, Any]) -> Any:
        """The decoded JSON of a 200 answer; any other answer, or a body past the cap, is a ``_Failure``."""
        url = f"{ep.base_url}/chat/completions"
        request_id = f"{_REQUEST_ID_PREFIX}{uuid.uuid4().hex}"
        headers = {**ep.headers(), REQUEST_ID_HEADER: request_id}
        try:
            async with self._client().stream("POST", url, json=body, headers=headers) as response:
                if response.status_code != 200:
                    head, _ = await _read_capped(response, _DETAIL_BYTES)
                    raise _Failure(Status.EXEC_ERR, f"HTTP {response.status_code}: {_text(head)}",
                                   retryable_status(response.status_code))
                raw, complete = await _read_capped(response, self.max_response_bytes)
                if not complete:
                    raise _Failure(Status.EXEC_ERR, f"response larger than {self.max_response_bytes} bytes", False)
                data = _decode(raw)
                stray = _mismatch(data, response.headers.get(REQUEST_ID_HEADER), body["model"], request_id)
                if stray is not None:
                    await _drop_connection(response)
                    raise _Failure(Status.EXEC_ERR, f"response does not answer this request ({stray}); its "
                                   "connection was dropped", True)
                return data
        except httpx.TransportError as err:  # refused, reset, dropped mid-response, DNS
            raise _Failure(Status.TIMEOUT, f"{type(err).__name__}: {err}"[:_DETAIL_CHARS], True) from None
        except httpx.DecodingError as err:  # a Content-Encoding (gzip, ...) whose bytes do not decode
            raise _Failure(Status.EXEC_ERR, f"{type(err).__name__}: {err}"[:_DETAIL_CHARS], False) from None


def _decode(raw: bytes) -> Any:
    """The JSON of a body; a body that is not JSON (or nests past the recursion limit) is a ``_Failure``."""
    try:
        return json.loads(raw)  # bytes: the encoding is detected as httpx's Response.json does
    except RecursionError:
        reason = "nested too deeply to decode"
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        reason = f"{type(err).__name__}: {err}"[:_DETAIL_CHARS]
    raise _Failure(Status.EXEC_ERR, f"response is not JSON ({reason}): {_text(raw)!r}", False)


def _mismatch(data: Any, echoed: str | None, model: str, request_id: str) -> str | None:
    """Why a decoded 200 is not the answer to the request (``model``, ``request_id``), or None when nothing says
    so: another model, another ``X-Request-Id`` echoed, or a completion ``id`` carrying another parasim request id."""
    if echoed is not None and echoed != request_id:
        return f"{REQUEST_ID_HEADER} {reprlib.repr(echoed)}, sent {request_id!r}"
    if not isinstance(data, dict):
        return None  # not a completion: _parse_completion names what is wrong with it
    answered = data.get("model")
    if answered is not None and answered != model:
        return f"model {reprlib.repr(answered)}, asked {model!r}"
    cid = data.get("id")
    if isinstance(cid, str) and _REQUEST_ID_PREFIX in cid and not cid.endswith(request_id):
        return f"id {reprlib.repr(cid)}, sent {request_id!r}"
    return None


async def _drop_connection(response: httpx.Response) -> None:
    """Close the socket a response came on, so that the pool never lends the connection again (an idle connection
    whose socket is closed counts as expired) and the answer still owed on it is never read."""
    stream = response.extensions.get("network_stream")
    if stream is not None:
        await stream.aclose()


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the (decoded) body and whether that was all of it; stops reading past the limit,
    so a huge or endless body costs ``limit`` bytes of memory, not its size."""
    chunks: list[bytes] = []
    size = 0
    async with aclosing(response.aiter_bytes()) as body:
        async for chunk in body:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks)[:limit], False
    return b"".join(chunks), True


def _text(raw: bytes) -> str:
    """The start of a body, for a detail: UTF-8 with undecodable bytes replaced."""
    return raw[:_DETAIL_BYTES].decode("utf-8", "replace")[:_DETAIL_CHARS]


def _malformed(field: str, expected: str, value: Any) -> _Failure:
    """The failure for a field of the wrong type or range; the value is shown abridged (it may be a huge tree)."""
    return _Failure(Status.EXEC_ERR, f"malformed completion: {field}: expected {expected}, got {reprlib.repr(value)}",
                    False)


def _usage_count(usage: dict[str, Any], name: str) -> int:
    """``usage[name]``: absent or null is 0 (servers may omit usage), else an integer in [0, MAX_USAGE_TOKENS]."""
    value = usage.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_USAGE_TOKENS:
        raise _malformed(f"usage.{name}", f"an integer in [0, {MAX_USAGE_TOKENS}]", value)
    return value


def _parse_completion(data: Any, n: int) -> tuple[list[str], int, int, list[bool]]:
    """Texts (in ``index`` order), usage and which choices stopped at the generation cap (``finish_reason``
    "length") from an OpenAI chat-completion body, every field checked for its type and range, none cast; a
    malformed body is an EXEC_ERR attempt."""
    if not isinstance(data, dict):
        raise _malformed("(top level)", "a JSON object", data)
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise _malformed("choices", "a list", choices)
    if len(choices) != n:
        raise _Failure(Status.EXEC_ERR, f"asked for {n} choices, got {len(choices)}", False)
    indexed = []
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise _malformed(f"choices[{i}]", "an object", choice)
        index = choice.get("index", 0)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
            raise _malformed(f"choices[{i}].index", f"an integer in [0, {n - 1}]", index)
        message = choice.get("message")
        if not isinstance(message, dict):
            raise _malformed(f"choices[{i}].message", "an object", message)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise _malformed(f"choices[{i}].message.content", "a string or null", content)
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise _malformed(f"choices[{i}].finish_reason", "a string or null", finish)
        indexed.append((index, utf8_safe(content or ""), finish == "length"))
    usage = data.get("usage")
    if usage is None:
        usage = {}
    elif not isinstance(usage, dict):
        raise _malformed("usage", "an object or null", usage)
    ordered = sorted(indexed, key=lambda entry: entry[0])
    return ([text for _, text, _ in ordered], _usage_count(usage, "prompt_tokens"),
            _usage_count(usage, "completion_tokens"), [cut for _, _, cut in ordered])
