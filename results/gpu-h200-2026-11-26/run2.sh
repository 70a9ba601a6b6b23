#!/usr/bin/env bash
# Issue 55, second run on the GPU machine: every notebook not yet passed there since its fix.
set -u
SNAP=/tmp/snap; ln -sfn "$REPO/results" $SNAP/results
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$REPO"/.gpuwheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$SNAP/lib:$SNAP/tests:$SNAP PYTHONUNBUFFERED=1 SMOKE=1
cd $SNAP
NB="python3 -m pytest -p no:cacheprovider -p no:xdist -o addopts= --import-mode=importlib --nbval --nbval-sanitize-with tests/notebooks/sanitize.cfg --nbval-cell-timeout=300 -ra --tb=long --durations=5"
L=${LIMIT:-300}
g() { local name=$1; shift; (timeout $L $NB "$@" > "$OUT/nb_$name.txt" 2>&1; echo "rc=$?" >> "$OUT/nb_$name.txt") & }
g 02_12 notebooks/02_pipeline_overlap.ipynb notebooks/12_images.ipynb
g 00_01_03_04 notebooks/00_start_here.ipynb notebooks/01_samplers.ipynb notebooks/03_async_parts.ipynb notebooks/04_allreduce.ipynb
g 05_06 notebooks/05_transfers.ipynb notebooks/06_ddp.ipynb
g 07_08 notebooks/07_profile.ipynb notebooks/08_collectives.ipynb
g 10_11 notebooks/10_process_hop.ipynb notebooks/11_judging_the_model.ipynb
(timeout $L python3 -m pytest -p no:cacheprovider -o addopts= --import-mode=importlib -ra --tb=long -m cuda tests > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt") &
wait
tail -n 2 "$OUT"/*.txt
