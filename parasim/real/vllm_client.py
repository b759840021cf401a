"""Talking to a running vLLM OpenAI server beyond completions: readiness and in-place weight reloads.

A GRPO trainer pushes its updated weights to the rollout server after every update. With vLLM 0.32 the
mechanism that works on every device, CPU included, is an in-place reload from a Hugging Face checkpoint
directory: ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}`` makes
each worker stream the directory's safetensors into the live model (no restart, no re-profiling; tens of
milliseconds for a tiny model). The route exists only when the server was started with
``VLLM_SERVER_DEV_MODE=1`` (``parasim serve-pool`` sets it for models marked ``reloadable``). Around the
reload, ``/pause?mode=wait`` lets in-flight requests finish on the old weights and blocks new ones, and
``/reset_prefix_cache`` drops KV blocks computed with the old weights, which prefix caching would otherwise
reuse for the next prompt that shares a prefix. (vLLM's NCCL/IPC ``/update_weights`` engines need a GPU
and a trainer in the same process group; the checkpoint path needs only a shared filesystem.)

One vLLM 0.32 defect is worked around: with tied embeddings the reload skips the LM head, and on CPU the
head keeps computing logits from a copy packed from the old weights. Servers started with the worker
extension in ``vllm_ext/`` (``reloadable_server_args``; serve-pool adds it) reload through
``parasim_reload_weights``, which also repacks the head. On a CPU server without the extension a reload is
refused rather than silently serving a half-updated model; GPU servers without it use plain
``reload_weights``, whose LM head shares the embedding's storage.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx

from parasim.real.endpoints import normalize_base_url

EXTENSION_DIR = Path(__file__).with_name("vllm_ext")
EXTENSION_CLS = "parasim_vllm_ext.WeightSyncExtension"
_NO_EXTENSION = "has no attribute 'parasim_reload_weights'"


class WeightReloadError(RuntimeError):
    """The server refused or failed a reload; the message says which step and why."""


def reloadable_server_args() -> tuple[list[str], dict[str, str]]:
    """Extra vLLM arguments and environment for a server that ``reload_weights`` can update in place.

    The environment's ``PYTHONPATH`` must be prepended to any the server already has (serve-pool does).
    """
    return (["--worker-extension-cls", EXTENSION_CLS],
            {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(EXTENSION_DIR)})


def server_root(base_url: str) -> str:
    """``http://h:p/v1`` or ``http://h:p`` -> ``http://h:p``."""
    return normalize_base_url(base_url).removesuffix("/v1")


def is_ready(base_url: str, served_model: str | None = None, timeout_s: float = 2.0) -> bool:
    """True when ``/health`` answers 200 and ``/v1/models`` lists ``served_model`` (any model if None)."""
    root = server_root(base_url)
    try:
        if httpx.get(f"{root}/health", timeout=timeout_s).status_code != 200:
            return False
        models = httpx.get(f"{root}/v1/models", timeout=timeout_s)
        names = [m.get("id") for m in models.json().get("data", [])] if models.status_code == 200 else []
    except (httpx.HTTPError, ValueError):
        return False
    return bool(names) and (served_model is None or served_model in names)


def wait_ready(base_url: str, served_model: str | None = None, timeout_s: float = 600.0,
               interval_s: float = 0.5) -> float:
    """Block until the server is ready; returns the seconds waited. Raises ``TimeoutError`` past the limit."""
    start = time.monotonic()
    while not is_ready(base_url, served_model):
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{server_root(base_url)} not ready after {timeout_s:g} s")
        time.sleep(interval_s)
    return time.monotonic() - start


def _post(client: httpx.Client, url: str, step: str, **kwargs: object) -> httpx.Response:
    try:
        response = client.post(url, **kwargs)  # type: ignore[arg-type]
    except httpx.HTTPError as err:
        raise WeightReloadError(f"{step}: {type(err).__name__}: {err}") from None
    if response.status_code == 404:
        raise WeightReloadError(f"{step}: {url} not found; start the server with VLLM_SERVER_DEV_MODE=1 "
                                "(serve-pool: `reloadable: true`)")
    if response.status_code != 200:
        raise WeightReloadError(f"{step}: HTTP {response.status_code}: {response.text[:500]}")
    return response


def reload_weights(base_url: str, checkpoint_dir: str | Path, *, timeout_s: float = 600.0,
                   pause: bool = True, client: httpx.Client | None = None) -> float:
    """Load the safetensors in ``checkpoint_dir`` into the running server's model; returns seconds taken.

    ``checkpoint_dir`` is what ``model.save_pretrained`` wrote, on a filesystem the server can read, with
    the architecture the server was started with. Later generations use the new weights; with ``pause``,
    requests already running finish on the old ones first.
    """
    path = Path(checkpoint_dir).resolve()
    if not any(path.glob("*.safetensors")):
        raise WeightReloadError(f"checkpoint_dir: no *.safetensors in {str(path)!r}")
    root = server_root(base_url)
    start = time.monotonic()
    with httpx.Client(timeout=timeout_s) if client is None else nullcontext(client) as client:
        if pause:
            _post(client, f"{root}/pause", "pause", params={"mode": "wait"})
        try:
            _reload(client, root, str(path))
            _post(client, f"{root}/reset_prefix_cache", "reset_prefix_cache")
        except WeightReloadError:
            if pause:  # never leave the server paused; the reload's own error is the one to report
                try:
                    _post(client, f"{root}/resume", "resume")
                except WeightReloadError:
                    pass
            raise
        if pause:
            _post(client, f"{root}/resume", "resume")
    return time.monotonic() - start


def _reload(client: httpx.Client, root: str, path: str) -> None:
    """The reload RPC: the extension's when the server has it, plain ``reload_weights`` on GPU servers."""
    url = f"{root}/collective_rpc"
    try:
        body = {"method": "parasim_reload_weights", "kwargs": {"weights_path": path}}
        _post(client, url, "reload_weights", json=body)
        return
    except WeightReloadError as err:
        if _NO_EXTENSION not in str(err):
            raise
    info = client.get(f"{root}/server_info")
    if info.status_code != 200 or "device_config=cpu" in info.text:
        raise WeightReloadError(
            "reload_weights: this CPU vLLM server lacks the parasim worker extension, without which a reload "
            "leaves tied LM heads on the old weights; start it with reloadable_server_args() "
            "(serve-pool: `reloadable: true`)")
    _post(client, url, "reload_weights", json={"method": "reload_weights", "kwargs": {"weights_path": path}})


def save_state_dict(state_dict: Mapping[str, Any], out_dir: str | Path, dtype: Any = None) -> Path:
    """Write a model's state dict as ``out_dir/model.safetensors``, the layout ``reload_weights`` reads.

    Tensors are gathered (FSDP2 ``DTensor``s through ``full_tensor()``), moved to CPU and made contiguous;
    tensors that share storage (tied embeddings: ``lm_head.weight`` is ``embed_tokens.weight``) are written
    once under their first name, which is what ``save_pretrained`` does and vLLM's loaders expect. ``dtype``
    (e.g. ``torch.bfloat16``, the served dtype) casts floating tensors, halving the bytes an fp32 trainer
    writes and the server reads. The file is written under a temporary name and renamed, so a reader never
    sees half a file.
    """
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors, seen = {}, set()
    for name, tensor in state_dict.items():
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        tensor = tensor.detach().to("cpu")
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensors[name] = tensor.contiguous()
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    return out


def push_weights(base_url: str, state_dict: Mapping[str, Any], weights_dir: str | Path, *, step: int,
                 client: httpx.Client | None = None, keep: int = 1, timeout_s: float = 600.0,
                 dtype: Any = None) -> Path:
    """A trainer's weight sync: save ``state_dict`` to ``weights_dir/step_<step>`` and reload the server from it.

    ``weights_dir`` must be on a filesystem the server reads. The newest ``keep`` step directories are kept
    (the one just loaded included), older ones deleted. Returns the directory loaded.
    """
    if keep < 1:
        raise ValueError(f"keep: expected an integer >= 1, got {keep!r}")
    out = save_state_dict(state_dict, Path(weights_dir) / f"step_{step:08d}", dtype=dtype)
    reload_weights(base_url, out, timeout_s=timeout_s, client=client)
    steps = sorted(p for p in Path(weights_dir).glob("step_*") if p.is_dir())
    for old in steps[:-keep]:
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    return out
