"""nccl-tests-style allreduce benchmark: every distlab algorithm next to torch's built-in.

    python -m distlab.bench allreduce --world-size 4 -b 1K -e 64M -f 4 \\
        --algorithms ring,tree,builtin --dtype float32 --op sum --iters 20 --warmup 5 \\
        --json out.json
    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl -b 8 -e 1G -f 2

Spawns ``--world-size`` local ranks through :func:`distlab.launch.run` (or, under torchrun, runs on
the torchrun ranks unchanged). Each size and algorithm is first checked once against the exact
answer (``#wrong``); then ``--warmup`` untimed and ``--iters`` timed rounds each run every size and
algorithm once (after a barrier) next to the calibration exchanges that measure alpha, beta, gamma
and the per-step hand-off (unless ``--no-calibrate``; ``--calibration FILE`` loads them instead;
``--calibrate-upfront`` calibrates once before the rounds), so load changes hit model and
measurement alike. time = median over rounds of the slowest rank; mean = their mean. algbw = bytes /
time; busbw = algbw * 2 (n - 1) / n (nccl-tests); predicted = the calibrated cost of the algorithm's
schedule (alpha-beta-gamma-handoff-relay, each message and reduction priced at its size from the
calibration's per-size series) plus the calibrated per-call overhead
(:mod:`distlab.collectives.model.predict`); for builtin under gloo the schedule is gloo's own ring
(:mod:`distlab.collectives.algorithms.allreduce.gloo_ring`); builtin under NCCL is left empty (NCCL
picks its algorithm inside; :func:`distlab.collectives.predict_builtin` models it for the GPU boxes
of :mod:`distlab.nccl.boxes`, not for the GPUs at hand); error% = (measured -
predicted) / predicted, where measured is the row's ``--statistic`` (default the mean: the model
adds step costs, and costs add as means do, not as medians; the calibration measured in the rounds
is fitted on the same statistic of its own rounds,
:func:`distlab.collectives.model.calibration.fit_rounds`); vs builtin = busbw / the built-in's busbw
at the same size in the same run; cpu = the CPU seconds of a call summed over the ranks (each
rank's process, user + system over every thread, ``getrusage``; median over rounds) and cpu vs
builtin its ratio to the built-in's at the same size; executor = what ran the row: ``compiled``
(distlab's plan in one C++ call, :mod:`distlab.collectives.runtime.compiled`), ``python`` (one
Python round trip per step) or ``builtin`` (``--executor compiled,python`` races both in the same
rounds). The targets beside the builtin close the report (:mod:`distlab.bench.allreduce_targets`):
busbw ratios where each rank has a core, CPU time per call where the ranks outnumber the cores
(4 ranks on 2 cores: every plan <= 1.05x the builtin's from 1 to 16 MiB):

    python -m distlab.bench allreduce -n 4 -b 1M -e 16M -f 4 \\
        -a ring,tree,recursive_doubling,rabenseifner,builtin --check off --iters 20
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from distlab import launch
from distlab.bench.allreduce_ranks import (
    bench_rank,
    slowest_rank_mean,
    slowest_rank_median,
    summed_ranks_median,
)
from distlab.bench.allreduce_targets import target_lines
from distlab.bench.harness import BenchConfig, Benchmark, Report, SizeSweepConfig, opt, run_cli
from distlab.bench.versus import executors_of, versus_lines, versus_table
from distlab.cli import options
from distlab.collectives.algorithms.registry import BUILTIN, names, options_of
from distlab.collectives.model.calibration import STATISTICS
from distlab.collectives.model.predict import call_model
from distlab.collectives.plan.ops import OPS, check_op_dtype
from distlab.collectives.runtime.compiled import EXECUTORS, status
from distlab.collectives.runtime.compiled import available as compiled_available
from distlab.collectives.runtime.execute import default_options
from distlab.collectives.runtime.peercheck import CHECK_MODES
from distlab.report.jsonfile import SchemaError, read_json
from distlab.report.table import Column, Table, format_table
from distlab.vocabulary import busbw_factor, error_pct, gb_per_s

__all__ = ["AllreduceBenchmark", "AllreduceConfig", "BENCHMARK", "COLUMNS", "SHORT_COLUMNS",
           "SHORT_WIDTH", "allreduce_table", "calibration_lines", "load_calibration", "main",
           "short_table"]

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
CALIBRATION_KEYS = ("alpha", "beta", "gamma")
NAMES = list(names("all_reduce", "plan", "builtin"))

COLUMNS = (Column("size(B)", "nbytes", width=11), Column("count", "count", width=10),
           Column("type", "dtype", width=9), Column("redop", "op", width=6),
           Column("algorithm", "algorithm", width=19),
           Column("executor", "executor", width=9),
           Column("time(us)", "time_us", ".1f", width=12),
           Column("mean(us)", "mean_us", ".1f", width=12),
           Column("algbw(GB/s)", "algbw_gbps", ".3f"), Column("busbw(GB/s)", "busbw_gbps", ".3f"),
           Column("#wrong", "wrong", width=7), Column("predicted(us)", "predicted_us", ".1f"),
           Column("error%", "error_pct", "+.1f", width=8),
           Column("vs builtin(x)", "vs_builtin", ".2f"),
           Column("cpu(us)", "cpu_us", ".1f", width=10),
           Column("cpu vs builtin(x)", "cpu_vs_builtin", ".2f"))


@dataclass(frozen=True)
class AllreduceConfig(SizeSweepConfig, BenchConfig):
    """Options of ``python -m distlab.bench allreduce`` (sizes in bytes)."""

    world_size: int = opt(2, "--world-size", "-n", type=options.positive_int,
                          help="local ranks to spawn (ignored under torchrun, which sets "
                               "WORLD_SIZE)")
    backend: str = opt("gloo", "--backend", choices=("gloo", "nccl"),
                       help="torch.distributed backend; nccl needs one CUDA device per rank")
    minbytes: int = opt(1024, "-b", "--minbytes", type=options.size_bytes,
                        help="smallest message in bytes (binary units: 1K = 1024)")
    maxbytes: int = opt(16 * 2**20, "-e", "--maxbytes", type=options.size_bytes,
                        help="largest message in bytes (>= --minbytes)")
    stepfactor: int = opt(4, "-f", "--stepfactor", type=options.int_at_least(2),
                          help="multiply the size by this from -b up to -e")
    algorithms: tuple[str, ...] = opt(tuple(NAMES), "--algorithms", "-a",
                                      type=options.comma_choices(NAMES),
                                      help=f"comma list of {', '.join(NAMES)}, or 'all'")
    executors: tuple[str, ...] = opt(("auto",), "--executor",
                                     type=options.comma_choices(EXECUTORS),
                                     help="which executor runs distlab's algorithms: auto "
                                          "(compiled where it builds), compiled, python, or a "
                                          "comma list to race them in the same rounds")
    check: str = opt("inline", "--check", choices=CHECK_MODES,
                     help="the peer check of distlab's timed calls: inline (what a call does "
                          "by default), gather, or off (no cross-rank check of the arguments, "
                          "as torch's built-in runs: the plans themselves)")
    dtype: str = opt("float32", "--dtype", "-d", choices=DTYPES, help="element type")
    op: str = opt("sum", "--op", "-o", choices=OPS, help="reduction (avg needs a floating dtype)")
    iters: int = opt(20, "--iters", type=options.positive_int,
                     help="timed runs per size and algorithm (time = their median)")
    warmup: int = opt(5, "--warmup", "-w", type=options.nonnegative_int,
                      help="untimed runs before the timed ones")
    segment_size: int | None = opt(None, "--segment-size", type=options.positive_int,
                                   help="segmented_ring segment size in elements (default: the "
                                        "algorithm's)")
    group_size: int | None = opt(None, "--group-size", type=options.positive_int,
                                 help="hierarchical group size, a divisor of the world size "
                                      "(default: the largest divisor <= sqrt(world size))")
    no_calibrate: bool = opt(False, "--no-calibrate", action="store_true",
                             help="skip calibration (no predicted column)")
    calibration: str | None = opt(None, "--calibration", type=options.existing_file,
                                  help="JSON file with alpha/beta/gamma (a previous --json "
                                       "output) to use instead of calibrating")
    calibrate_upfront: bool = opt(False, "--calibrate-upfront", action="store_true",
                                  help="calibrate once before the rounds instead of inside "
                                       "every timed round next to the measured collectives")
    calibration_sizes: tuple[int, ...] = opt((), "--calibration-sizes",
                                             type=options.size_list,
                                             help="calibration message sizes (comma list; "
                                                  "default: from the swept sizes)")
    timeout: float = opt(600.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")
    statistic: str = opt("mean", "--statistic", choices=STATISTICS,
                         help="what predicted is compared with: the mean or the median over "
                              "rounds of the slowest rank; a calibration measured in the "
                              "rounds is fitted on the same statistic")
    quiet: bool = opt(False, "--quiet", "-q", action="store_true",
                      help="no progress lines on stderr")



def load_calibration(path: str | Path) -> dict[str, Any]:
    """The calibration dict of ``path`` (a ``--json`` output, or a Calibration dict written by
    :func:`~distlab.report.jsonfile.write_json`); ``ValueError`` saying what is wrong with it
    (a file of another results schema: what :func:`~distlab.report.jsonfile.check_schema`
    says)."""
    try:
        data = read_json(path)
    except SchemaError as exc:
        raise ValueError(f"a distlab result ({exc})") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"a readable JSON file ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]})") from None
    cal = data.get("calibration", data) if isinstance(data, dict) else None
    if not isinstance(cal, dict):
        raise ValueError("a JSON object with alpha, beta, gamma (or a 'calibration' object)")
    bad = [k for k in CALIBRATION_KEYS
           if isinstance(cal.get(k), bool) or not isinstance(cal.get(k), (int, float))
           or not math.isfinite(cal[k]) or cal[k] < 0]
    if bad:
        raise ValueError(f"a JSON file whose calibration has finite numbers >= 0 for "
                         f"{', '.join(CALIBRATION_KEYS)} (missing or bad: {', '.join(bad)})")
    if cal.get("duplex", "full") not in ("full", "half", "shared"):
        raise ValueError(f"a calibration whose duplex is full, half or shared (got "
                         f"{cal.get('duplex')!r})")
    return cal


def allreduce_table(rows: list[dict[str, Any]]) -> str:
    """The nccl-tests-style table of allreduce rows, every column (ratio to builtin filled in;
    without the mean column when no row kept its mean, as rows summarized over runs do, and
    without the CPU columns when no row measured its CPU, as older files): what the command
    prints. :func:`short_table` is the same rows narrow enough for a notebook."""
    drop = set() if any("mean_us" in r for r in rows) else {"mean_us"}
    if not any(r.get("cpu_us") is not None for r in rows):
        drop |= {"cpu_us", "cpu_vs_builtin"}
    return format_table(_with_ratio(rows), tuple(c for c in COLUMNS if c.key not in drop))


SHORT_COLUMNS = (Column("size(B)", "nbytes", width=9), Column("algorithm", "algorithm"),
                 Column("executor", "executor", width=8),
                 Column("time(us)", "time_us", ".1f", width=9),
                 Column("mean(us)", "mean_us", ".1f", width=9),
                 Column("busbw(GB/s)", "busbw_gbps", ".3f"), Column("#wrong", "wrong"),
                 Column("model(us)", "predicted_us", ".1f", width=9),
                 Column("error%", "error_pct", "+.1f", width=7),
                 Column("vs builtin", "vs_builtin", ".2f", width=10))
"""The columns of :func:`short_table`: those of :data:`COLUMNS` (``predicted(us)`` headed
``model(us)``, ``vs builtin(x)`` headed ``vs builtin``, to leave room for the executor) less the
ones a reader can derive or that hold one value per run (``count`` = size / element size,
``type``, ``redop``,
and ``algbw`` = busbw * n / (2 (n - 1)))."""


def short_table(rows: list[dict[str, Any]]) -> str:
    """Allreduce rows as a table at most :data:`SHORT_WIDTH` characters wide: a ``# dtype op``
    line (the element types and reductions of the rows, comma-joined when they differ, and the
    executor when one ran every distlab row), then :data:`SHORT_COLUMNS` (ratio to builtin
    filled in; without the mean column when no row kept its mean, without the executor column
    unless the rows raced several)."""
    drop = set() if any("mean_us" in r for r in rows) else {"mean_us"}
    executors = executors_of(rows)
    if len(executors) <= 1:  # one executor ran every distlab row: say it once, above
        drop.add("executor")
    kinds = ", ".join(dict.fromkeys(f"{r.get('dtype', '?')} {r.get('op', '?')}" for r in rows))
    if len(executors) == 1:
        kinds += f"; distlab's algorithms on the {executors[0]} executor"
    return f"# {kinds}\n" + format_table(_with_ratio(rows),
                                          tuple(c for c in SHORT_COLUMNS if c.key not in drop))


#: The widest line :func:`short_table` and :func:`calibration_lines` print (characters): a
#: notebook's output area shows about 110 before it wraps.
SHORT_WIDTH = 105


def _with_ratio(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with ``vs_builtin`` (busbw over the builtin's at its size) and, where rows
    carry ``cpu_us``, ``cpu_vs_builtin`` (CPU per call over the builtin's)."""
    builtin = {r["nbytes"]: r["busbw_gbps"] for r in rows if r["algorithm"] == BUILTIN}
    cpu = {r["nbytes"]: r.get("cpu_us") for r in rows if r["algorithm"] == BUILTIN}
    return [{**r, "vs_builtin": r["busbw_gbps"] / builtin[r["nbytes"]]
             if builtin.get(r["nbytes"]) else None,
             "cpu_vs_builtin": r["cpu_us"] / cpu[r["nbytes"]]
             if r.get("cpu_us") is not None and cpu.get(r["nbytes"]) else None} for r in rows]


def calibration_lines(cal: dict[str, Any]) -> list[str]:
    """The calibration as four lines of at most :data:`SHORT_WIDTH` characters (fields a
    loaded file lacks print as '?'): how it was measured, alpha-beta-gamma, the fixed costs of
    a step and a call, the quality of its fit."""
    def num(key: str, scale: float, fmt: str) -> str:
        v = cal.get(key)
        return "?" if not isinstance(v, (int, float)) else format(v * scale, fmt)

    bw = f"{gb_per_s(1, cal['beta']):.2f} GB/s" if cal.get("beta") else "inf GB/s"
    return [f"calibration: {cal.get('duplex', 'full')} link model, measured "
            f"{cal.get('method', 'upfront')}, fitted on the {cal.get('statistic', 'median')} of "
            "rounds",
            f"  alpha {num('alpha', 1e6, '.1f')} us, beta {num('beta', 1e9, '.3f')} ns/B ({bw}), "
            f"gamma {num('gamma', 1e9, '.3f')} ns/B",
            f"  hand-off {num('handoff', 1e6, '.1f')} us/step, relay {num('relay', 1e6, '.1f')} "
            f"us/step/rank, per-call overhead {num('call_overhead', 1e6, '.1f')} us",
            f"  fit R^2: comm {num('comm_r2', 1, '.3f')} (worst point "
            f"{num('comm_max_rel_residual', 100, '.0f')}% off), reduce "
            f"{num('reduce_r2', 1, '.3f')}"]


def _rows(config: AllreduceConfig, per_rank: list[dict[str, Any]],
          cal: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per (size, algorithm): the slowest rank's median and mean time, bandwidths,
    #wrong over ranks, prediction and error (against ``config.statistic``), and the options the
    timed calls ran with (``pieces`` as the default call picks it; ``{}`` for the builtin), so a
    refit prices the same schedule."""
    world = len(per_rank)
    itemsize = torch.empty(0, dtype=getattr(torch, config.dtype)).element_size()
    opts = {"segment_size": config.segment_size, "group_size": config.group_size}
    model = call_model(cal, backend=config.backend) if cal is not None else None
    rows = []
    for i, row in enumerate(per_rank[0]["rows"]):
        per_round = [r["rows"][i]["seconds"] for r in per_rank]
        cpu_rounds = [r["rows"][i].get("cpu_seconds") or [] for r in per_rank]
        cpu = summed_ranks_median(cpu_rounds) if all(cpu_rounds) else None
        seconds = slowest_rank_median(per_round)
        mean = slowest_rank_mean(per_round)
        judged = mean if config.statistic == "mean" else seconds
        algbw = gb_per_s(row["nbytes"], seconds) if seconds > 0 else 0.0
        predicted = None
        used = {} if row["algorithm"] == BUILTIN else default_options(
            row["algorithm"], world, row["count"], itemsize,
            {k: v for k, v in opts.items() if v is not None and k in options_of(row["algorithm"])})
        if model is not None and (row["algorithm"] != BUILTIN or config.backend == "gloo"):
            predicted = model.seconds(row["algorithm"], world, row["count"], itemsize, used)
        rows.append({"nbytes": row["nbytes"], "count": row["count"], "dtype": config.dtype,
                     "op": config.op, "algorithm": row["algorithm"],
                     "executor": row["executor"], "options": used,
                     "time_us": seconds * 1e6, "mean_us": mean * 1e6,
                     "algbw_gbps": algbw, "busbw_gbps": algbw * busbw_factor("all_reduce", world),
                     "wrong": sum(r["rows"][i]["wrong"] for r in per_rank),
                     "predicted_us": None if predicted is None else predicted * 1e6,
                     "error_pct": None if not predicted else error_pct(judged, predicted),
                     "cpu_us": None if cpu is None else cpu * 1e6,
                     "seconds_per_rank": per_round, "cpu_seconds_per_rank": cpu_rounds})
    return _with_ratio(rows)


class AllreduceBenchmark(Benchmark[AllreduceConfig]):
    """Every allreduce algorithm next to torch's built-in, with the calibrated model."""

    name = "allreduce"
    about = "nccl-tests-style sweep of every allreduce algorithm vs torch's built-in"
    config_type = AllreduceConfig

    def check(self, parser: argparse.ArgumentParser, config: AllreduceConfig) -> AllreduceConfig:
        c, world = config, config.ranks
        if "compiled" in c.executors and not compiled_available():
            options.fail(parser, "--executor", "compiled", f"auto or python here: {status()}")
        if c.maxbytes < c.minbytes:
            options.fail(parser, "-e/--maxbytes", c.maxbytes, f">= -b/--minbytes ({c.minbytes})")
        itemsize = torch.empty(0, dtype=getattr(torch, c.dtype)).element_size()
        if c.minbytes < itemsize:
            options.fail(parser, "-b/--minbytes", c.minbytes, f">= {itemsize} (one {c.dtype} "
                         "element)")
        try:
            check_op_dtype(c.op, c.dtype)
        except ValueError as exc:
            options.fail(parser, "--op", c.op, f"valid for --dtype {c.dtype} ({exc})")
        if c.group_size is not None and world % c.group_size:
            divisors = [d for d in range(1, world + 1) if world % d == 0]
            options.fail(parser, "--group-size", c.group_size,
                         f"a divisor of the world size {world} (one of {divisors})")
        if c.calibration is not None:
            try:
                load_calibration(c.calibration)
            except ValueError as exc:
                options.fail(parser, "--calibration", str(c.calibration), str(exc))
        if c.backend == "nccl" and not torch.cuda.is_available():
            options.fail(parser, "--backend", "nccl", "gloo on this machine: torch sees no CUDA "
                         "device")
        if c.backend == "nccl" and not launch.in_torchrun() \
                and world > torch.cuda.device_count():
            options.fail(parser, "--world-size", world,
                         f"<= {torch.cuda.device_count()} with --backend nccl (one GPU per rank)")
        return config

    def run(self, config: AllreduceConfig) -> Report:
        c, world = config, config.ranks
        given = load_calibration(c.calibration) if c.calibration is not None else None
        cal_kwargs = None
        if not c.no_calibrate and given is None and world >= 2:
            cal_kwargs = {"op": "sum" if c.op == "avg" else c.op,
                          "sizes": list(c.calibration_sizes) or None,
                          "statistic": c.statistic}
        per_rank = launch.run(bench_rank, world, backend=c.backend, timeout=c.timeout,
                              args=(c.sizes, list(c.algorithms)),
                              kwargs={"dtype": c.dtype, "op": c.op, "iters": c.iters,
                                      "executors": list(c.executors), "check": c.check,
                                      "warmup": c.warmup,
                                      "options": {"segment_size": c.segment_size,
                                                  "group_size": c.group_size},
                                      "calibration": cal_kwargs, "progress": not c.quiet,
                                      "calibrate_in_rounds": not c.calibrate_upfront})
        cal = given if given is not None else per_rank[0]["calibration"]
        rows = _rows(c, per_rank, cal)
        wrong = sum(r["wrong"] for r in rows)
        head = (calibration_lines(cal) if cal else []) + [
            f"world size {world}, backend {c.backend}, iters {c.iters}, warmup {c.warmup}, "
            f"peer check {c.check}; time = median over iterations of the slowest rank, mean = "
            f"their mean; error% = ({c.statistic} - predicted) / predicted; cpu = the ranks' "
            f"CPU seconds per call (getrusage: user + system, every thread) summed over the "
            f"ranks, median over iterations"]
        versus = versus_table(rows)
        cores = os.cpu_count() or 1
        return Report([Table(rows, COLUMNS)] + ([versus] if versus else []), head,
                      versus_lines(rows) + target_lines(rows, world, cores) +
                      [f"out of bounds values: {wrong} {'OK' if wrong == 0 else 'FAILED'}"],
                      {"calibration": cal},
                      {"spans": [r.get("spans", []) for r in per_rank],
                       "hosts": [r.get("host") for r in per_rank]},
                      failed=f"{wrong} wrong elements" if wrong else "",
                      backend=c.backend, world_size=world)


BENCHMARK = AllreduceBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench allreduce``; every bad option exits 2 with one line before any
    rank starts."""
    return run_cli(BENCHMARK, argv)
