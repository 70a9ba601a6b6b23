#!/usr/bin/env bash
# The fit verdict at its edge: each case run with the caching allocator capped 1.5 GiB below and
# 1.5 GiB above the least memory the planner's allocator replay needs for it (74.91, 68.13 and
# 63.22 GiB): below it should run out of memory, above it should run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/lib PYTHONUNBUFFERED=1
run() { timeout 45 python3 -m distlab.plan.verify.grid --out "$OUT/grid-cap-$2.json" \
  --allocator-limit-gib "$2" --cases "$1" >> "$OUT/run3.txt" 2>&1; echo "$1 @ $2 GiB rc=$?" >> "$OUT/run3.txt"; }
run "llama3.2-3b s4096 mb2 none" 73.41; run "llama3.2-3b s4096 mb2 none" 76.41
run "llama3.2-3b s4096 mb4 full" 66.63; run "llama3.2-3b s4096 mb4 full" 69.63
run "llama3.2-1b s4096 mb4 none" 61.72; run "llama3.2-1b s4096 mb4 none" 64.72
cat "$OUT/run3.txt"
