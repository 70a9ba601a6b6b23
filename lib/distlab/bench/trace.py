"""Benchmark: reading and breaking down torch.profiler traces, distlab against HTA 0.5.0.

    python -m distlab.bench trace                       # folders of 8 ranks: 100 MB and 1 GB
    python -m distlab.bench trace --sizes 100 --ranks 8 --workers 2 --repeats 3 --json out.json

The traces are made from a real one (``--source``, default HTA's published A100 trace
``results/traces/hta_a100_2ranks_rank0``): its events are replicated, each copy shifted by the
trace's span, with ``correlation``/``External id`` and ``ProfilerStep#N`` renumbered so copies never
collide, until the file holds its share of the size (uncompressed JSON, as both tools read it; the
last copy is cut where the size is reached). Each ``--sizes`` entry (MB in all) is a folder of
``--ranks`` such files, ranks 0..N-1. They are written to a temporary folder (removed afterwards;
``TMPDIR`` picks where: 1 GB of traces needs 1 GB of disk).

Each implementation runs in a fresh child process (``python -m distlab.bench.trace --child``):
``distlab`` = :func:`distlab.trace.torch_trace.read_run` (a process pool of ``--workers``, default
every core this process may use) + :func:`~distlab.trace.breakdown.analyze_run` (temporal
breakdown, overlap, idle time by stream and idle causes, per rank and per step) +
:func:`~distlab.trace.collectives.match_collectives`; ``hta`` = ``TraceAnalysis(trace_dir)`` (its
own process pool over the ranks) + ``get_temporal_breakdown`` + ``get_comm_comp_overlap`` +
``get_idle_time_breakdown`` (all ranks).
Time is the child's wall time for that work (imports excluded); peak memory is the largest sum of
resident memory (PSS: shared pages counted once) over the child and its own children (both tools
parse ranks in process pools), sampled every 50 ms from this process (so the child runs no extra
thread) and never below the child's own ``ru_maxrss``, minus the child's resident memory before the
work. Medians over ``--repeats``. Targets: distlab >= 3x faster and <= 1/2 of HTA's peak memory at
each size; the lines under the table say whether each was met. ``#wrong``: 1 where distlab's idle
time differs from HTA's by more than 0.5 us in any of HTA's idle categories, else 0 (the run then
exits 1). A trace is never smaller than one copy of the source: where a size asks for less, the
table's MB column says what was written and a line says why.
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
from distlab.vocabulary import size_in

__all__ = ["BENCHMARK", "TraceBenchConfig", "main", "replicate_trace"]

IMPLS = ("hta", "distlab")
_SOURCE = "results/traces/hta_a100_2ranks_rank0"
"""The default ``--source``: HTA's published A100 trace, committed under the repository root."""
COLUMNS = (Column("case", "case", width=20), Column("impl", "impl", width=8),
           Column("MB", "mb", ".1f"), Column("events", "events", width=9),
           Column("time(s)", "seconds", ".3f"), Column("cpu(s)", "cpu_seconds", ".3f"),
           Column("peak(MB)", "peak_mb", ".1f"), Column("#wrong", "wrong"))


def _sizes(text: str) -> tuple[float, ...]:
    """``--sizes``: MB > 0, comma-separated."""
    try:
        out = tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of MB, e.g. 100,1000") \
            from None
    if not out or not all(v > 0 and math.isfinite(v) for v in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every size must be a number of MB > 0")
    return out


@dataclass(frozen=True)
class TraceBenchConfig(BenchConfig):
    """Options of ``python -m distlab.bench trace``."""

    source: str = opt(_SOURCE, "--source", help="a real GPU trace file or folder (its first "
                                                "file) to replicate; the default is found from "
                                                "the current folder or the checkout distlab "
                                                "runs from")
    sizes: tuple[float, ...] = opt((100.0, 1000.0), "--sizes", type=_sizes,
                                   help="MB of JSON in each folder of traces, comma-separated")
    ranks: int = opt(8, "--ranks", type=options.positive_int, help="ranks (files) per folder")
    workers: int = opt(0, "--workers", type=int, help="distlab's processes reading the ranks "
                                                     "(0: every core this process may use)")
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
    """The trace document at ``source`` (a file, or a folder's first trace file), read by
    :func:`distlab.trace.kineto_file.load_kineto`; ValueError in one line when it is not a
    readable trace HTA can break down (GPU kernels needed). Read once for the option check and
    the run (the document is not modified)."""
    from distlab.trace.kineto_file import TraceReadError, load_kineto
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
        if not files:
            raise ValueError(f"the folder {str(source)!r} holds no .json or .json.gz trace")
        source = files[0]
    try:
        doc = load_kineto(source)
    except TraceReadError as exc:
        why = str(exc).removeprefix(f"{source}: ")
        if exc.kind == "format":
            raise ValueError(f"{str(source)!r} is JSON but not a trace ({why})") from None
        raise ValueError(f"{str(source)!r} is not a readable trace ({why})") from None
    events = doc["traceEvents"]
    if not any(isinstance(e.get("ts"), (int, float)) for e in events):
        raise ValueError(f"{str(source)!r} is JSON but not a trace (no timed traceEvents)")
    if not any(e.get("cat") == "kernel" for e in events):
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
    """Resident memory of ``proc`` and its children, MB: the sum of each one's proportional set
    size (PSS: a page shared by k processes counts 1/k in each, so pages a forked pool worker
    shares with its parent count once, for HTA's pool as for distlab's), the resident set size
    where the OS reports no PSS."""
    import psutil
    total = 0
    try:
        tree = [proc, *proc.children(recursive=True)]
    except psutil.Error:  # the child has just ended
        return 0.0
    for p in tree:
        try:
            mem = p.memory_full_info()
            total += getattr(mem, "pss", mem.rss)
        except psutil.Error:
            pass
    return total / 2**20


def child(impl: str, folder: str, workers: int = 0) -> dict[str, Any]:
    """Run ``impl`` on ``folder`` in this process, after a ``go`` line on stdin (``ready`` on
    stdout says the imports are done); wall and CPU seconds, own ``ru_maxrss``."""
    import logging
    import os
    import resource
    import warnings
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    if impl == "hta":
        from hta.trace_analysis import TraceAnalysis
    else:
        from distlab.trace.breakdown import analyze_run
        from distlab.trace.collectives import match_collectives
        from distlab.trace.torch_trace import read_run
    print("ready", flush=True)
    sys.stdin.readline()
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
        run = read_run(folder, workers=workers or None, progress=False)
        an = analyze_run(run)
        match_collectives(run)
        idle = {r: (a.whole.idle_us if a.whole else None) for r, a in an.items()}
    seconds = time.perf_counter() - t0
    ch1 = os.times()
    cpu = time.process_time() - c0 + (ch1.children_user - ch0.children_user) + \
        (ch1.children_system - ch0.children_system)
    return {"seconds": seconds, "cpu_seconds": cpu, "idle_us": idle,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _run_child(impl: str, folder: Path, workers: int = 0) -> dict[str, Any]:
    """:func:`child` in a fresh process, its tree's resident memory sampled from here."""
    import psutil
    proc = subprocess.Popen([sys.executable, "-m", "distlab.bench.trace", "--child", impl,
                             str(folder), str(workers)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        ready = proc.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"{impl} child failed: "
                               f"{(ready + proc.communicate()[1]).strip().splitlines()[-1:]}")
        me = psutil.Process(proc.pid)
        base = _tree_rss_mb(me)
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _tree_rss_mb(me))
                time.sleep(0.05)

        th = threading.Thread(target=sample, name="distlab-bench-rss", daemon=True)
        th.start()
        try:
            out, err = proc.communicate("go\n")
        finally:
            stop.set()
            th.join()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} child failed: {err.strip().splitlines()[-1:]}")
    res = json.loads(out.strip().splitlines()[-1])
    res["peak_mb"] = max(peak[0], res.pop("maxrss_mb")) - base
    return res


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
        if config.workers < 0:
            options.fail(parser, "--workers", config.workers, "0 (every core) or more")
        return config

    def run(self, config: TraceBenchConfig) -> Report:
        from distlab.trace.torch_trace import cores
        c = config
        doc = _load(source_path(c.source))
        rows: list[dict[str, Any]] = []
        tail: list[str] = []
        workers = c.workers or cores()
        for total in c.sizes:
            with tempfile.TemporaryDirectory(prefix="distlab_bench_trace_") as tmp:
                folder = Path(tmp)
                size, events = 0, 0
                for r in range(c.ranks):
                    sz, k = replicate_trace(doc, int(total * 1e6 / c.ranks),
                                            folder / f"rank{r}.pt.trace.json", rank=r,
                                            world_size=c.ranks)
                    size, events = size + sz, events + k
                case = f"{size_in(size, 'MB', '.0f')} {c.ranks} ranks"
                if size / 1e6 > 1.5 * total:
                    tail.append(f"{case}: holds {size_in(size, 'MB', '.1f')} where {total:g} MB "
                                "was asked: "
                                "one copy of the source is the least a trace holds")
                runs: dict[str, list[dict[str, Any]]] = {i: [] for i in IMPLS}
                for _ in range(c.repeats):
                    for impl in IMPLS:
                        runs[impl].append(_run_child(impl, folder, c.workers))
            med = {i: {k: statistics.median(r[k] for r in runs[i])
                       for k in ("seconds", "cpu_seconds")} | {
                "peak_mb": max(r["peak_mb"] for r in runs[i])} for i in IMPLS}
            ref_idle = runs["hta"][0]["idle_us"]
            got_idle = runs["distlab"][0]["idle_us"]
            wrong = int(any(abs((got_idle.get(k) or 0) - v) > 0.5 for k, v in ref_idle.items()))
            for impl in IMPLS:
                rows.append({"case": case, "impl": impl, "mb": size / 1e6, "events": events,
                             **med[impl], "wrong": wrong if impl == "distlab" else 0})
            speed = med["hta"]["seconds"] / med["distlab"]["seconds"]
            cpu = med["hta"]["cpu_seconds"] / med["distlab"]["cpu_seconds"]
            mem = med["distlab"]["peak_mb"] / med["hta"]["peak_mb"]
            verdict = "met" if speed >= 3 and mem <= 0.5 else "MISSED"
            tail.append(f"{case}: distlab {speed:.1f}x faster (wall; CPU {cpu:.1f}x), peak "
                        f"memory {mem:.2f} of HTA's (targets: >= 3x, <= 0.5: {verdict})")
        failed = "distlab's idle time differs from HTA's" if any(r["wrong"] for r in rows) else ""
        return Report([Table(rows, COLUMNS)],
                      head=[f"trace: source {c.source}; sizes "
                            f"{', '.join(f'{v:g}' for v in c.sizes)} MB; {c.ranks} ranks "
                            f"each; distlab workers {workers} of "
                            f"{cores()} cores; repeats {c.repeats}"],
                      tail=tail, failed=failed)


BENCHMARK = TraceBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench trace``; exit 1 when distlab's idle time differs from HTA's."""
    return run_cli(BENCHMARK, argv)


if __name__ == "__main__":
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        print(json.dumps(child(sys.argv[i + 1], sys.argv[i + 2],
                               int(sys.argv[i + 3]) if len(sys.argv) > i + 3 else 0)))
    else:
        raise SystemExit(main())
