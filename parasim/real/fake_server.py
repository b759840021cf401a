"""A scripted OpenAI-compatible server: the real HTTP path of the backend without a model.

Why: the backend's failure handling (timeouts, 5xx, a server killed mid-episode, concurrency limits) has to
be tested against a real socket and a real process, and a dry run of a real-tools pipeline should not need a
GPU. Each served model answers ``Final answer: <answer>`` with the answers given on the command line (the
choices of an ``n > 1`` request cycle through them), adds a verdict for review prompts and a program for
code prompts, and reports ``usage`` as whitespace-token counts. ``POST /control`` scripts faults: a delay,
an HTTP status for the next k requests. ``GET /stats`` reports requests served and the peak in flight. The
vLLM weight-reload routes (``/pause``, ``/collective_rpc``, ``/reset_prefix_cache``, ``/resume``,
``/server_info``) are recorded in order, with or without the parasim worker extension (``control``).

    python -m parasim.real.fake_server --port 8011 --model tiny=42 --model split=41,42,42
"""
import argparse  # no `from __future__ import annotations`: FastAPI reads the route signatures at runtime
import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

_CODE_HINT = "```python block"
_REVIEW_HINT = "Verdict: CORRECT"


@dataclass
class _State:
    answers: dict[str, list[str]]
    delay_s: float = 0.0
    fail_status: int = 500
    fail_next: int = 0
    requests: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    seen: list[dict[str, Any]] = field(default_factory=list)
    extension: bool = True
    device: str = "cpu"
    admin: list[str] = field(default_factory=list)


def _words(text: str) -> int:
    return len(text.split())


def _reply(state: _State, body: dict[str, Any], index: int) -> str:
    model = body.get("model", "")
    answers = state.answers.get(model) or ["42"]
    answer = answers[index % len(answers)]
    system = " ".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system")
    if _CODE_HINT in system:
        return f"I will compute it.\n```python\nprint({answer!r})\n```\nFinal answer: {answer}"
    if _REVIEW_HINT in system:
        return f"The steps check out.\nVerdict: CORRECT\nFinal answer: {answer}"
    return f"Step 1: think.\nFinal answer: {answer}"


def build_app(answers: dict[str, list[str]]) -> Any:
    """The FastAPI app; ``answers`` maps a served model name to the answers its choices cycle through."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()
    state = _State(answers=answers)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model"} for m in state.answers]}

    @app.post("/control")
    async def control(request: Request) -> dict[str, Any]:
        body = await request.json()
        state.delay_s = float(body.get("delay_s", state.delay_s))
        state.fail_status = int(body.get("fail_status", state.fail_status))
        state.fail_next = int(body.get("fail_next", state.fail_next))
        state.extension = bool(body.get("extension", state.extension))
        state.device = str(body.get("device", state.device))
        state.peak_in_flight = state.in_flight  # each control call starts a new measurement window
        return {"ok": True}

    @app.post("/pause")
    @app.post("/resume")
    @app.post("/reset_prefix_cache")
    async def admin(request: Request) -> dict[str, Any]:
        state.admin.append(request.url.path.strip("/"))
        return {"status": "ok"}

    @app.post("/collective_rpc")
    async def rpc(request: Request) -> Any:
        body = await request.json()
        method = body.get("method")
        state.admin.append(f"rpc:{method}:{json.dumps(body.get('kwargs', {}), sort_keys=True)}")
        if method == "parasim_reload_weights" and not state.extension:
            return JSONResponse({"error": {"message": f"'Worker' object has no attribute '{method}'"}},
                                status_code=500)
        return {"results": [None]}

    @app.get("/server_info")
    async def server_info() -> dict[str, Any]:
        return {"vllm_config": f"model='fake', device_config={state.device}, seed=0"}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"requests": state.requests, "peak_in_flight": state.peak_in_flight, "seen": state.seen,
                "admin": state.admin}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        state.requests += 1
        state.in_flight += 1
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        try:
            state.seen.append({"model": body.get("model"), "n": body.get("n", 1), "seed": body.get("seed"),
                               "messages": body.get("messages")})
            if state.delay_s:
                await asyncio.sleep(state.delay_s)
            if state.fail_next > 0:
                state.fail_next -= 1
                return JSONResponse({"error": {"message": "scripted failure"}}, status_code=state.fail_status)
            if body.get("model") not in state.answers:
                return JSONResponse({"error": {"message": f"model {body.get('model')!r} not served"}},
                                    status_code=404)
            n = int(body.get("n", 1))
            texts = [_reply(state, body, i) for i in range(n)]
            prompt_tokens = sum(_words(m.get("content", "")) for m in body.get("messages", []))
            return {
                "id": f"chatcmpl-{state.requests}", "object": "chat.completion", "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                            for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sum(_words(t) for t in texts),
                          "total_tokens": prompt_tokens + sum(_words(t) for t in texts)},
            }
        finally:
            state.in_flight -= 1

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", action="append", default=[], metavar="NAME=ANSWER[,ANSWER...]",
                        help="a served model and the answers its choices cycle through (repeatable)")
    args = parser.parse_args(argv)
    answers = {}
    for spec in args.model or ["tiny=42"]:
        name, _, values = spec.partition("=")
        answers[name] = values.split(",") if values else ["42"]
    import uvicorn

    uvicorn.run(build_app(answers), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
