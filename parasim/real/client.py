"""Async calls to OpenAI-compatible ``/v1/chat/completions`` endpoints, with failures as statuses.

Why its own small client instead of the ``openai`` package: the backend needs a per-endpoint concurrency
limit shared by every episode in flight, a hard per-attempt deadline (httpx's timeouts are per socket
operation, so a server trickling bytes could hold a call forever), bounded retries with exponential backoff,
and a result that is always a value: a dead server mid-episode must become a TIMEOUT in the manager's
feedback, not an exception that ends a GRPO step.

Status mapping (shared/DESIGN.md 3): no answer in time (deadline, refused or dropped connection) is
TIMEOUT; an answer that is an error (HTTP 4xx/5xx, a body that is not a completion) is EXEC_ERR.
Timeouts, dropped connections, 408/429 and 5xx are retried; other 4xx are not (a retry cannot fix them).
That rule and the backoff schedule are :func:`retryable_status` and :func:`backoff_delay`, shared with the
trainer's vLLM rollout client.
"""
from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from parasim.protocol.schema import Status
from parasim.real.endpoints import Endpoint, EndpointMap

_RETRY_HTTP = frozenset({408, 429})
_DETAIL_CHARS = 300


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
    is used on (the backend runs a single loop thread).
    """

    def __init__(self, endpoints: EndpointMap, http: httpx.AsyncClient | None = None) -> None:
        self.endpoints = endpoints
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
                texts, tokens_in, tokens_out = _parse_completion(data, n)
                return Completion(Status.OK, texts, tokens_in, tokens_out, time.perf_counter() - start, attempt + 1)
            except _Failure as err:
                failure = err
            except asyncio.TimeoutError:
                failure = _Failure(Status.TIMEOUT, f"no answer within {ep.timeout_s:g} s", True)
            if not failure.retryable:
                break
        return Completion(failure.status, latency_s=time.perf_counter() - start, attempts=attempt + 1,
                          detail=f"{ep.model_id}: {failure.detail} (after {attempt + 1} attempt(s))")

    async def _post(self, ep: Endpoint, body: dict[str, Any]) -> Any:
        try:
            response = await self._client().post(f"{ep.base_url}/chat/completions", json=body, headers=ep.headers())
        except httpx.TransportError as err:  # refused, reset, dropped mid-response, DNS
            raise _Failure(Status.TIMEOUT, f"{type(err).__name__}: {err}"[:_DETAIL_CHARS], True) from None
        if response.status_code != 200:
            raise _Failure(Status.EXEC_ERR, f"HTTP {response.status_code}: {response.text[:_DETAIL_CHARS]}",
                           retryable_status(response.status_code))
        try:
            return response.json()
        except ValueError:
            raise _Failure(Status.EXEC_ERR, f"response is not JSON: {response.text[:_DETAIL_CHARS]!r}", False) from None


def _parse_completion(data: Any, n: int) -> tuple[list[str], int, int]:
    """Texts and usage from an OpenAI chat-completion body; a malformed body is an EXEC_ERR attempt."""
    try:
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        texts = [str(c["message"].get("content") or "") for c in choices]
        usage = data.get("usage") or {}
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
    except (KeyError, TypeError, AttributeError, ValueError) as err:
        raise _Failure(Status.EXEC_ERR, f"malformed completion ({type(err).__name__}: {err})", False) from None
    if len(texts) != n:
        raise _Failure(Status.EXEC_ERR, f"asked for {n} choices, got {len(texts)}", False)
    return texts, tokens_in, tokens_out
