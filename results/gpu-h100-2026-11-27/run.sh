#!/usr/bin/env bash
# Issue 58 on an H100: the kernels run of ../gpu-h200-2026-11-27 (a smaller grid: two models, tp 1 and 8,
# FlashAttention-2 and cuDNN at 4k-32k tokens), to check the cuDNN speed-up holds on the other Hopper part.
# Run from the repository root on the device machine (torch preinstalled, no registry: tqdm and cloudpickle carried as wheels).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$PWD/lib PYTHONUNBUFFERED=1
{ nvidia-smi; nproc; free -g; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0), torch.backends.cudnn.version())"; git log -1 --format=%H 2>/dev/null; } > "$OUT/env.txt" 2>&1
timeout ${LIMIT:-300} python3 -m distlab.bench kernels --models llama3-8b,llama3-70b --tp 1,8 --attention-tp 1,8 --seq-lens 4096,8192,16384,32768 --backends flash,cudnn --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
echo "rc=$?" >> "$OUT/kernels.txt"
tail -n 60 "$OUT/kernels.txt"
