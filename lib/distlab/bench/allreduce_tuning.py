"""The default allreduce call beside torch's built-in, over the number of pieces and check modes.

    python -m distlab.bench allreduce-tuning --world-size 2 -b 1M -e 64M -f 4 --iters 9
    python -m distlab.bench allreduce-tuning --world-size 4 --algorithm ring --pieces 1,2,4,8

What ``distlab.collectives.all_reduce(x, algorithm=ALG)`` costs as a user calls it, measured side
by side with ``torch.distributed.all_reduce`` in one run, and why: per size, every round runs (in
an order that rotates from round to round, each call after a barrier, on a buffer refilled with
the same data) these variants of the same allreduce:

- ``builtin``: torch's ``all_reduce``;
- ``default``: ``all_reduce(x, algorithm=ALG)`` as a user calls it: the inline peer check and the
  ``pieces`` the shipped cost model picks (:func:`distlab.collectives.model.choice.best_pieces`);
- ``k=K`` for each ``--pieces`` K: the same call with ``pieces=K`` (the pieces curve);
- ``check=gather`` and ``check=off``: the default call with the peer check done by a separate
  all_gather before the first step, or not at all (what the inline check costs).

Next to them (unless ``--no-calibrate``) the calibration exchanges of
:class:`~distlab.collectives.runtime.rounds.RoundCalibrator` run in the same rounds; the fit gives
the ``predicted`` column (per-call overhead + the schedule's cost) and the ``k`` this run's model
would pick. time = median over rounds of the slowest rank; spread = the 25th to 75th percentile of
those per-round times; vs builtin = the median over rounds of the built-in's time over the
variant's in the same round (paired, so a burst of load from other jobs hits both); busbw =
algbw * 2 (n - 1) / n. The load average of the machine is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distlab import launch
from distlab.bench.allreduce_ranks import size_pattern
from distlab.bench.harness import BenchConfig, Benchmark, Report, SizeSweepConfig, opt, run_cli
from distlab.bench.rounds import calibration_round, print_progress, rank_fences, timed_rounds
from distlab.cli import options
from distlab.collectives.algorithms.registry import BUILTIN, build, options_of
from distlab.collectives.model.calibration import calibration_sizes
from distlab.collectives.model.choice import PIECES_CANDIDATES, best_pieces, schedule_seconds
from distlab.collectives.plan.ops import check_op_dtype
from distlab.collectives.runtime.execute import all_reduce
from distlab.collectives.runtime.group import builtin_all_reduce, rank_device
from distlab.collectives.runtime.rounds import RoundCalibrator
from distlab.report.table import Column, Table
from distlab.vocabulary import busbw_factor, error_pct, gb_per_s, size_label

__all__ = ["BENCHMARK", "COLUMNS", "SUMMARY_COLUMNS", "TuningBenchmark", "TuningConfig", "main",
           "tuning_rank"]

PIECES_ALGORITHMS = ("ring", "segmented_ring", "hierarchical")

COLUMNS = (Column("size(B)", "nbytes", width=10), Column("variant", "variant", width=12),
           Column("pieces", "pieces", width=6), Column("check", "check", width=6),
           Column("time(us)", "time_us", ".1f", width=10),
           Column("p25-p75(us)", "spread", width=16),
           Column("busbw(GB/s)", "busbw_gbps", ".3f"), Column("vs builtin(x)", "vs_builtin", ".2f"),
           Column("vs p25-p75", "vs_spread", width=11),
           Column("predicted(us)", "predicted_us", ".1f"), Column("error%", "error_pct", "+.1f"),
           Column("#wrong", "wrong", width=6))

SUMMARY_COLUMNS = (Column("size(B)", "nbytes", width=10),
                   Column("builtin busbw", "builtin_busbw", ".3f"),
                   Column("default busbw", "default_busbw", ".3f"),
                   Column("default/builtin", "default_vs_builtin", ".2f"),
                   Column("default k", "default_k", width=9),
                   Column("model k", "model_k", width=7),
                   Column("best k measured", "best_k", width=15),
                   Column("t(default k)/t(best)", "default_k_vs_best", ".3f"),
                   Column("t(model k)/t(best)", "model_k_vs_best", ".3f"))


@dataclass(frozen=True)
class TuningConfig(SizeSweepConfig, BenchConfig):
    """Options of ``python -m distlab.bench allreduce-tuning`` (sizes in bytes)."""

    world_size: int = opt(2, "--world-size", "-n", type=options.positive_int,
                          help="local ranks to spawn (ignored under torchrun)")
    backend: str = opt("gloo", "--backend", choices=("gloo", "nccl"),
                       help="torch.distributed backend")
    minbytes: int = opt(1 << 20, "-b", "--minbytes", type=options.size_bytes,
                        help="smallest message in bytes (1M = 1 MiB)")
    maxbytes: int = opt(64 << 20, "-e", "--maxbytes", type=options.size_bytes,
                        help="largest message in bytes (>= --minbytes)")
    stepfactor: int = opt(4, "-f", "--stepfactor", type=options.int_at_least(2),
                          help="multiply the size by this from -b up to -e")
    algorithm: str = opt("ring", "--algorithm", "-a", choices=PIECES_ALGORITHMS,
                         help="the distlab algorithm (one that takes pieces)")
    pieces: tuple[int, ...] = opt(PIECES_CANDIDATES, "--pieces", type=options.int_list(1),
                                  help="the pieces curve: comma list of k")
    dtype: str = opt("float32", "--dtype", "-d",
                     choices=("float16", "bfloat16", "float32", "float64", "int32", "int64"),
                     help="element type")
    op: str = opt("sum", "--op", "-o", choices=("sum", "prod", "max", "min", "avg"),
                  help="reduction")
    iters: int = opt(9, "--iters", type=options.positive_int,
                     help="timed rounds (time = the median)")
    warmup: int = opt(2, "--warmup", "-w", type=options.nonnegative_int,
                      help="untimed rounds first")
    no_check_modes: bool = opt(False, "--no-check-modes", action="store_true",
                               help="leave out the check=gather and check=off variants")
    no_calibrate: bool = opt(False, "--no-calibrate", action="store_true",
                             help="no calibration in the rounds (no predicted column, no model k)")
    timeout: float = opt(900.0, "--timeout", type=options.positive_float,
                         help="seconds for the whole run")
    quiet: bool = opt(False, "--quiet", "-q", action="store_true",
                      help="no progress lines on stderr")



def _variants(algorithm: str, world: int, count: int, itemsize: int, pieces: tuple[int, ...],
              modes: bool) -> list[tuple[str, int | None, str]]:
    """``(name, pieces, check)`` of every variant at one size (``builtin`` first)."""
    k = best_pieces(algorithm, world, count, itemsize)
    out = [(BUILTIN, None, "-"), ("default", k, "inline")]
    out += [(f"k={p}", p, "inline") for p in pieces]
    if modes:
        out += [("check=gather", k, "gather"), ("check=off", k, "off")]
    return out


def _call(algorithm: str, op: str, pieces: int | None, check: str) -> Any:
    if pieces is None:
        return lambda t: builtin_all_reduce(t, op)
    return lambda t: all_reduce(t, op=op, algorithm=algorithm, check=check, pieces=pieces)


def tuning_rank(rank: int, world_size: int, sizes: list[int], algorithm: str,
                pieces: tuple[int, ...], dtype: str = "float32", op: str = "sum",
                iters: int = 9, warmup: int = 2, modes: bool = True, calibrate: bool = True,
                progress: bool = True) -> dict[str, Any]:
    """One rank of the benchmark (a :func:`distlab.launch.run` rank function).

    Returns ``{"cases": [{"nbytes", "count", "variant", "pieces", "check", "seconds": [per
    round], "wrong"}], "calibration": dict | None, "host": str}``.
    """
    device = rank_device()
    tdtype = getattr(torch, dtype)
    itemsize = torch.empty(0, dtype=tdtype).element_size()
    calibrator = (RoundCalibrator(calibration_sizes(sizes, world_size, itemsize), tdtype,
                                  "sum" if op == "avg" else op, device=device)
                  if calibrate and world_size >= 2 else None)
    cases = []
    for nbytes in sizes:
        count, pristine, expected = size_pattern(rank, world_size, nbytes, dtype, op, device)
        buf = pristine.clone()
        for name, k, check in _variants(algorithm, world_size, count, itemsize, pieces, modes):
            run = _call(algorithm, op, k, check)
            buf.copy_(pristine)
            run(buf)
            tol = 0.0 if op != "avg" else 1e-2
            wrong = int((~torch.isclose(buf.double().cpu(), expected, rtol=tol, atol=0.0)).sum())
            cases.append({"nbytes": count * itemsize, "count": count, "variant": name,
                          "pieces": k, "check": check, "seconds": [], "wrong": wrong,
                          "run": run, "buf": buf, "pristine": pristine})
    # rotate: the variants are compared within a round (vs builtin is paired by round), so
    # each goes first in turn and a burst of load falls on all of them alike
    timings = timed_rounds(
        cases, lambda c, _: c["run"](c["buf"]), warmup=warmup, rounds=iters, rotate=True,
        fences=rank_fences(device), prepare=lambda c: c["buf"].copy_(c["pristine"]),
        before_round=calibration_round(calibrator),
        progress=print_progress("allreduce-tuning") if progress and rank == 0 else None)
    for case, seconds in zip(cases, timings.seconds, strict=True):
        case["seconds"] = seconds
    cal = calibrator.fit().to_dict() if calibrator is not None else None
    keep = ("nbytes", "count", "variant", "pieces", "check", "seconds", "wrong")
    return {"cases": [{k: c[k] for k in keep} for c in cases], "calibration": cal,
            "host": socket.gethostname()}


def _slowest(per_rank: list[list[float]]) -> np.ndarray:
    """Per round, the slowest rank's seconds."""
    return np.asarray(per_rank, dtype=float).max(axis=0)


def _rows(config: TuningConfig, per_rank: list[dict[str, Any]],
          cal: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    world = len(per_rank)
    itemsize = torch.empty(0, dtype=getattr(torch, config.dtype)).element_size()
    factor = busbw_factor("all_reduce", world)
    rows: list[dict[str, Any]] = []
    builtin: dict[int, np.ndarray] = {}
    for i, case in enumerate(per_rank[0]["cases"]):
        t = _slowest([r["cases"][i]["seconds"] for r in per_rank])
        if case["variant"] == BUILTIN:
            builtin[case["nbytes"]] = t
        ratio = builtin[case["nbytes"]] / t
        med = float(np.median(t))
        predicted = None
        if cal is not None and case["pieces"] is not None:
            sched = build(config.algorithm, world, case["count"], pieces=case["pieces"])
            predicted = schedule_seconds(cal, sched, itemsize)
        q1, q3 = np.percentile(t, [25, 75])
        r1, r3 = np.percentile(ratio, [25, 75])
        rows.append({"nbytes": case["nbytes"], "count": case["count"],
                     "variant": case["variant"], "pieces": case["pieces"],
                     "check": case["check"], "time_us": med * 1e6,
                     "spread": f"{q1 * 1e6:.0f}-{q3 * 1e6:.0f}",
                     "spread_us": [float(q1 * 1e6), float(q3 * 1e6)],
                     "busbw_gbps": gb_per_s(case["nbytes"], med) * factor,
                     "vs_builtin": float(np.median(ratio)),
                     "vs_spread": f"{r1:.2f}-{r3:.2f}", "vs_builtin_spread": [float(r1), float(r3)],
                     "predicted_us": None if predicted is None else predicted * 1e6,
                     "error_pct": None if not predicted else error_pct(med, predicted),
                     "wrong": sum(r["cases"][i]["wrong"] for r in per_rank),
                     "seconds_slowest": t.tolist()})
    return rows, _summary(config, rows, cal, world, itemsize)


def _summary(config: TuningConfig, rows: list[dict[str, Any]], cal: dict[str, Any] | None,
             world: int, itemsize: int) -> list[dict[str, Any]]:
    out = []
    for nbytes in dict.fromkeys(r["nbytes"] for r in rows):
        at = {r["variant"]: r for r in rows if r["nbytes"] == nbytes}
        curve = {r["pieces"]: r["time_us"] for r in at.values() if r["variant"].startswith("k=")}
        best_k = min(curve, key=curve.__getitem__) if curve else None
        default = at["default"]
        model_k = None
        if cal is not None and curve:
            model_k = best_pieces(config.algorithm, world, default["count"], itemsize, cal,
                                  candidates=sorted(curve))
        out.append({"nbytes": nbytes, "builtin_busbw": at[BUILTIN]["busbw_gbps"],
                    "default_busbw": default["busbw_gbps"],
                    "default_vs_builtin": default["vs_builtin"],
                    "default_k": default["pieces"], "model_k": model_k, "best_k": best_k,
                    "default_k_vs_best": (curve[default["pieces"]] / curve[best_k]
                                          if default["pieces"] in curve else None),
                    "model_k_vs_best": (curve[model_k] / curve[best_k]
                                        if model_k in curve else None)})
    return out


def _targets(summary: list[dict[str, Any]]) -> list[str]:
    lines = []
    mid = [s for s in summary if s["nbytes"] == 16 << 20]
    if mid:
        r = mid[0]["default_vs_builtin"]
        lines.append(f"target default >= 0.9x builtin busbw at 16 MiB: {r:.2f}x "
                     f"{'met' if r >= 0.9 else 'NOT met'}")
    band = [s for s in summary if (1 << 20) <= s["nbytes"] <= (64 << 20)]
    if band:
        worst = min(band, key=lambda s: s["default_vs_builtin"])
        lines.append(f"target default >= 0.8x builtin busbw at every size 1-64 MiB: lowest "
                     f"{worst['default_vs_builtin']:.2f}x at {size_label(worst['nbytes'])} "
                     f"{'met' if worst['default_vs_builtin'] >= 0.8 else 'NOT met'}")
    for key, who in (("default_k_vs_best", "default call's k (shipped model)"),
                     ("model_k_vs_best", "this run's model's k")):
        vals = [s[key] for s in summary if s[key] is not None]
        if vals:
            lines.append(f"target {who} within 10% of the best k measured: worst "
                         f"{max(vals):.3f}x the best time "
                         f"{'met' if max(vals) <= 1.10 else 'NOT met'}")
    return lines


class TuningBenchmark(Benchmark[TuningConfig]):
    """The default call vs builtin, the pieces curve and the peer-check modes, in one run."""

    name = "allreduce-tuning"
    about = "default allreduce call vs torch's built-in: pieces curve, check modes, model's k"
    config_type = TuningConfig

    def check(self, parser: argparse.ArgumentParser, config: TuningConfig) -> TuningConfig:
        c = config
        if c.maxbytes < c.minbytes:
            options.fail(parser, "-e/--maxbytes", c.maxbytes, f">= -b/--minbytes ({c.minbytes})")
        try:
            check_op_dtype(c.op, c.dtype)
        except ValueError as exc:
            options.fail(parser, "--op", c.op, f"valid for --dtype {c.dtype} ({exc})")
        if c.ranks < 2:
            options.fail(parser, "--world-size", c.ranks, ">= 2 (an allreduce between ranks)")
        if "pieces" not in options_of(c.algorithm):
            options.fail(parser, "--algorithm", c.algorithm, "an algorithm that takes pieces")
        return config

    def run(self, config: TuningConfig) -> Report:
        c = config
        load0 = os.getloadavg()
        per_rank = launch.run(tuning_rank, c.ranks, backend=c.backend, timeout=c.timeout,
                              args=(c.sizes, c.algorithm, tuple(c.pieces)),
                              kwargs={"dtype": c.dtype, "op": c.op, "iters": c.iters,
                                      "warmup": c.warmup, "modes": not c.no_check_modes,
                                      "calibrate": not c.no_calibrate,
                                      "progress": not c.quiet})
        load1 = os.getloadavg()
        cal = per_rank[0]["calibration"]
        rows, summary = _rows(c, per_rank, cal)
        wrong = sum(r["wrong"] for r in rows)
        head = [(f"{c.algorithm} on {c.ranks} {c.backend} ranks, {c.iters} paired rounds "
                 f"(+{c.warmup} warmup); load average before {load0[0]:.2f} {load0[1]:.2f} "
                 f"{load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} "
                 f"({os.cpu_count()} cores)")]
        verdict = "OK" if wrong == 0 else "FAILED"
        tail = [*_targets(summary), f"out of bounds values: {wrong} {verdict}"]
        return Report([Table(rows, COLUMNS),
                       Table(summary, SUMMARY_COLUMNS, "per size: the default call and k",
                             "summary")], head, tail,
                      {"calibration": cal, "load_before": list(load0), "load_after": list(load1)},
                      failed=f"{wrong} wrong elements" if wrong else "",
                      backend=c.backend, world_size=c.ranks)


BENCHMARK = TuningBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench allreduce-tuning``."""
    return run_cli(BENCHMARK, argv)
