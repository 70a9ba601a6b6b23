"""nccl-tests-style benchmark of any collective: every distlab algorithm next to torch's built-in.

    python -m distlab.bench collective --op all_gather --world-size 4 -b 1K -e 64M -f 4
    python -m distlab.bench collective --op reduce_scatter --algorithms ring,builtin --redop max
    python -m distlab.bench collective --op broadcast --root 1 --json bcast.json

``--op`` is the collective (``all_reduce``, ``broadcast``, ``reduce``, ``gather``, ``scatter``,
``all_gather``, ``reduce_scatter``, ``all_to_all``, ``barrier``); sizes are bytes of nccl-tests'
count (the whole vector, or the whole gathered buffer of ``p`` blocks, or one rank's all-to-all
buffer), rounded down to a multiple of the world size. Every (size, algorithm) is first checked
once against the exact answer (``#wrong``, on the ranks that get a result); then ``--warmup`` +
``--iters`` rounds run every case once each (rotating order, a barrier before each) next to the
calibration exchanges of :class:`~distlab.collectives.runtime.rounds.RoundCalibrator`. time =
median over rounds of the slowest rank; algbw = bytes / time; busbw = algbw times nccl-tests'
factor for the collective (nccl-tests src/*.cu ``*GetBw``, NVIDIA/nccl-tests a0b82b2, v2.19.6):
``2 (n-1)/n`` all-reduce; ``(n-1)/n`` all-gather, reduce-scatter, all-to-all, gather, scatter;
``1`` broadcast and reduce; none for a barrier. predicted = the calibrated per-call overhead +
the cost of the schedule the call ran (none for builtin); error% = (time - predicted) /
predicted; vs builtin = busbw / the built-in's at the same size in the same run (for a barrier:
the built-in's time / this one's).
"""

from __future__ import annotations

import argparse
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distlab import launch
from distlab.bench.collective_ranks import DRIVERS, collective_rank
from distlab.bench.harness import BenchConfig, Benchmark, Report, SizeSweepConfig, opt, run_cli
from distlab.bench.versus import versus_lines, versus_table
from distlab.cli import options
from distlab.collectives.algorithms.registry import BUILTIN, PLANS, names
from distlab.collectives.model.choice import schedule_seconds
from distlab.collectives.plan.ops import check_op_dtype
from distlab.collectives.runtime.collectives import plan_for
from distlab.collectives.runtime.compiled import EXECUTORS, resolved, status
from distlab.collectives.runtime.compiled import available as compiled_available
from distlab.report.table import Column, Table
from distlab.report.words import count
from distlab.vocabulary import COLLECTIVES, busbw_factor, error_pct, gb_per_s

__all__ = ["BENCHMARK", "COLUMNS", "COMMENT_WIDTH", "CollectiveBenchmark", "CollectiveConfig",
           "head_lines", "main"]

COLUMNS = (Column("size(B)", "nbytes", width=10), Column("algorithm", "algorithm", width=18),
           Column("time(us)", "time_us", ".1f", width=10),
           Column("algbw(GB/s)", "algbw_gbps", ".3f"), Column("busbw(GB/s)", "busbw_gbps", ".3f"),
           Column("#wrong", "wrong", width=6), Column("predicted(us)", "predicted_us", ".1f"),
           Column("error%", "error_pct", "+.1f", width=7),
           Column("vs builtin(x)", "vs_builtin", ".2f"))
"""The printed columns (at most 110 characters a line). The rows also carry ``count``,
``dtype``, ``op`` (the reduction or "none") and ``root`` (or "-"): the same for every row of a
run, so the head lines say them once and the JSON keeps them per row."""
COMMENT_WIDTH = 108
"""The widest comment line printed (without its leading ``# ``)."""
ALL_NAMES = sorted({a for c in COLLECTIVES for a in names(c, "plan", "builtin")})


@dataclass(frozen=True)
class CollectiveConfig(SizeSweepConfig, BenchConfig):
    """Options of ``python -m distlab.bench collective`` (sizes in bytes)."""

    op: str = opt("all_gather", "--op", choices=COLLECTIVES, help="the collective")
    world_size: int = opt(2, "--world-size", "-n", type=options.positive_int,
                          help="local ranks to spawn (ignored under torchrun)")
    backend: str = opt("gloo", "--backend", choices=("gloo", "nccl"),
                       help="torch.distributed backend")
    minbytes: int = opt(1024, "-b", "--minbytes", type=options.size_bytes,
                        help="smallest size in bytes (binary units: 1K = 1024)")
    maxbytes: int = opt(16 << 20, "-e", "--maxbytes", type=options.size_bytes,
                        help="largest size in bytes (>= --minbytes)")
    stepfactor: int = opt(4, "-f", "--stepfactor", type=options.int_at_least(2),
                          help="multiply the size by this from -b up to -e")
    algorithms: tuple[str, ...] = opt((), "--algorithms", "-a",
                                      type=options.comma_choices(ALL_NAMES),
                                      help="comma list of the collective's algorithms and "
                                           "builtin (default: all of them)")
    executor: str = opt("auto", "--executor", choices=EXECUTORS,
                        help="which executor runs distlab's algorithms: auto (compiled where it "
                             "builds), compiled or python")
    dtype: str = opt("float32", "--dtype", "-d",
                     choices=("float16", "bfloat16", "float32", "float64", "int32", "int64"),
                     help="element type")
    redop: str = opt("sum", "--redop", "-o", choices=("sum", "prod", "max", "min", "avg"),
                     help="reduction of all_reduce, reduce and reduce_scatter")
    root: int = opt(0, "--root", "-r", type=options.nonnegative_int,
                    help="root of broadcast, reduce, gather and scatter")
    iters: int = opt(9, "--iters", type=options.positive_int, help="timed rounds")
    warmup: int = opt(2, "--warmup", "-w", type=options.nonnegative_int,
                      help="untimed rounds first")
    no_calibrate: bool = opt(False, "--no-calibrate", action="store_true",
                             help="no calibration in the rounds (no predicted column)")
    timeout: float = opt(900.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")
    quiet: bool = opt(False, "--quiet", "-q", action="store_true",
                      help="no progress lines on stderr")


    @property
    def names(self) -> list[str]:
        """The algorithms run (default: all of the collective's, then builtin)."""
        return list(self.algorithms) or list(names(self.op, "plan", "builtin"))


def _rows(c: CollectiveConfig, per_rank: list[dict[str, Any]],
          cal: dict[str, Any] | None) -> list[dict[str, Any]]:
    world = len(per_rank)
    itemsize = torch.empty(0, dtype=getattr(torch, c.dtype)).element_size()
    factor = busbw_factor(c.op, world)
    drv = DRIVERS[c.op]
    rows: list[dict[str, Any]] = []
    for i, case in enumerate(per_rank[0]["cases"]):
        t = np.asarray([r["cases"][i]["seconds"] for r in per_rank], dtype=float).max(axis=0)
        sec = float(np.median(t))
        algbw = gb_per_s(case["nbytes"], sec) if sec > 0 and factor is not None else None
        predicted = None
        if cal is not None and case["algorithm"] != BUILTIN:
            opts = {"root": c.root} if drv.rooted else {}
            count = 1 if c.op == "barrier" else case["count"]
            plan = plan_for(c.op, case["algorithm"], world, count, itemsize, opts)
            predicted = schedule_seconds(cal, plan, itemsize)
        rows.append({"nbytes": case["nbytes"], "count": case["count"], "dtype": c.dtype,
                     "op": c.redop if drv.reduces else "none",
                     "root": c.root if drv.rooted else "-", "algorithm": case["algorithm"],
                     "executor": case["executor"],
                     "time_us": sec * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": None if algbw is None else algbw * factor,
                     "wrong": sum(r["cases"][i]["wrong"] for r in per_rank),
                     "predicted_us": None if predicted is None else predicted * 1e6,
                     "error_pct": None if not predicted else error_pct(sec, predicted),
                     "seconds_slowest": t.tolist()})
    by_size = {r["nbytes"]: r for r in rows if r["algorithm"] == BUILTIN}
    for r in rows:
        b = by_size.get(r["nbytes"])
        if b is None:
            r["vs_builtin"] = None
        elif r["busbw_gbps"] is not None and b["busbw_gbps"]:
            r["vs_builtin"] = r["busbw_gbps"] / b["busbw_gbps"]
        else:
            r["vs_builtin"] = b["time_us"] / r["time_us"] if r["time_us"] else None
    return rows


def head_lines(c: CollectiveConfig, factor: float | None, load_before: Sequence[float],
               load_after: Sequence[float]) -> list[str]:
    """The comment lines above a run's tables: what ran (collective, element type, reduction,
    root, ranks, rounds), how a row's numbers are made (``busbw`` factor ``factor``: None for a
    barrier) and the 1-minute load averages before and after; each at most
    :data:`COMMENT_WIDTH` characters."""
    drv = DRIVERS[c.op]
    itemsize = torch.empty(0, dtype=getattr(torch, c.dtype)).element_size()
    moves = c.op != "barrier"
    what = [f"{c.op} of {c.dtype}" if moves else c.op] + \
        ([f"redop {c.redop}"] if drv.reduces else []) + ([f"root {c.root}"] if drv.rooted else [])
    count_note = f"; count = size / {itemsize} elements" if moves else ""
    executor = resolved(c.executor)
    lines = [f"{', '.join(what)} on {count(c.ranks, c.backend + ' rank')}: "
             f"{count(c.iters, 'round')} (+{c.warmup} warmup){count_note}; distlab's algorithms "
             f"on the {executor} executor",
             "time = median over rounds of the slowest rank; "
             + ("no algbw or busbw (a barrier moves no data)" if factor is None
                else f"busbw = algbw x {factor:g} (nccl-tests' factor)"),
             f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
             f"({os.cpu_count()} cores)"]
    return _fit(lines)


def _fit(lines: Sequence[str]) -> list[str]:
    """``lines`` with each one wider than :data:`COMMENT_WIDTH` broken after a ``", "`` where
    one fits (else at a space), the continuation lines indented by two spaces."""
    out: list[str] = []
    for line in lines:
        current, *rest = line.split(", ")
        for item in rest:
            if len(current) + 2 + len(item) <= COMMENT_WIDTH:
                current += ", " + item
            else:
                out.append(current + ",")
                current = "  " + item
        out += textwrap.wrap(current, COMMENT_WIDTH, subsequent_indent="  ") or [""]
    return out


class CollectiveBenchmark(Benchmark[CollectiveConfig]):
    """Every algorithm of one collective next to torch's built-in, with the calibrated model."""

    name = "collective"
    about = "nccl-tests-style sweep of one collective's algorithms vs torch's built-in"
    config_type = CollectiveConfig

    def check(self, parser: argparse.ArgumentParser,
              config: CollectiveConfig) -> CollectiveConfig:
        c = config
        if c.maxbytes < c.minbytes:
            options.fail(parser, "-e/--maxbytes", c.maxbytes, f">= -b/--minbytes ({c.minbytes})")
        bad = [a for a in c.algorithms if a not in names(c.op, "plan", "builtin")]
        if bad:
            options.fail(parser, "--algorithms", ",".join(bad),
                         f"algorithms of {c.op}: {', '.join([*PLANS[c.op], 'builtin'])}")
        if DRIVERS[c.op].reduces:
            try:
                check_op_dtype(c.redop, c.dtype)
            except ValueError as exc:
                options.fail(parser, "--redop", c.redop, f"valid for --dtype {c.dtype} ({exc})")
        if c.root >= c.ranks:
            options.fail(parser, "--root", c.root, f"a rank of the world (< {c.ranks})")
        itemsize = torch.empty(0, dtype=getattr(torch, c.dtype)).element_size()
        if c.op != "barrier" and c.minbytes < itemsize * c.ranks:
            options.fail(parser, "-b/--minbytes", c.minbytes,
                         f">= {itemsize * c.ranks} (one {c.dtype} element per rank)")
        if c.backend == "nccl" and not torch.cuda.is_available():
            options.fail(parser, "--backend", "nccl", "gloo on this machine: torch sees no CUDA "
                         "device")
        if c.executor == "compiled" and not compiled_available():
            options.fail(parser, "--executor", "compiled", f"auto or python here: {status()}")
        return config

    def run(self, config: CollectiveConfig) -> Report:
        c = config
        load0 = os.getloadavg()
        per_rank = launch.run(collective_rank, c.ranks, backend=c.backend, timeout=c.timeout,
                              args=(c.op, c.sizes, c.names),
                              kwargs={"dtype": c.dtype, "op": c.redop, "root": c.root,
                                      "executor": c.executor,
                                      "iters": c.iters, "warmup": c.warmup,
                                      "calibrate": not c.no_calibrate,
                                      "progress": not c.quiet})
        load1 = os.getloadavg()
        cal = per_rank[0]["calibration"]
        rows = _rows(c, per_rank, cal)
        wrong = sum(r["wrong"] for r in rows)
        factor = busbw_factor(c.op, c.ranks)
        head = head_lines(c, factor, load0, load1)
        tables = [Table(rows, COLUMNS)]
        versus = versus_table([r for r in rows if r["busbw_gbps"] is not None])
        if versus is not None:
            tables.append(versus)
        verdict = "OK" if wrong == 0 else "FAILED"
        tail = _fit([*versus_lines([r for r in rows if r["busbw_gbps"] is not None]),
                     f"out of bounds values: {wrong} {verdict}"])
        return Report(tables, head, tail,
                      {"calibration": cal, "load_before": list(load0),
                       "load_after": list(load1), "busbw_factor": factor},
                      failed=f"{wrong} wrong elements" if wrong else "",
                      backend=c.backend, world_size=c.ranks)


BENCHMARK = CollectiveBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench collective``."""
    return run_cli(BENCHMARK, argv)
