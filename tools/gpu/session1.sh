#!/usr/bin/env bash
# GPU session 1 (see README.md): writes into $OUT
set -u
source tools/gpu/setup.sh
git log -1 --format=%H > $OUT/commit.txt 2>/dev/null || true
{ nvidia-smi; nvidia-smi topo -m; python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.get_device_name(0))"; nproc; } > $OUT/env.txt 2>&1
t() { local name=$1; shift; local s=$(date +%s); timeout "$@" > $OUT/$name.txt 2>&1; echo "$name: exit $? in $(( $(date +%s) - s )) s" | tee -a $OUT/steps.txt; }
t pytest_cuda 120 python3 -m pytest -o addopts="" -p no:cacheprovider --import-mode=importlib -m cuda tests -q -rs
t ddp_overhead_cuda_nccl1 150 python3 -m distlab.bench ddp-overhead --device cuda --world-size 1 --layers 8 --width 4096 --batch 64 --bucket-cap-mb 25 --steps 10 --rounds 7 --json $OUT/ddp_overhead_cuda_nccl1.json
t ddp_overhead_cuda_gloo2 150 python3 -m distlab.bench ddp-overhead --device cuda --world-size 2 --layers 8 --width 4096 --batch 64 --bucket-cap-mb 25 --steps 5 --rounds 5 --json $OUT/ddp_overhead_cuda_gloo2.json
t ddp_trace 90 python3 tools/gpu/ddp_trace.py $OUT/traces
t torchrun2 200 torchrun --nproc-per-node 2 -m distlab.profile --quick --no-progress --timeout 120 --out $OUT/torchrun2
t profile 330 python3 -m distlab.profile --no-progress --timeout 240 --out $OUT/profile
ls -R $OUT | head -50
