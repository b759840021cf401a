"""Sharded LLM training checkpoints: the fp32 model and AdamW states go through torch.distributed.checkpoint (DCP),
each rank writing its own shards (no rank-0 gathered optimizer file), atomically and with the ``keep`` rotation,
while ``model/`` stays an HF directory for inference; a resumed run ends on bit-identical weights, in one process
(no process group) and in two (FSDP2 on gloo)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tiny_lm import build_tiny_lm  # noqa: E402

from parasim.config.fields import ConfigError  # noqa: E402
from training.llm import runtime  # noqa: E402
from training.llm.data import write_jsonl  # noqa: E402

# slow: this module's runs take seconds each (the fast tier, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("ckpt") / "tiny", seed=0)


def _train(policy: runtime.TokenLogprobs, optimizer: torch.optim.Optimizer, steps: range) -> None:
    """AdamW steps on token ids drawn from torch's global RNG, so a resume that lost the RNG state diverges."""
    vocab = policy.lm.config.vocab_size
    for _ in steps:
        ids = torch.randint(0, vocab, (2, 12))
        logprobs, _ = policy(ids, torch.ones_like(ids))
        optimizer.zero_grad(set_to_none=True)
        (-logprobs.mean()).backward()
        optimizer.step()


def _adamw(policy: runtime.TokenLogprobs) -> torch.optim.Optimizer:
    return torch.optim.AdamW(policy.parameters(), lr=1e-2, weight_decay=0.1)


def _dcp_files(ckpt: Path) -> list[str]:
    return sorted(p.name for p in (ckpt / runtime.TRAIN_STATE).iterdir())


@pytest.mark.timeout(300)
def test_single_process_checkpoint_is_dcp_and_resumes_exactly(tiny: Path, tmp_path: Path) -> None:
    info = runtime.DistInfo(0, 1, 0, CPU)
    root = tmp_path / "checkpoints"
    runtime.seed_everything(0)
    policy = runtime.load_policy(tiny, info)
    optimizer = _adamw(policy)
    for step in (1, 2, 3):
        _train(policy, optimizer, range(step - 1, step))
        runtime.save_checkpoint(root, step, policy, optimizer, info, {"note": "x"}, keep=2)
    _train(policy, optimizer, range(3, 5))

    # the keep rotation and the atomic rename: two complete checkpoints, no temporary left, latest is the newest
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_00000002", "step_00000003"]
    ckpt = root / "step_00000002"
    assert runtime.latest_checkpoint(root) == root / "step_00000003"
    assert sorted(p.name for p in ckpt.iterdir()) == ["model", "rng_rank0.pt", "state.json", runtime.TRAIN_STATE]
    assert _dcp_files(ckpt) == [".metadata", "__0_0.distcp"]
    assert (ckpt / "model" / "model.safetensors").is_file() and (ckpt / "model" / "config.json").is_file()

    # resume from the base weights: the training state alone restores the step-2 model, AdamW moments and RNG
    runtime.seed_everything(123)
    resumed = runtime.load_policy(tiny, info)
    resumed_opt = _adamw(resumed)
    assert runtime.load_training_state(ckpt, resumed, resumed_opt, info) == {"step": 2, "note": "x"}
    _train(resumed, resumed_opt, range(2, 5))
    for (name, a), (_, b) in zip(policy.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    want, got = optimizer.state_dict(), resumed_opt.state_dict()
    assert want["state"].keys() == got["state"].keys()
    for i, moments in want["state"].items():
        for key, value in moments.items():
            assert torch.equal(value, got["state"][i][key]), (i, key)


def test_resume_with_more_ranks_than_saved_names_the_world_size(tiny: Path, tmp_path: Path) -> None:
    info = runtime.DistInfo(0, 1, 0, CPU)
    policy = runtime.load_policy(tiny, info)
    optimizer = _adamw(policy)
    ckpt = runtime.save_checkpoint(tmp_path, 1, policy, optimizer, info, {})
    with pytest.raises(ConfigError, match=r"world size = 2: .* holds the RNG states of 1 ranks .*\[1, 1\]"):
        runtime.load_training_state(ckpt, policy, optimizer, runtime.DistInfo(1, 2, 1, CPU))


def _torchrun_sft(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "training.llm.sft", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _sft_data(path: Path) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"What is {a}+1?"},
                          {"role": "assistant", "content": f"The answer is {a + 1}."}]} for a in range(8)]
    write_jsonl(path, rows)
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fsdp2_checkpoint_is_sharded_per_rank_and_resumes_to_identical_weights(tiny: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flags = ["--model_path", str(tiny), "--data", str(_sft_data(tmp_path / "sft.jsonl")), "--total_steps", "3",
             "--batch_size", "4", "--micro_batch_size", "1", "--learning_rate", "3e-3", "--weight_decay", "0.1",
             "--save_every", "1", "--keep_checkpoints", "3"]
    straight = tmp_path / "straight"
    _torchrun_sft([*flags, "--output_dir", str(straight)], tmp_path)

    ckpt = straight / "checkpoints" / "step_00000002"
    assert not (ckpt / "optimizer.pt").exists()
    assert sorted(p.name for p in ckpt.iterdir()) == ["model", "rng_rank0.pt", "rng_rank1.pt", "state.json",
                                                      runtime.TRAIN_STATE]
    assert _dcp_files(ckpt) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    meta = FileSystemReader(ckpt / runtime.TRAIN_STATE).read_metadata()
    moments = [k for k in meta.state_dict_metadata if k.startswith("optim.state.") and k.endswith(".exp_avg")]
    assert len(moments) == len(load_file(str(ckpt / "model" / "model.safetensors")))  # every parameter
    for key in moments:  # each AdamW moment: half the rows from each rank, in that rank's own file
        size = meta.state_dict_metadata[key].size
        files = {}
        for chunk in meta.state_dict_metadata[key].chunks:
            assert chunk.sizes[0] == size[0] // 2, key
            index = next(i for i in meta.storage_data if i.fqn == key and i.offset == chunk.offsets)
            files[chunk.offsets[0]] = meta.storage_data[index].relative_path
        assert files == {0: "__0_0.distcp", size[0] // 2: "__1_0.distcp"}, key

    # an interrupted run: its output holds the step-2 checkpoint only; it resumes in 2 processes to step 3
    resumed = tmp_path / "resumed"
    shutil.copytree(ckpt, resumed / "checkpoints" / ckpt.name)
    (resumed / "checkpoints" / "latest").write_text(ckpt.name)
    _torchrun_sft([*flags, "--output_dir", str(resumed)], tmp_path)
    step3 = [run / "checkpoints" / "step_00000003" for run in (straight, resumed)]
    assert json.loads((step3[1] / "state.json").read_text())["step"] == 3
    want, got = (load_file(str(c / "model" / "model.safetensors")) for c in step3)
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert torch.equal(value, got[name]), name
    full = []
    for c in step3:  # the sharded AdamW states of both step-3 checkpoints, gathered here only to compare them
        dcp_to_torch_save(c / runtime.TRAIN_STATE, c / "full.pt")
        full.append(torch.load(c / "full.pt", weights_only=False)["optim"]["state"])
    assert full[0].keys() == full[1].keys()
    for name, states in full[0].items():
        for key, value in states.items():
            assert torch.equal(value, full[1][name][key]), (name, key)
