"""Run under torchrun by tests/test_launch.py: launch.run must use the torchrun ranks, and
several launch.run calls in a row, rank 1 late, each get a fresh group.

``world calls``: one call tagged ``torchrun`` (printed as ``GATHER <values>``), then ``calls``
more (their sums printed as ``REPEAT <sums>``). Each call makes and destroys a process group;
rank 1 sleeps after each so rank 0 always builds the next group first (where a group could read
the previous group's store keys).
"""

import json
import os
import sys
import time

from distlab import launch
from helpers.launch_targets import describe


def _late() -> None:
    if os.environ["RANK"] == "1":
        time.sleep(1.0)


if __name__ == "__main__":
    world, calls = int(sys.argv[1]), int(sys.argv[2])
    values = launch.run(describe, world, args=("torchrun",), timeout=60)
    print("GATHER " + json.dumps([{k: v[k] for k in ("rank", "pg_world_size", "sum", "tag")}
                                  for v in values]), flush=True)
    _late()
    sums = []
    for i in range(calls):
        values = launch.run(describe, world, args=(f"call{i}",), timeout=60)
        sums.append([v["sum"] for v in values])
        _late()
    print("REPEAT " + json.dumps(sums), flush=True)
