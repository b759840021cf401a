#!/usr/bin/env bash
# Downloads the wheels that the GPU check needs and the H200 image lacks, so that they can travel with the
# working tree to a machine that reaches no package registry.
#
# The image ships Python 3.12, torch, transformers 5.x (with huggingface-hub, tokenizers, safetensors), accelerate,
# numpy, scipy, numba, pandas, pyarrow, rich, tqdm, matplotlib, psutil, pyyaml, jinja2, xxhash, fsspec, cloudpickle,
# typing-extensions, pybind11, scikit-build-core, cmake and ninja. It lacks gymnasium (parasim's environments) and
# TRL (the GRPOTrainer baseline) with the part of their requirements it does not have: farama-notifications for
# gymnasium; datasets, dill and multiprocess for TRL (GRPOTrainer imports datasets; every other requirement of TRL is
# in the image). TRL 1.16.0 takes transformers >= 4.56.2, so it runs on the image's transformers 5.x.
#
# Usage: bash scripts/fetch_gpu_wheels.sh [DEST]      (DEST defaults to wheels/gpu, which .gitignore excludes)
# Then copy DEST along with the checkout to the GPU machine and run `bash scripts/gpu_check.sh` there.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-wheels/gpu}"
PY="${PYTHON:-python3}"
DEVICE_PYTHON=3.12
PINS=(
  gymnasium==1.4.0
  farama-notifications==0.0.6
  trl==1.16.0
  datasets==5.2.0
  dill==0.4.1
  multiprocess==0.70.19
)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
download() {  # $1: the Python version the wheels are for (multiprocess ships one wheel per version)
  "$PY" -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version "$1" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp" "${PINS[@]}"
}
download "$DEVICE_PYTHON"
# The CPU dry run (`gpu_check.sh --dry-run`) installs the same pins for the interpreter here.
local_python="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
if [ "$local_python" != "$DEVICE_PYTHON" ]; then
  download "$local_python"
fi
printf '%s\n' "${PINS[@]}" >"$tmp/requirements.txt"

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
cp -r "$tmp" "$DEST"
echo "wheel folder $DEST: $(du -sh "$DEST" | cut -f1)"
ls -l "$DEST"
