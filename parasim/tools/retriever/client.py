"""The ``search`` tool's client: queries a retriever service, failures become call statuses.

A round's searches go out as one ``POST /retrieve`` (the service batches the encoding); a timeout
becomes TIMEOUT and any other transport, HTTP or payload failure EXEC_ERR, so a dead retriever
costs the episode a status, never a crash. Passages are rendered the way Search-R1 feeds them back
to the model: ``Doc i(Title: t) text``.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from parasim.protocol.schema import CallResult, Status


def format_passages(hits: Sequence[dict[str, Any]]) -> str:
    """Search-R1's rendering: title from the first line of ``contents``, the text after it."""
    lines = []
    for i, hit in enumerate(hits, start=1):
        doc = hit.get("document", hit)
        title, _, text = str(doc.get("contents", "")).partition("\n")
        lines.append(f"Doc {i}(Title: {title}) {text}")
    return "\n".join(lines) + ("\n" if lines else "")


class RetrieverClient:
    """Client of one retriever service (``base_url`` like ``http://127.0.0.1:8000``)."""

    def __init__(self, base_url: str, *, topk: int = 3, timeout_s: float = 10.0, max_query_chars: int = 2048,
                 client: httpx.AsyncClient | None = None) -> None:
        if max_query_chars < 1:
            raise ValueError(f"RetrieverClient.max_query_chars={max_query_chars}: must be >= 1")
        if topk < 1:
            raise ValueError(f"RetrieverClient.topk={topk}: must be >= 1")
        if not timeout_s > 0:
            raise ValueError(f"RetrieverClient.timeout_s={timeout_s}: must be > 0")
        self.url = base_url.rstrip("/") + "/retrieve"
        self.topk, self.timeout_s, self.max_query_chars = topk, timeout_s, max_query_chars
        self._client = client  # shared pool if given; else one client per request, safe across event loops

    async def retrieve(self, queries: Sequence[str], topk: int | None = None) -> list[list[dict[str, Any]]]:
        """Raw hits ``[{"document", "score"}, ...]`` per query; raises httpx errors and ValueError."""
        payload = {"queries": list(queries), "topk": topk or self.topk, "return_scores": True}
        if self._client is not None:
            response = await self._client.post(self.url, json=payload, timeout=self.timeout_s)
        else:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.post(self.url, json=payload)
        response.raise_for_status()
        result = response.json().get("result")
        if not isinstance(result, list) or len(result) != len(queries):
            raise ValueError(f"retriever answered {type(result).__name__} for {len(queries)} queries")
        return result

    async def search_many(self, queries: Sequence[str], topk: int | None = None) -> list[CallResult]:
        """One result per query, in order; never raises on service failures."""
        results: list[CallResult | None] = [None] * len(queries)
        live = []
        for i, query in enumerate(queries):
            if not isinstance(query, str) or not query.strip():
                results[i] = CallResult(Status.FORMAT_ERR, detail="search needs a non-empty query string")
            else:
                live.append(i)
        if live:
            start = time.monotonic()
            status, detail, hits = Status.OK, "", None
            try:  # the encoder reads a few hundred tokens anyway; a megabyte of model text must not stall it
                hits = await self.retrieve([queries[i][: self.max_query_chars] for i in live], topk)
            except httpx.TimeoutException as exc:
                status = Status.TIMEOUT
                detail = f"retriever timed out after {self.timeout_s:g} s ({type(exc).__name__})"
            except (httpx.HTTPError, ValueError) as exc:  # connection refused, 5xx, bad JSON / shape
                status, detail = Status.EXEC_ERR, f"retriever error: {type(exc).__name__}: {exc}"
            latency = time.monotonic() - start
            for j, i in enumerate(live):
                if hits is None:
                    results[i] = CallResult(status, detail=detail, latency_s=latency)
                    continue
                ids = [h.get("document", {}).get("id") for h in hits[j]]
                results[i] = CallResult(Status.OK, output=format_passages(hits[j]), latency_s=latency,
                                        extra={"doc_ids": ids, "scores": [h.get("score") for h in hits[j]]})
        return [r for r in results if r is not None]

    async def search(self, query: str, topk: int | None = None) -> CallResult:
        """One query as one call result."""
        return (await self.search_many([query], topk))[0]
