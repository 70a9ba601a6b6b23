"""Transfer benchmark: disk -> pageable -> pinned -> GPU copies, each path its own row.

    python -m distlab.bench transfers -b 4K -e 256M -f 4 --paths copies --memory pageable,pinned \\
        --repeats 5 --json results/transfers_<device>.json
    python -m distlab.bench transfers --preset shmoo      # bandwidthTest's shmoo sizes
    python -m distlab.bench transfers --paths hops -b 4K -e 256M --hop-busy \\
        --json results/transfers_hop_cpu.json            # the hop between processes
    python -m distlab.bench transfers --paths peer,host-to-all -b 4 -e 256M   # a multi-GPU box
    python -m distlab.bench transfers --paths gpus --rehearse dgx_h100_like -e 4M  # its rehearsal

Method: warm-up copies, then ``--repeats`` timings of ``--iters`` copies; pageable copies are timed
per copy on the host, pinned/device copies as an event-timed burst behind a spin kernel. The median
is reported; every copy's bytes are checked afterwards (#wrong). GB/s = 1e9 B/s. ``model GB/s`` is
the per-path fit ``t = latency + n / bandwidth``; ``error%`` =
:func:`distlab.vocabulary.bandwidth_error_pct`, (model - measured) / measured GB/s: the error of the
copy's time, positive when it was slower than the model. ``numpy_copyto`` is a plain
``numpy.copyto`` timed the same way in the same run (the harness-overhead reference for ``h2h``).
Rows that cannot be measured here (no GPU, no pinned memory, page cache that cannot be dropped) are
printed and written with null times and the reason in ``skipped``: no number is ever invented. Pin
costs (``pin_memory``, the pinned caching allocator, ``cudaHostRegister``) are one-off times,
printed in their own table in us and us per MiB, never as GB/s.

The hop between processes (``--paths hops``, or any of ``hop_shm_fd``, ``hop_shm_fs``,
``hop_pickle``, ``hop_ring``, ``hop_cuda_ipc``; not in the default selection: it spawns a
worker process): ``n`` bytes from a worker process to this one, timed from the worker's
hand-over to the moment every byte is readable here (:mod:`distlab.transfers.hop`), one hop at a
time, median of ``--repeats`` after ``--warmup``; ``#wrong`` counts received bytes that differ
from what the worker wrote. ``--hop-busy`` adds rows ``<path>_busy`` where the worker keeps
computing after its hand-over. The hop's costs (its parts, an empty segment, a ring's set-up,
each path's first hop) are times in their own table, the worker's start-up a line of its own;
below the table each path's fit says up to which size the hop is a fixed cost and beyond which it
is a copy.

The multi-GPU paths (``--paths peer``, ``--paths host-to-all``, or ``gpus`` for both; not in the
default selection): every ordered GPU pair copying device to device, one way and both ways at
once, at ``-b`` bytes (latency) and ``-e`` bytes (bandwidth), as rows and as ``src x dst``
matrices labelled with each pair's ``nvidia-smi topo -m`` path; and every GPU copying ``-e``
bytes of pinned host memory at once, to the GPUs and back, with the host buffers on each GPU's
NUMA node and then on the other, per GPU and aggregate (:mod:`distlab.bench.gpu_paths`). Without
a GPU (or with one, for the pairs) each is one ``skipped`` line and the command exits 0.
``--rehearse BOX`` runs them on a fake box, host memory standing in for each GPU, every row
labelled rehearsal.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from distlab.bench.gpu_paths import GPU_PATHS, measure_gpu_paths
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.cli import options
from distlab.envinfo import pcie_links
from distlab.report.html import HtmlTable
from distlab.report.table import Column, Table, format_table
from distlab.transfers.cuda_prefetch import prefetch_runner
from distlab.transfers.default import default_adapter
from distlab.transfers.gpu_box import REHEARSAL_BOXES
from distlab.transfers.hop_paths import HOP_KINDS, HOP_PATHS
from distlab.transfers.hop_sweep import HopSweep, hop_sweep
from distlab.transfers.paths import PIN_PATHS, ROW_KINDS
from distlab.transfers.sweep import FIT_MIN_BYTES, Row, fit_rows, pin_rows, sweep
from distlab.vocabulary import ErrorSummary, bandwidth_error_pct

__all__ = ["BENCHMARK", "COLUMNS", "COMMENT_WIDTH", "PATH_NAMES", "PIN_COLUMNS",
           "TransfersBenchmark", "TransfersConfig", "main", "pin_table", "shmoo_sizes",
           "skip_notes", "targets", "transfer_html", "transfer_table", "wrap_lines"]

COPY_PATH_NAMES = list(dict.fromkeys([p for p, _ in ROW_KINDS] + list(PIN_PATHS)))
PATH_NAMES = COPY_PATH_NAMES + list(HOP_PATHS) + list(GPU_PATHS)
MEMORIES = ["pageable", "pinned", "device"]
H2H_TARGET = 0.20        # h2h within 20% of numpy.copyto at 16 MiB
MODEL_TARGET_PCT = 10.0  # fitted line within 10% at sizes >= 64 KiB
#: The widest comment line (without its ``# ``): a notebook shows at most 110 characters a line
#: before JupyterLab wraps it.
COMMENT_WIDTH = 108

COLUMNS = (Column("size(B)", "nbytes", width=12), Column("path", "path", width=20),
           Column("memory", "memory", width=9), Column("time(us)", "time_us", ".2f", width=11),
           Column("GB/s", "gbps", ".2f", width=8), Column("model GB/s", "model_gbps", ".2f"),
           Column("error%", "error_pct", "+.1f", width=7), Column("#wrong", "wrong"),
           Column("", "note", missing=""))
PIN_COLUMNS = (Column("size(B)", "nbytes", width=12), Column("method", "path", width=20),
               Column("time(us)", "time_us", ".2f", width=11),
               Column("us/MiB", "us_per_mib", ".2f", width=9), Column("", "note", missing=""))
HOP_PART_COLUMNS = (Column("size(B)", "nbytes", width=12), Column("path", "path", width=20),
                    Column("ready(us)", "ready_us", ".1f", width=10),
                    Column("handle(us)", "handle_us", ".1f", width=11),
                    Column("map(us)", "map_us", ".1f", width=9),
                    Column("segment(us)", "segment_us", ".1f", width=12),
                    Column("setup(us)", "setup_us", ".1f", width=10))


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


def wrap_lines(lines: Sequence[str], width: int = COMMENT_WIDTH) -> list[str]:
    """``lines`` with each one wider than ``width`` characters wrapped at word boundaries (the
    continuation indented by four spaces); nothing is cut."""
    return [part for line in lines
            for part in textwrap.wrap(line, width, subsequent_indent="    ",
                                      break_long_words=False, break_on_hyphens=False) or [""]]


HOP_PARTS_TITLE = ("hop parts: times, not bandwidths (medians, us): ready = worker moved the "
                   "bytes into shared memory / its ring slot; handle = then until get() "
                   "returned here; map = every page touched here; segment = an empty segment "
                   "made; setup = the ring made and sent, once")


@dataclass(frozen=True)
class TransfersConfig(BenchConfig):
    """Options of ``python -m distlab.bench transfers``."""

    minbytes: int = opt(4096, "-b", "--minbytes", type=options.size_bytes, help="smallest size")
    maxbytes: int = opt(256 * 2**20, "-e", "--maxbytes", type=options.size_bytes,
                        help="largest size")
    stepfactor: int = opt(4, "-f", "--stepfactor", type=options.int_at_least(2),
                          help="size multiplier between steps")
    preset: str = opt("sweep", "--preset", choices=("sweep", "shmoo"),
                      help="sweep: -b/-e/-f; shmoo: bandwidthTest's shmoo sizes (1 kB .. 64 MB)")
    paths: tuple[str, ...] = opt(tuple(COPY_PATH_NAMES), "--paths",
                                 type=options.comma_choices(
                                     PATH_NAMES, groups={"copies": COPY_PATH_NAMES,
                                                         "hops": list(HOP_PATHS),
                                                         "gpus": list(GPU_PATHS)}),
                                 help="comma list of paths, 'copies' (disk, copies between "
                                      "memory kinds, pin costs), 'hops' (every hop between "
                                      "processes), 'gpus' (peer: every GPU pair; host-to-all: "
                                      "every GPU fed at once) or 'all'")
    memory: tuple[str, ...] = opt(tuple(MEMORIES), "--memory",
                                  type=options.comma_choices(MEMORIES),
                                  help="comma list of memory kinds, or 'all'")
    repeats: int = opt(5, "--repeats", type=options.positive_int, help="timed repeats")
    iters: int = opt(10, "--iters", type=options.positive_int,
                     help="copies per repeat (burst length for event-timed copies)")
    warmup: int = opt(2, "--warmup", type=options.nonnegative_int, help="untimed copies")
    prefetch_batches: int = opt(10, "--prefetch-batches", type=options.nonnegative_int,
                                help="batches for the sequential-vs-prefetch loops (0: skip them)")
    batch_bytes: int = opt(16 * 2**20, "--batch-bytes", type=options.size_bytes,
                           help="bytes per prefetched batch")
    compute_ms: float = opt(5.0, "--compute-ms", type=options.positive_float,
                            help="compute per batch in the prefetch loops (a sleep on the host, "
                                 "a spin kernel on a GPU), ms")
    hop_busy: bool = opt(False, "--hop-busy", action="store_true",
                         help="also measure the selected host hops with a worker that keeps "
                              "computing after its hand-over (rows <path>_busy)")
    rehearse: str | None = opt(None, "--rehearse", choices=tuple(REHEARSAL_BOXES),
                               help="run the multi-GPU paths on this fake box (host memory for "
                                    "each GPU; every row labelled rehearsal)")
    no_progress: bool = opt(False, "--no-progress", action="store_true",
                            help="no progress bar on stderr")

    @property
    def gpu_paths(self) -> tuple[str, ...]:
        """The multi-GPU paths selected (``peer``, ``host-to-all``)."""
        return tuple(p for p in GPU_PATHS if p in self.paths)

    @property
    def sizes(self) -> list[int]:
        """The sizes measured, bytes."""
        return shmoo_sizes() if self.preset == "shmoo" else \
            options.size_sweep(self.minbytes, self.maxbytes, self.stepfactor)

    @property
    def kinds(self) -> list[tuple[str, str]]:
        """The (path, memory) copy rows selected by ``paths`` and ``memory``."""
        return [(pth, m) for pth, m in ROW_KINDS if pth in self.paths and m in self.memory]

    @property
    def hops(self) -> list[str]:
        """The hop paths selected (a path's memory kind must be selected too)."""
        return [pth for pth, m in HOP_KINDS if pth in self.paths and m in self.memory]

    @property
    def pins(self) -> list[str]:
        """The pin-cost methods selected (they need ``pinned`` in ``memory``)."""
        return [pth for pth in PIN_PATHS if pth in self.paths and "pinned" in self.memory]


def _error_pct(r: Row) -> float | None:
    """The row's measured GB/s against the model's, percent (positive: slower than the model);
    None without both."""
    if not r.gbps or not r.model_gbps:
        return None
    return bandwidth_error_pct(r.gbps, r.model_gbps)


def targets(rows: list[Row]) -> dict[str, Any]:
    """The lab's targets met or not: h2h beside numpy.copyto at 16 MiB, and each path's worst
    model error (percent) at sizes >= 64 KiB."""
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
        e = _error_pct(r)
        if e is not None and r.nbytes >= FIT_MIN_BYTES:
            key = f"{r.path}/{r.memory}"
            errs[key] = max(errs.get(key, 0.0), abs(e))
    out["model_max_error_ge_64KiB"] = {k: {"max_error_pct": v, "met": v <= MODEL_TARGET_PCT}
                                       for k, v in errs.items()}
    return out


def _prefetch(adapter: Any, c: TransfersConfig) -> list[dict[str, Any]]:
    """Sequential and double-buffered loops (pinned memory when there is any, else pageable);
    ``efficiency`` = the model's time / measured wall (1.0: at the bound)."""
    memory = "pageable" if adapter.unavailable("pinned") else "pinned"
    runner = prefetch_runner(adapter)
    out = []
    for mode in ("sequential", "prefetch"):
        r = runner(adapter, mode=mode, batches=c.prefetch_batches, nbytes=c.batch_bytes,
                   compute_s=c.compute_ms / 1e3, memory=memory)
        out.append({**r.as_dict(), "efficiency": r.model_s / r.wall_s})
    return out


def _with_notes(rows: list[dict[str, Any]], reasons: dict[str, int]) -> list[dict[str, Any]]:
    """``rows`` with ``error`` (measured vs model) and ``note`` (``skipped [k]``, ``k`` the
    reason's number in ``reasons``, which gains the reasons seen first here)."""
    out = []
    for r in rows:
        note = f"skipped [{reasons.setdefault(r['skipped'], len(reasons) + 1)}]" \
            if r["skipped"] else None
        out.append({**r, "error_pct": _error_pct(Row(**r)), "note": note})
    return out


def skip_notes(rows: Sequence[dict[str, Any]], reasons: dict[str, int] | None = None,
               width: int = COMMENT_WIDTH) -> list[str]:
    """One note per reason a row was skipped: ``skipped [k] path (memory), ...: reason``,
    numbered as :func:`_with_notes` numbers them (``reasons``: the numbers given so far; default
    numbered in order of first appearance in ``rows``), wrapped at word boundaries to ``width``
    characters. Empty when nothing was skipped."""
    numbers = dict(reasons) if reasons is not None else {}
    paths: dict[str, list[str]] = {}
    for r in rows:
        if r["skipped"]:
            numbers.setdefault(r["skipped"], len(numbers) + 1)
            what = f"{r['path']} ({r['memory']})"
            if what not in paths.setdefault(r["skipped"], []):
                paths[r["skipped"]].append(what)
    return wrap_lines([f"skipped [{k}] {', '.join(paths.get(why, []))}: {why}"
                       for why, k in sorted(numbers.items(), key=lambda kv: kv[1])
                       if why in paths], width)


def transfer_table(rows: list[dict[str, Any]]) -> str:
    """The benchmark's table of sweep rows (dicts as :meth:`Row.as_dict` makes them): size,
    path, memory, time, GB/s, the fitted model's GB/s, its error and #wrong, skip reasons
    numbered below the table (``# `` lines of at most 110 characters)."""
    reasons: dict[str, int] = {}
    table = format_table(_with_notes(rows, reasons), COLUMNS)
    return "\n".join([table] + [f"# {line}" for line in skip_notes(rows, reasons)])


def transfer_html(rows: list[dict[str, Any]], title: str = "",
                  max_height_px: int = 360) -> HtmlTable:
    """:func:`transfer_table`'s table as a scrolling HTML table (for a notebook); the skip
    reasons its ``skipped [k]`` notes point to are :func:`skip_notes` of the same rows."""
    return HtmlTable(_with_notes(rows, {}), COLUMNS, title=title, max_height_px=max_height_px)


def pin_table(rows: list[dict[str, Any]]) -> str:
    """Pin costs (dicts as :meth:`Row.as_dict` makes :func:`~distlab.transfers.pin_rows`'
    rows) under :data:`PIN_COLUMNS`: one-off times in us and us per MiB, never GB/s; skip
    reasons numbered below the table (``# `` lines of at most 110 characters)."""
    reasons: dict[str, int] = {}
    table = format_table(_with_notes(rows, reasons), PIN_COLUMNS)
    return "\n".join([table] + [f"# {line}" for line in skip_notes(rows, reasons)])


def _tail(payload: dict[str, Any], notes: list[str]) -> list[str]:
    lines = list(notes)
    for r in payload["prefetch"]:
        lines.append(f"{r['mode']:>10} loop ({r['memory']}, {r['batches']} x {r['nbytes']} B, "
                     f"compute {r['compute_s'] * 1e3:.2f} ms, copy {r['copy_s'] * 1e3:.2f} ms per "
                     f"batch): wall {r['wall_s'] * 1e3:.1f} ms,")
        lines.append(f"{'':>10} model {r['model_s'] * 1e3:.1f} ms, efficiency "
                     f"{r['efficiency']:.2f}, #wrong {r['wrong']}")
    t = payload["targets"]
    if "h2h_vs_copyto_16MiB" in t:
        h = t["h2h_vs_copyto_16MiB"]
        lines.append(f"target h2h vs numpy.copyto at 16 MiB: {h['h2h_gbps']:.2f} / "
                     f"{h['copyto_gbps']:.2f} GB/s = {h['ratio']:.3f} (within 20%: {h['met']})")
    for k, v in t["model_max_error_ge_64KiB"].items():
        lines.append(f"target model error <= 10% at >= 64 KiB, {k}: max "
                     f"{v['max_error_pct']:.1f}% ({'met' if v['met'] else 'NOT met'})")
    return lines


def _hops(c: TransfersConfig) -> list[HopSweep]:
    """The hop sweeps the config selects: idle worker, then (``--hop-busy``) busy worker."""
    if not c.hops:
        return []
    out = []
    for busy in (False, True) if c.hop_busy else (False,):
        paths = [p for p in c.hops if not (busy and p == "hop_cuda_ipc")]
        if not paths:
            continue
        with tqdm(total=len(c.sizes) * len(paths), desc="hops" + (" busy" if busy else ""),
                  file=sys.stderr, leave=False, disable=c.no_progress) as bar:
            out.append(hop_sweep(c.sizes, paths, repeats=c.repeats, warmup=c.warmup, busy=busy,
                                 progress=lambda: bar.update(1)))
    return out


def _hop_payload(sw: HopSweep) -> dict[str, Any]:
    return {"startup_s": sw.startup_s, "first_hop_us": sw.first_hop_us,
            "fits": {p: vars(f) for p, f in sw.fits.items()},
            "crossover_bytes": sw.crossovers()}


def _hop_tail(hops: list[HopSweep]) -> list[str]:
    """Start-up apart, then per path: fixed part, bandwidth, and where the hop turns copy."""
    lines = []
    for sw in hops:
        if sw.startup_s is not None:
            lines.append(f"hop worker start-up (spawn, imports): {sw.startup_s:.3f} s, kept "
                         "out of every hop row")
        if sw.first_hop_us:
            lines.append("first hop per path (one-off: starts the path's helpers), us: " +
                         ", ".join(f"{p} {us:.0f}" for p, us in sw.first_hop_us.items()))
        for path, f in sw.fits.items():
            errs = ErrorSummary.of(_error_pct(r) for r in sw.rows if r.path == path)
            lines.append(f"hop model {path}: {f.latency_s * 1e6:.1f} us fixed + n / "
                         f"{f.bandwidth_Bps / 1e9:.2f} GB/s: a fixed cost below "
                         f"{sw.crossovers()[path]:.3g} B, a copy above (fit over every size, "
                         f"worst error {errs.max if errs.n else 0.0:.0f}%)")
    return lines


class TransfersBenchmark(Benchmark[TransfersConfig]):
    """The transfer lab's copy sweep (see the module docstring)."""

    name = "transfers"
    about = ("disk -> pageable -> pinned -> GPU copies, measured and fitted (GPU rows skip "
             "without CUDA)")
    config_type = TransfersConfig

    def check(self, parser: argparse.ArgumentParser, config: TransfersConfig) -> TransfersConfig:
        if config.maxbytes < config.minbytes:
            options.fail(parser, "-e/--maxbytes", config.maxbytes,
                         f">= -b/--minbytes ({config.minbytes})")
        if config.rehearse and not config.gpu_paths:
            options.fail(parser, "--rehearse", config.rehearse,
                         "used with --paths peer, host-to-all or gpus (it fakes the GPUs of "
                         "those paths only)")
        if not config.kinds and not config.pins and not config.hops and not config.gpu_paths:
            options.fail(parser, "--paths/--memory",
                         f"{','.join(config.paths)} / {','.join(config.memory)}",
                         "a combination that selects at least one row (e.g. h2h with pageable)")
        return config

    def run(self, config: TransfersConfig) -> Report:
        c = config
        adapter = default_adapter()
        with tqdm(total=len(c.sizes) * len(c.kinds), desc="transfers", file=sys.stderr,
                  leave=False, disable=c.no_progress) as bar:
            rows = sweep(adapter, c.sizes, c.kinds, repeats=c.repeats, warmup=c.warmup,
                         iters=c.iters, progress=lambda: bar.update(1))
        pins = [r for r in pin_rows(adapter, c.sizes, repeats=min(c.repeats, 3))
                if r.path in c.pins]
        fits = fit_rows(rows)
        hops = _hops(c)
        links = [ln for ln in pcie_links() if ln.get("gen") and ln.get("width")]
        only_gpus = not (c.kinds or c.pins or c.hops)   # no host copy row asked for
        payload = {"prefetch": _prefetch(adapter, c) if c.prefetch_batches and not only_gpus
                   else [],
                   "targets": targets(rows), "adapter": adapter.describe(),
                   "fits": {f"{p}/{m}": vars(f) for (p, m), f in fits.items()},
                   "pcie_link": {"gen": links[0]["gen"], "width": links[0]["width"]}
                   if links else None}
        hop_rows = [r for sw in hops for r in sw.rows]
        if hops:
            payload["hop"] = [_hop_payload(sw) for sw in hops]
        reasons: dict[str, int] = {}
        order = {k: i for i, k in enumerate(ROW_KINDS + HOP_KINDS)}
        every = sorted(rows + hop_rows, key=lambda r: (r.nbytes, order.get(
            (r.path.removesuffix("_busy"), r.memory), 0), r.path))
        every_d = [r.as_dict() for r in every]
        pins_d = [r.as_dict() for r in pins]
        copy = _with_notes(every_d, reasons)
        pin = _with_notes(pins_d, reasons)
        gpus = measure_gpu_paths(c.gpu_paths, minbytes=c.minbytes, maxbytes=c.maxbytes,
                                 repeats=c.repeats, iters=c.iters, warmup=c.warmup,
                                 rehearse=c.rehearse, progress=not c.no_progress)
        if c.gpu_paths:
            payload["gpus"] = gpus.payload
        tables = [Table(copy, COLUMNS)] if copy or not only_gpus else []
        if pin:
            tables.append(Table(pin, PIN_COLUMNS, "pin costs: one-off times, not bandwidths",
                                "pin_costs"))
        hop_parts = [part for sw in hops for part in sw.parts]
        if hop_parts:
            tables.append(Table(hop_parts, HOP_PART_COLUMNS,
                                "\n# ".join(wrap_lines([HOP_PARTS_TITLE])), "hop_parts"))
        tables += gpus.tables
        wrong = sum(r.wrong or 0 for r in every) + gpus.wrong
        head = [] if only_gpus else [f"adapter: {adapter.describe()['adapter']}; GB = 1e9 B; "
                                     "median of repeats; pin costs are one-off times, not "
                                     "bandwidths"]
        return Report(tables, head,
                      wrap_lines(_tail(payload, skip_notes(every_d + pins_d, reasons))
                                 + _hop_tail(hops) + gpus.lines), payload,
                      failed=f"{wrong} bytes copied wrong" if wrong else "", world_size=1)


BENCHMARK = TransfersBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench transfers``; see the module docstring."""
    return run_cli(BENCHMARK, argv)
