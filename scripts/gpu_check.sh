#!/usr/bin/env bash
# The prepared one-GPU check (docs/gpu.md), about 10 minutes on one GPU with a 0.5B–7B Qwen:
#   1. the test suite's `gpu`-marked tests (tests/test_gpu_path.py);
#   2. one EMPO² iteration on the trap env and one on ScienceWorld (needs Java 17) with the model,
#      printing step time and peak GPU memory (scripts/gpu_step.py);
#   3. the same group size, prompt and completion length through TRL's GRPOTrainer for a side-by-side
#      step time, when `trl` is importable.
#
# usage: scripts/gpu_check.sh MODEL_DIR        (or EMPO2_GPU_MODEL=MODEL_DIR scripts/gpu_check.sh)
#   MODEL_DIR: a local model directory, e.g. after `hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir MODEL_DIR`
#   PYTHON (default .venv/bin/python), QUANTIZATION (default auto: 4-bit), GROUP (default 8),
#   OUT (default gpu_check_out/: one JSON line per part in results.jsonl)
# Without a CUDA device it prints "no CUDA device: skipped" and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "no CUDA device: skipped (scripts/gpu_check.sh needs one GPU; see docs/gpu.md)"
  exit 0
fi
MODEL=${1:-${EMPO2_GPU_MODEL:-}}
if [ -z "$MODEL" ] || [ ! -f "$MODEL/config.json" ]; then
  echo "give a local model directory with a config.json: scripts/gpu_check.sh DIR" >&2
  echo "(fetch one once: hf download Qwen/Qwen2.5-0.5B-Instruct --local-dir DIR; see docs/gpu.md)" >&2
  exit 2
fi
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
# USE_HUB_KERNELS=NO: TRL loads its own model; transformers ≥5.25 would fetch Hub kernels for it (offline: fails).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 USE_HUB_KERNELS=NO
status=0
STEP_ARGS="--group ${GROUP:-8} --quantization ${QUANTIZATION:-auto} --out $OUT/results.jsonl"
"$PY" -c "import torch; p = torch.cuda.get_device_properties(0); print(f'GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}')"

echo "== 1/4 gpu-marked tests"
"$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_path.py || status=1

echo "== 2/4 one trap iteration"
"$PY" scripts/gpu_step.py empo2 --model "$MODEL" --env trap $STEP_ARGS || status=1

echo "== 3/4 one ScienceWorld iteration"
if command -v java >/dev/null 2>&1; then
  "$PY" scripts/gpu_step.py empo2 --model "$MODEL" --env scienceworld $STEP_ARGS || status=1
else
  echo "skipped: no java on PATH (ScienceWorld needs Java 17)"
fi

echo "== 4/4 the same step through TRL's GRPOTrainer"
if "$PY" -c "import trl, datasets" 2>/dev/null; then
  "$PY" scripts/gpu_step.py trl --model "$MODEL" --env trap $STEP_ARGS || status=1
else
  echo "skipped: trl (and datasets) not importable; pip install trl for the side-by-side time"
fi

echo "== results ($OUT/results.jsonl)"
cat "$OUT/results.jsonl"
exit $status
