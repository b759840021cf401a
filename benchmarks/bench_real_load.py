"""Calls per second of the real-tools backend under load: 64 concurrent episodes x 4 parallel calls x 3 rounds, plus
each episode's termination call, against the scripted OpenAI-compatible server on loopback
(``tests/fake_server.py``), fault-free and with a seeded fifth of the calls faulty, in the same run.

The faults are the ones that cost the client work: a 503 whose retry succeeds, a 500 retried to the end, invalid
JSON, a completion without choices, a slow answer, a 100 kB body. Hangs are left out on purpose: a round lasts as
long as its slowest call, so with hangs the number would measure the deadline, not the backend. The ratio (faulty
over fault-free calls/s) is what handling the faults costs. The client's own CPU is most of a call's cost here.

Run: ``pytest benchmarks/bench_real_load.py --benchmark-only`` (calls/s and the ratio land in ``extra_info`` and
are printed).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from parasim.protocol.schema import Tool, ToolCall
from parasim.real import prompts
from parasim.real.backend import RealToolBackend
from parasim.real.calllog import CallLogger
from parasim.real.engine import RealEpisodeEngine
from parasim.real.tasks import RealTask, parse_task

# the scripted OpenAI-compatible server (a test tool)
FAKE_SERVER = Path(__file__).resolve().parents[1] / "tests" / "fake_server.py"

EPISODES, CALLS, ROUNDS = 64, 4, 3
MODELS = {"good": "42", "split": "41,42,42"}
TOOLS = [Tool.STANDARD_REASONER, Tool.CRITICAL_REVIEWER, Tool.ENSEMBLE_SOLVER, Tool.KNOWLEDGE_SEARCHER]
FAULTS = ["[fault:http=503*1]", "[fault:http=500]", "[fault:badjson]", "[fault:nochoices]", "[fault:slow=0.05]",
          "[fault:huge=100000]"]
FAULT_RATE = 0.2
_RATES: dict[bool, float] = {}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, str(FAKE_SERVER), "--port", str(port)]
    argv += [f"--model={name}={answers}" for name, answers in MODELS.items()]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=1) as http:
            for _ in range(600):  # 30 s
                try:
                    if http.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            else:
                raise RuntimeError("the fake server did not come up in 30 s")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _rounds(episode: int, faults: bool) -> list[list[ToolCall]]:
    """The episode's calls; with ``faults`` a seeded FAULT_RATE of them carry a fault tag."""
    rng = np.random.default_rng(episode)
    rounds = []
    for r in range(ROUNDS):
        row = []
        for k in range(CALLS):
            tool, model = TOOLS[int(rng.integers(len(TOOLS)))], list(MODELS)[int(rng.integers(len(MODELS)))]
            tag = FAULTS[int(rng.integers(len(FAULTS)))] if rng.random() < FAULT_RATE else ""
            row.append(ToolCall(tool, model, f"e{episode} r{r} s{k} {tag}" if faults else f"e{episode} r{r} s{k}"))
        rounds.append(row)
    return rounds


def _exact(answer: str, task: RealTask) -> bool:
    """Answer checking kept out of the measurement (math-verify would cost more than the call)."""
    return prompts.normalize_answer(answer) == prompts.normalize_answer(task.answer)


def _episode(engine: RealEpisodeEngine, rounds: list[list[ToolCall]]) -> None:
    engine.reset()
    for calls in rounds:
        engine.run_round(calls)
    engine.finish("42")


def run_load(url: str, faults: bool, log: Path) -> float:
    """Calls (tool calls and terminations) per second of one load run."""
    policy = {"base_url": url, "timeout_s": 30, "retries": 1, "backoff_s": 0.02, "max_concurrency": 16}
    emap = {"endpoints": {name: policy for name in MODELS}, "termination": {"model": "good"}}
    tasks: list[RealTask] = [parse_task({"id": "t", "question": "What is six times seven?", "answer": "42",
                                         "domain": "math"})]
    plans = [_rounds(e, faults) for e in range(EPISODES)]
    with RealToolBackend(emap) as backend, CallLogger(log) as logger:
        engines = [RealEpisodeEngine(backend, tasks, logger=logger, verifier=_exact, seed=e) for e in range(EPISODES)]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=EPISODES) as pool:
            for fut in [pool.submit(_episode, engine, plan) for engine, plan in zip(engines, plans)]:
                fut.result()
        seconds = time.perf_counter() - start
    return EPISODES * (ROUNDS * CALLS + 1) / seconds


@pytest.mark.parametrize("faults", [False, True], ids=["no_faults", "faults"])
def test_calls_per_second(benchmark, server: str, faults: bool, tmp_path: Path) -> None:
    rate = benchmark.pedantic(run_load, args=(server, faults, tmp_path / "calls.jsonl"), rounds=2, iterations=1)
    _RATES[faults] = rate
    benchmark.extra_info["calls_per_s"] = rate
    line = f"{'with faults' if faults else 'no faults'}: {rate:.0f} calls/s"
    if faults and False in _RATES:
        benchmark.extra_info["ratio_to_no_faults"] = rate / _RATES[False]
        line += f" ({rate / _RATES[False]:.2f} x the fault-free run)"
    print(line)
    assert rate > 0
