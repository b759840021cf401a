"""A scripted OpenAI-compatible server: the real HTTP path of the backend without a model.

Why: the backend's failure handling (timeouts, 5xx, malformed bodies, a server killed mid-episode, concurrency
limits) has to be tested against a real socket and a real process, and a dry run of a real-tools pipeline should
not need a GPU. Each served model answers ``Final answer: <answer>`` with the answers given on the command line
(the choices of an ``n > 1`` request cycle through them), adds a verdict for review prompts and a program for code
prompts, and reports ``usage`` as whitespace-token counts. ``GET /stats`` reports requests served, those in flight
and their peak, the faults served per kind and the newest request bodies (``?seen=false``: without them). The vLLM
weight-reload routes (``/pause``, ``/collective_rpc``, ``/reset_prefix_cache``, ``/resume``, ``/server_info``) are
recorded in order, with or without the parasim worker extension (``control``).

Faults are scripted two ways. ``POST /control`` sets server-wide ones: a delay, an HTTP status for the next k
requests. And each request may carry its own script, a tag anywhere in its messages (a subtask, a context, the
manager's proposal in a termination prompt)::

    [fault:KIND]  [fault:KIND=ARG]  [fault:KIND=ARG*TIMES]

``*TIMES`` applies the fault to the first TIMES identical requests only (a retry sends the same body), so a
transient fault is one whose retry succeeds; without it every attempt gets the fault. The outcome depends only on
the request, never on arrival order, so a load test with many episodes in flight stays deterministic. Kinds (see
``FAULT_KINDS``): ``http=CODE`` an error status; ``slow=S`` answer after S seconds (longer than the client's
deadline: a hang); ``trickle=S`` a 200 whose body arrives in 8 pieces S seconds apart; ``badjson`` a 200 that is
not JSON; ``nochoices`` a completion without ``choices``; ``wrongtype`` choices whose ``message`` is a string;
``negusage`` a negative ``prompt_tokens``; ``infusage`` ``completion_tokens: Infinity``; ``deep`` JSON nested
100,000 deep; ``huge=B`` a valid completion of B characters; ``longanswer=B`` a final answer of B digits;
``hugejunk=B`` a 200 of B bytes that are not JSON; ``blank=N`` a reply of ``Verdict:`` and N newlines;
``surrogate`` a reply (so its answer) ending in a lone UTF-16 surrogate (``\\ud800``: legal JSON, not UTF-8).

    python tests/fake_server.py --port 8011 --model tiny=42 --model split=41,42,42
"""
import argparse  # no `from __future__ import annotations`: FastAPI reads the route signatures at runtime
import asyncio
import hashlib
import json
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

_CODE_HINT = "```python block"
_REVIEW_HINT = "Verdict: CORRECT"
_SEEN_LIMIT = 1000  # request bodies kept for /stats: the newest, so a long dry run does not grow the server
_FAULT_TAG = re.compile(r"\[fault:([a-z]+)(?:=([0-9.]+))?(?:\*([0-9]+))?\]")
_TRICKLE_PIECES = 8
_DEEP = 100_000
# kind -> whether it takes an argument
FAULT_KINDS: dict[str, bool] = {
    "http": True, "slow": True, "trickle": True, "badjson": False, "nochoices": False, "wrongtype": False,
    "negusage": False, "infusage": False, "deep": False, "huge": True, "longanswer": True, "hugejunk": True,
    "blank": True, "surrogate": False,
}


@dataclass
class _State:
    answers: dict[str, list[str]]
    delay_s: float = 0.0
    fail_status: int = 500
    fail_next: int = 0
    requests: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    seen: deque = field(default_factory=lambda: deque(maxlen=_SEEN_LIMIT))
    extension: bool = True
    device: str = "cpu"
    admin: list[str] = field(default_factory=list)
    faults: Counter = field(default_factory=Counter)  # faults served, by kind
    repeats: Counter = field(default_factory=Counter)  # body digest -> times seen, for ``*TIMES`` tags only


@dataclass(frozen=True)
class Fault:
    """One scripted fault: its kind and argument (seconds, bytes, an HTTP status; None where the kind has none)."""

    kind: str
    arg: float | None = None


def parse_fault(text: str) -> tuple[Fault, int | None] | None:
    """The first fault tag in ``text`` and its TIMES (None: every attempt); errors name the tag and the kinds."""
    match = _FAULT_TAG.search(text)
    if match is None:
        return None
    kind, arg, times = match.groups()
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault tag {match.group()!r}: unknown kind {kind!r}; known: {sorted(FAULT_KINDS)}")
    if FAULT_KINDS[kind] != (arg is not None):
        need = "needs" if FAULT_KINDS[kind] else "takes no"
        raise ValueError(f"fault tag {match.group()!r}: kind {kind!r} {need} an '=ARG'")
    return Fault(kind, float(arg) if arg is not None else None), int(times) if times is not None else None


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


def _completion(state: _State, body: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """A completion of ``texts``, each cut at the request's ``max_tokens`` (a word is a token here) with
    ``finish_reason`` "length", as vLLM stops a generation at the cap."""
    cap = body.get("max_tokens")
    cut = [isinstance(cap, int) and _words(t) > cap for t in texts]
    texts = [" ".join(t.split()[:cap]) if c else t for t, c in zip(texts, cut)]
    prompt_tokens = sum(_words(m.get("content", "")) for m in body.get("messages", []))
    completion_tokens = sum(_words(t) for t in texts)
    return {
        "id": f"chatcmpl-{state.requests}", "object": "chat.completion", "created": int(time.time()),
        "model": body["model"],
        "choices": [{"index": i, "message": {"role": "assistant", "content": t},
                     "finish_reason": "length" if c else "stop"} for i, (t, c) in enumerate(zip(texts, cut))],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def _texts(state: _State, body: dict[str, Any], fault: Fault | None) -> list[str]:
    """The choices' texts; the content faults replace them."""
    n = int(body.get("n", 1))
    texts = [_reply(state, body, i) for i in range(n)]
    kind, arg = (fault.kind, fault.arg) if fault is not None else ("", None)
    if kind == "huge":
        texts = ["x" * int(arg) + "\n" + t for t in texts]
    elif kind == "longanswer":
        texts = ["Final answer: " + "9" * int(arg)] * n
    elif kind == "blank":
        texts = ["Verdict:" + "\n" * int(arg)] * n
    elif kind == "surrogate":
        texts = [t + "\ud800" for t in texts]  # the answer line ends with it
    return texts


def _body(fault: Fault, done: dict[str, Any]) -> bytes:
    """The raw body of a 200 with a fault: bytes that are not a completion, or ``done`` changed and encoded
    with ``ensure_ascii`` and ``allow_nan`` (so that ``Infinity`` and ``\\ud800`` arrive as written)."""
    if fault.kind == "badjson":
        return b"<html>upstream error</html>"
    if fault.kind == "hugejunk":
        return b"#" * int(fault.arg)
    if fault.kind == "deep":
        return b'{"choices": ' + b"[" * _DEEP + b"]" * _DEEP + b"}"
    if fault.kind == "nochoices":
        done.pop("choices")
    elif fault.kind == "wrongtype":
        for choice in done["choices"]:
            choice["message"] = choice["message"]["content"]
    elif fault.kind == "negusage":
        done["usage"]["prompt_tokens"] = -7
    elif fault.kind == "infusage":
        done["usage"]["completion_tokens"] = float("inf")
    return json.dumps(done).encode("ascii")


def build_app(answers: dict[str, list[str]]) -> Any:
    """The FastAPI app; ``answers`` maps a served model name to the answers its choices cycle through."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    app = FastAPI()
    state = _State(answers=answers)

    def scripted(body: dict[str, Any]) -> Fault | None:
        """The request's fault tag, counted; a ``*TIMES`` tag counts identical bodies."""
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []) if isinstance(m, dict))
        parsed = parse_fault(text)
        if parsed is None:
            return None
        fault, times = parsed
        if times is not None:
            digest = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
            state.repeats[digest] += 1
            if state.repeats[digest] > times:
                return None
        state.faults[fault.kind] += 1
        return fault

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
    async def stats(seen: bool = True) -> dict[str, Any]:
        """Counters; ``?seen=false`` leaves out the request bodies (cheap enough to poll under load)."""
        return {"requests": state.requests, "in_flight": state.in_flight, "peak_in_flight": state.peak_in_flight,
                "seen": list(state.seen) if seen else [], "admin": state.admin, "faults": dict(state.faults)}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        state.requests += 1
        state.in_flight += 1
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        try:
            state.seen.append({"model": body.get("model"), "n": body.get("n", 1), "seed": body.get("seed"),
                               "messages": body.get("messages")})
            try:
                fault = scripted(body)
            except ValueError as err:
                return JSONResponse({"error": {"message": f"fake_server: {err}"}}, status_code=400)
            if state.delay_s:
                await asyncio.sleep(state.delay_s)
            if fault is not None and fault.kind == "slow":
                await asyncio.sleep(fault.arg)
            if state.fail_next > 0:
                state.fail_next -= 1
                return JSONResponse({"error": {"message": "scripted failure"}}, status_code=state.fail_status)
            if fault is not None and fault.kind == "http":
                return JSONResponse({"error": {"message": "scripted fault"}}, status_code=int(fault.arg))
            if body.get("model") not in state.answers:
                return JSONResponse({"error": {"message": f"model {body.get('model')!r} not served"}},
                                    status_code=404)
            done = _completion(state, body, _texts(state, body, fault))
            if fault is None or fault.kind == "slow":
                return done
            if fault.kind == "trickle":
                return StreamingResponse(_trickle(_body(fault, done), fault.arg), media_type="application/json")
            return Response(_body(fault, done), media_type="application/json")
        finally:
            state.in_flight -= 1

    return app


async def _trickle(raw: bytes, pause_s: float) -> Any:
    """``raw`` in ``_TRICKLE_PIECES`` pieces, ``pause_s`` apart: a server that answers, too slowly."""
    step = -(-len(raw) // _TRICKLE_PIECES)
    for start in range(0, len(raw), step):
        if start:
            await asyncio.sleep(pause_s)
        yield raw[start:start + step]


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
