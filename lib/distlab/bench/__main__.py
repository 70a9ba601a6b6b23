"""Benchmark entry point.

    python -m distlab.bench sampler   --n 100000000 --world-size 8
    python -m distlab.bench allreduce --world-size 4 -b 1K -e 64M -f 4 --algorithms ring,builtin
    python -m distlab.bench allreduce-tuning --world-size 2 -b 1M -e 64M --iters 9
    python -m distlab.bench collective --op all_gather --world-size 4 -b 1K -e 16M
    python -m distlab.bench loading   --items 200   # the data-loading pipeline's executors
    python -m distlab.bench images --variant imagenet --workers 1,2
    python -m distlab.bench transfers -b 4K -e 256M -f 4 --memory pageable,pinned
    python -m distlab.bench ddp --world-size 2 --layers 8 --width 1024 --bucket-cap-mb 1,5,25
    python -m distlab.bench zero --world-size 2 --layers 8 --width 512
    python -m distlab.bench pipeline-parallel --world-size 2 --schedules 1F1B,GPipe
    python -m distlab.bench tensor-parallel --world-size 2 --layers 4 --width 512
    python -m distlab.bench trace --sizes 100 --ranks 8  # reading profiler traces: distlab vs HTA
    python -m distlab.bench kernels   # a layer's matmuls and attention beside the planner's rate
    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl -b 8 -e 1G -f 2

Every benchmark runs the reference (torch) in the same run, prints a table, and can write JSON
with provenance (``--json PATH``).
"""

from __future__ import annotations

import importlib
import sys

from distlab.cli.dispatch import dispatch, usage

# name -> the module that defines its BENCHMARK (distlab.bench.harness.Benchmark) and main(argv)
MODULES = {"sampler": "distlab.bench.sampler", "allreduce": "distlab.bench.allreduce",
           "allreduce-tuning": "distlab.bench.allreduce_tuning",
           "collective": "distlab.bench.collective",
           "loading": "distlab.bench.loading", "images": "distlab.bench.images",
           "transfers": "distlab.bench.transfers",
           "ddp": "distlab.bench.ddp", "ddp-overhead": "distlab.bench.ddp_overhead",
           "zero": "distlab.bench.zero",
           "pipeline-parallel": "distlab.bench.pipeline_parallel",
           "tensor-parallel": "distlab.bench.tensor_parallel",
           "trace": "distlab.bench.trace", "kernels": "distlab.bench.kernels"}
BENCHMARKS = tuple(MODULES)

USAGE = usage("python -m distlab.bench", MODULES)


def _about(name: str) -> str:
    return str(importlib.import_module(MODULES[name]).BENCHMARK.about)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv[0]`` to its benchmark's ``main(argv[1:])``; returns the exit status.

    No benchmark or an unknown one: the usage line and one error line on stderr, exit 2.
    Ctrl-C: one line on stderr, exit 130 (:func:`distlab.cli.run.run_main`).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    return dispatch("python -m distlab.bench", __doc__ or "", MODULES, _about, args,
                    noun="benchmark")


if __name__ == "__main__":
    raise SystemExit(main())
