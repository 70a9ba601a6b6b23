"""Figures for ZeRO: bytes per rank by stage against world size (model lines, measured points),
communication per step against DDP, and an explorer with sliders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w

from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.zero.comm_volume import comm_volume
from distlab.zero.memory_model import largest_model_that_fits, zero_memory

__all__ = ["ZeroExplorer", "comm_figure", "memory_figure"]

GIB = 2**30
_COLORS = {0: "C7", 1: "C0", 2: "C2", 3: "C3"}
_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def memory_figure(params: int, world_sizes: Sequence[int], precision: str = "mixed", *,
                  stages: Sequence[int] = (0, 1, 2, 3),
                  measured: Sequence[Mapping[str, Any]] = (), ax: Any = None,
                  title: str = "") -> Any:
    """Model-state bytes per rank (GiB, log scale) against world size, one line per stage;
    ``measured`` rows (``world_size``, ``stage``, ``measured["total"]`` bytes, for ``params``
    parameters) as points on the lines; returns the figure."""
    fig = ax.figure if ax is not None else new_figure(figsize=(8, 4.5))
    ax = ax if ax is not None else fig.subplots()
    for s in stages:
        ys = [zero_memory(params, n, s, precision).total / GIB for n in world_sizes]
        ax.plot(world_sizes, ys, "-", color=_COLORS[s], label=f"{_NAMES[s]} (model)")
    for s in stages:
        pts = [(m["world_size"], m["measured"]["total"] / GIB) for m in measured
               if m["stage"] == s]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o", color=_COLORS[s], mfc="none", ms=9,
                    label=f"{_NAMES[s]} measured")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("world size N (ranks)")
    ax.set_ylabel("model states per rank (GiB)")
    ax.set_title(title or f"{params:,} parameters, {precision} precision, Adam")
    ax.legend(fontsize="small", ncol=2)
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
    per rank by stage and says what the chosen stage holds and the largest model that fits in
    ``gpu_gib`` GiB. State: ``summary`` (the readout), ``figure``, ``png``, ``widget``."""

    def __init__(self, *, params_b: float = 7.5, world_size: int = 64, precision: str = "mixed",
                 stage: int = 2, gpu_gib: float = 80.0) -> None:
        st = {"description_width": "110px"}
        self.gpu_gib = gpu_gib
        self.params = w.FloatLogSlider(value=params_b, base=10, min=-1, max=3, step=0.05,
                                       description="params (B)", continuous_update=False,
                                       style=st)
        self.world = w.IntSlider(value=world_size, min=1, max=1024, description="world size",
                                 continuous_update=False, style=st)
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
                   f"{m.total / GIB:.2f} GiB per rank; largest model in "
                   f"{self.gpu_gib:g} GiB: {fits / 1e9:.2f} B parameters")
        sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, n})
        fig = memory_figure(p, sizes, prec)
        fig.axes[0].axvline(n, color="k", lw=0.8, ls=":")
        fig.axes[0].axhline(self.gpu_gib, color="k", lw=0.8, ls="--")
        return Drawing(fig, summary)
