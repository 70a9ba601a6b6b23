#!/usr/bin/env bash
# Second GPU run, beside run.sh: held-out model shapes (GPT-3 1.3B: layer norms, GELU, biases,
# learned positions; Llama 2 7B: untied output), torch DDP-style autocast on one GPU (zero0)
# with its allocator history, an 80 GB card emulated by capping the caching allocator at an
# H100's CUDA total less the 0.80 GiB outside the allocator (the planner's verdict against
# out-of-memory on that budget), and `python -m distlab.plan ... --verify` end to end.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/lib PYTHONUNBUFFERED=1
G="python3 -m distlab.plan.verify.grid"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch; print(torch.__version__, torch.version.cuda)"; git log -1 --format=%H 2>/dev/null; } > "$OUT/env2.txt" 2>&1
M1=llama3.2-1b; M3=llama3.2-3b
C="$M1 s4096 mb2 none zero0;$M1 s4096 mb2 full zero0;gpt3-1.3b s2048 mb8 none;gpt3-1.3b s2048 mb8 full"
C="$C;gpt3-1.3b s2048 mb16 op;gpt3-1.3b s2048 mb4 none zero0;llama2-7b s4096 mb1 full;llama2-7b s4096 mb2 op"
C="$C;llama2-7b s2048 mb2 none;$M1 s4096 mb1 op;$M1 s4096 mb1 none;$M3 s4096 mb1 op"
timeout 200 $G --out "$OUT/grid-run2.json" --warmup 3 --limit-s 170 \
  --history "$M1 s4096 mb2 none zero0" --history-out "$OUT/history2.json.gz" > "$OUT/run2.txt" 2>&1
echo "grid rc=$?" >> "$OUT/run2.txt"
K="$M3 s4096 mb2 op;$M3 s4096 mb4 full;$M3 s8192 mb2 full;$M3 s4096 mb2 none;$M1 s4096 mb4 none;$M3 s4096 mb1 none;$M3 s4096 mb2 full"
timeout 110 $G --out "$OUT/grid-h100cap.json" --allocator-limit-gib 78.377 --limit-s 90 \
  --cases "$K" >> "$OUT/run2.txt" 2>&1
echo "capped rc=$?" >> "$OUT/run2.txt"
timeout 150 python3 -m distlab.plan $M3 --gpu h200 --gpus 1 --global-batch 4 --seq-len 4096 \
  --recompute none,op,full --verify 3 --json "$OUT/verify.json" > "$OUT/verify.txt" 2>&1
echo "verify rc=$?" >> "$OUT/verify.txt"
tail -n 30 "$OUT/run2.txt"; tail -n 25 "$OUT/verify.txt"
