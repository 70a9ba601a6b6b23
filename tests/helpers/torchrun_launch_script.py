"""Run under torchrun by tests/test_launch.py: launch.run must use the torchrun ranks."""

import json
import sys

from distlab import launch
from helpers.launch_targets import describe

if __name__ == "__main__":
    world = int(sys.argv[1])
    values = launch.run(describe, world, args=("torchrun",), timeout=60)
    print("RESULT " + json.dumps([{k: v[k] for k in ("rank", "pg_world_size", "sum", "tag")}
                                  for v in values]), flush=True)
