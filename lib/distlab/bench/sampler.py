"""Benchmark: one rank's epoch of indices, distlab's samplers against torch's DistributedSampler.

    python -m distlab.bench sampler --n 100000000 --world-size 8 --prefetch
    python -m distlab.bench sampler --n 10000000000 --impl permutation   # torch skipped above --torch-max-n
    python -m distlab.bench sampler --n 1000000 --world-size 8 --repeats 3 --json results/sampler.json

Each implementation runs in a fresh child process (``python -m distlab.bench.sampler --child
...``), so its peak resident memory (``ru_maxrss`` of that process) belongs to it alone. A child
imports torch, warms up on a tiny sampler, records its resident memory (``base``), then times
building the sampler and iterating rank ``--rank``'s whole epoch, hashing the indices 64 Ki at a time
(the same consumer for both), and reports wall time, CPU time (user + system of the child, steadier
than wall time on a busy machine) and its peak RSS. The parent prints one row per
implementation and the ratios; ``#wrong`` is 1 when distlab's indices differ from torch's.
Timings are the median over ``--repeats`` child pairs, peak RSS the largest.

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
from itertools import islice
from typing import Any

IMPLS = ("torch", "distlab", "permutation")
_CHUNK = 1 << 16


def _rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (1e6 bytes); Linux reports KiB."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib * 1024 / 1e6


def _make(impl: str, n: int, world: int, rank: int, shuffle: bool, seed: int,
          drop_last: bool, prefetch: bool = False) -> Any:
    if impl == "torch":
        from torch.utils.data import DistributedSampler as TorchSampler

        return TorchSampler(range(n), world, rank, shuffle, seed, drop_last)
    if impl == "permutation":
        from distlab.samplers import PermutationSampler

        return PermutationSampler(n, world, rank, shuffle, seed, drop_last)
    from distlab.samplers import DistributedSampler

    return DistributedSampler(n, world, rank, shuffle, seed, drop_last,
                              prefetch_next_epoch=prefetch)


def _consume(indices: Iterable[int]) -> tuple[int, str]:
    """Count and SHA-256 (of little-endian int64) of the indices, 64 Ki at a time."""
    import numpy as np

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


def _run_child(impl: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "distlab.bench.sampler", "--child", impl, "--n", str(args.n),
           "--world-size", str(args.world_size), "--rank", str(args.rank), "--seed",
           str(args.seed), "--epoch", str(args.epoch)]
    cmd += ["--no-shuffle"] if args.no_shuffle else []
    cmd += ["--drop-last"] if args.drop_last else []
    cmd += ["--prefetch"] if args.prefetch else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the {impl} child failed (exit {proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _parser() -> argparse.ArgumentParser:
    from distlab.bench import options

    p = options.parser("python -m distlab.bench sampler", __doc__)
    p.add_argument("--n", type=options.nonnegative_int, default=10_000_000, help="dataset length")
    p.add_argument("--world-size", type=options.positive_int, default=8, help="num_replicas")
    p.add_argument("--rank", type=options.nonnegative_int, default=0,
                   help="the rank whose epoch is produced, < --world-size")
    p.add_argument("--seed", type=options.nonnegative_int, default=0, help="sampler seed")
    p.add_argument("--epoch", type=options.nonnegative_int, default=0, help="the timed epoch")
    p.add_argument("--no-shuffle", action="store_true", help="shuffle=False")
    p.add_argument("--drop-last", action="store_true", help="drop_last=True")
    p.add_argument("--impl", type=options.comma_choices(IMPLS[1:]), default=["distlab"],
                   help="distlab implementations to run beside torch (comma list or all)")
    p.add_argument("--prefetch", action="store_true",
                   help="distlab: prefetch_next_epoch=True (epoch-start latency)")
    p.add_argument("--torch-max-n", type=options.nonnegative_int, default=300_000_000,
                   help="skip torch (and the distlab DistributedSampler) above this --n")
    p.add_argument("--repeats", type=options.positive_int, default=1,
                   help="child rounds to run (median time)")
    p.add_argument("--json", metavar="PATH", help="also write the results with provenance")
    p.add_argument("--child", choices=IMPLS, help=argparse.SUPPRESS)
    return p


def _validate(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from distlab.bench import options

    if args.rank >= args.world_size:
        options.fail(p, "--rank", args.rank, f"in [0, {args.world_size - 1}] (< --world-size)")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns 0 when distlab's indices equal torch's, 1 otherwise."""
    parser = _parser()
    args = parser.parse_args(argv)
    _validate(parser, args)
    if args.child:
        res = child(args.child, args.n, args.world_size, args.rank, not args.no_shuffle,
                    args.seed, args.epoch, args.drop_last, args.prefetch)
        print(json.dumps(res))
        return 0

    big = args.n > args.torch_max_n
    impls = [i for i in IMPLS if i == "permutation" and i in args.impl
             or not big and (i == "torch" or i in args.impl)]
    if not impls:
        from distlab.bench import options

        options.fail(parser, "--n", args.n, f"<= --torch-max-n ({args.torch_max_n}) unless "
                     "--impl includes permutation")
    runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for _ in range(args.repeats):
        for impl in impls:
            runs[impl].append(_run_child(impl, args))
    summary = {}
    for impl in impls:
        summary[impl] = {
            "seconds": statistics.median(r["seconds"] for r in runs[impl]),
            "cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs[impl]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[impl]),
            "base_rss_mb": statistics.median(r["base_rss_mb"] for r in runs[impl]),
            "count": runs[impl][0]["count"],
            "start_seconds": statistics.median(r["start_seconds"] for r in runs[impl]),
        }
    wrong = 0
    if "torch" in runs:
        reference = {(r["count"], r["sha256"]) for r in runs["torch"]}
        counts = {c for c, _ in reference}
        for impl in impls:  # permutation: a different order by design, so only the count
            bad = [r for r in runs[impl] if ((r["count"], r["sha256"]) not in reference
                                             if impl != "permutation" else r["count"] not in counts)]
            summary[impl]["wrong"] = int(bool(bad))
            wrong |= int(bool(bad))
    else:
        for impl in impls:
            summary[impl]["wrong"] = 0

    print(f"# sampler: n={args.n} world_size={args.world_size} rank={args.rank} "
          f"shuffle={not args.no_shuffle} drop_last={args.drop_last} seed={args.seed} "
          f"epoch={args.epoch} repeats={args.repeats} prefetch={args.prefetch}"
          + (f" (torch skipped: n > --torch-max-n {args.torch_max_n})" if big else ""))
    print(f"{'impl':>11} {'count':>12} {'time(s)':>9} {'cpu(s)':>8} {'peakRSS(MB)':>12} "
          f"{'baseRSS(MB)':>12} {'start(s)':>9} {'#wrong':>7}")
    for impl in impls:
        s = summary[impl]
        print(f"{impl:>11} {s['count']:>12} {s['seconds']:>9.3f} {s['cpu_seconds']:>8.3f} "
              f"{s['peak_rss_mb']:>12.1f} {s['base_rss_mb']:>12.1f} "
              f"{s['start_seconds']:>9.4f} {s['wrong']:>7}")
    speedup = cpu_speedup = memory = extra = None
    for impl in [i for i in impls if i != "torch" and "torch" in summary]:
        speedup, cpu_speedup, memory, extra = _ratios(impl, summary["torch"], summary[impl])
    if args.json:
        from distlab.bench.provenance import provenance, write_json

        payload = {"benchmark": "sampler", "parameters": vars(args) | {"child": None},
                   "results": summary, "runs": runs,
                   "ratios": {"speedup": speedup, "cpu_speedup": cpu_speedup,
                              "peak_rss": memory, "extra_rss": extra},
                   "provenance": provenance(world_size=args.world_size)}
        write_json(args.json, payload)
        print(f"# wrote {args.json}")
    return 1 if wrong else 0


def _ratios(impl: str, t: dict[str, Any], d: dict[str, Any]) -> tuple[float, float, float,
                                                                        float | None]:
    speedup = t["seconds"] / d["seconds"] if d["seconds"] > 0 else float("inf")
    cpu_speedup = t["cpu_seconds"] / d["cpu_seconds"] if d["cpu_seconds"] > 0 else float("inf")
    memory = t["peak_rss_mb"] / d["peak_rss_mb"]
    extra_t, extra_d = t["peak_rss_mb"] - t["base_rss_mb"], d["peak_rss_mb"] - d["base_rss_mb"]
    extra = extra_t / extra_d if extra_d >= 1.0 else None
    above = (f"{extra:.2f}x less above the post-import baseline" if extra is not None else
             "distlab's growth above the post-import baseline is below 1 MB")
    print(f"# {impl} vs torch: {speedup:.2f}x faster ({cpu_speedup:.2f}x less CPU time), "
          f"{memory:.2f}x less peak RSS ({above})")
    return speedup, cpu_speedup, memory, extra


if __name__ == "__main__":
    raise SystemExit(main())
