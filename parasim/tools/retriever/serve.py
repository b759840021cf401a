"""The retriever service, Search-R1's API: ``python -m parasim.tools.retriever.serve --index DIR --port P``.

``POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}`` answers
``{"result": [[{"document": doc, "score": s}, ...], ...]}`` (or lists of bare documents without
scores), one list per query, exactly as Search-R1's ``retrieval_server.py`` does, so its search
tool, clients and indexes interoperate. ``GET /health`` reports the corpus size for readiness checks.
"""
from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, Field

from parasim.tools.retriever.index import DenseIndex

MAX_TOPK = 1000


class QueryRequest(BaseModel):
    """Search-R1's request body; ``topk`` falls back to the server default when absent or null."""

    queries: list[str]
    topk: int | None = Field(default=None, ge=1, le=MAX_TOPK)
    return_scores: bool = False


def create_app(index: DenseIndex, default_topk: int = 3) -> FastAPI:
    """A FastAPI app over a loaded index.

    Searches run on one dedicated thread: fast tokenizers are not thread-safe, and torch's OpenMP
    pool is per calling thread, so spreading searches over the server's thread pool would build a
    thread team per worker and oversubscribe the CPUs. Batching the queries of a request is where the
    throughput comes from.
    """
    if not 1 <= default_topk <= MAX_TOPK:
        raise ValueError(f"default_topk={default_topk}: must be in [1, {MAX_TOPK}]")
    app = FastAPI(title="parasim retriever")
    searcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "documents": len(index), "model": index.meta.model}

    @app.post("/retrieve")
    async def retrieve(request: QueryRequest) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        docs, scores = await loop.run_in_executor(searcher, index.search, request.queries,
                                                  request.topk or default_topk)
        if request.return_scores:
            return {"result": [[{"document": d, "score": s} for d, s in zip(ds, ss)] for ds, ss in zip(docs, scores)]}
        return {"result": docs}

    return app


def make_server(argv: list[str] | None = None) -> uvicorn.Server:
    """Parse the command line, load the index and return the (not yet running) uvicorn server."""
    parser = argparse.ArgumentParser(prog="python -m parasim.tools.retriever.serve", description=__doc__)
    parser.add_argument("--index", required=True, help="index directory from parasim.tools.retriever.build")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3, help="default topk when a request gives none")
    parser.add_argument("--model", default=None, help="encoder path, if it moved since the index was built")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (0: torch's default); 1 keeps latency steady on a busy host, "
                             "where OpenMP teams stall on descheduled threads")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    if args.threads < 0:
        parser.error(f"--threads={args.threads}: must be >= 0")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    app = create_app(DenseIndex(args.index, model_path=args.model, device=args.device), args.topk)
    return uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level))


def main(argv: list[str] | None = None) -> int:
    make_server(argv).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
