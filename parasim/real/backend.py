"""The real-tools backend: each ``ToolCall`` of a round becomes real work, all calls of a round at once.

Agent tools are prompt templates (``parasim.real.prompts``) sent to the pool model's OpenAI-compatible
endpoint; ``ensemble_solver`` is k samples in one request (``n=k``) and a majority vote; ``code_reasoner``
runs the program the model wrote in the python sandbox (so EXEC_ERR means what it means in the simulator:
the code failed); ``knowledge_searcher`` puts the retriever's passages in its prompt when a retriever is
configured. ``python`` and ``search`` go to the sandbox and the retriever. Token counts come from each
response's ``usage``, USD from the pool's (or the endpoint's) prices, latency is measured.

Tools are looked up in the pool's tool spec (``parasim.tools.spec``) by kind and behaviour, never by name, so a
user's tools run the same paths: an agent tool sends its ``real.system_prompt`` through the agent path (a
``reviewer`` one returns a verdict, as critical_reviewer does), and a basic tool with a ``real.callable`` calls the
user's function with its argument in a daemon thread under the tool's time limit (``BackendConfig.user_tool_timeout_s``,
else the pool's ``runtime.timeout_s``): an exception is EXEC_ERR with its message, a call past the limit TIMEOUT
(the thread is left to finish on its own: Python cannot stop it), never a crash.

Model text is untrusted input. The chat client (``parasim.real.client``) checks each reply's types, usage ranges
and size and makes its text UTF-8-safe; the python and search tools' outputs get lone surrogates replaced here (a
retriever's JSON may carry them), so that every result can be logged and sent on as context; answers are cut at
``max_answer_chars`` like outputs at ``max_output_chars``, so what an episode keeps is bounded; and the extractors
of ``parasim.real.prompts`` are linear in the text, as they run on the loop every episode shares.

Everything runs on one event loop in a daemon thread that the backend owns, so that synchronous callers
(the Gymnasium env, a trainer) and many episodes at once share the per-endpoint concurrency limits, and the
backend also works where the caller already runs a loop. No call raises: failures are statuses.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from parasim.protocol.schema import CallResult, Status, Tool, ToolCall
from parasim.real import prompts
from parasim.real.client import ChatClient, Completion, utf8_safe
from parasim.real.endpoints import EndpointError, EndpointMap, load_endpoint_map
from parasim.tools.spec import ToolDef, ToolSpec, default_tool_spec, resolve_callable

T = TypeVar("T")
BasicTool = Callable[[str], Awaitable[CallResult]]  # python: code -> result; search: query -> result


def approx_tokens(text: str) -> int:
    """Token count of a text that no server counted (sandbox output, passages): ~4 UTF-8 bytes a token,
    the usual BPE rate on English and code. Replace with a tokenizer's ``len(encode())`` for exact counts."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def _cut(text: str, limit: int) -> str:
    """``text`` up to ``limit`` characters, with a marker saying how much was cut."""
    return text if len(text) <= limit else text[:limit] + f"\n...[truncated {len(text) - limit} chars]"


@dataclass(frozen=True)
class BackendConfig:
    """Knobs of the backend that are not per endpoint."""

    ensemble_k: int | None = None  # samples of ensemble_solver; None: the pool's protocol.ensemble_k
    max_output_chars: int = 4000  # a call's text fed back to the manager is cut here, with a marker
    max_answer_chars: int = 1000  # an extracted answer (and each ensemble sample) is cut here, with a marker
    user_tool_timeout_s: float | None = None  # a user basic tool's time limit; None: its pool runtime.timeout_s

    def __post_init__(self) -> None:
        k = self.ensemble_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 16):
            raise ValueError(f"BackendConfig.ensemble_k: expected None or an integer in [1, 16], got {k!r}")
        t = self.user_tool_timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 1e5):
            raise ValueError(f"BackendConfig.user_tool_timeout_s: expected None or a number in (0, 1e5], got {t!r}")
        for name in ("max_output_chars", "max_answer_chars"):
            chars = getattr(self, name)
            if isinstance(chars, bool) or not isinstance(chars, int) or chars < 1:
                raise ValueError(f"BackendConfig.{name}: expected an integer >= 1, got {chars!r}")


@dataclass(frozen=True)
class CallInput:
    """What one call needs besides the ``ToolCall``: the task, the carried context and a sampling seed."""

    question: str
    options: tuple[str, ...] = ()
    context: str = ""
    seed: int | None = None


class _LoopThread:
    """An asyncio loop running forever in a daemon thread; ``run`` blocks the caller until a coroutine ends."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="parasim-real-backend", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


@dataclass
class _Prices:
    """USD per input / output token for each model id, per call and per second and cost units for each tool (one
    entry per tool of the spec, and one for ``final_answer``'s value with the default spec)."""

    num_tools: int
    per_token: dict[str, tuple[float, float]] = field(default_factory=dict)
    usd_call: np.ndarray = field(init=False)
    usd_s: np.ndarray = field(init=False)
    cost_units: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = max(self.num_tools, len(Tool))
        self.usd_call, self.usd_s, self.cost_units = np.zeros(n), np.zeros(n), np.ones(n)


def _build(factory: Callable[..., T], section: Any, name: str) -> T:
    """``factory(**section)`` with errors that name the endpoint map's section."""
    if not isinstance(section, dict):
        raise EndpointError(f"{name}: expected a mapping of settings, got {type(section).__name__}")
    try:
        return factory(**section)
    except TypeError as err:
        raise EndpointError(f"{name}: {err}") from None


class RealToolBackend:
    """Executes rounds of ``ToolCall``s against real endpoints and basic tools.

    ``pool`` (a ``PoolSpec`` or its name) gives the tool spec (``tools``; the default spec without a pool), cost
    units per tool, per-call USD and default token prices for models it knows; an endpoint's own
    ``input_per_mtok`` / ``output_per_mtok`` win. ``python_tool``
    and ``search_tool`` are async callables, ``text -> CallResult`` (``from_config`` builds them from
    ``parasim.tools``); without them those tools answer EXEC_ERR naming what is missing.
    """

    def __init__(self, endpoints: EndpointMap | str | dict, pool: Any = "paramanager", *,
                 python_tool: BasicTool | None = None, search_tool: BasicTool | None = None,
                 config: BackendConfig | None = None) -> None:
        from parasim.pools.pool import load_pool

        self.endpoints = load_endpoint_map(endpoints)
        self.pool = load_pool(pool) if pool is not None else None
        self.config = config or BackendConfig()
        self.tools: ToolSpec = self.pool.tools if self.pool is not None else default_tool_spec()
        self.python_tool, self.search_tool = _utf8_safe(python_tool), _utf8_safe(search_tool)
        k = self.config.ensemble_k
        self.ensemble_k = k if k is not None else (self.pool.ensemble_k if self.pool is not None else 3)
        self.prices = self._prices()
        self.chat = ChatClient(self.endpoints)
        self._loop = _LoopThread()

    @classmethod
    def from_config(cls, endpoints: EndpointMap | str | dict, pool: Any = "paramanager",
                    config: BackendConfig | None = None) -> RealToolBackend:
        """A backend whose basic tools come from the endpoint map's optional ``python`` section (fields of
        ``parasim.tools.sandbox.SandboxConfig``) and ``search`` section (``base_url``, ``topk``, ``timeout_s``
        of ``parasim.tools.retriever.client.RetrieverClient``)."""
        emap = load_endpoint_map(endpoints)
        python_tool = search_tool = None
        if "python" in emap.extra:
            from parasim.tools.sandbox import Sandbox, SandboxConfig

            python_tool = Sandbox(_build(SandboxConfig, emap.extra["python"], "python")).arun
        if "search" in emap.extra:
            from parasim.tools.retriever.client import RetrieverClient

            search_tool = _build(RetrieverClient, emap.extra["search"], "search").search
        return cls(emap, pool, python_tool=python_tool, search_tool=search_tool, config=config)

    def _prices(self) -> _Prices:
        prices = _Prices(self.tools.num_tools)
        names = self.pool.model_names[:-1] if self.pool is not None else ()
        direct = self.tools.with_behaviour("solver", agent=True)[0] if self.pool is not None else 0
        if self.pool is not None:
            prices.usd_call[:len(self.pool.usd_call)] = self.pool.usd_call
            prices.usd_s[:len(self.pool.usd_s)] = self.pool.usd_s
            prices.cost_units[:len(self.pool.cost_units)] = self.pool.cost_units
        for mid, ep in self.endpoints.endpoints.items():
            p_in = p_out = 0.0
            if mid in names:
                row = names.index(mid)
                p_in = float(self.pool.price_in[direct, row])  # agent tools share their model's prices
                p_out = float(self.pool.price_out[direct, row])
            if ep.input_per_mtok is not None:
                p_in = ep.input_per_mtok / 1e6
            if ep.output_per_mtok is not None:
                p_out = ep.output_per_mtok / 1e6
            prices.per_token[mid] = (p_in, p_out)
        return prices

    # ------------------------------------------------------------------------------------------ sync API
    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the backend's loop and wait for it (safe from any thread but the loop's)."""
        return self._loop.submit(coro).result()

    def run_round(self, calls: Sequence[ToolCall], inputs: Sequence[CallInput]) -> list[CallResult]:
        """All calls of a round concurrently; results in call order."""
        return self.run(self.around(calls, inputs))

    def close(self) -> None:
        """Close connections and stop the loop thread; the backend cannot be used afterwards."""
        if self._loop.loop.is_running():
            self.run(self.chat.aclose())
        self._loop.stop()

    def __enter__(self) -> RealToolBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------- async API
    async def around(self, calls: Sequence[ToolCall], inputs: Sequence[CallInput]) -> list[CallResult]:
        if len(calls) != len(inputs):
            raise ValueError(f"inputs: expected one per call ({len(calls)}), got {len(inputs)}")
        return list(await asyncio.gather(*(self.acall(c, i) for c, i in zip(calls, inputs))))

    async def acall(self, call: ToolCall, inp: CallInput) -> CallResult:
        """One call; whatever goes wrong comes back as a status with the reason in ``detail``."""
        tool = self.tools.tool_def(call.tool) if call.tool is not Tool.FINAL_ANSWER else None
        try:
            if tool is None:
                result = CallResult(Status.INVALID_TOOL, detail=f"{call.tool.wire_name} is not a callable tool")
            elif tool.is_agent:
                result = await self._agent(call, tool, inp)
            elif tool.callable is not None:
                result = await self._user_tool(tool, call)
            elif tool.behaviour == "code_exec":
                result = await self._basic(self.python_tool, tool.name, call.subtask)
            else:  # a basic search tool without a callable: the retriever (the spec allows no other)
                result = await self._basic(self.search_tool, tool.name, call.subtask)
        except Exception as err:  # a bug in a tool adapter must not end the episode
            result = CallResult(Status.EXEC_ERR, detail=f"{type(err).__name__}: {err}"[:300])
        result.cost_units = float(self.prices.cost_units[call.tool])
        result.usd += float(self.prices.usd_call[call.tool] + self.prices.usd_s[call.tool] * result.latency_s)
        result.output = _cut(result.output, self.config.max_output_chars)
        return result

    def _answer(self, text: str) -> str:
        """The answer in a model's (or a program's) text, bounded."""
        return _cut(prompts.extract_answer(text), self.config.max_answer_chars)

    async def _basic(self, tool: BasicTool | None, name: str, text: str) -> CallResult:
        if tool is None:
            return CallResult(Status.EXEC_ERR, detail=f"the {name} tool is not configured on this backend")
        result = await tool(text)
        if not result.tokens_in:
            result.tokens_in = approx_tokens(text)
        if not result.tokens_out:
            result.tokens_out = approx_tokens(result.output)
        return result

    async def _user_tool(self, tool: ToolDef, call: ToolCall) -> CallResult:
        """A user's basic tool: its ``real.callable`` on the call's argument in a daemon thread, within the time
        limit; its ``str`` return is the output (and, for a ``solver`` tool, the answer). The function receives the
        argument as the parser typed it (``ToolCall.argument``: an ``int`` for an ``integer`` argument), or the
        call's text where the call was not parsed from text."""
        text = call.subtask
        func = resolve_callable(tool)
        timeout = self.config.user_tool_timeout_s
        if timeout is None:
            timeout = float(self.pool.timeout[tool.index]) if self.pool is not None else 60.0
        start = time.perf_counter()
        try:
            argument = text if call.argument is None else call.argument
            value = await asyncio.wait_for(_in_thread(func, argument, tool.name), timeout)
        except TimeoutError:
            return CallResult(Status.TIMEOUT, latency_s=timeout, tokens_in=approx_tokens(text),
                              detail=f"{tool.name} did not return within {timeout:g} s")
        except Exception as err:  # the user's function raised: the call failed, the episode goes on
            return CallResult(Status.EXEC_ERR, latency_s=time.perf_counter() - start, tokens_in=approx_tokens(text),
                              detail=utf8_safe(f"{tool.name} raised {type(err).__name__}: {err}")[:1000])
        latency = time.perf_counter() - start
        if not isinstance(value, str):
            return CallResult(Status.EXEC_ERR, latency_s=latency, tokens_in=approx_tokens(text),
                              detail=f"{tool.name} returned {type(value).__name__}, expected str")
        output = utf8_safe(value)
        extra = {"answer": _cut(output.strip(), self.config.max_answer_chars)} if tool.behaviour == "solver" else {}
        return CallResult(Status.OK, output=output, tokens_in=approx_tokens(text), tokens_out=approx_tokens(output),
                          latency_s=latency, extra=extra)

    def _usd(self, model_id: str, tokens_in: int, tokens_out: int) -> float:
        p_in, p_out = self.prices.per_token.get(model_id, (0.0, 0.0))
        return tokens_in * p_in + tokens_out * p_out

    def termination_usd(self, synthesis: Any) -> float:
        """USD of the termination model's call (a ``Synthesis``) at its endpoint's prices."""
        return self._usd(self.endpoints.termination.model, synthesis.tokens_in, synthesis.tokens_out)

    def _from_completion(self, call: ToolCall, comp: Completion, text: str, **extra: Any) -> CallResult:
        return CallResult(
            status=comp.status, output=text, tokens_in=comp.tokens_in, tokens_out=comp.tokens_out,
            usd=self._usd(call.model, comp.tokens_in, comp.tokens_out), latency_s=comp.latency_s,
            detail=comp.detail, extra={"attempts": comp.attempts, **extra})

    async def _agent(self, call: ToolCall, tool: ToolDef, inp: CallInput) -> CallResult:
        """An agent tool's call by its behaviour: search puts passages in the prompt, ensemble samples k times and
        votes, code_exec runs the program, reviewer adds the verdict (``extra["flagged"]``)."""
        if call.model not in self.endpoints.endpoints:
            return CallResult(Status.INVALID_TOOL, detail=f"no endpoint for model {call.model!r}; "
                              f"known: {sorted(self.endpoints.endpoints)}")
        context, search_latency = inp.context, 0.0
        if tool.behaviour == "search" and self.search_tool is not None:
            found = await self.search_tool(call.subtask or inp.question)
            search_latency = found.latency_s
            if found.status is Status.OK and found.output:
                context = (context + "\n\n" if context else "") + f"Retrieved passages:\n{found.output}"
        messages = prompts.agent_messages(tool, inp.question, call.subtask, context, inp.options)
        n = self.ensemble_k if tool.behaviour == "ensemble" else 1
        comp = await self.chat.chat(call.model, messages, n=n, seed=inp.seed)
        comp.latency_s += search_latency
        if comp.status is not Status.OK:
            return self._from_completion(call, comp, "")
        if tool.behaviour == "ensemble":
            # a sample cut at the generation cap has no answer and does not vote (the simulator's rule)
            whole = [t for t, cut in zip(comp.texts, comp.cut or [False] * n) if not cut]
            answers = [self._answer(t) for t in whole]
            answer, votes = prompts.majority_vote(answers)
            best = next((t for t, a in zip(whole, answers)
                         if prompts.normalize_answer(a) == prompts.normalize_answer(answer)), whole[0])
            text = f"{best}\n\nMajority of {n} samples ({votes} votes): {answer}"
            return self._from_completion(call, comp, text, answer=answer, votes=votes, samples=answers)
        text = comp.texts[0]
        if tool.behaviour == "code_exec":
            return await self._run_code(call, comp, text)
        extra: dict[str, Any] = {"answer": self._answer(text)}
        if tool.behaviour == "reviewer":
            extra["flagged"] = prompts.review_verdict(text)
        return self._from_completion(call, comp, text, **extra)

    async def _run_code(self, call: ToolCall, comp: Completion, text: str) -> CallResult:
        """Run the model's program; its failure is the call's EXEC_ERR, its last output line the answer."""
        code = prompts.extract_code(text)
        if code is None or self.python_tool is None:
            return self._from_completion(call, comp, text, answer=self._answer(text), executed=False)
        ran = await self.python_tool(code)
        result = self._from_completion(call, comp, text, executed=True)
        result.latency_s += ran.latency_s
        if ran.status is not Status.OK:
            result.status = ran.status
            result.detail = f"the program failed: {ran.detail or ran.output}"[:1000]
            result.output = f"{text}\n\nProgram output:\n{ran.output}"
            return result
        lines = [ln for ln in ran.output.splitlines() if ln.strip()]
        result.output = f"{text}\n\nProgram output:\n{ran.output}"
        last = lines[-1].strip() if lines else ""
        result.extra["answer"] = _cut(last, self.config.max_answer_chars) if last else self._answer(text)
        return result


def _in_thread(func: Callable[[Any], Any], arg: str | int, name: str) -> asyncio.Future[Any]:
    """``func(arg)`` in a new daemon thread, as a future of the running loop: a function that never returns keeps
    only its own thread (a pool's worker would be lost to later calls, and a non-daemon thread would hold up the
    process at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # a timed-out call's future is cancelled already
            future.set_result(value) if ok else future.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, func(arg)
        except Exception as err:  # noqa: BLE001 -- the user's error becomes the call's EXEC_ERR
            ok, value = False, err
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the backend closed its loop meanwhile: nobody waits for this result
            pass

    threading.Thread(target=work, name=f"parasim-tool-{name}", daemon=True).start()
    return future


def _utf8_safe(tool: BasicTool | None) -> BasicTool | None:
    """``tool`` with lone surrogates cleaned out of its output and detail (a retriever's JSON may carry them)."""
    if tool is None:
        return None

    async def cleaned(text: str) -> CallResult:
        result = await tool(text)
        result.output, result.detail = utf8_safe(result.output), utf8_safe(result.detail)
        return result

    return cleaned

