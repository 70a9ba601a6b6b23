"""Figures and the prefetcher explorer for the transfer lab (notebook 05).

Every figure is built with :func:`distlab.viz.figure.new_figure`. Rows are the benchmark's dicts
(``{path, memory, nbytes, time_us, gbps, model_gbps, wrong, skipped}``); GB/s = 1e9 B/s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import ipywidgets as w
from matplotlib.patches import FancyBboxPatch

from distlab.links import Link, fraction_of_peak
from distlab.timeline import Timeline
from distlab.transfers.adapter import DeviceAdapter
from distlab.transfers.cuda_prefetch import prefetch_runner
from distlab.transfers.paths import PIN_PATHS
from distlab.transfers.prefetch import PrefetchResult
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.viz.gantt import gantt
from distlab.viz.palette import colour

__all__ = ["link_lines", "HOPS", "chain_hops", "path_figure", "sweep_figure", "prefetch_figure",
           "PrefetchExplorer"]

COLORS = {k: colour(k) for k in ("copy", "compute")}
# (from, to, (path, memory) measured for that hop)
HOPS = [("disk", "pageable", ("disk_read_cold", "pageable")),
        ("pageable", "pinned", ("pageable_to_pinned", "pinned")),
        ("pinned", "GPU", ("h2d", "pinned"))]


def chain_hops(rows: Iterable[dict[str, Any]], nbytes: int) -> list[dict[str, Any]]:
    """One dict per hop of disk -> pageable -> pinned -> GPU at ``nbytes``: ``{src, dst, path,
    memory, gbps, skipped}`` (``gbps`` None and ``skipped`` the reason when not measured)."""
    at = {(r["path"], r["memory"]): r for r in rows if r["nbytes"] == nbytes}
    out = []
    for src, dst, key in HOPS:
        r = at.get(key)
        out.append({"src": src, "dst": dst, "path": key[0], "memory": key[1],
                    "gbps": r["gbps"] if r else None,
                    "skipped": (r["skipped"] if r else "not in this sweep")})
    return out


def path_figure(hops: Sequence[dict[str, Any]], nbytes: int) -> Any:
    """Boxes disk -> pageable -> pinned -> GPU with each hop's measured GB/s, or 'skipped' and
    the reason; the slowest measured hop (the chain's bound) is drawn red."""
    fig = new_figure(figsize=(9.4, 2.8))
    ax = fig.add_subplot()
    names = [hops[0]["src"]] + [h["dst"] for h in hops]
    measured = [h["gbps"] for h in hops if h["gbps"] is not None]
    slowest = min(measured) if measured else None
    for i, name in enumerate(names):
        _box(ax, 3 * i, name)
    for i, h in enumerate(hops):
        x0, x1 = 3 * i + 1.0, 3 * i + 3.0
        if h["gbps"] is not None:
            color = "tab:red" if h["gbps"] == slowest else "black"
            ax.annotate("", (x1, 0.5), (x0, 0.5), arrowprops={"arrowstyle": "->", "color": color})
            ax.text((x0 + x1) / 2, 0.75, f"{h['gbps']:.2f} GB/s", ha="center", color=color)
        else:
            ax.annotate("", (x1, 0.5), (x0, 0.5),
                        arrowprops={"arrowstyle": "->", "linestyle": "dashed", "color": "grey"})
            ax.text((x0 + x1) / 2, 0.75, "skipped", ha="center", color="grey")
            ax.text((x0 + x1) / 2, 0.05, _wrap(h["skipped"] or "", 26), ha="center", va="top",
                    color="grey", fontsize="x-small")
        ax.text((x0 + x1) / 2, 0.3, h["path"], ha="center", fontsize="small")
    ax.set_xlim(-0.3, 3 * len(hops) + 1.3)
    ax.set_ylim(-0.8, 1.2)
    ax.axis("off")
    ax.set_title(f"one batch's path at {nbytes} B (red: the slowest measured hop bounds the "
                 "chain)", loc="left", fontsize="medium")
    return fig


def _box(ax: Any, x: float, label: str) -> None:
    ax.add_patch(FancyBboxPatch((x, 0.25), 1.0, 0.5, boxstyle="round,pad=0.05",
                                fc="whitesmoke"))
    ax.text(x + 0.5, 0.5, label, ha="center", va="center", fontweight="bold")


def _wrap(text: str, width: int) -> str:
    words, lines, cur = text.split(), [], ""
    for word in words:
        if cur and len(cur) + len(word) + 1 > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    return "\n".join(lines + [cur][: 1 if cur else 0])


DEVICE_PATHS = ("h2d", "d2h", "d2d")  # what crosses or lives on the GPU side of the link


def sweep_figure(rows: Iterable[dict[str, Any]], links: Sequence[Link] = (),
                 title: str = "") -> Any:
    """Measured GB/s against size (points) with the fitted model (lines) per (path, memory), on
    log-log axes: host copies on the left, copies to, from and on the GPU on the right (when
    there are any) with each link's per-direction peak as a dashed line labelled at the right
    edge. Pin costs are times, not bandwidths: they never appear here."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["gbps"] is not None and r["path"] not in PIN_PATHS:
            groups.setdefault((r["path"], r["memory"]), []).append(r)
    device = {k: g for k, g in groups.items() if k[0] in DEVICE_PATHS}
    host = {k: g for k, g in groups.items() if k not in device}
    panels = [("host copies", host)] + ([("to, from and on the GPU", device)] if device else [])
    fig = new_figure(figsize=(min(9.4, 4.2 * len(panels) + 1.5), 4.6))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, part) in zip(axes, panels, strict=False):
        for (path, memory), g in part.items():
            g = sorted(g, key=lambda r: r["nbytes"])
            line = ax.plot([r["nbytes"] for r in g], [r["gbps"] for r in g], "o", ms=4,
                           label=f"{path} ({memory})")[0]
            model = [(r["nbytes"], r["model_gbps"]) for r in g if r["model_gbps"] is not None]
            if model:
                ax.plot(*zip(*model, strict=True), "-", color=line.get_color(), alpha=0.6)
        if part is device or not device:
            ranked = sorted(links, key=lambda k: k.gbps)
            for k, link in enumerate(ranked):
                # the lowest label hangs below its line, the highest stands above it: a log
                # axis squeezed by slow measured points brings two peaks a factor 2 apart
                # closer than two centred labels are tall
                va = ("center" if len(ranked) == 1 else "top" if k == 0 else
                      "bottom" if k == len(ranked) - 1 else "center")
                ax.axhline(link.gbps, ls="--", color="grey", lw=1)
                ax.annotate(f"{link.name}\n{link.gbps:.1f} GB/s", (1.0, link.gbps),
                            xycoords=("axes fraction", "data"), xytext=(4, 0),
                            textcoords="offset points", va=va, fontsize="x-small",
                            color="grey", annotation_clip=False)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("GB/s (1e9 B/s)")
        ax.set_title(name, loc="left", fontsize="medium")
        ax.grid(True, which="major", alpha=0.3)
        if part:   # below the axes: measured points can land anywhere inside them
            ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.17),
                      ncols=2, frameon=False)
    fig.suptitle(title or "measured (points) and fitted latency + n/bandwidth (lines)",
                 x=0.01, ha="left", fontsize="medium")
    return fig


def link_lines(rows: Iterable[dict[str, Any]], link: Link) -> list[str]:
    """Per direction, the best pinned copy across ``link`` as GB/s and as a share of its
    per-direction peak (e.g. 55.2 GB/s = 87% of PCIe Gen5 x16); [] without GPU rows."""
    out = []
    for path in ("h2d", "d2h"):
        got = [r for r in rows if r["path"] == path and r["memory"] == "pinned" and r["gbps"]]
        if got:
            best = max(got, key=lambda r: r["gbps"])
            out.append(f"{path} pinned: {best['gbps']:.2f} GB/s at {best['nbytes']} B = "
                       f"{100 * fraction_of_peak(best['gbps'], link):.0f}% of {link.name} "
                       f"({link.gbps:.1f} GB/s per direction)")
    return out


def prefetch_figure(timeline: Timeline, results: Sequence[PrefetchResult]) -> Any:
    """One Gantt per loop (sequential, prefetch) on a shared ms axis, titled with the measured
    wall time beside the model's (``n (copy + compute)`` or ``copy + compute + (n-1) max``)."""
    fig = new_figure(figsize=(9.4, 1.6 + 1.3 * len(results)))
    axes = fig.subplots(len(results), 1, sharex=True, squeeze=False)[:, 0]
    for ax, r in zip(axes, results, strict=False):
        lanes = [f"{r.mode}/copy stream", f"{r.mode}/default stream"]
        sub = timeline.filter(lanes=lanes)
        if len(sub):
            gantt(sub, ax, lanes=lanes, colors=COLORS)
        ax.set_title(f"{r.mode}: measured {r.wall_s * 1e3:.1f} ms, model {r.model_s * 1e3:.1f} ms"
                     f" (copy {r.copy_s * 1e3:.2f} ms, compute {r.compute_s * 1e3:.2f} ms per "
                     f"batch, {r.batches} batches, #wrong {r.wrong})", loc="left",
                     fontsize="small")
    return fig


class PrefetchExplorer(Explorer):
    """Sliders for batch size and compute time, buttons for pinned/pageable; every change runs
    both loops for real (small) and redraws. State: ``results``, ``summary``, ``figure``,
    ``png``, ``widget``."""

    def __init__(self, adapter: DeviceAdapter, *, batch_mib: int = 4, compute_ms: float = 3.0,
                 memory: str = "pageable", batches: int = 8) -> None:
        style = {"description_width": "110px"}
        self.adapter, self.batches = adapter, batches
        self.batch_mib = w.IntSlider(value=batch_mib, min=1, max=64, description="batch MiB",
                                     continuous_update=False, style=style)
        self.compute_ms = w.FloatSlider(value=compute_ms, min=0.0, max=20.0, step=0.5,
                                        description="compute ms", continuous_update=False,
                                        style=style)
        self.memory = w.ToggleButtons(options=["pageable", "pinned"], value=memory,
                                      description="memory", style=style)
        self.results: list[PrefetchResult] = []
        controls = [self.batch_mib, self.compute_ms, self.memory]
        super().__init__(controls, rows=controls)

    def draw(self) -> Drawing:
        """Measure both loops at the current settings (or say why they are skipped)."""
        reason = self.adapter.unavailable(self.memory.value)
        if reason:
            self.results = []
            summary = f"{self.memory.value} skipped: {reason}"
            fig = new_figure(figsize=(9.4, 2.0))
            ax = fig.add_subplot()
            ax.axis("off")
            ax.text(0.5, 0.5, _wrap(summary, 90), ha="center", va="center")
            return Drawing(fig, summary)
        tl = Timeline()
        nbytes = self.batch_mib.value * 2**20
        runner = prefetch_runner(self.adapter)
        self.results = [runner(self.adapter, mode=m, batches=self.batches, nbytes=nbytes,
                               compute_s=self.compute_ms.value / 1e3,
                               memory=self.memory.value, timeline=tl)
                        for m in ("sequential", "prefetch")]
        seq, pre = self.results
        summary = (f"{self.memory.value}, {self.batch_mib.value} MiB: sequential "
                   f"{seq.wall_s * 1e3:.1f} ms (model {seq.model_s * 1e3:.1f}), "
                   f"prefetch {pre.wall_s * 1e3:.1f} ms (bound "
                   f"{pre.model_s * 1e3:.1f}), #wrong {seq.wrong + pre.wrong}")
        return Drawing(prefetch_figure(tl, self.results), summary)
