"""LLM manager training on CPU with the tiny Qwen3 model: masked SFT, then GRPO on ParaOrchText-v0 with simulated
tools; masks give tool / environment tokens exactly zero gradient; checkpoints resume to identical weights; a
2-process FSDP2 run (gloo) matches the single-process one."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tiny_lm import build_tiny_lm  # noqa: E402

from training.llm import grpo, runtime, sft  # noqa: E402
from training.llm.data import (  # noqa: E402
    ROLE_ENV,
    ROLE_MANAGER,
    TokenTrajectory,
    read_jsonl,
    render_segments,
    token_mask,
    write_jsonl,
)
from training.llm.expert_data import generate  # noqa: E402
from training.llm.rollout import Generation, parse_completion_choice, reset_for_group  # noqa: E402

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

FAKE_SERVER = Path(__file__).with_name("fake_server.py")  # the scripted OpenAI-compatible server (a test tool)

REPAIR = '<tool_call>\n{"name": "python", "arguments": {"code": "print(%d+1)"}}\n</tool_call>'
FINAL = '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "%d"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("llm") / "tiny", seed=0)


@pytest.fixture(scope="module")
def tokenizer(tiny: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny)


def recoverable_failure(a: int) -> dict:
    """A trajectory where a call fails (EXEC_ERR), the manager repairs it, then answers."""
    return {"messages": [
        {"role": "system", "content": "You are the manager."},
        {"role": "user", "content": f"What is {a}+1?"},
        {"role": "assistant", "content": REPAIR % a},
        {"role": "tool", "content": '{"status": "EXEC_ERR", "output": "NameError"}'},
        {"role": "assistant", "content": REPAIR % a},
        {"role": "tool", "content": json.dumps({"status": "OK", "output": str(a + 1)})},
        {"role": "assistant", "content": FINAL % (a + 1)},
    ]}


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    write_jsonl(path, [recoverable_failure(a) for a in range(8)])
    return path


# ------------------------------------------------------------------------------------------- formats
def test_render_segments_tile_the_chat_and_isolate_manager_turns(tokenizer) -> None:
    row = recoverable_failure(3)
    segments = render_segments(tokenizer, row["messages"])
    full = tokenizer.apply_chat_template(row["messages"], tokenize=False)
    assert "".join(text for text, _ in segments) == full
    manager = [text for text, role in segments if role == ROLE_MANAGER]
    assert manager == [REPAIR % 3 + "<|im_end|>", REPAIR % 3 + "<|im_end|>", FINAL % 4 + "<|im_end|>"]
    assert all("EXEC_ERR" not in text for text in manager)


def test_token_mask_marks_exactly_the_manager_tokens(tokenizer, sft_data: Path) -> None:
    trajs = read_jsonl(sft_data, tokenizer)
    width = max(len(t.input_ids) for t in trajs)
    mask = token_mask(trajs, width)
    for b, t in enumerate(trajs):
        want = np.zeros(width, np.uint8)
        for s, e, r in t.spans:
            want[s:e] = r == ROLE_MANAGER
        assert np.array_equal(mask[b], want)
        manager_text = tokenizer.decode([i for i, m in zip(t.input_ids, mask[b]) if m])
        assert "EXEC_ERR" not in manager_text and "<tool_call>" in manager_text
    cut = read_jsonl(sft_data, tokenizer, max_tokens=40)
    assert all(t.truncated and len(t.input_ids) == 40 for t in cut)
    assert token_mask(cut, 40, mask_truncated=True).sum() == 0


def test_trajectory_spans_are_validated() -> None:
    with pytest.raises(ValueError, match="spans"):
        TokenTrajectory([1, 2, 3], [(0, 2, ROLE_ENV)])
    with pytest.raises(ValueError, match=r"spans\[1\]"):
        TokenTrajectory([1, 2, 3], [(0, 1, ROLE_ENV), (2, 3, ROLE_MANAGER)])


def test_vllm_completion_choice_parsing() -> None:
    choice = {"text": "ab", "finish_reason": "stop", "token_ids": [5, 7, 2],
              "logprobs": {"tokens": ["token_id:5", "token_id:7", "token_id:2"], "token_logprobs": [-0.1, -0.2, -0.3]}}
    assert parse_completion_choice(choice, [2]) == Generation([5, 7, 2], [-0.1, -0.2, -0.3], True)
    del choice["token_ids"]
    choice["finish_reason"] = "length"
    choice["logprobs"]["tokens"] = ["token_id:5", "token_id:7", "token_id:9"]
    assert parse_completion_choice(choice, [2]) == Generation([5, 7, 9], [-0.1, -0.2, -0.3], False)
    with pytest.raises(ValueError, match="logprobs"):
        parse_completion_choice({"token_ids": [1], "logprobs": None}, [2])


def test_config_file_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text("group_size: 4\nlearning_rate: 3.0e-6\nreward: toolorchestra\n")
    args = runtime.parse_config(grpo.GRPOArgs, ["--config", str(cfg), "--group_size", "2", "--resume", "false"])
    assert (args.group_size, args.learning_rate, args.reward, args.resume) == (2, 3e-6, "toolorchestra", False)
    with pytest.raises(ValueError, match=r"GRPOArgs.clip_eps = 1.5: must be finite and in \[0.0, 1.0\]"):
        grpo.GRPOArgs(clip_eps=1.5)
    with pytest.raises(ValueError, match="GRPOArgs.engine = 'sglang'"):
        runtime.parse_config(grpo.GRPOArgs, ["--engine", "sglang"])
    with pytest.raises(ValueError, match="SFTArgs.loss_agg"):
        sft.SFTArgs(loss_agg="mean")
    cfg.write_text('{"group_sise": 4}')
    with pytest.raises(ValueError, match="group_sise"):
        runtime.parse_config(grpo.GRPOArgs, ["--config", str(cfg)])


def test_stream_appends_only_new_env_text_and_keeps_generated_ids(tokenizer) -> None:
    """The env may show the manager's turn differently from the raw sample (U+FFFD for characters outside its
    charset, an end-of-turn the sample lacked); the stream still holds the sampled ids and only new env text."""
    from training.llm.rollout import Stream

    eos = tokenizer.eos_token_id
    obs0 = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    tail = "<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    for text, finished in (("\U0001F600 four", True), ("four", True), ("fo", False)):
        stream = Stream(tokenizer, None, group_id=0, max_tokens=4096)
        stream.observe(obs0)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + ([eos] if finished else [])
        sent = stream.add_generation(Generation(ids, [-1.0] * len(ids), finished))
        assert sent == tokenizer.decode(ids, skip_special_tokens=True)
        shown = sent.replace("\U0001F600", "\ufffd")
        stream.observe(obs0 + shown + "<|im_end|>\n" + tail)
        traj = stream.traj
        n0 = len(tokenizer(obs0, add_special_tokens=False)["input_ids"])
        assert traj.input_ids[n0:n0 + len(ids)] == ids and traj.spans[1] == (n0, n0 + len(ids), ROLE_MANAGER)
        new = tokenizer.decode(traj.input_ids[n0 + len(ids):])
        assert new == ("\n" if finished else "<|im_end|>\n") + tail
        assert traj.sampled_logprobs[n0:n0 + len(ids)] == [-1.0] * len(ids)
        assert set(traj.sampled_logprobs[:n0] + traj.sampled_logprobs[n0 + len(ids):]) == {0.0}


# ------------------------------------------------------------------------------------------- the loss
def test_reset_for_group_shares_the_task_through_reset_options() -> None:
    """Simulated tools: rollouts with one task seed see the same question and option letters and play the same
    task (terminal task_index), with tool draws of their own; equal seeds replay the same transcript."""
    import gymnasium as gym

    from parasim.protocol.schema import Tool

    def play(task_seed: int, tool_seed: int) -> tuple[str, Any, list[str], int]:
        env = gym.make("ParaOrchText-v0")
        obs, info = reset_for_group(env, task_seed, tool_seed)
        calls = "".join("<tool_call>" + json.dumps({"name": Tool.ENSEMBLE_SOLVER.wire_name,
                                                     "arguments": {"model": m, "subtask": "s"}}) + "</tool_call>"
                        for m in env.unwrapped.model_names)
        feedback, *_ = env.step(calls)
        *_, end = env.step(FINAL % 1)
        return obs, env.unwrapped.labels, feedback[len(obs):], end["task_index"]

    runs = [play(21, tool) for tool in (1, 2, 3)]
    assert all(r[:2] == runs[0][:2] and r[3] == runs[0][3] for r in runs)
    assert len({r[2] for r in runs}) > 1  # each rollout's tools draw from its own seed
    assert play(21, 1) == runs[0]
    assert len({play(seed, 1)[3] for seed in range(6)}) > 1  # task seeds spread over the suite's tasks


def test_reset_for_group_gives_real_engines_a_task_index() -> None:
    """Engines with a task list (RealEpisodeEngine) get an in-range int task_index drawn from the task seed."""
    from envs.paraorch_text import ParaOrchTextEnv
    from parasim.protocol.engine import EpisodeEngineBase, EpisodeOutcome, TaskView

    class Engine(EpisodeEngineBase):
        model_names = ("m",)
        tasks = ["a", "b", "c", "d", "e"]

        def reset(self, seed: Any = None, options: Any = None) -> TaskView:
            self.seed, self.options = seed, options
            return TaskView("t", "q?", 0)

        def run_round(self, calls: Any, **_: Any) -> list:
            return []

        def finish(self, manager_answer: Any = None, lead: str | None = None) -> EpisodeOutcome:
            return EpisodeOutcome("", False)

    env = ParaOrchTextEnv(pool=None, tools="real", engine=Engine())
    picks = set()
    for task_seed in range(12):
        reset_for_group(env, task_seed, 5)
        opts = env.engine.options
        assert type(opts["task_index"]) is int and 0 <= opts["task_index"] < 5 and env.engine.seed == 5
        assert opts["task_seed"] == task_seed
        picks.add(opts["task_index"])
    assert len(picks) > 1


def test_ppo_loss_gives_masked_tokens_exactly_zero_gradient() -> None:
    gen = torch.Generator().manual_seed(0)
    shape = (3, 11)
    mask = (torch.rand(shape, generator=gen) > 0.5).float()
    new_lp = (-torch.rand(shape, generator=gen) * 3).requires_grad_(True)
    old_lp = new_lp.detach() + 0.3 * torch.randn(shape, generator=gen)
    ref_lp = new_lp.detach() + 0.3 * torch.randn(shape, generator=gen)
    adv = torch.randn(shape, generator=gen)
    entropy = torch.rand(shape, generator=gen).requires_grad_(True)
    row_w = torch.full((3, 1), 1.0 / mask.sum())
    args = grpo.GRPOArgs(kl_coef=0.1, entropy_coef=0.01)
    loss, metrics = grpo.ppo_token_loss(new_lp, old_lp, adv, mask, row_w, args, ref_lp, entropy)
    loss.backward()
    off = mask == 0
    assert torch.isfinite(loss)
    assert torch.all(new_lp.grad[off] == 0) and torch.all(entropy.grad[off] == 0)
    assert torch.all(new_lp.grad[~off] != 0)
    # Extreme values on masked tokens (what tool tokens carry: logprob 0 from the sampler) change nothing.
    wild_old, wild_adv, wild_ref = old_lp.clone(), adv.clone(), ref_lp.clone()
    wild_old[off], wild_adv[off], wild_ref[off] = -1e4, 1e6, 1e4
    loss2, _ = grpo.ppo_token_loss(new_lp, wild_old, wild_adv, mask, row_w, args, wild_ref, entropy)
    assert loss2.item() == loss.item()
    assert float(metrics["tokens"]) == float(mask.sum())


# ------------------------------------------------------------------------------------------- SFT
def test_sft_trains_on_manager_tokens_and_resumes_exactly(tiny: Path, sft_data: Path, tmp_path: Path) -> None:
    base = sft.SFTArgs(model_path=str(tiny), data=str(sft_data), total_steps=4, batch_size=4, micro_batch_size=2,
                       learning_rate=3e-3, save_every=2)
    straight = sft.main(replace(base, output_dir=str(tmp_path / "a")))
    losses = [json.loads(line)["loss"] for line in (tmp_path / "a" / "sft_metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 4 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    sft.main(replace(base, output_dir=str(tmp_path / "b"), total_steps=2))
    resumed = sft.main(replace(base, output_dir=str(tmp_path / "b")))
    _assert_same_weights(straight, resumed)


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k, v in wa.items():
        assert torch.equal(v, wb[k]), k


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


# ------------------------------------------------------------------------------------------- SFT -> GRPO
GRPO_FLAGS = dict(tasks_per_step=2, group_size=2, max_tokens=800, max_turn_tokens=16, minibatch_size=2,
                  micro_batch_size=2, ppo_epochs=2, learning_rate=1e-3, kl_coef=0.05, entropy_coef=0.01,
                  save_every=1, dump_rollouts=True)


@pytest.fixture(scope="module")
def expert_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("expert") / "expert.jsonl"
    stats = generate(path, episodes=24, seed=0)
    assert stats["written"] >= 12 and stats["with_repair"] > 0
    return path


def test_simulator_expert_data_keeps_recoverable_failures(expert_data: Path, tokenizer) -> None:
    from parasim.protocol.parser import parse_tool_calls

    rows = [json.loads(line) for line in expert_data.read_text().splitlines()]
    assert all(r["record"]["outcome"] == 1.0 and r["record"]["ended_with_final"] == 1 for r in rows)
    repaired = [r for r in rows if any("(retry: " in s["text"] for s in r["segments"] if s["role"] == "manager")]
    assert repaired
    for row in repaired:
        text = "".join(s["text"] for s in row["segments"])
        assert text.index('"status": "EXEC_ERR"') < text.index("(retry: ") or "TIMEOUT" in text
    for row in rows:
        for seg in row["segments"]:
            if seg["role"] == "manager":
                parsed = parse_tool_calls(seg["text"].removesuffix("<|im_end|>"))
                assert parsed.calls or parsed.is_final
                assert not parsed.errors and not parsed.repairs
    trajs = read_jsonl(expert_data, tokenizer)
    assert all(t.manager_tokens > 0 and t.spans[0][2] == ROLE_ENV for t in trajs)


@pytest.fixture(scope="module")
def sft_model(tiny: Path, expert_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sft")
    return sft.main(sft.SFTArgs(model_path=str(tiny), data=str(expert_data), output_dir=str(out), total_steps=2,
                                batch_size=4, micro_batch_size=4, learning_rate=3e-3))


@pytest.fixture(scope="module")
def grpo_run(sft_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("grpo")
    grpo.main(grpo.GRPOArgs(model_path=str(sft_model), output_dir=str(out), total_steps=2, **GRPO_FLAGS))
    return out


def _rollouts(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]


def test_grpo_on_paraorch_text_logs_finite_metrics(grpo_run: Path) -> None:
    log = [json.loads(line) for line in (grpo_run / "grpo_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2]
    for r in log:
        for key in ("pg_loss", "kl_ref", "entropy", "clip_frac", "reward_mean", "grad_norm", "len/len_mean"):
            assert np.isfinite(r[key]), key
        assert 0.0 <= r["clip_frac"] <= 1.0 and r["kl_ref"] >= 0.0 and r["entropy"] > 0.0
        assert abs(sum(v for k, v in r.items() if k.startswith("tools/")) - 1.0) < 1e-9 or r["traj/tool_calls"] == 0
        assert "reward/outcome" in r and "traj/rounds" in r
    rows = _rollouts(grpo_run)
    assert len(rows) == 2 * 2 * 2
    assert {r["group_id"] for r in rows} == {0, 1, 2, 3}
    # a group shares its task: the first prompt tokens of its two rollouts are the same
    for g in range(4):
        a, b = [r for r in rows if r["group_id"] == g]
        assert a["input_ids"][:a["spans"][0][1]] == b["input_ids"][:b["spans"][0][1]]


def test_sampled_logprobs_match_the_trainer_on_the_same_tokens(sft_model: Path, grpo_run: Path, tokenizer) -> None:
    """Rollouts keep generated ids and logprobs; the trainer, scoring the stored ids with the weights that sampled
    them, must reproduce those logprobs on every manager token (a re-tokenized stream would not)."""
    info = runtime.DistInfo(0, 1, 0, torch.device("cpu"))
    policy = runtime.load_policy(sft_model, info)
    trajs = [r for r in _rollouts(grpo_run)[:4]]  # step 1: sampled by the SFT weights
    for row in trajs:
        ids = torch.tensor([row["input_ids"]])
        with torch.no_grad():
            lp, _ = policy(ids, torch.ones_like(ids))
        manager = [t for s, e, r in row["spans"] if r == ROLE_MANAGER for t in range(s, e)]
        assert manager, "no manager tokens"
        sampled = torch.tensor(row["sampled_logprobs"])[manager]
        torch.testing.assert_close(lp[0, manager], sampled, rtol=0, atol=2e-4)
        env_tokens = [t for s, e, r in row["spans"] if r == ROLE_ENV for t in range(s, e)]
        assert all(row["sampled_logprobs"][t] == 0.0 for t in env_tokens)
        assert "<|im_start|>user" in tokenizer.decode(row["input_ids"])


def test_tool_and_env_tokens_get_zero_gradient_through_the_model(sft_model: Path, grpo_run: Path) -> None:
    info = runtime.DistInfo(0, 1, 0, torch.device("cpu"))
    policy = runtime.load_policy(sft_model, info)
    rows = _rollouts(grpo_run)[:2]
    trajs = [TokenTrajectory(r["input_ids"], [tuple(s) for s in r["spans"]], r["sampled_logprobs"], r["truncated"])
             for r in rows]
    width = max(len(t.input_ids) for t in trajs)
    mask_np = token_mask(trajs, width)
    mask_np[:, 0] = 0
    ids = torch.zeros((2, width), dtype=torch.long)
    att = torch.zeros_like(ids)
    old = torch.zeros((2, width))
    for i, t in enumerate(trajs):
        ids[i, :len(t.input_ids)], att[i, :len(t.input_ids)] = torch.tensor(t.input_ids), 1
        old[i, :len(t.input_ids)] = torch.tensor(t.sampled_logprobs)
    mask = torch.as_tensor(mask_np, dtype=torch.float32)
    adv = torch.randn((2, width), generator=torch.Generator().manual_seed(0))
    lp, ent = policy(ids, att)
    lp.retain_grad()
    loss, _ = grpo.ppo_token_loss(lp, old, adv, mask, torch.full((2, 1), 1.0 / mask.sum()),
                                  grpo.GRPOArgs(kl_coef=0.1, entropy_coef=0.01), lp.detach() - 0.1, ent)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.all(lp.grad[mask == 0] == 0)
    assert (lp.grad[mask == 1] != 0).float().mean() > 0.9
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    # scrambling advantages and sampler logprobs on tool / env tokens leaves every weight gradient unchanged
    policy.zero_grad()
    adv2, old2 = adv.clone(), old.clone()
    adv2[mask == 0], old2[mask == 0] = 1e3, -50.0
    lp2, ent2 = policy(ids, att)
    loss2, _ = grpo.ppo_token_loss(lp2, old2, adv2, mask, torch.full((2, 1), 1.0 / mask.sum()),
                                   grpo.GRPOArgs(kl_coef=0.1, entropy_coef=0.01), lp2.detach() - 0.1, ent2)
    loss2.backward()
    assert loss2.item() == loss.item()
    for n, p in policy.named_parameters():
        if n in grads:
            assert torch.equal(p.grad, grads[n]), n


def test_grpo_checkpoint_resumes_to_identical_weights(sft_model: Path, grpo_run: Path, tmp_path: Path) -> None:
    args = grpo.GRPOArgs(model_path=str(sft_model), output_dir=str(tmp_path), **GRPO_FLAGS)
    grpo.main(replace(args, total_steps=1))
    assert runtime.latest_checkpoint(tmp_path / "checkpoints").name == "step_00000001"
    resumed = grpo.main(replace(args, total_steps=2))
    _assert_same_weights(runtime.latest_checkpoint(grpo_run / "checkpoints") / "model", resumed)
    assert _rollouts(tmp_path) == _rollouts(grpo_run)


def test_grpo_with_real_tools_against_an_openai_compatible_server(sft_model: Path, tmp_path: Path, tokenizer) -> None:
    """tools='real': the envs share one RealToolBackend over the endpoint map; calls and the termination model go
    over HTTP to a scripted server process (tests/fake_server.py), every call is logged."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--port", str(port),
                             "--model=solver=42"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        endpoints = tmp_path / "endpoints.json"
        endpoints.write_text(json.dumps({"endpoints": {"solver": {"base_url": f"http://127.0.0.1:{port}",
                                                                  "timeout_s": 10, "retries": 0}},
                                         "termination": {"model": "solver"}}))
        tasks = tmp_path / "tasks.jsonl"
        write_jsonl(tasks, [{"id": f"t{i}", "question": f"What is {i} * 6?", "answer": str(6 * i), "domain": "math"}
                            for i in range(1, 4)])
        out = tmp_path / "run"
        grpo.main(grpo.GRPOArgs(model_path=str(sft_model), output_dir=str(out), tools="real",
                                endpoints=str(endpoints), tasks=str(tasks), call_log=str(tmp_path / "calls.jsonl"),
                                old_logprobs="recompute", total_steps=1, **{**GRPO_FLAGS, "tasks_per_step": 1}))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    log = json.loads((out / "grpo_metrics.jsonl").read_text())
    assert np.isfinite(log["pg_loss"]) and log["traj/ended_with_final"] in (0.0, 0.5, 1.0)
    assert log["sampler_abs_logprob_gap"] < 1e-4  # recomputed behaviour logprobs: same fp32 model on CPU
    rows = _rollouts(out)
    assert len(rows) == 2 and rows[0]["input_ids"][:rows[0]["spans"][0][1]] == \
        rows[1]["input_ids"][:rows[1]["spans"][0][1]]  # one task for the group
    prompt = tokenizer.decode(rows[0]["input_ids"][:rows[0]["spans"][0][1]])
    assert "* 6?" in prompt and "solver" in prompt  # the real task, and the endpoint map's model in the prompt


# ------------------------------------------------------------------------------------------- FSDP2
def _torchrun(module: str, args: list[str], cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", module, *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_fsdp2_two_processes_match_single_process_sft(tiny: Path, sft_data: Path, tmp_path: Path) -> None:
    flags = ["--model_path", str(tiny), "--data", str(sft_data), "--total_steps", "2", "--batch_size", "4",
             "--micro_batch_size", "1", "--learning_rate", "3e-3", "--save_every", "1"]
    _torchrun("training.llm.sft", [*flags, "--output_dir", str(tmp_path / "fsdp")], tmp_path)
    single = sft.main(runtime.parse_config(sft.SFTArgs, [*flags, "--output_dir", str(tmp_path / "one")]))
    sharded = runtime.latest_checkpoint(tmp_path / "fsdp" / "checkpoints") / "model"
    ws, wf = _weights(single), _weights(sharded)
    assert ws.keys() == wf.keys()
    for k in ws:
        torch.testing.assert_close(wf[k], ws[k], rtol=0, atol=2e-5, msg=k)
    fsdp_log = [json.loads(x) for x in (tmp_path / "fsdp" / "sft_metrics.jsonl").read_text().splitlines()]
    one_log = [json.loads(x) for x in (tmp_path / "one" / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["manager_tokens"] for r in fsdp_log] == [r["manager_tokens"] for r in one_log]
    np.testing.assert_allclose([r["loss"] for r in fsdp_log], [r["loss"] for r in one_log], rtol=1e-5)
    # the optimizer state is written as per-rank DCP shards, which DCP reshards for the 1-process resume below
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(sharded.parent / runtime.TRAIN_STATE).read_metadata().state_dict_metadata
    assert {k.removeprefix("optim.state.").rsplit(".", 1)[0] for k in meta if k.startswith("optim.state.")} == \
        set(ws) - {"lm_head.weight"}  # tied to embed_tokens
    resumed = sft.main(runtime.parse_config(sft.SFTArgs, [*flags, "--total_steps", "3",
                                                          "--output_dir", str(tmp_path / "fsdp")]))
    assert resumed.parent.name == "step_00000003"
    # GRPO under FSDP2: records gathered over ranks for group advantages, HF rollout copies synced after the update
    _torchrun("training.llm.grpo", [
        "--model_path", str(sharded), "--output_dir", str(tmp_path / "grpo"), "--total_steps", "1",
        "--tasks_per_step", "2", "--group_size", "2", "--max_tokens", "700", "--max_turn_tokens", "16",
        "--minibatch_size", "4", "--micro_batch_size", "2", "--dump_rollouts", "true", "--kl_coef", "0.05",
        "--old_logprobs", "recompute"], tmp_path)
    log = json.loads((tmp_path / "grpo" / "grpo_metrics.jsonl").read_text())
    assert np.isfinite(log["pg_loss"]) and np.isfinite(log["grad_norm"]) and log["step"] == 1
    assert log["kl_ref"] >= 0.0 and log["sampler_abs_logprob_gap"] < 1e-4
    assert (tmp_path / "grpo" / "rollouts.jsonl").exists() and (tmp_path / "grpo" / "rollouts_rank1.jsonl").exists()
    assert runtime.latest_checkpoint(tmp_path / "grpo" / "checkpoints").name == "step_00000001"



def test_a_cut_off_episode_is_scored_by_the_env_as_the_trainer_scores_it(tokenizer) -> None:
    """When the token stream is full the env ends the episode as cut off (``end_episode``): no forced empty rounds
    to patch out of the record afterwards, so the env's ``reward_components`` and the trainer's score of the
    record under the same config agree."""
    import gymnasium as gym

    from parasim import TrajectoryBatch, compute_rewards
    from parasim.scoring.rewards import PRESETS
    from training.llm.rollout import RolloutConfig, collect

    block = tokenizer('<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>')["input_ids"]

    class Scripted:
        def generate(self, prompts, params, seed):
            ids = block[:params.max_new_tokens]
            return [Generation(ids, [0.0] * len(ids), False) for _ in prompts]

    reward = PRESETS["paramanager"].replace(c_tar=4.0)
    envs = [gym.make("ParaOrchText-v0", reward=reward) for _ in range(2)]
    ended: list[dict] = []
    for env in envs:
        end = env.unwrapped.end_episode
        env.unwrapped.end_episode = lambda end=end: ended.append(end()[4]) or (None, 0.0, False, True, ended[-1])
    from training.llm.rollout import reset_for_group

    prompt_len = len(tokenizer(reset_for_group(envs[0], 1, 2)[0])["input_ids"])  # the group's task: its question
    trajs = collect(envs, Scripted(), tokenizer, [(1, 2), (1, 3)], [0, 0],
                    RolloutConfig(max_tokens=prompt_len + 3 * len(block), max_turn_tokens=len(block)), seed=0)
    assert len(ended) == 2 and all(t.truncated for t in trajs)
    records = [t.record for t in trajs]
    assert all(r["ended_with_final"] == 0 and r["format_violations"] == 0 and r["rounds"] >= 1 for r in records)
    scored = compute_rewards(TrajectoryBatch.from_records(records), reward).total
    np.testing.assert_array_equal(scored, [info["reward_components"]["total"] for info in ended])
