# sourced by session*.sh on the GPU machine: the notebook stack from .gpu-wheels into /tmp/site
export PYTHONUNBUFFERED=1
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu-wheels/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=/tmp/site:$PWD/lib:$PWD/tests:$PWD
export PATH=/tmp/site/bin:$PATH
