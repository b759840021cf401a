"""Plumbing shared by the LLM trainers: config, torchrun / FSDP2, token log-probs, checkpoints, logs.

Kept out of ``sft.py`` / ``grpo.py`` so that those read as the algorithm only. Nothing here knows about rewards.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import random
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from parasim.config import fields as config_fields
from parasim.config.fields import ConfigError

T = TypeVar("T")
DTYPES = ("bfloat16", "float16", "float32")  # compute dtypes of the trainers on GPUs


# ----------------------------------------------------------------------------------------------- config
def parse_config(cls: type[T], argv: Sequence[str] | None = None, prog: str | None = None) -> T:
    """Build the dataclass ``cls`` from defaults, then ``--config FILE`` (YAML, JSON or TOML), then ``--field value``
    flags (``parasim.config.fields``: every field is a flag with its help, type, range and default; unknown keys
    and abbreviated flags are errors, so a typo never silently trains with a default)."""
    return config_fields.parse_args(cls, argv, prog or _prog(cls), _description(cls))[0]


def cli(cls: type[T], main: Callable[[T], Any], prog: str, argv: Sequence[str] | None = None) -> int:
    """A trainer's command line: parse, ``--print-config`` or run ``main``; a bad flag, value, file or path is one
    line on stderr and exit code 2 (argparse's own errors too), a failed run a traceback and exit code 1."""
    try:
        args, ns = config_fields.parse_args(cls, argv, prog, _description(cls))
        if ns.print_config:
            print(config_fields.to_toml(dataclasses.asdict(args)), end="")
            return 0
        main(args)
    except ConfigError as err:
        print(f"{prog}: error: {err}", file=sys.stderr, flush=True)
        return 2
    return 0


def _prog(cls: type) -> str:
    return f"python -m {cls.__module__}"


def _description(cls: type) -> str:
    return inspect.cleandoc(cls.__doc__ or "")


def check_model_dir(path: str, name: str = "model_path") -> Path:
    """``path`` as an existing HF model directory, or a ``ConfigError`` saying what is missing: a run must not
    end in a tokenizer's or the Hub's message about a path that was never there."""
    if not path:
        raise ConfigError(f"{name}: required (an HF model directory: a base model, or a checkpoint's model/)")
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"{name} = {path!r}: no such directory")
    if not (p / "config.json").is_file():
        raise ConfigError(f"{name} = {path!r}: not an HF model directory (no config.json)")
    return p


def check_file(path: str, name: str, what: str) -> Path:
    """``path`` as an existing file, or a ``ConfigError`` naming the setting."""
    if not path:
        raise ConfigError(f"{name}: required ({what})")
    if not Path(path).is_file():
        raise ConfigError(f"{name} = {path!r}: no such file ({what})")
    return Path(path)


# ------------------------------------------------------------------------------------------ distributed
@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: rank 0 of 1 in a plain run, or torchrun's rank / world size."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join torchrun's process group when WORLD_SIZE > 1 (NCCL on GPUs, gloo on CPU); a plain process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank, world, local, device)


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum a tensor over ranks (no-op in a single process); used for global loss normalizers and metrics."""
    if info.world_size > 1:
        out = values.clone().to(info.device if dist.get_backend() == "nccl" else "cpu")
        dist.all_reduce(out)
        return out.to(values.device)
    return values


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------- policy
class TokenLogprobs(nn.Module):
    """Per-token log-probabilities and entropies of a causal LM, computed in sequence chunks.

    Why a module: under FSDP2 the root ``fully_shard`` gathers embeddings / final norm / lm_head in the root's
    forward, so the chunked head must run *inside* a forward. Why chunks with recomputation: at Qwen3's 151k vocab a
    24k-token sequence has 14 GB of fp32 logits; each chunk's logits are rebuilt in backward instead of stored.
    Output ``logprobs[:, t] = log p(ids[t] | ids[:t]) / temperature-scaled``; position 0 is 0 (nothing predicts it).
    """

    def __init__(self, lm: nn.Module, chunk_tokens: int = 2048) -> None:
        super().__init__()
        self.lm = lm
        self.chunk_tokens = chunk_tokens

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.lm.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        head = self.lm.get_output_embeddings()
        targets = input_ids[:, 1:]
        hidden = hidden[:, :-1]
        lps, ents = [], []
        for s in range(0, hidden.shape[1], self.chunk_tokens):
            h, y = hidden[:, s:s + self.chunk_tokens], targets[:, s:s + self.chunk_tokens]
            if torch.is_grad_enabled():
                lp, ent = torch.utils.checkpoint.checkpoint(_head_chunk, h, y, head.weight, temperature,
                                                            use_reentrant=False)
            else:
                lp, ent = _head_chunk(h, y, head.weight, temperature)
            lps.append(lp)
            ents.append(ent)
        zero = torch.zeros_like(input_ids[:, :1], dtype=torch.float32)
        return torch.cat([zero, *lps], dim=1), torch.cat([zero, *ents], dim=1)


def _head_chunk(h: torch.Tensor, y: torch.Tensor, weight: torch.Tensor,
                temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (h @ weight.t()).float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    token_lp = logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return token_lp, entropy


def load_policy(model_path: str | Path, info: DistInfo, *, compute_dtype: str = "bfloat16",
                gradient_checkpointing: bool = False, chunk_tokens: int = 2048) -> TokenLogprobs:
    """Load an HF causal LM with fp32 master weights; FSDP2-shard it when world size > 1.

    Master weights stay fp32 so that checkpoints resume bit-exactly and small updates are not lost to bf16
    rounding; compute runs in ``compute_dtype`` (FSDP2's mixed-precision policy, or autocast in a single process).
    """
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    lm.config.use_cache = False
    if gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = TokenLogprobs(lm, chunk_tokens).to(info.device)
    if info.world_size > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(info.device.type, (info.world_size,))
        dtype = getattr(torch, compute_dtype) if info.device.type == "cuda" else torch.float32
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for layer in lm.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(policy, mesh=mesh, mp_policy=mp)
    return policy


def autocast(info: DistInfo, compute_dtype: str) -> Any:
    """bf16 autocast for single-process GPU runs; FSDP2 casts itself and CPU runs stay fp32 (exact tests)."""
    if info.world_size == 1 and info.device.type == "cuda" and compute_dtype != "float32":
        return torch.autocast("cuda", dtype=getattr(torch, compute_dtype))
    return torch.autocast(info.device.type, enabled=False)


def full_state_dict(policy: TokenLogprobs, info: DistInfo, *, all_ranks: bool = False) -> dict[str, torch.Tensor]:
    """The unsharded HF state dict on CPU (rank 0 only unless ``all_ranks``); a collective under FSDP2.

    A tied ``lm_head.weight`` is left out: it is ``embed_tokens.weight``, and loaders (HF, vLLM) re-tie it.
    """
    if info.world_size == 1:
        sd = {k: v.detach().to("cpu", copy=True) for k, v in policy.lm.state_dict().items()}
    else:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=not all_ranks)
        sd = {k: v.to("cpu") for k, v in get_model_state_dict(policy.lm, options=opts).items()}
    if getattr(policy.lm.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    return sd


# ---------------------------------------------------------------------------------------------- checkpoints
TRAIN_STATE = "train_state"  # the DCP directory of a checkpoint: fp32 model and optimizer states, sharded per rank


def save_checkpoint(root: str | Path, step: int, policy: TokenLogprobs, optimizer: torch.optim.Optimizer,
                    info: DistInfo, state: dict[str, Any], tokenizer: Any = None, keep: int = 2) -> Path | None:
    """Write ``root/step_XXXXXXXX`` atomically: everything goes to a ``.tmp`` directory that is renamed at the end,
    and ``root/latest`` is replaced last, so a crash mid-save leaves the previous checkpoint intact.

    Contents: ``model/`` (an HF directory written by rank 0, servable by vLLM), ``train_state/`` (model and optimizer
    states through ``torch.distributed.checkpoint``: each rank writes its own shards, so no rank ever holds the whole
    optimizer state), ``rng_rank{r}.pt`` (every rank's RNG states), ``state.json`` (step and trainer state).
    """
    import torch.distributed.checkpoint as dcp

    root = Path(root)
    final = root / f"step_{step:08d}"
    tmp = root / f"step_{step:08d}.tmp"
    if info.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "model").mkdir(parents=True)
    barrier(info)
    torch.save(rng_state(), tmp / f"rng_rank{info.rank}.pt")
    with _single_process_dcp():
        dcp.save(_train_state(policy, optimizer), checkpoint_id=tmp / TRAIN_STATE)
    model_sd = full_state_dict(policy, info)
    if info.is_main:
        policy.lm.save_pretrained(tmp / "model", state_dict=model_sd, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1, default=str))
    barrier(info)
    if info.is_main:
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        latest_tmp = root / "latest.tmp"
        latest_tmp.write_text(final.name)
        os.replace(latest_tmp, root / "latest")
        for old in sorted(root.glob("step_????????"))[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
    barrier(info)
    return final if info.is_main else None


def latest_checkpoint(root: str | Path) -> Path | None:
    """The checkpoint ``root/latest`` names, or None when there is none yet."""
    pointer = Path(root) / "latest"
    if not pointer.exists():
        return None
    path = Path(root) / pointer.read_text().strip()
    return path if (path / "state.json").exists() else None


@dataclass
class RunStart:
    """Where a run starts: the checkpoint it resumes (None for a fresh run), the weights and tokenizer to load."""

    ckpt_root: Path
    ckpt: Path | None
    model_dir: Path
    tokenizer: Any
    pad_id: int


def run_start(output_dir: str | Path, model_path: str | Path, resume: bool) -> RunStart:
    """Resume from the latest checkpoint under ``output_dir`` when asked and one exists, else start from
    ``model_path``; SFT and GRPO share this so that both resume the same way."""
    from transformers import AutoTokenizer

    ckpt_root = Path(output_dir) / "checkpoints"
    ckpt = latest_checkpoint(ckpt_root) if resume else None
    model_dir = ckpt / "model" if ckpt else check_model_dir(str(model_path))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return RunStart(ckpt_root, ckpt, model_dir, tokenizer, pad_token_id(tokenizer))


def pad_token_id(tokenizer: Any) -> int:
    """The padding id: the tokenizer's own, else its end-of-sequence id (Qwen3-style tokenizers may lack one)."""
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def load_training_state(ckpt: Path, policy: TokenLogprobs, optimizer: torch.optim.Optimizer,
                        info: DistInfo) -> dict[str, Any]:
    """Restore the fp32 model and optimizer states from ``ckpt/train_state`` (each rank reads the shards it needs;
    DCP reshards, so the world size may differ from the saving run's) and this rank's RNG states; returns
    state.json. The model was already built from ``ckpt/model``; its training state is reloaded here so that a
    resume never depends on the HF export."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    saved = len(list(ckpt.glob("rng_rank*.pt")))
    if info.world_size > saved:  # checked by every rank, before any collective
        raise ConfigError(f"world size = {info.world_size}: checkpoint {ckpt} holds the RNG states of {saved} ranks "
                          f"(resume with a world size in [1, {saved}])")
    train_state = _train_state(policy, optimizer)
    with _single_process_dcp():
        dcp.load(train_state, checkpoint_id=ckpt / TRAIN_STATE)
    set_state_dict(policy.lm, optimizer, model_state_dict=train_state["model"],
                   optim_state_dict=train_state["optim"])
    set_rng_state(torch.load(ckpt / f"rng_rank{info.rank}.pt", weights_only=False))
    return json.loads((ckpt / "state.json").read_text())


def _train_state(policy: TokenLogprobs, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Model and optimizer states keyed by parameter names, as DTensor shards under FSDP2 and whole tensors in one
    process: the layout DCP saves without gathering and loads in place (a fresh optimizer gets zero states first)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(policy.lm, optimizer)
    return {"model": model_sd, "optim": optim_sd}


@contextlib.contextmanager
def _single_process_dcp() -> Iterator[None]:
    """DCP runs without a process group as a single process (what a plain run is) and warns that it does so on
    every call; that warning is silenced here, nothing else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def barrier(info: DistInfo) -> None:
    if info.world_size > 1:
        dist.barrier()


# ---------------------------------------------------------------------------------------------- logging
class StepLog:
    """A trainer's per-step record: to the metric loggers (``training.loggers``) and one line on stdout,
    from the main process only. A resumed run passes the checkpoint's step, so steps after it are logged once.
    ``record`` ("grpo" or "sft") picks the dashboard names (``training.loggers.metric_name``)."""

    def __init__(self, out: str | Path, name: str, loggers: str, info: DistInfo, *, resume_step: int | None,
                 config: dict[str, Any] | None = None, echo: bool = True, record: str = "grpo") -> None:
        from training.loggers import MetricLoggers, parse_loggers

        self.echo = echo and info.is_main
        self.sinks = MetricLoggers(out, name, parse_loggers(loggers), resume_step=resume_step, config=config,
                                   enabled=info.is_main, record=record)

    def log(self, record: dict[str, Any]) -> None:
        self.sinks.log(record, int(record["step"]))
        if self.echo:
            brief = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in record.items() if not isinstance(v, (dict, list)))
            print(brief, file=sys.stdout, flush=True)

    def close(self) -> None:
        self.sinks.close()
