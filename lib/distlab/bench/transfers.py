"""Transfer benchmark: disk -> pageable -> pinned -> GPU copies, each path its own row.

    python -m distlab.bench transfers -b 4K -e 256M -f 4 --paths all --memory pageable,pinned \\
        --repeats 5 --json results/transfers_<device>.json
    python -m distlab.bench transfers --preset shmoo      # bandwidthTest's shmoo sizes

Method: warm-up copies, then ``--repeats`` timings of ``--iters`` copies; pageable copies are timed
per copy on the host, pinned/device copies as an event-timed burst behind a spin kernel. The
median is reported; every copy's bytes are checked afterwards (#wrong). GB/s = 1e9 B/s.
``model GB/s`` is the per-path fit ``t = latency + n / bandwidth``; ``error%`` = (measured -
model) / model. ``numpy_copyto`` is a plain ``numpy.copyto`` timed the same way in the same run
(the harness-overhead reference for ``h2h``). Rows that cannot be measured here (no GPU, no
pinned memory, page cache that cannot be dropped) are printed and written with null times and the
reason in ``skipped``: no number is ever invented.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from tqdm import tqdm

from distlab.bench import options
from distlab.bench.provenance import provenance, write_json
from distlab.transfers.adapter import default_adapter
from distlab.transfers.model import pcie_link
from distlab.transfers.paths import COPY_PATHS, DISK_PATHS, PIN_PATHS, ROW_KINDS
from distlab.transfers.sweep import FIT_MIN_BYTES, Row, fit_rows, pin_rows, sweep

__all__ = ["main", "parse_args", "shmoo_sizes", "run_benchmark", "PATH_NAMES"]

PATH_NAMES = list(dict.fromkeys([p for p, _ in ROW_KINDS] + list(PIN_PATHS)))
MEMORIES = ["pageable", "pinned", "device"]
H2H_TARGET = 0.20        # h2h within 20% of numpy.copyto at 16 MiB
MODEL_TARGET = 0.10      # fitted line within 10% at sizes >= 64 KiB


def shmoo_sizes() -> list[int]:
    """bandwidthTest's shmoo sizes (decimal units): 1 kB steps to 20 kB, 2 kB to 50 kB, 10 kB to
    100 kB, 100 kB to 1 MB, 1 MB to 16 MB, 2 MB to 32 MB, 4 MB to 64 MB."""
    steps = [(20e3, 1e3), (50e3, 2e3), (100e3, 10e3), (1e6, 100e3), (16e6, 1e6), (32e6, 2e6),
             (64e6, 4e6)]
    out, size = [], 0.0
    for limit, step in steps:
        while size < limit:
            size += step
            out.append(int(size))
    return out


def _parse(argv: list[str]) -> argparse.Namespace:
    p = options.parser("python -m distlab.bench transfers", __doc__)
    p.add_argument("-b", "--minbytes", type=options.size_bytes, default=4096, help="smallest size")
    p.add_argument("-e", "--maxbytes", type=options.size_bytes, default=256 * 2**20,
                   help="largest size")
    p.add_argument("-f", "--stepfactor", type=options.int_at_least(2), default=4,
                   help="size multiplier between steps")
    p.add_argument("--preset", choices=("sweep", "shmoo"), default="sweep",
                   help="sweep: -b/-e/-f; shmoo: bandwidthTest's shmoo sizes (1 kB .. 64 MB)")
    p.add_argument("--paths", type=options.comma_choices(PATH_NAMES), default=list(PATH_NAMES),
                   help="comma list of paths, or 'all'")
    p.add_argument("--memory", type=options.comma_choices(MEMORIES), default=list(MEMORIES),
                   help="comma list of memory kinds, or 'all'")
    p.add_argument("--repeats", type=options.positive_int, default=5, help="timed repeats")
    p.add_argument("--iters", type=options.positive_int, default=10,
                   help="copies per repeat (burst length for event-timed copies)")
    p.add_argument("--warmup", type=options.nonnegative_int, default=2, help="untimed copies")
    p.add_argument("--prefetch-batches", type=options.nonnegative_int, default=10,
                   help="batches for the sequential-vs-prefetch loops (0: skip them)")
    p.add_argument("--batch-bytes", type=options.size_bytes, default=16 * 2**20,
                   help="bytes per prefetched batch")
    p.add_argument("--compute-ms", type=options.positive_float, default=5.0,
                   help="compute per batch in the prefetch loops (a sleep on the host, a spin "
                        "kernel on a GPU), ms")
    p.add_argument("--json", default=None, help="write rows + provenance to this JSON file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    a = p.parse_args(argv)
    if a.maxbytes < a.minbytes:
        options.fail(p, "-e/--maxbytes", a.maxbytes, f">= -b/--minbytes ({a.minbytes})")
    a.sizes = shmoo_sizes() if a.preset == "shmoo" else \
        options.size_sweep(a.minbytes, a.maxbytes, a.stepfactor)
    a.kinds = [(pth, m) for pth, m in ROW_KINDS if pth in a.paths and m in a.memory]
    a.pins = [pth for pth in PIN_PATHS if pth in a.paths and "pinned" in a.memory]
    if not a.kinds and not a.pins:
        options.fail(p, "--paths/--memory", f"{','.join(a.paths)} / {','.join(a.memory)}",
                     "a combination that selects at least one row (e.g. h2h with pageable)")
    return a


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The Namespace :func:`run_benchmark` takes, from this command's options (``["-b", "4K"]``);
    a bad option exits 2 with one line, as on the command line."""
    return _parse(list(argv))


def _error(r: Row) -> float | None:
    if r.gbps is None or r.model_gbps is None:
        return None
    return (r.gbps - r.model_gbps) / r.model_gbps


def _targets(rows: list[Row]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    at = {(r.path, r.nbytes): r for r in rows if r.gbps is not None}
    size = 16 * 2**20
    h2h, ref = at.get(("h2h", size)), at.get(("numpy_copyto", size))
    if h2h and ref:
        ratio = h2h.gbps / ref.gbps
        out["h2h_vs_copyto_16MiB"] = {"h2h_gbps": h2h.gbps, "copyto_gbps": ref.gbps,
                                      "ratio": ratio, "met": abs(ratio - 1) <= H2H_TARGET}
    errs: dict[str, float] = {}
    for r in rows:
        e = _error(r)
        if e is not None and r.nbytes >= FIT_MIN_BYTES:
            key = f"{r.path}/{r.memory}"
            errs[key] = max(errs.get(key, 0.0), abs(e))
    out["model_max_error_ge_64KiB"] = {k: {"max_error": v, "met": v <= MODEL_TARGET}
                                       for k, v in errs.items()}
    return out


def _prefetch(adapter: Any, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Sequential and double-buffered loops (pinned memory when there is any, else pageable);
    ``efficiency`` = the model's time / measured wall (1.0: at the bound)."""
    memory = "pageable" if adapter.unavailable("pinned") else "pinned"
    if adapter.name == "cuda":
        from distlab.transfers.cuda_prefetch import run_cuda as runner
    else:
        from distlab.transfers.prefetch import run_loop as runner
    out = []
    for mode in ("sequential", "prefetch"):
        r = runner(adapter, mode=mode, batches=a.prefetch_batches, nbytes=a.batch_bytes,
                   compute_s=a.compute_ms / 1e3, memory=memory)
        out.append({**r.as_dict(), "efficiency": r.model_s / r.wall_s})
    return out


def run_benchmark(a: argparse.Namespace) -> dict[str, Any]:
    """Measure the selected rows; returns ``{rows, fits, targets, adapter, link}``."""
    adapter = default_adapter()
    total = len(a.sizes) * len(a.kinds)
    with tqdm(total=total, desc="transfers", file=sys.stderr, leave=False,
              disable=a.no_progress) as bar:
        rows = sweep(adapter, a.sizes, a.kinds, repeats=a.repeats, warmup=a.warmup,
                     iters=a.iters, progress=lambda: bar.update(1))
    pins = [r for r in pin_rows(adapter, a.sizes, repeats=min(a.repeats, 3)) if r.path in a.pins]
    fits = fit_rows(rows)
    link = pcie_link()
    loops = _prefetch(adapter, a) if a.prefetch_batches else []
    return {"rows": [r.as_dict() for r in rows + pins],
            "fits": {f"{p}/{m}": vars(f) for (p, m), f in fits.items()},
            "prefetch": loops, "targets": _targets(rows), "adapter": adapter.describe(),
            "pcie_link": None if link is None else {"gen": link[0], "width": link[1]}}


def _fmt(v: float | None, spec: str) -> str:
    width = int(spec.split(".")[0])
    return "-".rjust(width) if v is None or not math.isfinite(v) else format(v, spec)


def _print(payload: dict[str, Any]) -> None:
    print(f"# adapter: {payload['adapter']['adapter']}; GB = 1e9 B; median of repeats")
    print(f"{'size(B)':>12} {'path':>20} {'memory':>9} {'time(us)':>11} {'GB/s':>8} "
          f"{'model GB/s':>10} {'error%':>7} {'#wrong':>6}")
    reasons: dict[str, int] = {}
    for r in payload["rows"]:
        e = _error(Row(**r))
        note = ""
        if r["skipped"]:
            note = f"  skipped [{reasons.setdefault(r['skipped'], len(reasons) + 1)}]"
        print(f"{r['nbytes']:>12} {r['path']:>20} {r['memory']:>9} {_fmt(r['time_us'], '11.2f')} "
              f"{_fmt(r['gbps'], '8.2f')} {_fmt(r['model_gbps'], '10.2f')} "
              f"{_fmt(None if e is None else 100 * e, '7.1f')} "
              f"{'-' if r['wrong'] is None else r['wrong']:>6}{note}")
    for reason, k in reasons.items():
        print(f"# skipped [{k}]: {reason}")
    for r in payload.get("prefetch", []):
        print(f"# {r['mode']:>10} loop ({r['memory']}, {r['batches']} x {r['nbytes']} B, compute "
              f"{r['compute_s'] * 1e3:.2f} ms, copy {r['copy_s'] * 1e3:.2f} ms per batch): wall "
              f"{r['wall_s'] * 1e3:.1f} ms, model {r['model_s'] * 1e3:.1f} ms, efficiency "
              f"{r['efficiency']:.2f}, #wrong {r['wrong']}")
    t = payload["targets"]
    if "h2h_vs_copyto_16MiB" in t:
        h = t["h2h_vs_copyto_16MiB"]
        print(f"# target h2h vs numpy.copyto at 16 MiB: {h['h2h_gbps']:.2f} / "
              f"{h['copyto_gbps']:.2f} GB/s = {h['ratio']:.3f} (within 20%: {h['met']})")
    for k, v in t["model_max_error_ge_64KiB"].items():
        print(f"# target model error <= 10% at >= 64 KiB, {k}: max {100 * v['max_error']:.1f}% "
              f"({'met' if v['met'] else 'NOT met'})")


def main(argv: list[str] | None = None) -> int:
    a = _parse(list(sys.argv[1:] if argv is None else argv))
    payload = run_benchmark(a)
    _print(payload)
    if a.json:
        path = write_json(a.json, {"provenance": provenance(world_size=1,
                                   sizes=a.sizes, paths=a.paths, memory=a.memory,
                                   repeats=a.repeats, iters=a.iters), **payload})
        print(f"# wrote {path}")
    return 0
