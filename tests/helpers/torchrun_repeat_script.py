"""Run under torchrun by tests/test_launch.py: several launch.run calls in a row, rank 1 late.

Each call makes and destroys a process group; rank 1 sleeps between calls so rank 0 always
builds the next group first (where a group could read the previous group's store keys).
"""

import json
import os
import sys
import time

from distlab import launch
from helpers.launch_targets import describe

if __name__ == "__main__":
    world, calls = int(sys.argv[1]), int(sys.argv[2])
    sums = []
    for i in range(calls):
        values = launch.run(describe, world, args=(f"call{i}",), timeout=60)
        sums.append([v["sum"] for v in values])
        if os.environ["RANK"] == "1":
            time.sleep(1.0)
    print("RESULT " + json.dumps(sums), flush=True)
