#!/usr/bin/env bash
# "Will it fit", measured on one GPU: Llama 3.2 1B / 3B (and Llama 3 8B) trained a few steps with
# FSDP2 on a world of one, bf16 compute, fp32 states, fused AdamW, FlashAttention forced, recompute
# none / per-op / full; peak allocated and reserved memory per phase and step time per phase,
# for the planner's memory and step models (python -m distlab.judge fit). Run from the
# repository root on the device machine (torch preinstalled, no registry; nothing carried).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/lib PYTHONUNBUFFERED=1
G="python3 -m distlab.plan.verify.grid"
{ nvidia-smi; nproc; free -g; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0), torch.backends.cudnn.version())"; git log -1 --format=%H 2>/dev/null; } > "$OUT/env.txt" 2>&1
M1=llama3.2-1b; M3=llama3.2-3b
HIST="$M1 s4096 mb2 none;$M1 s4096 mb2 full;$M1 s4096 mb2 op"
timeout 215 $G --out "$OUT/grid.json" --limit-s 185 --history "$HIST" \
  --history-out "$OUT/history.json.gz" > "$OUT/grid.txt" 2>&1; echo "rc=$?" >> "$OUT/grid.txt"
EXP=""
for c in "$M3 s4096 mb2 full" "$M3 s4096 mb2 none" "$M3 s4096 mb2 op" "$M3 s8192 mb2 full" \
         "$M3 s8192 mb2 op" "$M3 s4096 mb4 full" "$M1 s4096 mb2 full" "$M1 s4096 mb2 none" \
         "$M1 s4096 mb2 op" "$M1 s8192 mb2 full" "$M1 s4096 mb4 full" "$M1 s4096 mb4 none" \
         "$M1 s2048 mb8 full" "$M3 s4096 mb1 full" "$M3 s4096 mb4 op" "$M3 s8192 mb2 none"; do
  EXP="$EXP;$c"; done
timeout 135 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $G --out "$OUT/grid-expandable.json" \
  --limit-s 110 --cases "${EXP#;}" > "$OUT/grid-expandable.txt" 2>&1; echo "rc=$?" >> "$OUT/grid-expandable.txt"
P="$M1 s4096 mb2 none;$M1 s4096 mb2 op;$M1 s4096 mb2 full"
timeout 80 $G --out "$OUT/profile-rows.json" --cases "$P;llama3-8b s2048 mb1 op;llama3-8b s4096 mb1 full" --profile "$P" --steps 1 \
  --profile-out "$OUT/kernels.txt" > "$OUT/profile.txt" 2>&1; echo "rc=$?" >> "$OUT/profile.txt"
tail -n 45 "$OUT/grid.txt"; tail -n 18 "$OUT/grid-expandable.txt"; tail -n 5 "$OUT/profile.txt"
