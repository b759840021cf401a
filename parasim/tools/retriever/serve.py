"""The retriever service, Search-R1's API: ``python -m parasim.tools.retriever.serve --index DIR --port P``.

``POST /retrieve {"queries": [...], "topk": k, "return_scores": bool}`` answers
``{"result": [[{"document": doc, "score": s}, ...], ...]}`` (or lists of bare documents without
scores), one list per query, exactly as Search-R1's ``retrieval_server.py`` does, so its search
tool, clients and indexes interoperate. ``GET /health`` reports the corpus size for readiness checks.
"""
from __future__ import annotations

import argparse
import threading
from typing import Any

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
    """A FastAPI app over a loaded index. Searches are serialized: fast tokenizers are not thread-safe."""
    if not 1 <= default_topk <= MAX_TOPK:
        raise ValueError(f"default_topk={default_topk}: must be in [1, {MAX_TOPK}]")
    app = FastAPI(title="parasim retriever")
    lock = threading.Lock()

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "documents": len(index), "model": index.meta.model}

    @app.post("/retrieve")
    def retrieve(request: QueryRequest) -> dict[str, Any]:
        with lock:
            docs, scores = index.search(request.queries, request.topk or default_topk)
        if request.return_scores:
            return {"result": [[{"document": d, "score": s} for d, s in zip(ds, ss)] for ds, ss in zip(docs, scores)]}
        return {"result": docs}

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parasim.tools.retriever.serve", description=__doc__)
    parser.add_argument("--index", required=True, help="index directory from parasim.tools.retriever.build")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3, help="default topk when a request gives none")
    parser.add_argument("--model", default=None, help="encoder path, if it moved since the index was built")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    import uvicorn

    app = create_app(DenseIndex(args.index, model_path=args.model, device=args.device), args.topk)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
