"""Benchmark entry point.

    python -m distlab.bench sampler   --n 100000000 --world-size 8
    python -m distlab.bench allreduce --world-size 4 -b 1K -e 64M -f 4 --algorithms ring,builtin
    python -m distlab.bench pipeline  --items 200
    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl -b 8 -e 1G -f 2

Every benchmark runs the reference (torch) in the same run, prints a table, and can write JSON
with provenance (``--json PATH``).
"""

from __future__ import annotations

import importlib
import sys

# name -> module under distlab.bench that defines main(argv)
BENCHMARKS = {
    "sampler": "distlab.bench.sampler",
    "allreduce": "distlab.bench.allreduce",
    "pipeline": "distlab.bench.pipeline",
    "ddp": "distlab.bench.ddp",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("benchmarks: " + ", ".join(sorted(BENCHMARKS)))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}; choose one of {sorted(BENCHMARKS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[name])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
