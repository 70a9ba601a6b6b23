"""NCCL as it measures: the execution model beside published tables, and NCCL's choice per size.

- :func:`nccl_tables_figure`: one panel per published table (at least ``min_points`` sizes):
  the published points (hollow black), NCCL's own estimate for the table's NCCL release (grey
  dashed), the measured-time model with constants fitted on every table (solid) and with
  constants fitted on the *other* sources only (dotted: leave-one-source-out). Bus bandwidth
  against message bytes; each title gives both medians.
- :func:`nccl_choice_figure`: one panel per GPU box: the model's bus bandwidth against size, one
  colour per (algorithm, protocol) NCCL picks, the sizes where the host's enqueue rate bounds the
  time shaded, NCCL's estimate dashed.
- :func:`nccl_nodes_figure`: one panel per published table beyond one 8-GPU box (nodes, GB200
  NVLink domains): the published points (hollow black) beside the model's bus bandwidth, each
  size's dot in the colour of the (algorithm, protocol) NCCL picks there; nothing is fitted on
  these tables, so one model line per panel.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from distlab._checks import check_int
from distlab.evidence.nccl.fit_execution import JudgedPoint
from distlab.nccl.boxes import gpu_box
from distlab.nccl.execution import nccl_execution
from distlab.nccl.tuning import (
    algorithm_from_nccl,
    busbw_gbps,
    nccl_allreduce,
)
from distlab.nccl.versions import nccl_constants as priced_version
from distlab.viz.axes import bytes_axis, plain_log_axis, widen_log_range
from distlab.viz.figure import new_figure
from distlab.viz.palette import colour, nccl_pair
from distlab.vocabulary import ErrorSummary

__all__ = ["nccl_choice_figure", "nccl_nodes_figure", "nccl_tables_figure"]

#: The (algorithm, protocol) pairs the choice figure marks, in the palette's colours.
_PAIRS = (("ring", "LL"), ("ring", "LL128"), ("ring", "Simple"), ("tree", "LL"),
          ("tree", "LL128"), ("tree", "Simple"), ("nvls", "Simple"), ("nvls_tree", "Simple"))


def _busbw(j: JudgedPoint) -> float:
    return busbw_gbps(j.nbytes, j.published_us * 1e-6, j.execution.world_size)


def _table_panels(judged: Sequence[JudgedPoint], min_points: int, *,
                  panel_height_in: float) -> tuple[Any, list[tuple[Any, str, list[JudgedPoint]]]]:
    """A figure of two columns with one panel per published table (``system``) of at least
    ``min_points`` judged points, the panels left over hidden; ``(figure, [(axes, system,
    its points by size)])``."""
    check_int("min_points", min_points, minimum=1)
    systems = [s for s in dict.fromkeys(j.system for j in judged)
               if sum(j.system == s for j in judged) >= min_points]
    if not systems:
        raise ValueError(f"no published table has {min_points} or more points")
    rows = (len(systems) + 1) // 2
    fig = new_figure(figsize=(9.4, panel_height_in * rows))
    axes = fig.subplots(rows, 2, squeeze=False).ravel()
    for ax in axes[len(systems):]:
        ax.set_visible(False)
    return fig, [(ax, system, sorted((j for j in judged if j.system == system),
                                     key=lambda j: j.nbytes))
                 for ax, system in zip(axes, systems, strict=False)]


def _busbw_axes(ax: Any, size_ticks: int = 8) -> None:
    """Message size (log 2, in KiB / MiB / GiB, about ``size_ticks`` ticks) against bus
    bandwidth in GB/s (log, plain numbers, at least a factor 4 from bottom to top), labelled."""
    bytes_axis(ax, "x", ticks=size_ticks)
    plain_log_axis(ax, "y")
    widen_log_range(ax, 4.0, "y")
    ax.set_ylabel("busbw GB/s")


PROTOCOL_MARKERS = {"LL": "o", "LL128": "s", "Simple": "^"}
"""A marker per NCCL protocol: the algorithm's colour goes light to dark with the protocol, and
the shape tells LL from LL128 where two light shades would not."""


def nccl_tables_figure(inside: Sequence[JudgedPoint], outside: Sequence[JudgedPoint], *,
                       points: Sequence[dict[str, Any]], min_points: int = 5) -> Any:
    """Published tables against the model in and out of sample (see the module doc).

    Args:
        inside: every point judged with constants fitted on every source
            (:func:`~distlab.evidence.nccl.fit_execution.judge`).
        outside: the same points judged leave-one-source-out
            (:func:`~distlab.evidence.nccl.fit_execution.leave_one_source_out`).
        points: the published points themselves (for each table's NCCL release and forced
            algorithm), in any order.
        min_points: tables with fewer sizes are left out of the figure (not of the tables).
    """
    out_by = {(j.system, j.nbytes, j.published_us): j for j in outside}
    fig, panels = _table_panels(inside, min_points, panel_height_in=3.9)
    for ax, system, mine in panels:
        point = next(p for p in points if p["system"] == system)
        forced = point.get("nccl_algo")
        algos = None if forced is None else [algorithm_from_nccl(forced)]
        xs = [j.nbytes for j in mine]
        est = nccl_allreduce(point["preset"], point["world_size"], sorted(set(xs)),
                             algorithms=algos, nccl_version=point.get("nccl_version"))
        ax.plot([c.nbytes for c in est], [c.busbw_gbps for c in est], "--", color="0.5",
                lw=1.2, label="NCCL's estimate")
        ax.plot(xs, [j.execution.busbw_gbps for j in mine], "-", color="C0", lw=1.8,
                label="model, fitted on every table")
        lo = [out_by[(j.system, j.nbytes, j.published_us)] for j in mine]
        ax.plot(xs, [j.execution.busbw_gbps for j in lo], ":", color="C3", lw=1.8,
                label="model, this source left out")
        ax.plot(xs, [_busbw(j) for j in mine], "o", ms=6, mfc="none", mec="k",
                label="published")
        med_in = ErrorSummary.of(j.error_pct for j in mine).median
        med_out = ErrorSummary.of(j.error_pct for j in lo).median
        version = point.get("nccl_version") or "2.28 (not stated)"
        how = f", NCCL_ALGO={forced}" if forced else ""
        ax.set_title(f"{system}\nNCCL {version}{how}; |error| median {med_in:.0f}% in, "
                     f"{med_out:.0f}% out", fontsize=8)
        _busbw_axes(ax)
        ax.legend(fontsize=7, loc="lower right")
    return fig


def nccl_choice_figure(presets: Sequence[Any] = ("h100_sxm8", "a100_sxm8", "pcie5_8"),
                       world_size: int = 8, sizes_bytes: Sequence[int] | None = None, *,
                       harness: str = "torch", nccl_version: str | None = None) -> Any:
    """NCCL's choice per size and the model's bus bandwidth, one panel per box (see the module
    doc). ``sizes_bytes`` defaults to 1 KiB .. 8 GiB in powers of two."""
    boxes = [gpu_box(p) for p in presets]
    if not boxes:
        raise ValueError("presets must name at least one preset, got an empty sequence")
    n = check_int("world_size", world_size, minimum=2)
    sizes = list(sizes_bytes) if sizes_bytes is not None else [2 ** k for k in range(10, 34)]
    fig = new_figure(figsize=(9.4, 3.6 * len(boxes)))
    axes = fig.subplots(len(boxes), 1, squeeze=False)[:, 0]
    for ax, box in zip(axes, boxes, strict=False):
        ex = nccl_execution(box, n, sizes, harness=harness, nccl_version=nccl_version)
        xs = [e.nbytes for e in ex]
        ax.plot(xs, [busbw_gbps(e.nbytes, e.estimate_us * 1e-6, n) for e in ex], "--",
                color="0.5", lw=1.0, label="NCCL's estimate")
        ax.plot(xs, [e.busbw_gbps for e in ex], "-", color="k", lw=0.8)
        for pair in _PAIRS:
            at = [e for e in ex if (e.algorithm, e.protocol) == pair]
            if at:
                ax.plot([e.nbytes for e in at], [e.busbw_gbps for e in at],
                        PROTOCOL_MARKERS.get(pair[1], "o"), ms=5,
                        color=colour(nccl_pair(*pair)), label=nccl_pair(*pair))
        host = [e.nbytes for e in ex if e.bound == "host"]
        if host:
            ax.axvspan(min(host) / 1.4, max(host) * 1.4, color="0.9", zorder=0,
                       label="host-bound (enqueue rate)")
        version = priced_version(nccl_version).release
        ax.set_title(f"{box.name}, {n} GPUs, NCCL {version}, harness {harness}:\n"
                     "NCCL's choice and the predicted time as measured", fontsize=9)
        _busbw_axes(ax)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def nccl_nodes_figure(judged: Sequence[JudgedPoint], *, min_points: int = 5) -> Any:
    """Published tables across nodes against the model, one panel per table of at least
    ``min_points`` sizes (see the module doc). ``judged``: every point priced with the shipped
    constants (:func:`~distlab.evidence.nccl.fit_execution.judge` of
    :func:`~distlab.evidence.nccl.fit_execution.multinode_points`)."""
    fig, panels = _table_panels(judged, min_points, panel_height_in=3.4)
    for ax, system, mine in panels:
        xs = [j.nbytes for j in mine]
        ax.plot(xs, [j.execution.busbw_gbps for j in mine], "-", color="k", lw=0.8)
        for pair in _PAIRS:
            at = [j for j in mine if (j.execution.algorithm, j.execution.protocol) == pair]
            if at:
                ax.plot([j.nbytes for j in at], [j.execution.busbw_gbps for j in at],
                        PROTOCOL_MARKERS.get(pair[1], "o"), ms=4,
                        color=colour(nccl_pair(*pair)), label=nccl_pair(*pair))
        ax.plot(xs, [_busbw(j) for j in mine], "o", ms=7, mfc="none", mec="k",
                label="published")
        med = ErrorSummary.of(j.error_pct for j in mine).median
        name, _, where = system.partition(" (")
        source = textwrap.shorten(f"({where}", width=60, placeholder="...)")
        ax.set_title(f"{name}: |error| median {med:.0f}%\n{source}", fontsize=8)
        _busbw_axes(ax, size_ticks=5)
        ax.legend(fontsize=7, loc="best")
    return fig
