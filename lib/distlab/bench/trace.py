"""Benchmark: reading and breaking down torch.profiler traces, distlab against HTA 0.5.0.

    python -m distlab.bench trace                         # a 35 MB trace and a folder of 8 ranks
    python -m distlab.bench trace --mb 35 --ranks 8 --rank-mb 10 --repeats 3 --json out.json

The traces are made from a real one (``--source``, default HTA's published A100 trace
``results/traces/hta_a100_2ranks_rank0``): its events are replicated, each copy shifted by the
trace's span, with ``correlation``/``External id`` and ``ProfilerStep#N`` renumbered so copies never
collide, until the file holds ``--mb`` MB of JSON (uncompressed, as both tools read it; the last
copy is cut where the size is reached); the folder holds ``--ranks`` such files of ``--rank-mb``
MB, ranks 0..N-1. They are written to a temporary folder and removed afterwards.

Each implementation runs in a fresh child process (``python -m distlab.bench.trace --child``):
``distlab`` = :func:`distlab.trace.torch_trace.read_run` +
:func:`~distlab.trace.breakdown.analyze_run` (temporal breakdown, overlap, idle time by stream
and idle causes, per rank and per step) + :func:`~distlab.trace.collectives.match_collectives`;
``hta`` = ``TraceAnalysis(trace_dir)`` + ``get_temporal_breakdown`` + ``get_comm_comp_overlap`` +
``get_idle_time_breakdown`` (all ranks).
Time is the child's wall time for that work (imports excluded); peak memory is the largest sum
of resident memory over the child and its own children (HTA parses ranks in a process pool),
sampled every 50 ms and never below the child's own ``ru_maxrss``, minus the child's resident
memory before the work. Medians over ``--repeats``. Targets: distlab >= 3x faster and <= 1/2 of
HTA's peak memory; the lines under the table say whether each was met. ``#wrong``: 1 where
distlab's idle time differs from HTA's by more than 0.5 us in any of HTA's idle categories, else
0 (the run then exits 1). A trace is never smaller than one copy of the source: where ``--mb`` or
``--rank-mb`` asks for less, the table's MB column says what was written and a line says why.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.cli import options
from distlab.report.table import Column, Table

__all__ = ["BENCHMARK", "TraceBenchConfig", "main", "replicate_trace"]

IMPLS = ("hta", "distlab")
_SOURCE = "results/traces/hta_a100_2ranks_rank0"
"""The default ``--source``: HTA's published A100 trace, committed under the repository root."""
COLUMNS = (Column("case", "case", width=16), Column("impl", "impl", width=8),
           Column("MB", "mb", ".1f"), Column("events", "events", width=9),
           Column("time(s)", "seconds", ".3f"), Column("cpu(s)", "cpu_seconds", ".3f"),
           Column("peak(MB)", "peak_mb", ".1f"), Column("#wrong", "wrong"))


@dataclass(frozen=True)
class TraceBenchConfig(BenchConfig):
    """Options of ``python -m distlab.bench trace``."""

    source: str = opt(_SOURCE, "--source", help="a real GPU trace file or folder (its first "
                                                "file) to replicate; the default is found from "
                                                "the current folder or the checkout distlab "
                                                "runs from")
    mb: float = opt(35.0, "--mb", type=float, help="size of the single trace, MB of JSON")
    ranks: int = opt(8, "--ranks", type=options.positive_int, help="ranks in the folder case")
    rank_mb: float = opt(10.0, "--rank-mb", type=float, help="size of each rank's trace, MB")
    repeats: int = opt(1, "--repeats", type=options.positive_int, help="child rounds (median)")


def source_path(text: str) -> Path:
    """``--source`` as a path: as given, or for the default (a path in the repository) the copy
    in the current folder, else in the checkout this distlab was imported from."""
    path = Path(text).expanduser()
    if text != _SOURCE or path.exists():
        return path
    checkout = Path(__file__).resolve().parents[3] / _SOURCE
    return checkout if checkout.exists() else path


@functools.lru_cache(maxsize=1)
def _load(source: Path) -> dict[str, Any]:
    """The trace document at ``source`` (a file, or a folder's first trace file); ValueError
    in one line when it is not a readable trace HTA can break down (GPU kernels needed). Read
    once for the option check and the run (the document is not modified)."""
    import gzip
    import zlib
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
        if not files:
            raise ValueError(f"the folder {str(source)!r} holds no .json or .json.gz trace")
        source = files[0]
    raw = source.read_bytes()
    try:
        doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{str(source)!r} is not a readable trace ({type(exc).__name__}: "
                         f"{exc})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not any(isinstance(e, dict) and "ts" in e
                                               for e in events):
        raise ValueError(f"{str(source)!r} is JSON but not a trace (no timed traceEvents)")
    if not any(isinstance(e, dict) and e.get("cat") == "kernel" for e in events):
        raise ValueError(f"{str(source)!r} has no GPU kernels (a CPU-only or gloo trace), and "
                         "HTA's breakdown, the reference here, needs them")
    return doc


def replicate_trace(doc: dict[str, Any], target_bytes: int, out: Path, *, rank: int = 0,
                    world_size: int | None = None) -> tuple[int, int]:
    """Write ``doc``'s events replicated (see the module docstring) to ``out`` until it holds
    ``target_bytes``; returns (bytes, events)."""
    import re
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1
    corr = max([(e.get("args") or {}).get("correlation", 0) for e in events
                if isinstance((e.get("args") or {}).get("correlation", 0), int)] + [0]) + 1
    ext = max([(e.get("args") or {}).get("External id", 0) for e in events
               if isinstance((e.get("args") or {}).get("External id", 0), int)] + [0]) + 1
    step_rx = re.compile(r"ProfilerStep#(\d+)")
    nsteps = 1000
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    info = dict(meta.get("distributedInfo") or {})
    info["rank"] = rank
    if world_size is not None:
        info["world_size"] = world_size
    meta["distributedInfo"] = info
    head = json.dumps(meta)[:-1] + ', "traceEvents": [\n'
    written, n, copy = 0, 0, 0
    with open(out, "w") as f:
        f.write(head)
        written += len(head)
        while written < target_bytes or copy == 0:
            for e in events:
                if copy and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if copy:
                    if isinstance(e2.get("ts"), (int, float)):
                        e2["ts"] = e2["ts"] + copy * span
                    a = e2.get("args")
                    if isinstance(a, dict):
                        a = dict(a)
                        if isinstance(a.get("correlation"), int) and a["correlation"] >= 0:
                            a["correlation"] += copy * corr
                        if isinstance(a.get("External id"), int):
                            a["External id"] += copy * ext
                        e2["args"] = a
                    m = step_rx.match(str(e2.get("name", "")))
                    if m:
                        e2["name"] = f"ProfilerStep#{int(m.group(1)) + copy * nsteps}"
                s = ("" if n == 0 else ",\n") + json.dumps(e2)
                f.write(s)
                written += len(s)
                n += 1
                if copy and written >= target_bytes:
                    break
            copy += 1
        f.write("\n]}\n")
    return out.stat().st_size, n


def _tree_rss_mb(proc: Any) -> float:
    import psutil
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def child(impl: str, folder: str) -> dict[str, Any]:
    """Run ``impl`` on ``folder`` in this process; wall, CPU, peak tree RSS above the start."""
    import logging
    import os
    import resource
    import warnings

    import psutil
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    if impl == "hta":
        from hta.trace_analysis import TraceAnalysis
    else:
        from distlab.trace.breakdown import analyze_run
        from distlab.trace.collectives import match_collectives
        from distlab.trace.torch_trace import read_run
    me = psutil.Process(os.getpid())
    base = _tree_rss_mb(me)
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss_mb(me))
            time.sleep(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    c0 = time.process_time()
    ch0 = os.times()
    t0 = time.perf_counter()
    if impl == "hta":
        a = TraceAnalysis(trace_dir=folder)
        tb = a.get_temporal_breakdown(visualize=False)
        a.get_comm_comp_overlap(visualize=False)
        a.get_idle_time_breakdown(visualize=False)
        idle = {int(r["rank"]): float(r["idle_time(us)"]) for _, r in tb.iterrows()}
    else:
        run = read_run(folder)
        an = analyze_run(run)
        match_collectives(run)
        idle = {r: (a.whole.idle_us if a.whole else None) for r, a in an.items()}
    seconds = time.perf_counter() - t0
    ch1 = os.times()
    stop.set()
    th.join()
    peak[0] = max(peak[0], _tree_rss_mb(me),
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    cpu = time.process_time() - c0 + (ch1.children_user - ch0.children_user) + \
        (ch1.children_system - ch0.children_system)
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak[0] - base, "idle_us": idle}


def _run_child(impl: str, folder: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "distlab.bench.trace", "--child", impl,
                           str(folder)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} child failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class TraceBenchmark(Benchmark[TraceBenchConfig]):
    """distlab's trace reading and breakdown against HTA's, same traces, same run."""

    name = "trace"
    about = "reading and breaking down torch.profiler traces: distlab vs HTA (time, memory)"
    config_type = TraceBenchConfig

    def check(self, parser: argparse.ArgumentParser, config: TraceBenchConfig) -> TraceBenchConfig:
        source = source_path(config.source)
        if not source.exists():
            options.fail(parser, "--source", config.source,
                         "an existing trace file or folder (from the repository root, the "
                         "default is results/traces/hta_a100_2ranks_rank0)")
        try:
            _load(source)
        except ValueError as exc:
            options.fail(parser, "--source", config.source, f"a GPU trace: {exc}")
        for name, value in (("--mb", config.mb), ("--rank-mb", config.rank_mb)):
            if not (value > 0 and math.isfinite(value)):
                options.fail(parser, name, value, "a number of MB > 0")
        return config

    def run(self, config: TraceBenchConfig) -> Report:
        c = config
        doc = _load(source_path(c.source))
        rows: list[dict[str, Any]] = []
        tail: list[str] = []
        with tempfile.TemporaryDirectory(prefix="distlab_bench_trace_") as tmp:
            single = Path(tmp) / "single"
            single.mkdir()
            size, n = replicate_trace(doc, int(c.mb * 1e6), single / "rank0.pt.trace.json")
            multi = Path(tmp) / "ranks"
            multi.mkdir()
            msize, mn = 0, 0
            for r in range(c.ranks):
                s, k = replicate_trace(doc, int(c.rank_mb * 1e6),
                                       multi / f"rank{r}.pt.trace.json", rank=r,
                                       world_size=c.ranks)
                msize, mn = msize + s, mn + k
            for what, asked, wrote in (("the single trace", c.mb, size / 1e6),
                                       ("each rank's trace", c.rank_mb, msize / 1e6 / c.ranks)):
                if wrote > 1.5 * asked:
                    tail.append(f"{what} holds {wrote:.1f} MB where {asked:g} MB was asked: one "
                                "copy of the source is the least a trace holds")
            for case, folder, mb, events in (("single", single, size / 1e6, n),
                                             (f"{c.ranks} ranks", multi, msize / 1e6, mn)):
                runs: dict[str, list[dict[str, Any]]] = {i: [] for i in IMPLS}
                for _ in range(c.repeats):
                    for impl in IMPLS:
                        runs[impl].append(_run_child(impl, folder))
                med = {i: {k: statistics.median(r[k] for r in runs[i])
                           for k in ("seconds", "cpu_seconds")} | {
                    "peak_mb": max(r["peak_mb"] for r in runs[i])} for i in IMPLS}
                ref_idle = runs["hta"][0]["idle_us"]
                got_idle = runs["distlab"][0]["idle_us"]
                wrong = int(any(abs((got_idle.get(k) or 0) - v) > 0.5
                                for k, v in ref_idle.items()))
                for impl in IMPLS:
                    rows.append({"case": case, "impl": impl, "mb": mb, "events": events,
                                 **med[impl], "wrong": wrong if impl == "distlab" else 0})
                speed = med["hta"]["seconds"] / med["distlab"]["seconds"]
                cpu = med["hta"]["cpu_seconds"] / med["distlab"]["cpu_seconds"]
                mem = med["distlab"]["peak_mb"] / med["hta"]["peak_mb"]
                verdict = "met" if speed >= 3 and mem <= 0.5 else "MISSED"
                tail.append(f"{case}: distlab {speed:.1f}x faster (wall; CPU {cpu:.1f}x), "
                            f"peak memory {mem:.2f} of HTA's (targets: >= 3x, <= 0.5: "
                            f"{verdict})")
        failed = "distlab's idle time differs from HTA's" if any(r["wrong"] for r in rows) else ""
        return Report([Table(rows, COLUMNS)],
                      head=[f"trace: source {c.source}; single {c.mb} MB; {c.ranks} ranks x "
                            f"{c.rank_mb} MB; repeats {c.repeats}"], tail=tail, failed=failed)


BENCHMARK = TraceBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench trace``; exit 1 when distlab's idle time differs from HTA's."""
    return run_cli(BENCHMARK, argv)


if __name__ == "__main__":
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        print(json.dumps(child(sys.argv[i + 1], sys.argv[i + 2])))
    else:
        raise SystemExit(main())
