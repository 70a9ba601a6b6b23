#!/usr/bin/env bash
# Issue 55, third run on the GPU machine: notebook 06 after its fix, and the tests marked cuda.
set -u
SNAP=/tmp/snap; ln -sfn "$REPO/results" $SNAP/results
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$REPO"/.gpuwheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$SNAP/lib:$SNAP/tests:$SNAP PYTHONUNBUFFERED=1 SMOKE=1
cd $SNAP
L=${LIMIT:-200}
(timeout $L python3 -m pytest -p no:cacheprovider -p no:xdist -o addopts= --import-mode=importlib --nbval --nbval-sanitize-with tests/notebooks/sanitize.cfg --nbval-cell-timeout=300 -ra --tb=long notebooks/06_ddp.ipynb > "$OUT/nb_06.txt" 2>&1; echo "rc=$?" >> "$OUT/nb_06.txt") &
(timeout $L python3 -m pytest -p no:cacheprovider -o addopts= --import-mode=importlib -ra --tb=long --continue-on-collection-errors -m cuda tests > "$OUT/tests_cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_cuda.txt") &
wait
tail -n 4 "$OUT"/*.txt
