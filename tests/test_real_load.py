"""Load test of the real-tools backend: 64 concurrent episodes x 4 parallel calls x 3 rounds against scripted
OpenAI-compatible server processes on loopback (``tests/fake_server.py``) that inject faults.

Server A serves ``good`` and ``split`` (deadline 30 s); 8 of their calls per fault kind carry a fault tag (5xx and
4xx, 429, slow answers, invalid JSON, missing fields, wrong types, bad usage counts, huge and deep bodies, a
whitespace flood, lone surrogates), transient or persistent. Server C serves ``other`` with a 3 s deadline and only
calls that hang or trickle past it, all in round 1 (a server of their own, so that a busy machine cannot delay the
retries that must succeed): 152 of the 768 calls are faulty. Server B serves ``flaky`` and is SIGKILLed while calls
to it are in flight in round 1, then restarted before round 2. Episodes run in threads sharing one backend and one
call log, as the GRPO rollout does.

Checked: every call logged exactly once; the documented status of every fault (``parasim.real.client``: no answer
in time, refused or dropped is TIMEOUT; an error answer or a malformed body is EXEC_ERR; timeouts, drops, 408/429
and 5xx are retried); every episode ending with a final answer; bounded memory and retained text; no thread, socket
or process left over. The single-call tests at the end guard the fixes the load run needed (named in each).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from parasim.calibration.calls import read_calls
from parasim.protocol.schema import CallResult, Status, Tool, ToolCall
from parasim.real import prompts
from parasim.real.backend import BackendConfig, CallInput, RealToolBackend
from parasim.real.calllog import CallLogger
from parasim.real.engine import RealEpisodeEngine
from parasim.real.tasks import RealTask, parse_task
from parasim.real.termination import Synthesis

FAKE_SERVER = Path(__file__).with_name("fake_server.py")  # the scripted OpenAI-compatible server (a test tool)

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]  # a hang guard: the module runs in well under a minute

A_MODELS = {"good": "42", "split": "41,42,42"}
HANGS = "other"  # server C
FLAKY = "flaky"  # server B
EPISODES, CALLS, ROUNDS = 64, 4, 3
KILL_ROUND = 1  # server B dies during this round and is back for the next
# A's deadline is far above a clean call's time even on a starved machine, so no clean call is ever retried
TIMEOUT_S, HANG_TIMEOUT_S, RETRIES = 30.0, 3.0, 1
OK, EXEC_ERR, TIMEOUT = Status.OK, Status.EXEC_ERR, Status.TIMEOUT

# tag -> (status, attempts the backend reports, attempts the server sees)
FAULTS: dict[str, tuple[Status, int, int]] = {
    "[fault:http=500]": (EXEC_ERR, 2, 2),
    "[fault:http=503*1]": (OK, 2, 1),
    "[fault:http=429*1]": (OK, 2, 1),
    "[fault:http=400]": (EXEC_ERR, 1, 1),
    "[fault:slow=0.05]": (OK, 1, 1),
    "[fault:badjson]": (EXEC_ERR, 1, 1),
    "[fault:nochoices]": (EXEC_ERR, 1, 1),
    "[fault:wrongtype]": (EXEC_ERR, 1, 1),
    "[fault:negusage]": (EXEC_ERR, 1, 1),
    "[fault:infusage]": (EXEC_ERR, 1, 1),
    "[fault:deep]": (EXEC_ERR, 1, 1),
    "[fault:huge=200000]": (OK, 1, 1),
    "[fault:longanswer=100000]": (OK, 1, 1),
    "[fault:hugejunk=200000]": (EXEC_ERR, 1, 1),
    "[fault:blank=20000]": (OK, 1, 1),
    "[fault:surrogate]": (OK, 1, 1),
    "[fault:slow=30]": (TIMEOUT, 2, 2),  # the three on server C
    "[fault:slow=30*1]": (OK, 2, 1),
    "[fault:trickle=0.6]": (TIMEOUT, 2, 2),  # 8 pieces 0.6 s apart: the hard deadline, not a socket timeout
}
ON_C = {"[fault:slow=30]", "[fault:slow=30*1]", "[fault:trickle=0.6]"}
PER_FAULT = 8  # calls per fault tag in the run
OUTPUT_CAP, ANSWER_CAP, MARKER = 4000, 1000, 40  # BackendConfig's defaults; "\n...[truncated N chars]"
TERMINATION_FAULTS = ["[fault:infusage]", "[fault:deep]", "[fault:http=500]", "[fault:badjson]"]
AGENTS = [Tool.STANDARD_REASONER, Tool.CRITICAL_REVIEWER, Tool.ENSEMBLE_SOLVER, Tool.KNOWLEDGE_SEARCHER,
          Tool.CODE_REASONER]


# ---------------------------------------------------------------------------------------------- servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(port: int, models: dict[str, str]) -> subprocess.Popen:
    """A fake server process on ``port`` (not yet up: see ``_up``)."""
    argv = [sys.executable, str(FAKE_SERVER), "--port", str(port)]
    argv += [f"--model={name}={answers}" for name, answers in models.items()]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _up(proc: subprocess.Popen, port: int) -> subprocess.Popen:
    """``proc`` once it answers ``/health`` (30 s at most; killed otherwise)."""
    deadline = time.monotonic() + 30
    with httpx.Client(timeout=1) as http:  # one client: each new one costs ~50 ms of CPU, which a load run feels
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"fake server on port {port} exited with code {proc.returncode}")
            try:
                if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return proc
            except httpx.TransportError:
                time.sleep(0.05)
    _kill(proc)
    raise RuntimeError(f"fake server on port {port} did not come up in 30 s")


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _stats(url: str, http: httpx.Client | None = None) -> dict:
    """The server's counters, without the request bodies it keeps."""
    return (http or httpx).get(f"{url}/stats", params={"seen": "false"}, timeout=5).json()


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, str]]:
    """Servers A and C, started together."""
    ports = _free_port(), _free_port()
    procs = [_spawn(ports[0], A_MODELS), _spawn(ports[1], {HANGS: "7"})]
    try:
        for proc, port in zip(procs, ports):
            _up(proc, port)
        yield f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    finally:
        for proc in procs:
            _kill(proc)


def _emap(a_url: str, c_url: str, b_url: str) -> dict:
    policy = {"timeout_s": TIMEOUT_S, "retries": RETRIES, "backoff_s": 0.02, "max_concurrency": 16}
    endpoints = {name: {"base_url": a_url, **policy} for name in A_MODELS}
    # room for all hangs at once: a hang waiting for a slot would make its round last another deadline
    endpoints[HANGS] = {**policy, "base_url": c_url, "timeout_s": HANG_TIMEOUT_S, "max_concurrency": 32}
    endpoints[FLAKY] = {**policy, "base_url": b_url, "max_concurrency": 8}
    return {"endpoints": endpoints, "termination": {"model": "good"}}


def _exact(answer: str, task: RealTask) -> bool:
    return prompts.normalize_answer(answer) == prompts.normalize_answer(task.answer)


async def _python_stub(code: str) -> CallResult:
    """The python tool as an in-process stand-in: prints 42, or fails like a buggy adapter."""
    if "raise" in code:
        raise RuntimeError("stub adapter bug")
    return CallResult(Status.OK, output="42\n", latency_s=0.001)


# ---------------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Planned:
    """One call of the run and what it must come back as."""

    call: ToolCall
    tag: str = ""  # the fault tag in its subtask, "" for none


def _deal(rng: np.random.Generator, free: list[tuple[int, int, int]], tags: list[str]) -> dict:
    """PER_FAULT of each tag on distinct slots drawn from ``free``."""
    picks = rng.choice(len(free), size=PER_FAULT * len(tags), replace=False)
    return {free[i]: tag for i, tag in zip(picks, [t for t in tags for _ in range(PER_FAULT)])}


def _plan(seed: int = 0) -> tuple[list[list[list[Planned]]], list[str]]:
    """[episode][round][slot] calls with PER_FAULT calls of each fault on servers A and C, and each episode's manager
    answer (some with a termination fault). Deterministic in ``seed``; carried contexts (``target``) included."""
    rng = np.random.default_rng(seed)
    models = [*A_MODELS, FLAKY]
    slots = [(e, r, k) for e in range(EPISODES) for r in range(ROUNDS) for k in range(CALLS)]
    tools, chosen = {}, {}
    for slot in slots:
        tools[slot] = Tool.PYTHON if rng.random() < 0.08 else AGENTS[int(rng.integers(len(AGENTS)))]
        chosen[slot] = "" if tools[slot] is Tool.PYTHON else models[int(rng.integers(len(models)))]
    # the hangs all in one round, as each round lasts as long as its slowest call
    tags = _deal(rng, [s for s in slots if chosen[s] in A_MODELS and s[1] == KILL_ROUND], sorted(ON_C))
    tags.update(_deal(rng, [s for s in slots if chosen[s] in A_MODELS and s not in tags], sorted(set(FAULTS) - ON_C)))
    plan: list[list[list[Planned]]] = []
    for e in range(EPISODES):
        rounds = []
        for r in range(ROUNDS):
            row = []
            for k in range(CALLS):
                slot, tool, model = (e, r, k), tools[(e, r, k)], chosen[(e, r, k)]
                if tool is Tool.PYTHON:
                    code = "raise SystemExit" if rng.random() < 0.3 else "print(42)"
                    row.append(Planned(ToolCall(Tool.PYTHON, "", code)))
                    continue
                tag = tags.get(slot, "")
                if tag in ON_C:
                    model = HANGS
                if model == FLAKY and r == KILL_ROUND:
                    tag = "[fault:slow=0.3]"  # in flight when the server dies
                target = int(rng.integers(r * CALLS)) if r and rng.random() < 0.3 else -1
                row.append(Planned(ToolCall(tool, model, f"e{e} r{r} s{k} {tag}".strip(), target=target), tag))
            rounds.append(row)
        plan.append(rounds)
    answers = ["42"] * EPISODES
    for i, tag in enumerate(TERMINATION_FAULTS * 2):
        answers[i * (EPISODES // (2 * len(TERMINATION_FAULTS)))] = f"42 {tag}"
    return plan, answers


# ---------------------------------------------------------------------------------------------- the run
def _sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


def _children() -> set[int]:
    me, found = os.getpid(), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            found.add(int(pid))
    return found


def _rss() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _RssPeak:
    """Samples this process's RSS every 20 ms in a thread, for the peak growth over the start."""

    def __init__(self) -> None:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler")
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak - self.start


@dataclass
class LoadRun:
    plan: list[list[list[Planned]]]
    manager_answers: list[str]
    results: list[list[list[CallResult]]] = field(default_factory=list)
    syntheses: list[Synthesis] = field(default_factory=list)
    outcomes: list[Any] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    log_rows: int = 0
    served: dict = field(default_factory=dict)  # server A's /stats after the run
    wall_s: float = 0.0
    rss_growth: int = 0
    leaked_threads: list[str] = field(default_factory=list)
    leaked_sockets: int = 0
    leaked_children: set[int] = field(default_factory=set)
    kill_in_flight: int = 0


class _FlakyServer:
    """Server B: SIGKILLed by a watcher once calls are in flight to it, restarted on the same port on request."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = _up(_spawn(self.port, {FLAKY: "42"}), self.port)
        self.in_flight_at_kill = 0
        self._watcher: threading.Thread | None = None

    def kill_when_busy(self) -> None:
        self._watcher = threading.Thread(target=self._watch, name="flaky-killer")
        self._watcher.start()

    def _watch(self) -> None:
        deadline = time.monotonic() + 30
        with httpx.Client() as http:
            while time.monotonic() < deadline:
                self.in_flight_at_kill = _stats(self.url, http)["in_flight"]
                if self.in_flight_at_kill >= 4:
                    break
                time.sleep(0.02)
        _kill(self.proc)

    def restart(self) -> None:
        assert self._watcher is not None
        self._watcher.join(timeout=60)
        self.proc = _up(_spawn(self.port, {FLAKY: "42"}), self.port)

    def stop(self) -> None:
        _kill(self.proc)


def _served(urls: tuple[str, ...]) -> dict:
    """Chat requests and faults served by these servers together."""
    stats = [_stats(url) for url in urls]
    return {"requests": sum(s["requests"] for s in stats), "faults": sum((Counter(s["faults"]) for s in stats),
                                                                         Counter())}


def _episode(e: int, engine: RealEpisodeEngine, run: LoadRun, barrier: threading.Barrier) -> None:
    engine.reset(options={"task_index": e})
    for r in range(ROUNDS):
        run.results[e][r] = engine.run_round([p.call for p in run.plan[e][r]])
        barrier.wait()
    outcome = engine.finish(run.manager_answers[e])
    run.syntheses[e], run.outcomes[e] = engine.last_synthesis, outcome


@pytest.fixture(scope="module")
def run(servers: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> LoadRun:
    plan, answers = _plan()
    out = LoadRun(plan, answers, results=[[[] for _ in range(ROUNDS)] for _ in range(EPISODES)],
                  syntheses=[None] * EPISODES, outcomes=[None] * EPISODES)
    tasks = [parse_task({"id": f"e{e:02d}", "question": "What is six times seven?", "answer": "42",
                         "domain": "math"}) for e in range(EPISODES)]
    log = tmp_path_factory.mktemp("load") / "calls.jsonl"
    threads, sockets, children = set(threading.enumerate()), _sockets(), _children()
    flaky = _FlakyServer()

    finished_rounds = [0]

    def between_rounds() -> None:  # once per round, in the last episode thread to finish it, before the next
        if finished_rounds[0] == KILL_ROUND - 1:
            flaky.kill_when_busy()
        elif finished_rounds[0] == KILL_ROUND:
            flaky.restart()
        finished_rounds[0] += 1

    barrier = threading.Barrier(EPISODES, action=between_rounds, timeout=90)
    before = _served(servers)
    try:
        rss = _RssPeak()
        with RealToolBackend(_emap(*servers, flaky.url), python_tool=_python_stub) as backend, \
                CallLogger(log) as logger:
            engines = [RealEpisodeEngine(backend, tasks, logger=logger, verifier=_exact, seed=e)
                       for e in range(EPISODES)]
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=EPISODES, thread_name_prefix="episode") as pool:
                futures = [pool.submit(_episode, e, engines[e], out, barrier) for e in range(EPISODES)]
                for fut in futures:
                    fut.result(timeout=120)
            out.wall_s = time.perf_counter() - start
        out.rss_growth = rss.stop()
    finally:
        flaky.stop()
    out.kill_in_flight = flaky.in_flight_at_kill
    after = _served(servers)
    out.served = {"requests": after["requests"] - before["requests"], "faults": after["faults"] - before["faults"]}
    out.records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    out.log_rows = len(read_calls(log))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (set(threading.enumerate()) - threads or _sockets() > sockets):
        time.sleep(0.05)  # threads that were told to stop may take a moment to exit
    out.leaked_threads = sorted(t.name for t in set(threading.enumerate()) - threads)
    out.leaked_sockets = _sockets() - sockets
    out.leaked_children = _children() - children
    calls = EPISODES * ROUNDS * CALLS
    print(f"\nload: {calls} tool calls + {EPISODES} terminations in {out.wall_s:.1f} s = "
          f"{(calls + EPISODES) / out.wall_s:.0f} calls/s (faults, a kill and a restart included); "
          f"peak RSS growth {out.rss_growth / 2**20:.0f} MiB")
    return out


def _all(run: LoadRun) -> Iterator[tuple[int, int, int, Planned, CallResult]]:
    for e in range(EPISODES):
        for r in range(ROUNDS):
            for k, (planned, result) in enumerate(zip(run.plan[e][r], run.results[e][r])):
                yield e, r, k, planned, result


# ---------------------------------------------------------------------------------------------- checks
def test_every_call_is_logged_exactly_once_with_its_result(run: LoadRun):
    assert len(run.records) == EPISODES * ROUNDS * CALLS and run.log_rows == len(run.records)
    episode_of = {}
    for rec in run.records:
        episode_of.setdefault(rec["task_id"], set()).add(rec["episode"])
    assert all(len(numbers) == 1 for numbers in episode_of.values()) and len(episode_of) == EPISODES
    assert len({n for (n,) in episode_of.values()}) == EPISODES  # one log episode number per episode
    keys = Counter((rec["task_id"], rec["call_index"]) for rec in run.records)
    assert set(keys.values()) == {1} and len(keys) == EPISODES * ROUNDS * CALLS
    by_key = {(rec["task_id"], rec["call_index"]): rec for rec in run.records}
    for e, r, k, planned, result in _all(run):
        rec = by_key[(f"e{e:02d}", r * CALLS + k)]
        assert (rec["tool"], rec["model"], rec["round"], rec["target"]) == (
            planned.call.tool.wire_name, planned.call.model, r, planned.call.target)
        assert rec["status"] == result.status.name and rec["correct"] == result.extra.get("correct")


def test_every_fault_gets_its_documented_status(run: LoadRun):
    wrong = []
    for _, _, _, planned, result in _all(run):
        if planned.call.model == FLAKY or not planned.tag:
            continue
        status, attempts, _ = FAULTS[planned.tag]
        if result.status is not status or result.extra.get("attempts") != attempts:
            wrong.append((planned.tag, result.status.name, result.extra.get("attempts"), result.detail[:120]))
    assert not wrong
    clean = [(p, res) for _, _, _, p, res in _all(run) if p.call.model in A_MODELS and not p.tag]
    assert clean and all(res.status is OK and res.extra["attempts"] == 1 for _, res in clean)
    python = [(p, res) for _, _, _, p, res in _all(run) if p.call.tool is Tool.PYTHON]
    for p, res in python:
        expected = (EXEC_ERR, "RuntimeError: stub adapter bug") if "raise" in p.call.subtask else (OK, "")
        assert (res.status, res.detail) == expected


def test_server_saw_each_fault_and_no_extra_request(run: LoadRun):
    """Faults were really injected, and the server got exactly the attempts the backend reports."""
    expected: Counter = Counter()
    tagged = [p.tag for _, _, _, p, _ in _all(run) if p.tag and p.call.model != FLAKY]
    tagged += [a.split(" ", 1)[1] for a in run.manager_answers if " " in a]
    for tag in tagged:
        expected[re.match(r"\[fault:([a-z]+)", tag).group(1)] += FAULTS[tag][2]
    assert run.served["faults"] == expected
    on_a_and_c = {*A_MODELS, HANGS}
    attempts = sum(res.extra.get("attempts", 1) for _, _, _, p, res in _all(run) if p.call.model in on_a_and_c)
    terminations = sum(FAULTS[a.split(" ", 1)[1]][2] if " " in a else 1 for a in run.manager_answers)
    assert run.served["requests"] == attempts + terminations


def test_killed_and_restarted_server(run: LoadRun):
    assert run.kill_in_flight >= 4  # it died with calls in flight
    by_round: dict[int, list[CallResult]] = {r: [] for r in range(ROUNDS)}
    for _, r, _, planned, result in _all(run):
        if planned.call.model == FLAKY:
            by_round[r].append(result)
    assert all(len(results) > 10 for results in by_round.values())
    assert all(res.status is OK and res.extra["attempts"] == 1 for res in by_round[KILL_ROUND - 1])
    during = by_round[KILL_ROUND]
    assert {res.status for res in during} <= {OK, TIMEOUT}
    timeouts = [res for res in during if res.status is TIMEOUT]
    assert len(timeouts) >= 4 and all(res.extra["attempts"] == RETRIES + 1 for res in timeouts)
    assert all("ConnectError" in res.detail for res in timeouts)  # the retry found nobody listening
    assert all(res.status is OK and res.extra["attempts"] <= RETRIES + 1 for res in by_round[KILL_ROUND + 1])


def test_every_episode_ends_with_an_answer(run: LoadRun):
    for e in range(EPISODES):
        synthesis, outcome = run.syntheses[e], run.outcomes[e]
        faulty = "[fault:" in run.manager_answers[e]
        assert synthesis.method == ("vote" if faulty else "model"), (e, synthesis)
        assert synthesis.answer and (synthesis.status is not OK) == faulty and outcome.answer == synthesis.answer
        assert [len(r) for r in run.results[e]] == [CALLS] * ROUNDS
        assert all(np.isfinite(v) and v >= 0 for v in (outcome.termination_usd, outcome.termination_latency_s))


def test_memory_and_what_episodes_keep_are_bounded(run: LoadRun):
    for _, _, _, planned, result in _all(run):
        answers = [result.extra.get("answer") or "", *result.extra.get("samples", [])]
        assert len(result.output) <= OUTPUT_CAP + MARKER, planned.tag
        assert all(len(a) <= ANSWER_CAP + MARKER for a in answers) and len(result.detail) <= 1000, planned.tag
        assert 0 <= result.tokens_in <= 10**6 and 0 <= result.tokens_out <= 10**6
    assert run.rss_growth < 512 * 2**20  # generous: the run's bodies total ~30 MB


def test_nothing_leaks(run: LoadRun):
    assert run.leaked_threads == [] and run.leaked_sockets <= 0 and run.leaked_children == set()


def test_replies_are_utf8_safe_and_logged(run: LoadRun):
    hits = [res for _, _, _, p, res in _all(run) if p.tag == "[fault:surrogate]"]
    assert hits and all("\ufffd" in res.output and "\ud800" not in res.output for res in hits)
    assert all("\ud800" not in json.dumps(rec, ensure_ascii=False) for rec in run.records)


# --------------------------------------------------------------------------------- single-call regressions
@pytest.fixture
def backend(servers: tuple[str, str]) -> Iterator[RealToolBackend]:
    with RealToolBackend(_emap(*servers, servers[0])) as b:
        yield b


def _one(backend: RealToolBackend, tool: Tool, tag: str) -> CallResult:
    (result,) = backend.run_round([ToolCall(tool, "good", f"check {tag}")], [CallInput("q")])
    return result


def test_waiting_for_a_slot_is_not_a_timeout(servers: tuple[str, str]):
    """The deadline is per attempt: five 0.5 s calls through one slot wait up to 2 s each, past a 1.5 s deadline."""
    emap = {"good": {"base_url": servers[0], "timeout_s": 1.5, "retries": 0, "max_concurrency": 1}}
    with RealToolBackend(emap) as b:
        calls = [ToolCall(Tool.STANDARD_REASONER, "good", f"queue {i} [fault:slow=0.5]") for i in range(5)]
        results = b.run_round(calls, [CallInput("q")] * 5)
    assert [(r.status, r.extra["attempts"]) for r in results] == [(OK, 1)] * 5
    assert max(r.latency_s for r in results) >= 2.5  # the last one did wait for four others


@pytest.mark.timeout(30)
def test_whitespace_flood_reply_is_read_in_linear_time(backend: RealToolBackend):
    """Was: the answer and verdict regexes backtrack quadratically on a reply of blank lines, on the loop that all
    episodes share (40,000 newlines held it for minutes, every deadline with it). Now the patterns are linear."""
    result = _one(backend, Tool.CRITICAL_REVIEWER, "[fault:blank=40000]")
    assert result.status is OK and result.extra["answer"] == "Verdict:" and result.extra["flagged"] is None


def test_negative_usage_is_exec_err_naming_the_field(backend: RealToolBackend):
    """Was: a negative ``prompt_tokens`` was taken as is (a negative token cost in the reward)."""
    result = _one(backend, Tool.STANDARD_REASONER, "[fault:negusage]")
    assert result.status is EXEC_ERR and result.tokens_in == 0
    assert "usage.prompt_tokens: expected an integer in [0, 1000000000], got -7" in result.detail


def test_lone_surrogates_are_replaced(backend: RealToolBackend):
    """Was: kept as is, so the call could not be logged (UnicodeEncodeError ended the round) nor sent on as a
    context or to the termination model (httpx encodes request bodies as strict UTF-8)."""
    result = _one(backend, Tool.STANDARD_REASONER, "[fault:surrogate]")
    assert result.status is OK and result.output.endswith("42\ufffd") and result.extra["answer"] == "42\ufffd"


def test_long_answers_are_cut(backend: RealToolBackend):
    """Was: the whole 100,000-digit answer kept in the episode's results and handed to the verifier."""
    result = _one(backend, Tool.ENSEMBLE_SOLVER, "[fault:longanswer=100000]")
    assert result.status is OK and result.extra["answer"] == "9" * ANSWER_CAP + "\n...[truncated 99000 chars]"
    assert all(len(s) <= ANSWER_CAP + MARKER for s in result.extra["samples"])


def test_call_log_writes_lone_surrogates_as_json_escapes(tmp_path: Path):
    """Was: ``encode("utf-8")`` raised on a lone surrogate (a task id from a JSON task file) and lost the call."""
    log = tmp_path / "c.jsonl"
    task = {"task_id": "t\ud800", "benchmark": "generic_math", "domain": 0, "difficulty": None}
    result = CallResult(Status.OK, extra={"answer": "4\udfff2"})
    with CallLogger(log) as logger:
        logger.log(episode=0, call_index=0, round_index=0, task=task, call=ToolCall(Tool.STANDARD_REASONER, "m", "x"),
                   result=result, correct=False)
    (rec,) = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert rec["task_id"] == "t\ud800" and rec["answer"] == "4\udfff2"


@pytest.mark.parametrize(("tag", "reason"), [
    ("[fault:infusage]", "usage.completion_tokens: expected an integer in [0, 1000000000], got inf"),
    ("[fault:deep]", "response is not JSON (nested too deeply to decode)")])
def test_termination_reply_the_client_cannot_read_falls_back_to_the_vote(servers: tuple[str, str], tag: str,
                                                                          reason: str):
    """Was: ``Infinity`` in ``usage`` (OverflowError) or JSON nested past the recursion limit (RecursionError)
    escaped the client and ``finish`` raised, ending the episode without an outcome. Now each is the client's
    EXEC_ERR, naming what it refused."""
    task = parse_task({"id": "t", "question": "What is six times seven?", "answer": "42", "domain": "math"})
    with RealToolBackend(_emap(*servers, servers[0])) as b:
        engine = RealEpisodeEngine(b, [task], verifier=_exact, seed=0)
        engine.reset()
        engine.run_round([ToolCall(Tool.STANDARD_REASONER, "good", "solve")])
        out = engine.finish(f"42 {tag}", lead="42")  # the call source passes the rules' vote lead
    assert out.answer == "42" and out.correct and engine.last_synthesis.method == "vote"
    assert engine.last_synthesis.status is EXEC_ERR and engine.last_synthesis.detail.startswith("good: ")
    assert reason in engine.last_synthesis.detail


@pytest.mark.parametrize(("field", "value"), [("max_answer_chars", 0), ("max_answer_chars", 10.0),
                                              ("max_output_chars", True), ("ensemble_k", True)])
def test_backend_config_rejects_what_is_not_a_count(field: str, value: object):
    with pytest.raises(ValueError, match=rf"BackendConfig\.{field}: expected .*, got {value!r}"):
        BackendConfig(**{field: value})
    assert BackendConfig().max_answer_chars == ANSWER_CAP and BackendConfig().max_output_chars == OUTPUT_CAP
