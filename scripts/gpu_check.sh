#!/usr/bin/env bash
# GPU check of the LLM manager training path, with the same GRPO step through TRL's GRPOTrainer in the same run, on
# one bare GPU machine (an H200 in mind) that reaches no package registry: one command, under 8 minutes.
#
#   bash scripts/fetch_gpu_wheels.sh               # where PyPI is reachable: the wheels the image lacks -> wheels/gpu
#   bash scripts/gpu_check.sh [OUT_DIR]            # on the GPU machine, with wheels/gpu carried along
#   bash scripts/gpu_check.sh --dry-run [OUT_DIR]  # the same steps on CPU with a tiny model (CI runs this)
#
# Steps: install the pinned wheels of wheels/gpu into a fresh target folder, with no index and no dependency
# resolution (the machine's own packages supply the rest); build parasim's C++ core from this checkout into the same
# folder without build isolation (the machine's pybind11, scikit-build-core, cmake and ninja); put the folder first
# on PYTHONPATH; run scripts/gpu_bench.py, which measures (see its docstring) and writes OUT_DIR/gpu_check.json
# (every figure) and OUT_DIR/gpu_check.md (the table); the build's log is OUT_DIR/build.log. OUT_DIR defaults to $OUT
# when set, else ./gpu_check_out. The exit status is non-zero when a step or a measured section failed.
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE=qwen3-4b
if [ "${1:-}" = "--dry-run" ]; then
  SHAPE=tiny
  shift
fi
OUT_DIR="${1:-${OUT:-gpu_check_out}}"
WHEELS="${PARASIM_GPU_WHEELS:-wheels/gpu}"
PY="${PYTHON:-python3}"
LIMIT_S="${PARASIM_GPU_CHECK_LIMIT_S:-460}"  # the whole script, install and build included
LAST_SECTION_S=100                           # room left for the section that starts last
start=$SECONDS
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

if [ ! -f "$WHEELS/requirements.txt" ]; then
  echo "no $WHEELS/requirements.txt: run 'bash scripts/fetch_gpu_wheels.sh' where PyPI is reachable, then carry" \
    "$WHEELS to this machine" >&2
  exit 2
fi
echo "wheel folder $WHEELS: $(du -sh "$WHEELS" | cut -f1)"
ls -l "$WHEELS"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
  torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")'
image_packages='transformers|accelerate|tokenizers|huggingface.hub|pyarrow|pandas|numpy|numba|pybind11'
"$PY" -m pip list 2>/dev/null | grep -iE "^(${image_packages}|scikit.build.core|cmake|ninja) " || true

SITE="$(mktemp -d "${TMPDIR:-/tmp}/parasim_gpu_site.XXXXXX")"
trap 'rm -rf "$SITE"' EXIT
"$PY" -m pip install -q --no-index --no-deps --no-compile --find-links "$WHEELS" --target "$SITE" \
  -r "$WHEELS/requirements.txt"
echo "building parasim and its C++ core into $SITE (log: $OUT_DIR/build.log) ..."
if ! "$PY" -m pip install --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" \
  -C build-dir="$SITE/.build" . >"$OUT_DIR/build.log" 2>&1; then
  echo "the parasim build failed; the end of $OUT_DIR/build.log:" >&2
  tail -30 "$OUT_DIR/build.log" >&2
  exit 1
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# outside the checkout, whose parasim/ (no compiled core) would otherwise shadow the build
found="$(cd "$SITE" && "$PY" -c 'import gymnasium, datasets, trl, parasim._core, parasim; print(parasim.__file__)')"
case "$found" in
  "$SITE"/*) ;;
  *) echo "note: parasim is imported from $found, not from the build in $SITE (an editable install's finder runs" \
       "first); the figures are that install's" ;;
esac

left=$((LIMIT_S - (SECONDS - start)))
budget=$((left - LAST_SECTION_S))
if [ "$budget" -le 0 ]; then
  echo "install and build took $((SECONDS - start)) s of the $LIMIT_S s limit: no time left to measure" >&2
  exit 1
fi
echo "installed in $((SECONDS - start)) s; measuring (no section starts after $budget s, hard stop at $left s) ..."
status=0
timeout --kill-after=10 "$left" "$PY" scripts/gpu_bench.py --shape "$SHAPE" --out "$OUT_DIR" --budget-s "$budget" \
  || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "the measurements ran past the $LIMIT_S s limit and were stopped; $OUT_DIR/gpu_check.json holds what" \
    "was measured (\"partial\": true)" >&2
fi
echo "gpu_check: $((SECONDS - start)) s in all, exit status $status; figures in $OUT_DIR/gpu_check.json and" \
  "$OUT_DIR/gpu_check.md"
exit "$status"
