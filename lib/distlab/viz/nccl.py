"""NCCL's own allreduce on GPU boxes we cannot reach, drawn beside published measurements.

One panel (row) per :class:`~distlab.nccl.boxes.GpuBox` preset: the bus bandwidth
of NCCL's estimate for the (algorithm, protocol) it picks (solid line, one marker shape per pick),
the estimate of every other candidate it compared (thin dashed; a pair's picked markers and its
estimate share one colour), legends at 8 pt, and the published 8-GPU points
checked against that preset (large hollow black-edged markers labelled ``published: ...``, as in
:mod:`distlab.viz.profile`). Sizes in bytes, bandwidth in GB/s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_int
from distlab.nccl.boxes import gpu_box
from distlab.nccl.tuning import busbw_gbps, compare_published, nccl_allreduce
from distlab.viz.axes import bytes_axis, plain_log_axis
from distlab.viz.figure import new_figure
from distlab.viz.palette import colours, nccl_pair
from distlab.vocabulary import size_label

__all__ = ["DEFAULT_SIZES", "Misses", "nccl_busbw_figure", "published_error_table",
           "published_misses"]

DEFAULT_SIZES = tuple(2 ** k for k in range(10, 34))
"""1 KiB to 8 GiB in powers of two, the range nccl-tests' ``-b 1K -e 8G -f 2`` sweeps."""

_CHOICE_MARKERS = {("ring", "LL"): "o", ("ring", "LL128"): "s", ("ring", "Simple"): "^",
                   ("tree", "LL"): "v", ("tree", "LL128"): "<", ("tree", "Simple"): ">",
                   ("nvls", "Simple"): "*"}
_PUBLISHED_MARKERS = ("D", "s", "^", "v", "P", "X", "o", "h")


def _pair_colour(algorithm: str, protocol: str) -> str:
    """The palette's colour of NCCL's (algorithm, protocol): its picked markers and its
    estimate line share it, in this figure and in notebook 14's."""
    return colours([nccl_pair(algorithm, protocol)])[nccl_pair(algorithm, protocol)]


def nccl_busbw_figure(presets: Sequence[Any] = ("h100_sxm8", "a100_sxm8", "pcie5_8"),
                      world_size: int = 8, sizes_bytes: Sequence[int] = DEFAULT_SIZES, *,
                      points: Iterable[dict[str, Any]] | None = None,
                      show_candidates: bool = True) -> Any:
    """Predicted busbw against size per preset, NCCL's pick marked, published points beside.

    Args:
        presets: GpuBox objects or preset names, one panel each.
        world_size: ranks (one per GPU), at least 2.
        sizes_bytes: message sizes for the model lines.
        points: published points (entries of ``published()["allreduce_8gpu"]``); each is drawn
            in the panel of its ``preset`` and only if its ``world_size`` matches. ``None``
            draws the shipped ones.
        show_candidates: also draw every candidate's estimate (thin dashed).
    """
    boxes = [gpu_box(p) for p in presets]
    if not boxes:
        raise ValueError("presets must name at least one preset, got an empty sequence")
    n = check_int("world_size", world_size, minimum=2)
    if points is None:
        from distlab.profile.load import published

        points = published()["allreduce_8gpu"]
    pts = [p for p in points if p["world_size"] == n]
    fig = new_figure(figsize=(9.4, 5.6 * len(boxes)))
    axes = fig.subplots(len(boxes), 1, squeeze=False)[:, 0]
    for ax, box in zip(axes, boxes, strict=False):
        choices = nccl_allreduce(box, n, sizes_bytes)
        xs = [c.nbytes for c in choices]
        ax.plot(xs, [c.busbw_gbps for c in choices], color="k", lw=1.5,
                label="model: NCCL's pick")
        for pair, marker in _CHOICE_MARKERS.items():
            at = [c for c in choices if (c.algorithm, c.protocol) == pair]
            if at:
                ax.plot([c.nbytes for c in at], [c.busbw_gbps for c in at], marker, ms=5,
                        ls="none", color=_pair_colour(*pair),
                        label=f"picked: {nccl_pair(*pair)}")
        if show_candidates:
            for i, cand in enumerate(choices[0].candidates):
                ys = [busbw_gbps(c.nbytes, c.candidates[i].seconds, n) for c in choices]
                ax.plot(xs, ys, ls="--", lw=0.8, alpha=0.6,
                        color=_pair_colour(cand.algorithm, cand.protocol),
                        label=f"estimate: {nccl_pair(cand.algorithm, cand.protocol)}")
        mine = [p for p in pts if p["preset"] == box.key]
        systems = list(dict.fromkeys(p["system"] for p in mine))
        for j, system in enumerate(systems):
            sp = [p for p in mine if p["system"] == system]
            forced = sp[0].get("nccl_algo")
            how = f", NCCL_ALGO={forced}" if forced else ""
            ax.plot([p["nbytes"] for p in sp], [p["busbw_gbps"] for p in sp],
                    _PUBLISHED_MARKERS[j % len(_PUBLISHED_MARKERS)], ms=8, mfc="none", mec="k",
                    label=f"published: {system}{how}")
        bytes_axis(ax, "x")
        plain_log_axis(ax, "y")
        ax.set_ylabel("busbw GB/s (nccl-tests)")
        ax.set_title(f"{box.name}, {n} GPUs", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2,
                  borderaxespad=0.0)
    return fig



@dataclass(frozen=True)
class Misses:
    """Where NCCL's estimate misses one published system by more than the limit: ``misses`` of
    its ``points``, from ``smallest`` to ``largest`` bytes, and ``sign``: +1 when every miss
    predicts more bandwidth than was published, -1 when every one predicts less, 0 when
    mixed."""

    system: str
    preset: str
    points: int
    misses: int
    smallest: int | None
    largest: int | None
    sign: int

    def line(self) -> str:
        """``10/18 miss, 64 KiB-32 MiB, high: <system>`` (``0/1 miss: <system>``); high: the
        model predicts more bandwidth than was published, low: less."""
        if not self.misses:
            return f"  {self.misses:>2}/{self.points:<2} miss: {self.system}"
        how = {1: "high", -1: "low", 0: "mixed"}[self.sign]
        return (f"  {self.misses:>2}/{self.points:<2} miss, {size_label(self.smallest)}-"
                f"{size_label(self.largest)}, {how}: {self.system}")


def published_misses(points: Iterable[dict[str, Any]] | None = None, *,
                     limit_pct: float = 20.0) -> list[Misses]:
    """Per published system (in the table's order): how many of its points NCCL's estimate
    misses by more than ``limit_pct``, at which sizes, and to which side."""
    if points is None:
        from distlab.profile.load import published

        points = published()["allreduce_8gpu"]
    by: dict[str, list[Any]] = {}
    for r in compare_published(points):
        by.setdefault(r.point["system"], []).append(r)
    out = []
    for system, rows in by.items():
        miss = [r for r in rows if abs(r.error_pct) > limit_pct]
        signs = {1 if r.error_pct > 0 else -1 for r in miss}
        sizes = [r.point["nbytes"] for r in miss]
        out.append(Misses(system, rows[0].point["preset"], len(rows), len(miss),
                          min(sizes, default=None), max(sizes, default=None),
                          signs.pop() if len(signs) == 1 else 0))
    return out


def published_error_table(points: Iterable[dict[str, Any]] | None = None, *,
                          limit_pct: float = 20.0) -> list[str]:
    """Text rows (point rows 66 characters wide, a system's line as long as its name): the column
    header, then per published system a line naming it and, indented, one row per point: size,
    ``NCCL_ALGO`` the run forced (``-``: none), NCCL's pick, published and predicted busbw (GB/s)
    and ``error% = (predicted - published) / published``; rows beyond ``limit_pct`` end in
    ``miss``, and the last line counts them. ``None`` uses the shipped points."""
    if points is None:
        from distlab.profile.load import published

        points = published()["allreduce_8gpu"]
    points = list(points)
    rows = compare_published(points)
    out = [f"  {'size(B)':>11} {'forced':>6} {'pick':>12} {'published':>9} {'model':>8} "
           f"{'error%':>7}"]
    misses = 0
    system = None
    for r in rows:
        p = r.point
        if p["system"] != system:
            system = p["system"]
            out.append(f"{system}:")
        miss = abs(r.error_pct) > limit_pct
        misses += miss
        out.append(f"  {p['nbytes']:>11} {p.get('nccl_algo') or '-':>6} "
                   f"{r.choice.algorithm + '/' + r.choice.protocol:>12} {p['busbw_gbps']:>9.2f} "
                   f"{r.predicted_busbw_gbps:>8.2f} {r.error_pct:>+7.1f}"
                   + ("  miss" if miss else ""))
    out.append(f"{len(rows) - misses} of {len(rows)} points within {limit_pct:g}%")
    return out
