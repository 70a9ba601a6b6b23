#!/usr/bin/env bash
# Issue 55 on a GPU machine: the notebooks not yet run there (02, 09 again, 12-17) under nbval,
# the FSDP2 scenarios and notebook 07 under two machine identities, with CUDA present.
set -u
SNAP=/tmp/snap; ln -sfn "$REPO/results" $SNAP/results
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$REPO"/.gpuwheels/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:$SNAP/lib:$SNAP/tests:$SNAP PYTHONUNBUFFERED=1 SMOKE=1
cd $SNAP
{ nvidia-smi; nproc; free -g; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0), torch.cuda.nccl.version())"; } > "$OUT/env.txt" 2>&1
NB="python3 -m pytest -p no:cacheprovider -p no:xdist -o addopts= --import-mode=importlib --nbval --nbval-sanitize-with tests/notebooks/sanitize.cfg --nbval-cell-timeout=300 -ra --tb=long --durations=12"
L=${LIMIT:-360}
(timeout $L $NB notebooks/09_zero.ipynb notebooks/02_pipeline_overlap.ipynb > "$OUT/nb_02_09.txt" 2>&1; echo "rc=$?" >> "$OUT/nb_02_09.txt") &
(timeout $L $NB notebooks/13_your_training_run.ipynb notebooks/14_nccl_model.ipynb notebooks/12_images.ipynb > "$OUT/nb_12_13_14.txt" 2>&1; echo "rc=$?" >> "$OUT/nb_12_13_14.txt") &
(timeout $L $NB notebooks/15_pipeline_parallel.ipynb notebooks/16_tensor_parallel.ipynb notebooks/17_planner.ipynb > "$OUT/nb_15_16_17.txt" 2>&1; echo "rc=$?" >> "$OUT/nb_15_16_17.txt") &
(timeout $L python3 -m pytest -p no:cacheprovider -o addopts= --import-mode=importlib -ra --tb=long --durations=8 tests/zero/test_zero_fsdp2_scenarios.py tests/notebooks/test_notebook_machine_identity.py > "$OUT/tests_fsdp2_nb07.txt" 2>&1; echo "rc=$?" >> "$OUT/tests_fsdp2_nb07.txt") &
wait
tail -n 3 "$OUT"/*.txt
