#!/usr/bin/env bash
# Issue 58 on a GPU: a transformer layer's kernels (matrix products, causal attention with each
# SDPA kernel) measured beside the planner's fitted compute rate. Run from the repository root
# on the device machine (torch preinstalled, no registry: tqdm and cloudpickle carried as wheels).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$PWD/lib PYTHONUNBUFFERED=1
{ nvidia-smi; nproc; free -g; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0), torch.backends.cudnn.version())"; git log -1 --format=%H 2>/dev/null; } > "$OUT/env.txt" 2>&1
timeout ${LIMIT:-420} python3 -m distlab.bench kernels --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
echo "rc=$?" >> "$OUT/kernels.txt"
tail -n 60 "$OUT/kernels.txt"
