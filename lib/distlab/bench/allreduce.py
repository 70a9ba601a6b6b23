"""nccl-tests-style allreduce benchmark: every distlab algorithm next to torch's built-in.

    python -m distlab.bench allreduce --world-size 4 -b 1K -e 64M -f 4 \\
        --algorithms ring,tree,builtin --dtype float32 --op sum --iters 20 --warmup 5 --json out.json
    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl -b 8 -e 1G -f 2

Spawns ``--world-size`` local ranks through :func:`distlab.launch.run` (or, under torchrun, runs
on the torchrun ranks unchanged). Each size and algorithm is first checked once against the exact
answer (``#wrong``); then ``--warmup`` untimed and ``--iters`` timed rounds each run every size and
algorithm once (after a barrier) next to the calibration exchanges that measure alpha, beta, gamma
and the per-step hand-off (unless ``--no-calibrate``; ``--calibration FILE`` loads them instead;
``--calibrate-upfront`` calibrates once before the rounds), so load changes hit model and
measurement alike. time = median over rounds of the slowest rank.
algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (nccl-tests); predicted = the calibrated
alpha-beta-gamma-handoff cost of the algorithm's schedule plus the calibrated per-call overhead
(empty for builtin, whose schedule gloo/NCCL choose internally); error% = (measured - predicted) /
predicted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from distlab.bench import options
from distlab.bench.options import size_bytes as parse_size  # the name tests and notebooks used

__all__ = ["format_table", "main", "parse_size", "run_benchmark"]

COLUMNS = ("size(B)", "count", "type", "redop", "algorithm", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong", "predicted(us)", "error%")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
OPS = ("sum", "prod", "max", "min", "avg")
CALIBRATION_KEYS = ("alpha", "beta", "gamma")


def _parser() -> argparse.ArgumentParser:
    from distlab.collectives import ALGORITHMS

    names = list(ALGORITHMS) + ["builtin"]
    p = options.parser("python -m distlab.bench allreduce", __doc__)
    p.add_argument("--world-size", "-n", type=options.positive_int, default=2,
                   help="local ranks to spawn (ignored under torchrun, which sets WORLD_SIZE)")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                   help="torch.distributed backend; nccl needs one CUDA device per rank")
    p.add_argument("-b", "--minbytes", type=options.size_bytes, default="1K",
                   help="smallest message in bytes (binary units: 1K = 1024)")
    p.add_argument("-e", "--maxbytes", type=options.size_bytes, default="16M",
                   help="largest message in bytes (>= --minbytes)")
    p.add_argument("-f", "--stepfactor", type=options.int_at_least(2), default=4,
                   help="multiply the size by this from -b up to -e")
    p.add_argument("--algorithms", "-a", type=options.comma_choices(names), default="all",
                   help=f"comma list of {', '.join(names)}, or 'all'")
    p.add_argument("--dtype", "-d", default="float32", choices=DTYPES, help="element type")
    p.add_argument("--op", "-o", default="sum", choices=OPS,
                   help="reduction (avg needs a floating dtype)")
    p.add_argument("--iters", type=options.positive_int, default=20,
                   help="timed runs per size and algorithm (time = their median)")
    p.add_argument("--warmup", "-w", type=options.nonnegative_int, default=5,
                   help="untimed runs before the timed ones")
    p.add_argument("--segment-size", type=options.positive_int, default=None,
                   help="segmented_ring segment size in elements (default: the algorithm's)")
    p.add_argument("--group-size", type=options.positive_int, default=None,
                   help="hierarchical group size, a divisor of the world size (default: the "
                        "largest divisor <= sqrt(world size))")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip calibration (no predicted column)")
    p.add_argument("--calibration", type=options.existing_file, default=None,
                   help="JSON file with alpha/beta/gamma (a previous --json output) to use "
                        "instead of calibrating")
    p.add_argument("--calibrate-upfront", action="store_true",
                   help="calibrate once before the rounds (the old way) instead of inside every "
                        "timed round next to the measured collectives")
    p.add_argument("--timeout", type=options.positive_float, default=600.0,
                   help="seconds for the whole run")
    p.add_argument("--json", default=None, help="write results with provenance to this file")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")
    return p


def _sizes(minbytes: int, maxbytes: int, factor: int) -> list[int]:
    return options.size_sweep(minbytes, maxbytes, factor)


def _load_calibration(p: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """The calibration dict of ``path`` (a ``--json`` output or a bare Calibration dict)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        options.fail(p, "--calibration", str(path),
                     f"a readable JSON file ({type(exc).__name__}: {str(exc).splitlines()[0]})")
    cal = data.get("calibration", data) if isinstance(data, dict) else None
    if not isinstance(cal, dict):
        options.fail(p, "--calibration", str(path),
                     "a JSON object with alpha, beta, gamma (or a 'calibration' object)")
    bad = [k for k in CALIBRATION_KEYS
           if isinstance(cal.get(k), bool) or not isinstance(cal.get(k), (int, float))
           or not math.isfinite(cal[k]) or cal[k] < 0]
    if bad:
        options.fail(p, "--calibration", str(path),
                     f"a JSON file whose calibration has finite numbers >= 0 for "
                     f"{', '.join(CALIBRATION_KEYS)} (missing or bad: {', '.join(bad)})")
    duplex = cal.get("duplex", "full")
    if duplex not in ("full", "half", "shared"):
        options.fail(p, "--calibration", str(path),
                     f"a calibration whose duplex is full, half or shared (got {duplex!r})")
    return cal


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace, world: int) -> list[int]:
    """Checks across options; each failure exits 2 with one line."""
    from distlab.collectives.ops import check_op_dtype

    if args.maxbytes < args.minbytes:
        options.fail(p, "-e/--maxbytes", args.maxbytes, f">= -b/--minbytes ({args.minbytes})")
    sizes = _sizes(args.minbytes, args.maxbytes, args.stepfactor)
    import torch

    itemsize = torch.empty(0, dtype=getattr(torch, args.dtype)).element_size()
    if args.minbytes < itemsize:
        options.fail(p, "-b/--minbytes", args.minbytes,
                     f">= {itemsize} (one {args.dtype} element)")
    try:
        check_op_dtype(args.op, args.dtype)
    except ValueError as exc:
        options.fail(p, "--op", args.op, f"valid for --dtype {args.dtype} ({exc})")
    if args.group_size is not None and world % args.group_size:
        divisors = [d for d in range(1, world + 1) if world % d == 0]
        options.fail(p, "--group-size", args.group_size,
                     f"a divisor of the world size {world} (one of {divisors})")
    if args.json is not None and Path(args.json).is_dir():
        options.fail(p, "--json", args.json, "a file path (it names a folder)")
    if args.backend == "nccl" and not torch.cuda.is_available():
        options.fail(p, "--backend", "nccl", "gloo on this machine: torch sees no CUDA device")
    if args.backend == "nccl" and not _in_torchrun() and world > torch.cuda.device_count():
        options.fail(p, "--world-size", world,
                     f"<= {torch.cuda.device_count()} with --backend nccl (one GPU per rank)")
    return sizes


def _in_torchrun() -> bool:
    from distlab import launch

    return launch.in_torchrun()


def run_benchmark(world_size: int, sizes: list[int], algorithms: list[str], *,
                  dtype: str = "float32", op: str = "sum", iters: int = 20, warmup: int = 5,
                  backend: str | None = None, options: dict[str, Any] | None = None,
                  calibrate: bool = True, calibration: dict[str, Any] | None = None,
                  calibrate_kwargs: dict[str, Any] | None = None,
                  timeout: float = 600.0, progress: bool = True,
                  calibrate_in_rounds: bool = True) -> dict[str, Any]:
    """Run the sweep on ``world_size`` ranks; return ``{"calibration", "rows"}`` (no printing).

    With ``calibrate`` (and no ``calibration`` given), alpha, beta, gamma and the per-step
    ``handoff`` are measured inside the same interleaved rounds as the rows
    (:class:`distlab.collectives.rounds.RoundCalibrator`; ``calibrate_kwargs`` may set its
    ``sizes`` and ``chain``, other keys are ignored), fitted over the same recorded rounds the
    rows are medians of; ``calibrate_in_rounds=False`` calibrates once before the rounds
    instead (:func:`distlab.collectives.calibrate`, whose kwargs ``calibrate_kwargs`` then are,
    e.g. smaller ``sizes`` and ``iters`` for a quick run).

    Each row: size/count/dtype/op/algorithm, ``time_us`` (median over iterations of the slowest
    rank), ``algbw_gbps``, ``busbw_gbps``, ``wrong`` (summed over ranks), ``predicted_us`` and
    ``error_pct`` (``None`` without a calibration or for builtin). ``"spans"``: per rank, one
    span per timed call (and calibration round) on that rank's ``now_us`` clock, lane
    ``"rank<r>/allreduce"`` (:func:`distlab.collectives.workers.bench_worker`); ``"hosts"``: per
    rank, its host name (spans from different hosts are on different clocks).
    """
    import torch

    from distlab import launch
    from distlab.collectives import build, cost
    from distlab.collectives.workers import bench_worker, summarize_times

    cal_kwargs = None
    if calibrate and calibration is None and world_size >= 2:
        cal_kwargs = {"dtype": dtype, "op": "sum" if op == "avg" else op,
                      **(calibrate_kwargs or {})}
    per_rank = launch.run(bench_worker, world_size, backend=backend, timeout=timeout,
                          args=(sizes, algorithms),
                          kwargs={"dtype": dtype, "op": op, "iters": iters, "warmup": warmup,
                                  "options": options or {}, "calibration": cal_kwargs,
                                  "progress": progress,
                                  "calibrate_in_rounds": calibrate_in_rounds})
    cal = calibration if calibration is not None else per_rank[0]["calibration"]
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    rows = []
    for i, row in enumerate(per_rank[0]["rows"]):
        seconds = summarize_times([r["rows"][i]["seconds"] for r in per_rank])
        algbw = row["nbytes"] / seconds / 1e9 if seconds > 0 else 0.0
        busbw = algbw * 2 * (world_size - 1) / world_size
        predicted = None
        if cal is not None and row["algorithm"] != "builtin":
            c = _terms(cal)
            opts = {k: v for k, v in (options or {}).items() if v is not None}
            sched = build(row["algorithm"], world_size, row["count"],
                          **{k: v for k, v in opts.items()
                             if k in _options_of(row["algorithm"])})
            predicted = c.call_overhead + cost(sched, c.alpha, c.beta, c.gamma, itemsize,
                                               duplex=c.duplex, handoff=c.handoff,
                                               relay=c.relay)
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
    return {"calibration": cal_out, "rows": rows,
            "spans": [r.get("spans", []) for r in per_rank],
            "hosts": [r.get("host") for r in per_rank]}


def _terms(cal: Any) -> argparse.Namespace:
    """alpha, beta, gamma, duplex, call_overhead, handoff of a Calibration or a (loaded) dict
    (a calibration without ``handoff`` or ``call_overhead`` predicts with them at 0)."""
    get = cal.get if isinstance(cal, dict) else (lambda k, d=None: getattr(cal, k, d))
    return argparse.Namespace(alpha=float(get("alpha")), beta=float(get("beta")),
                              gamma=float(get("gamma")), duplex=str(get("duplex", "full")),
                              call_overhead=float(get("call_overhead", 0.0) or 0.0),
                              handoff=float(get("handoff", 0.0) or 0.0),
                              relay=float(get("relay", 0.0) or 0.0))


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
    """CLI entry point (``python -m distlab.bench allreduce ...``); returns the exit status.

    Every bad option exits 2 with one line (argparse's usage line plus the error) before any
    rank starts.
    """
    import os

    p = _parser()
    args = p.parse_args(argv)
    world = int(os.environ["WORLD_SIZE"]) if _in_torchrun() else args.world_size
    sizes = _check_args(p, args, world)
    algorithms = args.algorithms  # argparse runs the type on the string default "all" too
    calibration = _load_calibration(p, args.calibration) if args.calibration else None
    result = run_benchmark(world, sizes, algorithms, dtype=args.dtype, op=args.op,
                           iters=args.iters, warmup=args.warmup, backend=args.backend,
                           options={"segment_size": args.segment_size,
                                    "group_size": args.group_size},
                           calibrate=not args.no_calibrate, calibration=calibration,
                           timeout=args.timeout, progress=not args.quiet,
                           calibrate_in_rounds=not args.calibrate_upfront)
    if _in_torchrun() and int(os.environ.get("RANK", "0")) != 0:
        return 0
    cal = result["calibration"]
    if cal:
        print(_calibration_line(cal))
    print(f"# world size {world}, backend {args.backend}, iters {args.iters}, "
          f"warmup {args.warmup}; time = median over iterations of the slowest rank")
    print(format_table(result["rows"]))
    wrong = sum(r["wrong"] for r in result["rows"])
    print(f"# out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    if args.json:
        from distlab.bench.provenance import provenance, write_json

        write_json(args.json, {"provenance": provenance(backend=args.backend, world_size=world),
                               "calibration": cal, "rows": result["rows"]})
        print(f"# wrote {args.json}", file=sys.stderr)
    return 0 if wrong == 0 else 1


def _calibration_line(cal: dict[str, Any]) -> str:
    """One comment line with the calibration (fields a loaded file lacks print as '?')."""
    def num(key: str, scale: float, fmt: str) -> str:
        v = cal.get(key)
        return "?" if not isinstance(v, (int, float)) else format(v * scale, fmt)

    bw = f"{1 / cal['beta'] / 1e9:.2f} GB/s" if cal.get("beta") else "inf GB/s"
    return (f"# calibration ({cal.get('duplex', 'full')} link model, "
            f"{cal.get('method', 'upfront')}): alpha "
            f"{num('alpha', 1e6, '.1f')} us, beta {num('beta', 1e9, '.3f')} ns/B ({bw}), "
            f"gamma {num('gamma', 1e9, '.3f')} ns/B, hand-off {num('handoff', 1e6, '.1f')} us/step, "
            f"relay {num('relay', 1e6, '.1f')} us/step/rank, "
            f"per-call overhead "
            f"{num('call_overhead', 1e6, '.1f')} us; fit R^2 comm {num('comm_r2', 1, '.3f')} "
            f"(worst point {num('comm_max_rel_residual', 100, '.0f')}% off), "
            f"reduce {num('reduce_r2', 1, '.3f')}")
