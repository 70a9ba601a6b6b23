"""Figures for ZeRO: bytes per rank by stage against world size (model lines, measured points),
communication per step against DDP, and an explorer with sliders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w
from matplotlib.ticker import FuncFormatter, LogFormatter

from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.vocabulary import size_in
from distlab.zero.comm_volume import comm_volume
from distlab.zero.memory_model import byte_unit, largest_model_that_fits, zero_memory

__all__ = ["ZeroExplorer", "comm_figure", "memory_figure"]

GIB = 2**30
_COLORS = {0: "C7", 1: "C0", 2: "C2", 3: "C3"}
_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


class _PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as plain numbers (``0.5``, ``2``, ``100``), never ``4x10^-3``;
    matplotlib's own rule picks which minor ticks get a label."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:.3g}"


def _plain_number(x: float, _pos: Any = None) -> str:
    return f"{x:g}"


def _amount(x: float) -> str:
    """``x`` with three significant digits, whole numbers with separators from 1000 on."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


def memory_figure(params: int, world_sizes: Sequence[int], precision: str = "mixed", *,
                  stages: Sequence[int] = (0, 1, 2, 3),
                  measured: Sequence[Mapping[str, Any]] = (), ax: Any = None,
                  title: str = "", chosen: tuple[int, int] | None = None,
                  limit_bytes: float | None = None, limit_label: str = "") -> Any:
    """Model-state bytes per rank against world size (log-log), one line per stage; returns
    the figure.

    The y unit (KiB, MiB, GiB, TiB) is the one that fits the data drawn
    (:func:`distlab.zero.memory_model.byte_unit`) and is named in the axis label; ticks read as
    plain numbers. ``measured`` rows (``world_size``, ``stage``, ``measured["total"]`` bytes,
    for ``params`` parameters) are drawn as points on the lines. ``chosen`` = ``(stage,
    world_size)`` draws that stage's line thick (the others faded) and a dot at that world size
    whose legend entry gives its bytes per rank. ``limit_bytes`` draws a dashed horizontal line
    (a GPU's memory) labelled ``limit_label`` at its right end."""
    fig = ax.figure if ax is not None else new_figure(figsize=(9.4, 4.5))
    ax = ax if ax is not None else fig.subplots()
    model = {s: [zero_memory(params, n, s, precision).total for n in world_sizes] for s in stages}
    points = {s: [(m["world_size"], m["measured"]["total"]) for m in measured if m["stage"] == s]
              for s in stages}
    drawn = [b for ys in model.values() for b in ys] + [b for pts in points.values()
                                                         for _, b in pts]
    unit, scale = byte_unit(drawn)
    chosen_stage = chosen[0] if chosen is not None else None
    for s in stages:
        main = s == chosen_stage
        faded = chosen_stage is not None and not main
        ax.plot(world_sizes, [b / scale for b in model[s]], "-", color=_COLORS[s],
                lw=3.0 if main else 1.5, alpha=0.45 if faded else 1.0,
                label=f"{_NAMES[s]} (model)" + (", chosen" if main else ""))
    for s in stages:
        if points[s]:
            xs, ys = zip(*points[s], strict=True)
            ax.plot(xs, [b / scale for b in ys], "o", color=_COLORS[s], mfc="none", ms=9,
                    label=f"{_NAMES[s]} measured")
    if chosen is not None:
        stage, n = chosen
        total = zero_memory(params, n, stage, precision).total / scale
        ax.plot([n], [total], "o", color=_COLORS[stage], ms=10, mec="k", zorder=5,
                label=f"{_NAMES[stage]} at N={n}: {_amount(total)} {unit} per rank")
    if limit_bytes is not None:
        ax.axhline(limit_bytes / scale, color="k", lw=0.8, ls="--")
        ax.text(0.99, limit_bytes / scale, limit_label or f"{limit_bytes / scale:g} {unit}",
                transform=ax.get_yaxis_transform(), ha="right", va="top", fontsize="small",
                zorder=6, bbox={"fc": "white", "ec": "none", "alpha": 0.85, "pad": 1.5})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain_number))
    ax.yaxis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False,
                                                    minor_thresholds=(1, 0.4)))
    ax.set_xlabel("world size N (ranks)")
    ax.set_ylabel(f"model states per rank ({unit})")
    ax.set_title(title or f"{params:,} parameters, {precision} precision, Adam")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="both", alpha=0.3)
    return fig


def comm_figure(params: int, world_sizes: Sequence[int], precision: str = "mixed", *,
                ax: Any = None) -> Any:
    """Bytes the busiest rank sends per step, by stage, relative to DDP's all-reduce."""
    fig = ax.figure if ax is not None else new_figure(figsize=(8, 3.5))
    ax = ax if ax is not None else fig.subplots()
    for s in (0, 1, 2, 3):
        ys = [comm_volume(params, n, s, precision) / comm_volume(params, n, 0, precision)
              for n in world_sizes]
        ax.plot(world_sizes, ys, "o-" if s in (0, 3) else "--", color=_COLORS[s],
                label=_NAMES[s])
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 2)
    ax.set_xlabel("world size N (ranks)")
    ax.set_ylabel("bytes sent per step / DDP's")
    ax.set_title(f"communication per step (ring plans), {params:,} parameters")
    ax.legend(fontsize="small")
    return fig


class ZeroExplorer(Explorer):
    """Sliders for parameter count (billions), world size, precision and stage; redraws bytes
    per rank by stage with the chosen stage's line thick and a dot at the chosen world size
    (its bytes per rank in the legend), the world size as a dotted vertical line and
    ``gpu_gib`` GiB as a labelled dashed line, and says what the chosen stage holds and the
    largest model that fits in ``gpu_gib`` GiB. State: ``summary`` (the readout), ``figure``,
    ``png``, ``widget``."""

    def __init__(self, *, params_b: float = 7.5, world_size: int = 64, precision: str = "mixed",
                 stage: int = 2, gpu_gib: float = 80.0) -> None:
        st = {"description_width": "110px"}
        self.gpu_gib = gpu_gib
        self.params = w.FloatLogSlider(value=params_b, base=10, min=-1, max=3, step=0.05,
                                       description="params (B)", continuous_update=False,
                                       style=st)
        # world sizes spaced evenly on the figure's log axis (each power of two and the one
        # halfway, 1.5x), so a step of the slider moves the dot as far at 8 ranks as at 512
        sizes = sorted({1, *(k << j for j in range(10) for k in (2, 3) if k << j <= 1024),
                        int(world_size)})
        self.world = w.SelectionSlider(options=sizes, value=int(world_size),
                                       description="world size", continuous_update=False,
                                       style=st)
        self.precision = w.Dropdown(options=["mixed", "fp32"], value=precision,
                                    description="precision", style=st)
        self.stage = w.IntSlider(value=stage, min=0, max=3, description="stage",
                                 continuous_update=False, style=st)
        super().__init__([self.params, self.world, self.precision, self.stage],
                         rows=[w.HBox([w.VBox([self.params, self.world]),
                                       w.VBox([self.precision, self.stage])])])

    def draw(self) -> Drawing:
        """Bytes per rank by stage, the chosen world size and the GPU's memory marked."""
        p = int(self.params.value * 1e9)
        n, prec, s = self.world.value, self.precision.value, self.stage.value
        m = zero_memory(p, n, s, prec)
        fits = largest_model_that_fits(self.gpu_gib * GIB, n, s, prec)
        summary = (f"{_NAMES[s]}, N={n}: params {m.params / GIB:.2f} + grads "
                   f"{m.grads / GIB:.2f} + optimizer {m.optimizer / GIB:.2f} = "
                   f"{size_in(m.total, 'GiB', '.2f')} per rank; largest model in "
                   f"{self.gpu_gib:g} GiB: {fits / 1e9:.2f} B parameters")
        sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, n})
        fig = memory_figure(p, sizes, prec, chosen=(s, n), limit_bytes=self.gpu_gib * GIB,
                            limit_label=f"{self.gpu_gib:g} GiB per GPU")
        fig.axes[0].axvline(n, color="k", lw=0.8, ls=":")
        return Drawing(fig, summary)
