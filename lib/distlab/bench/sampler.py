"""Benchmark: one rank's epoch of indices, distlab's samplers against torch's DistributedSampler.

    python -m distlab.bench sampler --n 100000000 --world-size 8 --prefetch
    python -m distlab.bench sampler --n 10000000000 --impl permutation  # torch: <= --torch-max-n
    python -m distlab.bench sampler --n 1000000 --world-size 8 --repeats 3 \\
        --json results/sampler.json

Each implementation runs in a fresh child process (``python -m distlab.bench.sampler --child ...``),
so its peak resident memory (``ru_maxrss`` of that process) belongs to it alone. A child imports
torch, warms up on a tiny sampler, records its resident memory (``base``), then times building the
sampler and iterating rank ``--rank``'s whole epoch, hashing the indices 64 Ki at a time (the same
consumer for both), and reports wall time, CPU time (user + system of the child, steadier than wall
time on a busy machine) and its peak RSS. The parent prints one row per implementation and the
ratios; ``#wrong`` is 1 when distlab's indices differ from torch's. Timings are the median over
``--repeats`` child pairs, peak RSS the largest.

``--impl`` picks distlab's implementations (``distlab``: the torch-identical DistributedSampler,
``permutation``: the constant-memory PermutationSampler, whose order differs from torch's by
design, so only its count is checked). ``start(s)`` is the epoch-start latency: after the timed
epoch, ``set_epoch(epoch + 1)`` and the time until the first index of the next epoch; with
``--prefetch`` distlab's DistributedSampler precomputes that order while the epoch is consumed.
Torch is skipped when ``--n`` exceeds ``--torch-max-n`` (its memory grows by ~50 bytes a sample).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
from torch.utils.data import DistributedSampler as TorchSampler

from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.cli import options
from distlab.report.table import Column, Table
from distlab.report.words import times
from distlab.samplers import DistributedSampler, PermutationSampler

__all__ = ["BENCHMARK", "COLUMNS", "SamplerBenchmark", "SamplerConfig", "child", "main",
           "ratio_lines"]

IMPLS = ("torch", "distlab", "permutation")
_CHUNK = 1 << 16

COLUMNS = (Column("impl", "impl", width=11), Column("count", "count", width=12),
           Column("time(s)", "seconds", ".3f"), Column("cpu(s)", "cpu_seconds", ".3f"),
           Column("peakRSS(MB)", "peak_rss_mb", ".1f"), Column("baseRSS(MB)", "base_rss_mb", ".1f"),
           Column("start(s)", "start_seconds", ".4f"), Column("#wrong", "wrong"))


def _rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (1e6 bytes); Linux reports KiB."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024 / 1e6


def _make(impl: str, n: int, world: int, rank: int, shuffle: bool, seed: int,
          drop_last: bool, prefetch: bool = False) -> Any:
    if impl == "torch":
        return TorchSampler(range(n), world, rank, shuffle, seed, drop_last)
    if impl == "permutation":
        return PermutationSampler(n, world, rank, shuffle, seed, drop_last)
    return DistributedSampler(n, world, rank, shuffle, seed, drop_last,
                              prefetch_next_epoch=prefetch)


def _consume(indices: Iterable[int]) -> tuple[int, str]:
    """Count and SHA-256 (of little-endian int64) of the indices, 64 Ki at a time."""
    h = hashlib.sha256()
    count = 0
    it = iter(indices)
    while chunk := list(islice(it, _CHUNK)):
        h.update(np.asarray(chunk, dtype="<i8").tobytes())
        count += len(chunk)
    return count, h.hexdigest()


def child(impl: str, n: int, world: int, rank: int, shuffle: bool, seed: int, epoch: int,
          drop_last: bool, prefetch: bool = False) -> dict[str, Any]:
    """Run inside the child: warm up, time one epoch, then the next epoch's first index."""
    warm = _make(impl, 1000, world, rank, shuffle, seed, drop_last)
    _consume(warm)
    base = _rss_mb()
    start, cpu_start = time.perf_counter(), time.process_time()
    sampler = _make(impl, n, world, rank, shuffle, seed, drop_last, prefetch)
    sampler.set_epoch(epoch)
    count, digest = _consume(sampler)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    sampler.set_epoch(epoch + 1)
    t0 = time.perf_counter()
    next(iter(sampler), None)
    latency = time.perf_counter() - t0
    if hasattr(sampler, "close"):
        sampler.close()
    return {"impl": impl, "seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": _rss_mb(),
            "base_rss_mb": base, "count": count, "sha256": digest, "start_seconds": latency}


@dataclass(frozen=True)
class SamplerConfig(BenchConfig):
    """Options of ``python -m distlab.bench sampler``."""

    n: int = opt(10_000_000, "--n", type=options.nonnegative_int, help="dataset length")
    world_size: int = opt(8, "--world-size", type=options.positive_int, help="num_replicas")
    rank: int = opt(0, "--rank", type=options.nonnegative_int,
                    help="the rank whose epoch is produced, < --world-size")
    seed: int = opt(0, "--seed", type=options.nonnegative_int, help="sampler seed")
    epoch: int = opt(0, "--epoch", type=options.nonnegative_int, help="the timed epoch")
    no_shuffle: bool = opt(False, "--no-shuffle", action="store_true", help="shuffle=False")
    drop_last: bool = opt(False, "--drop-last", action="store_true", help="drop_last=True")
    impl: tuple[str, ...] = opt(("distlab",), "--impl", type=options.comma_choices(IMPLS[1:]),
                                help="distlab implementations to run beside torch (comma list "
                                     "or all)")
    prefetch: bool = opt(False, "--prefetch", action="store_true",
                         help="distlab: prefetch_next_epoch=True (epoch-start latency)")
    torch_max_n: int = opt(300_000_000, "--torch-max-n", type=options.nonnegative_int,
                           help="skip torch (and the distlab DistributedSampler) above this --n")
    repeats: int = opt(1, "--repeats", type=options.positive_int,
                       help="child rounds to run (median time)")

    @property
    def impls(self) -> list[str]:
        """The implementations run: torch and distlab's only up to ``torch_max_n``."""
        big = self.n > self.torch_max_n
        return [i for i in IMPLS if i == "permutation" and i in self.impl
                or not big and (i == "torch" or i in self.impl)]


def _run_child(impl: str, c: SamplerConfig) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "distlab.bench.sampler", "--child", impl, "--n", str(c.n),
           "--world-size", str(c.world_size), "--rank", str(c.rank), "--seed", str(c.seed),
           "--epoch", str(c.epoch)]
    cmd += ["--no-shuffle"] if c.no_shuffle else []
    cmd += ["--drop-last"] if c.drop_last else []
    cmd += ["--prefetch"] if c.prefetch else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the {impl} child failed (exit {proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per implementation: median times, largest peak RSS, and ``wrong`` (1 when its indices
    differ from torch's; the permutation sampler's order differs by design: count only)."""
    summary = {impl: {"impl": impl,
                      "seconds": statistics.median(r["seconds"] for r in rs),
                      "cpu_seconds": statistics.median(r["cpu_seconds"] for r in rs),
                      "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                      "base_rss_mb": statistics.median(r["base_rss_mb"] for r in rs),
                      "count": rs[0]["count"],
                      "start_seconds": statistics.median(r["start_seconds"] for r in rs),
                      "wrong": 0}
               for impl, rs in runs.items()}
    if "torch" in runs:
        reference = {(r["count"], r["sha256"]) for r in runs["torch"]}
        counts = {c for c, _ in reference}
        for impl, rs in runs.items():
            bad = [r for r in rs if ((r["count"], r["sha256"]) not in reference
                                     if impl != "permutation" else r["count"] not in counts)]
            summary[impl]["wrong"] = int(bool(bad))
    return summary


def _ratios(t: dict[str, Any], d: dict[str, Any]) -> dict[str, float | None]:
    extra_t, extra_d = t["peak_rss_mb"] - t["base_rss_mb"], d["peak_rss_mb"] - d["base_rss_mb"]
    return {"speedup": t["seconds"] / d["seconds"] if d["seconds"] > 0 else float("inf"),
            "cpu_speedup": (t["cpu_seconds"] / d["cpu_seconds"] if d["cpu_seconds"] > 0
                            else float("inf")),
            "peak_rss": t["peak_rss_mb"] / d["peak_rss_mb"],
            "extra_rss": extra_t / extra_d if extra_d >= 1.0 else None}


def ratio_lines(impl: str, r: dict[str, float | None]) -> list[str]:
    """Two comment lines of :func:`_ratios`' ratios of ``impl`` against torch (each under 100
    characters for the benchmark's implementations): time and peak memory, then memory growth
    above the post-import baseline."""
    extra = r["extra_rss"]
    growth = (f"{times(extra, 'less', 'more')} growth above the post-import baseline"
              if extra is not None
              else f"{impl}'s growth above the post-import baseline is below 1 MB")
    return [f"{impl} vs torch: {times(r['speedup'], 'faster', 'slower')}, "
            f"{times(r['cpu_speedup'], 'less', 'more')} CPU time, "
            f"{times(r['peak_rss'], 'less', 'more')} peak RSS",
            f"{impl} vs torch: {growth}"]


class SamplerBenchmark(Benchmark[SamplerConfig]):
    """One rank's epoch of indices: distlab's samplers against torch's."""

    name = "sampler"
    about = "one rank's epoch of indices: distlab's DistributedSampler vs torch's"
    config_type = SamplerConfig

    def check(self, parser: argparse.ArgumentParser, config: SamplerConfig) -> SamplerConfig:
        if config.rank >= config.world_size:
            options.fail(parser, "--rank", config.rank,
                         f"in [0, {config.world_size - 1}] (< --world-size)")
        if not config.impls:
            options.fail(parser, "--n", config.n, f"<= --torch-max-n ({config.torch_max_n}) "
                         "unless --impl includes permutation")
        return config

    def run(self, config: SamplerConfig) -> Report:
        c = config
        runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in c.impls}
        for _ in range(c.repeats):
            for impl in c.impls:
                runs[impl].append(_run_child(impl, c))
        summary = _summary(runs)
        ratios = {impl: _ratios(summary["torch"], summary[impl])
                  for impl in c.impls if impl != "torch" and "torch" in summary}
        big = c.n > c.torch_max_n
        head = [f"sampler: n={c.n} world_size={c.world_size} rank={c.rank} "
                f"shuffle={not c.no_shuffle} drop_last={c.drop_last} seed={c.seed}",
                f"epoch={c.epoch} repeats={c.repeats} prefetch={c.prefetch}"
                + (f" (torch skipped: n > --torch-max-n {c.torch_max_n})" if big else "")]
        rows = list(summary.values())
        wrong = [r["impl"] for r in rows if r["wrong"]]
        return Report([Table(rows, COLUMNS)], head,
                      [line for i, r in ratios.items() for line in ratio_lines(i, r)],
                      {"runs": runs, "ratios": ratios},
                      failed=f"indices differ from torch's: {', '.join(wrong)}" if wrong else "",
                      world_size=c.world_size)


BENCHMARK = SamplerBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench sampler``; exit 1 when distlab's indices differ from torch's."""
    return run_cli(BENCHMARK, argv)


def _child_main(argv: list[str]) -> int:
    """``python -m distlab.bench.sampler --child IMPL ...``: one measured child (JSON line)."""
    p = argparse.ArgumentParser(prog="python -m distlab.bench.sampler --child")
    p.add_argument("--child", choices=IMPLS, required=True)
    for name in ("--n", "--world-size", "--rank", "--seed", "--epoch"):
        p.add_argument(name, type=int, required=True)
    for name in ("--no-shuffle", "--drop-last", "--prefetch"):
        p.add_argument(name, action="store_true")
    a = p.parse_args(argv)
    print(json.dumps(child(a.child, a.n, a.world_size, a.rank, not a.no_shuffle, a.seed,
                           a.epoch, a.drop_last, a.prefetch)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]) if "--child" in sys.argv else main())
