"""Figures of the hop between processes and of Hogwild (notebook 10).

Every figure is built with :func:`distlab.viz.figure.new_figure`. Hop rows and parts are the
dicts :func:`distlab.transfers.hop_sweep.hop_sweep` makes (``Row.as_dict()``; parts with
``ready_us``, ``handle_us``, ``map_us``); times in microseconds, GB = 1e9 B.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.patches import FancyBboxPatch

from distlab.transfers.copy_model import Fit
from distlab.viz.figure import new_figure
from distlab.viz.layout_check import legend_clear_of_data
from distlab.viz.palette import colour

__all__ = ["hogwild_figure", "hop_curves_figure", "hop_parts_figure", "hop_path_figure",
           "hop_path_steps"]

#: ``ready`` is a span kind of the palette (black, as DDP's bucket-ready marks); the others are
#: this figure's own.
PART_COLORS = {"ready": colour("ready"), "handle": "tab:blue", "map": "tab:green"}
#: What each part of a hop is, as its legend entry says.
PART_MEANINGS = {"ready": "worker, into shared memory", "handle": "across",
                 "map": "pages touched here"}


def hop_path_steps(hop_rows: Iterable[dict[str, Any]], parts: Iterable[dict[str, Any]],
                   copy_rows: Iterable[dict[str, Any]], nbytes: int,
                   path: str = "hop_shm_fd") -> list[dict[str, Any]]:
    """The steps of one batch's way from a worker to the GPU at ``nbytes``: worker -> shared
    memory (the hop's ``ready`` part), shared memory -> trainer (``handle`` + ``map``), trainer
    -> pinned (``pageable_to_pinned``), pinned -> GPU (``h2d`` from pinned). Each ``{src, dst,
    what, us, skipped}``: ``us`` None and ``skipped`` the reason where not measured."""
    part = next((p for p in parts if p["path"] == path and p["nbytes"] == nbytes), None)
    row = next((r for r in hop_rows if r["path"] == path and r["nbytes"] == nbytes), None)
    copies = {(r["path"], r["memory"]): r for r in copy_rows if r["nbytes"] == nbytes}
    why = (row or {}).get("skipped") or f"{path} not measured at {nbytes} B"
    out = [{"src": "worker", "dst": "shared memory", "what": f"{path}: into shared memory",
            "us": part["ready_us"] if part else None, "skipped": None if part else why},
           {"src": "shared memory", "dst": "trainer", "what": f"{path}: handle, pages mapped",
            "us": part["handle_us"] + part["map_us"] if part else None,
            "skipped": None if part else why}]
    for src, dst, key in (("trainer", "pinned", ("pageable_to_pinned", "pinned")),
                          ("pinned", "GPU", ("h2d", "pinned"))):
        r = copies.get(key)
        measured = r is not None and r.get("time_us") is not None
        out.append({"src": src, "dst": dst, "what": f"{key[0]} ({key[1]})",
                    "us": r["time_us"] if measured else None,
                    "skipped": None if measured else
                    ((r or {}).get("skipped") or "not in this sweep")})
    return out


def hop_path_figure(steps: Sequence[dict[str, Any]], nbytes: int) -> Any:
    """Boxes worker -> shared memory -> trainer -> pinned -> GPU with each step's measured time
    at ``nbytes`` (dashed and grey with the reason where skipped); the slowest step is red."""
    fig = new_figure(figsize=(9.4, 3.2))
    ax = fig.add_subplot()
    names = [steps[0]["src"]] + [s["dst"] for s in steps]
    measured = [s["us"] for s in steps if s["us"] is not None]
    slowest = max(measured) if measured else None
    for i, name in enumerate(names):
        ax.add_patch(FancyBboxPatch((3 * i, 0.25), 1.3, 0.5, boxstyle="round,pad=0.05",
                                    fc="whitesmoke"))
        ax.text(3 * i + 0.65, 0.5, name, ha="center", va="center", fontweight="bold",
                fontsize="small")
    for i, s in enumerate(steps):
        x0, x1, mid = 3 * i + 1.35, 3 * i + 3.0, 3 * i + 2.15
        if s["us"] is not None:
            color = "tab:red" if s["us"] == slowest else "black"
            ax.annotate("", (x1, 0.5), (x0, 0.5), arrowprops={"arrowstyle": "->", "color": color})
            ax.text(mid, 0.8, f"{s['us']:.0f} us", ha="center", color=color)
        else:
            ax.annotate("", (x1, 0.5), (x0, 0.5),
                        arrowprops={"arrowstyle": "->", "linestyle": "dashed", "color": "grey"})
            ax.text(mid, 0.8, "skipped", ha="center", color="grey")
            ax.text(mid, 0.05, _wrap(s["skipped"] or "", 24), ha="center", va="top",
                    color="grey", fontsize="x-small")
        ax.text(mid, 0.3, _wrap(s["what"], 22), ha="center", va="top", fontsize="x-small")
    ax.set_xlim(-0.3, 3 * len(steps) + 1.6)
    ax.set_ylim(-0.9, 1.1)
    ax.axis("off")
    ax.set_title(f"one batch from a worker process to the GPU at {nbytes} B (red: the slowest "
                 "measured step)", loc="left", fontsize="medium")
    return fig


def _wrap(text: str, width: int) -> str:
    lines, cur = [], ""
    for word in text.split():
        if cur and len(cur) + len(word) + 1 > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    return "\n".join(lines + ([cur] if cur else []))


def hop_curves_figure(rows: Iterable[dict[str, Any]], fits: Mapping[str, Fit],
                      reference: Iterable[dict[str, Any]] = ()) -> Any:
    """Left: microseconds per hop against size, per path (points) with its fitted
    ``latency + n / bandwidth`` (lines) and its crossover (a tick: below, a fixed cost; above,
    a copy); ``reference`` rows (e.g. ``h2h``, one memcpy in one process) drawn grey. Right: the
    same as GB/s. Log-log axes."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("time_us") is not None:
            groups.setdefault(r["path"], []).append(r)
    fig = new_figure(figsize=(9.4, 5.6))
    ax_t, ax_b = fig.subplots(1, 2)
    for path, g in groups.items():
        g = sorted(g, key=lambda r: r["nbytes"])
        n = np.array([r["nbytes"] for r in g], dtype=float)
        line = ax_t.plot(n, [r["time_us"] for r in g], "o", ms=4, label=path)[0]
        ax_b.plot(n, [r["gbps"] for r in g], "o", ms=4, color=line.get_color())
        fit = fits.get(path)
        if fit is not None:
            grid = np.geomspace(n.min(), n.max(), 60)
            ax_t.plot(grid, [fit.seconds(x) * 1e6 for x in grid], "-", alpha=0.6,
                      color=line.get_color())
            ax_b.plot(grid, [fit.gbps(x) for x in grid], "-", alpha=0.6, color=line.get_color())
            cross = fit.latency_s * fit.bandwidth_Bps
            if n.min() <= cross <= n.max():
                ax_t.plot([cross], [fit.seconds(cross) * 1e6], "|", ms=18, mew=2,
                          color=line.get_color())
    ref = sorted((r for r in reference if r.get("time_us") is not None),
                 key=lambda r: r["nbytes"])
    if ref:
        ax_t.plot([r["nbytes"] for r in ref], [r["time_us"] for r in ref], "--", color="grey",
                  label=f"{ref[0]['path']} (one memcpy, one process)")
        ax_b.plot([r["nbytes"] for r in ref], [r["gbps"] for r in ref], "--", color="grey")
    for ax, label in ((ax_t, "us per hop"), (ax_b, "GB/s (1e9 B/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per hop")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
    fig.legend(handles=ax_t.get_legend_handles_labels()[0], fontsize="x-small", ncols=3,
               loc="outside lower center")   # under both panels, off the dots
    ax_t.set_title("time: flat = a fixed cost, rising = a copy\n(tick: where they are equal)",
                   loc="left", fontsize="medium")
    ax_b.set_title("the same as bandwidth", loc="left", fontsize="medium")
    return fig


def hop_parts_figure(parts: Iterable[dict[str, Any]], sizes: Sequence[int]) -> Any:
    """Per size, one stacked bar per path: the hop's parts in microseconds (``ready``: into
    shared memory / the slot; ``handle``: across until ``get`` returned; ``map``: pages touched
    here), one panel per size in us or ms; the legend, below the panels, says what each part
    is, and the title above them has the figure's width to itself."""
    chosen = [p for p in parts if p["nbytes"] in sizes]
    fig = new_figure(figsize=(min(9.4, 3.2 * len(sizes) + 1.0), 3.8))
    axes = fig.subplots(1, len(sizes), squeeze=False)[0]
    for ax, size in zip(axes, sizes, strict=False):
        here = [p for p in chosen if p["nbytes"] == size]
        longest = max((sum(p.get(f"{k}_us") or 0.0 for k in PART_COLORS) for p in here),
                      default=0.0)
        unit, scale = ("ms", 1e-3) if longest >= 1e4 else ("us", 1.0)
        for i, p in enumerate(here):
            left = 0.0
            for key, color in PART_COLORS.items():
                v = p.get(f"{key}_us")
                if v:
                    ax.barh(i, v * scale, left=left, color=color, label=key)
                    left += v * scale
        ax.set_yticks(range(len(here)), [p["path"] for p in here], fontsize="small")
        ax.set_xlabel(unit)
        ax.set_title(f"{size} B", loc="left", fontsize="medium")
        ax.invert_yaxis()
        ax.grid(True, axis="x", alpha=0.3)
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=False):
            seen.setdefault(label, handle)
    fig.suptitle("where a hop's time goes", x=0.01, ha="left", fontsize="medium")
    fig.legend(list(seen.values()), [f"{k}: {PART_MEANINGS[k]}" for k in seen],
               fontsize="small", loc="outside lower center",
               ncols=len(seen) if len(axes) > 1 else 1)
    return fig


def _smooth(values: Sequence[float], window: int) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if window <= 1 or len(v) < window:
        return v
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def hogwild_figure(results: Sequence[Any], window: int = 16) -> Any:
    """Left: training loss (a moving average of ``window`` steps) against samples seen, one line
    per run, each run's evaluation loss at the end as a dot. Right: steps per second of each run
    with its lost updates written beside the bar (witness increments overwritten; parameter
    elements provably missing an update) and, for a locked run, its share of time waiting for
    the lock. ``results``: :class:`~distlab.hogwild.run.HogwildResult`."""
    fig = new_figure(figsize=(9.4, 4.6))
    ax_l, ax_r = fig.subplots(1, 2, width_ratios=[1.6, 1.0])
    for r in results:
        samples = [s for _, s, _ in r.curve]
        loss = _smooth([x for _, _, x in r.curve], window)
        line = ax_l.plot(samples[len(samples) - len(loss):], loss, label=r.label, lw=1.2)[0]
        ax_l.plot([r.samples], [r.eval_loss], "o", color=line.get_color())
    ax_l.set_yscale("log")
    ax_l.set_xlabel("samples seen (all processes)")
    ax_l.set_ylabel(f"training loss (mean of {window} steps)")
    ax_l.grid(True, alpha=0.3)
    ax_l.set_title("loss against samples (dots: evaluation loss at the end)", loc="left",
                   fontsize="medium")
    labels = [r.label for r in results]
    rates = [r.steps_per_s for r in results]
    ax_r.barh(range(len(results)), rates, color="tab:blue", alpha=0.7)
    for i, r in enumerate(results):
        wait = (f"\n  waiting for the lock: {r.lock_wait_share:.1%} of the time"
                if r.lock else "")
        ax_r.text(rates[i], i, f"  witness: lost {r.lost.lost} of {r.lost.total}\n"
                  f"  parameters: {r.lost.missed} of {r.lost.elements} missing an update{wait}",
                  va="center", fontsize="x-small")
    ax_r.set_yticks(range(len(results)), labels, fontsize="small")
    ax_r.invert_yaxis()
    ax_r.set_xlabel("steps per second (all processes)")
    ax_r.set_xlim(0, max(rates) * 2.2)
    ax_r.set_title("step rate and lost updates", loc="left", fontsize="medium")
    legend_clear_of_data(ax_l, fontsize="small")   # measured losses fall anywhere
    return fig
