"""Benchmark entry point.

    python -m distlab.bench sampler   --n 100000000 --world-size 8
    python -m distlab.bench allreduce --world-size 4 -b 1K -e 64M -f 4 --algorithms ring,builtin
    python -m distlab.bench allreduce-summary results/allreduce_ws*_run*.json --out summary.json
    python -m distlab.bench allreduce-tuning --world-size 2 -b 1M -e 64M --iters 9
    python -m distlab.bench collective --op all_gather --world-size 4 -b 1K -e 16M
    python -m distlab.bench pipeline  --items 200
    python -m distlab.bench transfers -b 4K -e 256M -f 4 --memory pageable,pinned
    python -m distlab.bench ddp --world-size 2 --layers 8 --width 1024 --bucket-cap-mb 1,5,25
    python -m distlab.bench zero --world-size 2 --layers 8 --width 512
    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl -b 8 -e 1G -f 2

Every benchmark runs the reference (torch) in the same run, prints a table, and can write JSON
with provenance (``--json PATH``).
"""

from __future__ import annotations

import importlib
import sys

# name -> the module that defines its BENCHMARK (distlab.bench.harness.Benchmark) and main(argv)
MODULES = {"sampler": "distlab.bench.sampler", "allreduce": "distlab.bench.allreduce",
           "allreduce-summary": "distlab.bench.allreduce_summary",
           "allreduce-tuning": "distlab.bench.allreduce_tuning",
           "collective": "distlab.bench.collective",
           "pipeline": "distlab.bench.pipeline", "transfers": "distlab.bench.transfers",
           "ddp": "distlab.bench.ddp", "ddp-overhead": "distlab.bench.ddp_overhead",
           "zero": "distlab.bench.zero"}
BENCHMARKS = tuple(MODULES)

USAGE = "usage: python -m distlab.bench {" + ",".join(BENCHMARKS) + "} [options]"


def _help() -> str:
    width = max(map(len, BENCHMARKS))
    lines = [USAGE, "", __doc__.strip(), "", "benchmarks:"]
    lines += [f"  {name:<{width}}  {importlib.import_module(module).BENCHMARK.about}"
              for name, module in MODULES.items()]
    lines += ["", "`python -m distlab.bench NAME --help` lists NAME's options and their defaults."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv[0]`` to its benchmark's ``main(argv[1:])``; returns the exit status.

    No benchmark or an unknown one: the usage line and one error line on stderr, exit 2.
    Ctrl-C (KeyboardInterrupt): one line on stderr, exit 130 (the shell's code for SIGINT).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(_help())
        return 0
    if not argv or argv[0] not in MODULES:
        got = "none given" if not argv else f"invalid choice {argv[0]!r}"
        print(USAGE, file=sys.stderr)
        print(f"python -m distlab.bench: error: argument benchmark: {got}: must be one of "
              f"{', '.join(MODULES)}", file=sys.stderr)
        return 2
    module = importlib.import_module(MODULES[argv[0]])
    try:
        return int(module.main(argv[1:]) or 0)
    except KeyboardInterrupt:  # Ctrl-C: the launch/executor code has already stopped its children
        print(f"python -m distlab.bench {argv[0]}: interrupted by Ctrl-C; nothing more was "
              "measured or written", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse's exit 2 (bad option) or 0 (--help)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
