#!/usr/bin/env bash
# GPU session 2 (see README.md): notebooks on the GPU, writes into $OUT
set -u
source tools/gpu/setup.sh
t() { local name=$1; shift; local s=$(date +%s); timeout "$@" > $OUT/$name.txt 2>&1; echo "$name: exit $? in $(( $(date +%s) - s )) s" | tee -a $OUT/steps.txt; }
t pytest_nb 300 python3 -m pytest -p no:cacheprovider -p no:xdist --import-mode=importlib --nbval --nbval-sanitize-with tests/notebooks/sanitize.cfg -o addopts="" notebooks/02_pipeline_overlap.ipynb notebooks/05_transfers.ipynb notebooks/06_ddp.ipynb notebooks/07_profile.ipynb -q
cd notebooks
for nb in 05_transfers 06_ddp 07_profile; do
  SMOKE=0 SHOW_TEXT=1 timeout 200 python3 ../tools/gpu/nbfigs.py $nb.ipynb $OUT/figures > $OUT/full_$nb.txt 2>&1; echo "full $nb: exit $?" | tee -a $OUT/steps.txt
done
