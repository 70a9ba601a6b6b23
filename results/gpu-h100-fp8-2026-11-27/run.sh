#!/usr/bin/env bash
# Issue 58 on an H100: one layer's matrix products in float8 (torch._scaled_mm, e4m3) beside the same
# products in bf16, in one run on one card, for the planner's hopper/fp8 rate. Attention is left out
# (SDPA has no float8 kernel; a float8 step runs it in bf16, measured in ../gpu-h100-2026-11-27).
# Run from the repository root on the device machine (torch preinstalled, no registry: tqdm and
# cloudpickle carried as wheels).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$PWD/lib PYTHONUNBUFFERED=1
{ nvidia-smi; nproc; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"; } > "$OUT/env.txt" 2>&1
for dtype in fp8 bf16; do
  timeout 75 python3 -m distlab.bench kernels --models llama3-8b,llama3-70b --tp 1,2,8 --attention-tp 8 \
    --seq-lens 8192 --backends flash --dtype $dtype --json "$OUT/kernels-$dtype.json" > "$OUT/kernels-$dtype.txt" 2>&1
  echo "rc=$?" >> "$OUT/kernels-$dtype.txt"
  grep -E "layer|rc=|Error|error:" "$OUT/kernels-$dtype.txt" | head -20
done
