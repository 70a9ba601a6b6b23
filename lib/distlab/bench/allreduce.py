"""nccl-tests-style allreduce benchmark: every distlab algorithm next to torch's built-in.

    python -m distlab.bench allreduce --world-size 4 -b 1K -e 64M -f 4 \\
        --algorithms ring,tree,builtin --dtype float32 --op sum --iters 20 --warmup 5 --json out.json
    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl -b 8 -e 1G -f 2

Spawns ``--world-size`` local ranks through :func:`distlab.launch.run` (or, under torchrun, runs
on the torchrun ranks unchanged), calibrates alpha, beta, gamma on the same ranks first (unless
``--no-calibrate``; ``--calibration FILE`` loads them instead), then for each size and algorithm
checks one run against the exact answer (``#wrong``) and times ``--iters`` runs after
``--warmup``, each after a barrier. time = median over iterations of the slowest rank.
algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (nccl-tests); predicted = the calibrated
alpha-beta-gamma cost of the algorithm's schedule plus the calibrated per-call overhead (empty for builtin, whose schedule gloo/NCCL
choose internally); error% = (measured - predicted) / predicted.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["format_table", "main", "parse_size", "run_benchmark"]

_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
COLUMNS = ("size(B)", "count", "type", "redop", "algorithm", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong", "predicted(us)", "error%")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


def parse_size(text: str) -> int:
    """``"64K"`` -> 65536, ``"1M"`` -> 1048576, ``"100"`` -> 100 (bytes, binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", str(text).upper())
    if not m:
        raise argparse.ArgumentTypeError(f"size must look like 1024, 64K, 16M or 1G, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2)]


def _parser() -> argparse.ArgumentParser:
    from distlab.collectives import ALGORITHMS

    p = argparse.ArgumentParser(prog="python -m distlab.bench allreduce",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", "-n", type=int, default=2, help="local ranks (default 2)")
    p.add_argument("--backend", default=None, choices=("gloo", "nccl"),
                   help="default gloo (nccl needs CUDA)")
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1K"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("16M"))
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("--algorithms", "-a", default="all",
                   help=f"comma list of {sorted(ALGORITHMS)} and builtin, or 'all'")
    p.add_argument("--dtype", "-d", default="float32", choices=DTYPES)
    p.add_argument("--op", "-o", default="sum", choices=("sum", "prod", "max", "min", "avg"))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", "-w", type=int, default=5)
    p.add_argument("--segment-size", type=int, default=None,
                   help="segmented_ring segment size in elements")
    p.add_argument("--group-size", type=int, default=None, help="hierarchical group size")
    p.add_argument("--no-calibrate", action="store_true", help="skip calibration (no predicted)")
    p.add_argument("--calibration", default=None,
                   help="JSON file with alpha/beta/gamma (a previous --json output) to use "
                        "instead of calibrating")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run")
    p.add_argument("--json", default=None, help="write results with provenance here")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    return p


def _sizes(minbytes: int, maxbytes: int, factor: int) -> list[int]:
    if minbytes < 1 or maxbytes < minbytes:
        raise ValueError(f"need 1 <= minbytes <= maxbytes, got -b {minbytes} -e {maxbytes}")
    if factor < 2:
        raise ValueError(f"stepfactor must be >= 2, got -f {factor}")
    out, s = [], minbytes
    while s <= maxbytes:
        out.append(s)
        s *= factor
    return out


def _algorithms(text: str) -> list[str]:
    from distlab.collectives import ALGORITHMS

    names = list(ALGORITHMS) + ["builtin"] if text == "all" else \
        [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in names if a not in ALGORITHMS and a != "builtin"]
    if bad or not names:
        raise ValueError(f"--algorithms must name some of {sorted(ALGORITHMS) + ['builtin']}, "
                         f"got {bad or text!r}")
    return names


def run_benchmark(world_size: int, sizes: list[int], algorithms: list[str], *,
                  dtype: str = "float32", op: str = "sum", iters: int = 20, warmup: int = 5,
                  backend: str | None = None, options: dict[str, Any] | None = None,
                  calibrate: bool = True, calibration: dict[str, Any] | None = None,
                  calibrate_kwargs: dict[str, Any] | None = None,
                  timeout: float = 600.0, progress: bool = True) -> dict[str, Any]:
    """Run the sweep on ``world_size`` ranks; return ``{"calibration", "rows"}`` (no printing).

    Each row: size/count/dtype/op/algorithm, ``time_us`` (median over iterations of the slowest
    rank), ``algbw_gbps``, ``busbw_gbps``, ``wrong`` (summed over ranks), ``predicted_us`` and
    ``error_pct`` (``None`` without a calibration or for builtin). ``calibrate_kwargs`` go to
    :func:`distlab.collectives.calibrate` (e.g. smaller ``sizes`` and ``iters`` for a quick run).
    """
    import torch

    from distlab import launch
    from distlab.collectives import Calibration, build, cost
    from distlab.collectives.workers import bench_worker, summarize_times

    cal_kwargs = None
    if calibrate and calibration is None and world_size >= 2:
        cal_kwargs = {"dtype": dtype, "op": "sum" if op == "avg" else op,
                      **(calibrate_kwargs or {})}
    per_rank = launch.run(bench_worker, world_size, backend=backend, timeout=timeout,
                          args=(sizes, algorithms),
                          kwargs={"dtype": dtype, "op": op, "iters": iters, "warmup": warmup,
                                  "options": options or {}, "calibration": cal_kwargs,
                                  "progress": progress})
    cal = calibration if calibration is not None else per_rank[0]["calibration"]
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    rows = []
    for i, row in enumerate(per_rank[0]["rows"]):
        seconds = summarize_times([r["rows"][i]["seconds"] for r in per_rank])
        algbw = row["nbytes"] / seconds / 1e9 if seconds > 0 else 0.0
        busbw = algbw * 2 * (world_size - 1) / world_size
        predicted = None
        if cal is not None and row["algorithm"] != "builtin":
            c = Calibration.from_dict(cal) if isinstance(cal, dict) else cal
            opts = {k: v for k, v in (options or {}).items() if v is not None}
            sched = build(row["algorithm"], world_size, row["count"],
                          **{k: v for k, v in opts.items()
                             if k in _options_of(row["algorithm"])})
            predicted = c.call_overhead + cost(sched, c.alpha, c.beta, c.gamma, itemsize,
                                               duplex=c.duplex)
        rows.append({"nbytes": row["nbytes"], "count": row["count"], "dtype": dtype, "op": op,
                     "algorithm": row["algorithm"], "time_us": seconds * 1e6,
                     "algbw_gbps": algbw, "busbw_gbps": busbw,
                     "wrong": sum(r["rows"][i]["wrong"] for r in per_rank),
                     "predicted_us": None if predicted is None else predicted * 1e6,
                     "error_pct": None if not predicted else 100 * (seconds - predicted) / predicted,
                     "seconds_per_rank": [r["rows"][i]["seconds"] for r in per_rank]})
    if isinstance(cal, dict) or cal is None:
        cal_out = cal
    else:
        cal_out = cal.to_dict()
    return {"calibration": cal_out, "rows": rows}


def _options_of(algo: str) -> list[str]:
    from distlab.collectives import options_of

    return options_of(algo)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The nccl-tests-style table (one line per row, plus ratio to builtin when present)."""
    builtin = {r["nbytes"]: r["busbw_gbps"] for r in rows if r["algorithm"] == "builtin"}
    widths = {"algorithm": 19, "size(B)": 11, "count": 10, "type": 9, "redop": 6}
    head = "".join(f"{c:>{widths.get(c, 14)}}" for c in COLUMNS) + \
        ("  vs builtin" if builtin else "")
    lines = [head]
    for r in rows:
        pred = "-" if r["predicted_us"] is None else f"{r['predicted_us']:.1f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:+.1f}"
        cells = [r["nbytes"], r["count"], r["dtype"], r["op"], r["algorithm"],
                 f"{r['time_us']:.1f}", f"{r['algbw_gbps']:.3f}", f"{r['busbw_gbps']:.3f}",
                 r["wrong"], pred, err]
        line = "".join(f"{str(c):>{widths.get(col, 14)}}" for c, col in zip(cells, COLUMNS))
        if builtin and builtin.get(r["nbytes"]):
            line += f"{r['busbw_gbps'] / builtin[r['nbytes']]:>12.2f}x"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (``python -m distlab.bench allreduce ...``); returns the exit status."""
    import os

    from distlab import launch

    args = _parser().parse_args(argv)
    try:
        sizes = _sizes(args.minbytes, args.maxbytes, args.stepfactor)
        algorithms = _algorithms(args.algorithms)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    world = int(os.environ["WORLD_SIZE"]) if launch.in_torchrun() else args.world_size
    calibration = None
    if args.calibration:
        data = json.loads(Path(args.calibration).read_text())
        calibration = data.get("calibration", data)
    result = run_benchmark(world, sizes, algorithms, dtype=args.dtype, op=args.op,
                           iters=args.iters, warmup=args.warmup, backend=args.backend,
                           options={"segment_size": args.segment_size,
                                    "group_size": args.group_size},
                           calibrate=not args.no_calibrate, calibration=calibration,
                           timeout=args.timeout, progress=not args.quiet)
    if launch.in_torchrun() and int(os.environ.get("RANK", "0")) != 0:
        return 0
    cal = result["calibration"]
    if cal:
        print(f"# calibration ({cal.get('duplex', 'full')} link model): alpha "
              f"{cal['alpha'] * 1e6:.1f} us, beta {cal['beta'] * 1e9:.3f} ns/B "
              f"({1 / cal['beta'] / 1e9:.2f} GB/s), gamma {cal['gamma'] * 1e9:.3f} ns/B, "
              f"per-call overhead {cal.get('call_overhead', 0.0) * 1e6:.1f} us; fit R^2 comm "
              f"{cal['comm_r2']:.3f} (worst point {100 * cal['comm_max_rel_residual']:.0f}% off), "
              f"reduce {cal['reduce_r2']:.3f}")
    print(f"# world size {world}, backend {args.backend or 'gloo'}, iters {args.iters}, "
          f"warmup {args.warmup}; time = median over iterations of the slowest rank")
    print(format_table(result["rows"]))
    wrong = sum(r["wrong"] for r in result["rows"])
    print(f"# out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    if args.json:
        from distlab.bench.provenance import provenance, write_json

        write_json(args.json, {"provenance": provenance(backend=args.backend or "gloo",
                                                        world_size=world),
                               "calibration": cal, "rows": result["rows"]})
        print(f"# wrote {args.json}", file=sys.stderr)
    return 0 if wrong == 0 else 1
