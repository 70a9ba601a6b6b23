"""The planner drawn: memory per GPU and the step of priced layouts, the best layout against the
GPU count, the planner judged on published runs, a pipeline layout's simulated step.

- :func:`memory_figure`: memory per GPU of several priced layouts
  (:class:`~distlab.plan.planner.LayoutPrice`) as stacked bars by part (:data:`MEMORY_PARTS`),
  the GPU's memory as a dashed line and, shaded below it, the memory model's own error
  (:func:`~distlab.plan.planner.tight_margin_bytes`); a layout that does not fit is hatched
  with a red edge, its total and its name in red, a tight one (it fits within that error)
  says so under its total, and a bar taller than the axes is cut at the top with its total
  written in it.
- :func:`step_figure`: the same layouts' steps as stacked bars by part (the registered
  dimensions' stacks, :func:`distlab.plan.dimensions.stack_parts`),
  tokens per second per GPU above each bar; a layout that does not fit is hatched with a red
  edge (no part's colour is faded into another's).
- :func:`best_by_gpus`, :func:`scaling_figure` and :func:`scaling_table`: the first layout of
  :func:`~distlab.plan.planner.plan`'s ranking (the command's first) and its tokens/s per GPU for
  each GPU count, one panel per series (another sequence length, another network), each point
  labelled with the layout's :func:`short_label`.
- :func:`judged_figure`: the planner judged
  (:func:`~distlab.evidence.plan.judged.judge_published`): every published run's step, measured
  against the model, log-log, with the diagonal and a band of +-30%, calibration and held-out
  runs apart; beside it each source's median and p90 ``|error|``.
- :func:`fit_grid_figure`: the planner beside measured GPU runs
  (:func:`~distlab.judge.fit_grid.judge_grid`): each run's peak reserved bytes and step,
  measured against the model's, calibration and held-out runs apart, runs under a capped
  allocator hollow, those that ran out of memory marked.
- :func:`pipeline_figure`: the simulated step of a pipeline layout
  (:func:`distlab.viz.pipeline_parallel.simulation_gantt` of its
  :attr:`~distlab.plan.step.StepEstimate.simulation`).
- :func:`plan_table`: priced layouts as the planner's command prints them
  (:func:`distlab.plan.table.plan_rows`), in a few of its columns (:data:`PLAN_COLUMNS`,
  :data:`MEMORY_COLUMNS`, :data:`STEP_COLUMNS`: narrow enough for a notebook).
- :class:`PlannerExplorer`: model preset, GPUs, GPU kind, network, sequence length and global
  batch -> the first layouts of :func:`~distlab.plan.planner.plan`'s ranking: their memory and
  step, and a table under the figure; :func:`plan_summary`, its line above the figure.

Colours are :mod:`distlab.viz.palette`'s (:data:`~distlab.viz.palette.PLAN_COLOURS`, and the
span kinds' ``compute`` and ``bubble``). Every figure is made with
:func:`~distlab.viz.figure.new_figure` (it displays once) and fits JupyterLab's 968 px.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as w
import numpy as np
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullLocator

from distlab.evidence.plan.judged import STEP_TARGET, PlanJudgement
from distlab.judge.fit_grid import GridRun
from distlab.judge.fit_grid import counts as grid_counts
from distlab.judge.fit_grid import summaries as grid_summaries
from distlab.nccl.multinode import NETWORKS
from distlab.plan.calibration import RESERVED_ERROR_P90, SHIPPED, ComputeRate, rate_key
from distlab.plan.dimensions import stack_parts
from distlab.plan.kernels import attention_factor
from distlab.plan.layout import (
    GPU_KINDS,
    Hardware,
    Layout,
    gpu_kind,
    hardware,
)
from distlab.plan.planner import TIE, LayoutPrice, Plan, plan, tight_margin_bytes
from distlab.plan.table import TIGHT, plan_rows, tight_note
from distlab.plan.table import columns as command_columns
from distlab.report.html import HtmlTable
from distlab.report.table import Column, format_table
from distlab.report.words import seconds
from distlab.transformer import PRESETS, ModelSpec, model_spec
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import message_figure, new_figure
from distlab.viz.palette import colour, colours
from distlab.viz.pipeline_parallel import simulation_gantt
from distlab.vocabulary import error_pct, size_in

__all__ = ["FIG_WIDTH_IN", "MEMORY_COLUMNS", "MEMORY_PARTS", "PLAN_COLUMNS", "STEP_COLUMNS",
           "PlannerExplorer",
           "ScalingSeries", "best_by_gpus", "fit_grid_figure", "judged_figure", "kernels_figure",
           "memory_figure", "pipeline_figure", "plan_summary", "plan_table", "planning_line",
           "scaling_figure", "scaling_table", "short_label", "step_figure"]

#: Figure width in inches: at the default 100 dpi the image stays within JupyterLab's 968 px.
FIG_WIDTH_IN = 9.2
GIB = 2**30

#: The stacks of :func:`memory_figure`: palette name -> the parts of a
#: :class:`~distlab.plan.memory.MemoryEstimate` it sums (bottom to top).
MEMORY_PARTS: dict[str, tuple[str, ...]] = {
    "parameters": ("params",), "gradients": ("grads",), "optimizer state": ("optimizer",),
    "activations": ("activations",),
    "gathered, buffers, transients": ("gathered", "comm_buffers", "working"),
    "allocator reserve": ("allocator",), "outside the allocator": ("device",),
}



def _columns(*headers: str) -> tuple[Column, ...]:
    by_header = {c.header: c for c in command_columns()}
    return tuple(by_header[h] for h in headers)


#: The planner command's columns (:func:`distlab.plan.table.columns`) a notebook prints of
#: a ranking: memory and whether it fits, the step and its communication, tokens/s, MFU.
PLAN_COLUMNS = _columns("#", "layout", "mem GiB", "fits", "step s", "tp+cp", "dp+fsdp",
                        "bubble", "tok/s/GPU", "MFU %")
#: The command's memory columns: GiB per GPU, model states, activations, the rest, fits.
MEMORY_COLUMNS = _columns("#", "layout", "mem GiB", "states", "act", "other", "fits")
#: The command's step columns: seconds by part (and the optimizer's step, ``optim``, which the
#: command's table leaves in ``step s``), tokens/s per GPU, MFU.
STEP_COLUMNS = (*_columns("#", "layout", "step s", "compute", "tp+cp", "dp+fsdp", "bubble"),
                Column("optim", "optimizer", ".3f"), *_columns("tok/s/GPU", "MFU %"))

_SHORT_SCHEDULES = {"Interleaved1F1B": "i1F1B", "InterleavedZeroBubble": "iZB",
                    "ZBVZeroBubble": "ZBV"}
_NOT_FIT = "#c0392b"                       # the text and edge of a layout that does not fit
_NOT_FIT_HATCH = "////"                    # and its bars' hatch, over the parts' own colours
_TIGHT = "#b35806"                         # the label of a layout that fits, tight
_EDGE = "#8a8a8a"
_SERIES = ("#222222", "#1b9e77", "#d95f02", "#7570b3")   # no palette names drawn
_LINE = "0.55"
_BEHIND = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
           "alpha": 0.8}
_OPAQUE = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}


def short_label(layout: Layout) -> str:
    """``layout`` in two lines for an axis: the split (``"dp2 tp4 pp4 cp2 ep8"``: ``dp``
    always, the others where above 1), then how (``fsdp`` or ``zero1``, ``ddp`` for replicated
    states over several replicas; the pipeline schedule, ``i1F1Bx2`` for interleaved 1F1B with two
    stages per rank; ``mb2`` for a micro-batch above 1; ``full-ac`` / ``op-ac`` / ``sel`` recompute;
    ``no-sp`` where ``tp > 1`` runs without sequence parallelism, which the planner always
    turns on; ``async-tp``; ``fp8``)."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a distlab.plan.Layout, got {type(layout).__name__}")
    dims = [f"dp{layout.dp}"] + [f"{d}{getattr(layout, d)}" for d in ("tp", "pp", "cp", "ep")
                                 if getattr(layout, d) > 1]
    how = []
    if layout.zero:
        how.append("fsdp" if layout.zero == 3 else f"zero{layout.zero}")
    elif layout.dp * layout.cp > 1:
        how.append("ddp")
    if layout.pp > 1:
        name = _SHORT_SCHEDULES.get(layout.schedule, layout.schedule)
        how.append(name + (f"x{layout.stages_per_rank}" if layout.stages_per_rank > 1 else ""))
    if layout.micro_batch > 1:
        how.append(f"mb{layout.micro_batch}")
    if layout.recompute_policy.label:
        how.append(layout.recompute_policy.label)
    if layout.tp > 1 and not layout.sequence_parallel:
        how.append("no-sp")
    if layout.tp_overlap:
        how.append("async-tp")
    if layout.compute_dtype != "bf16":
        how.append(layout.compute_dtype)
    return " ".join(dims) + ("\n" + " ".join(how) if how else "")


def _check_prices(prices: Sequence[LayoutPrice]) -> list[LayoutPrice]:
    prices = list(prices)
    if not prices:
        raise ValueError("prices must hold at least one LayoutPrice, got none")
    for p in prices:
        if not isinstance(p, LayoutPrice):
            raise TypeError(f"prices must hold LayoutPrice (distlab.plan.planner.price), got "
                            f"{type(p).__name__}")
    kinds = {p.step.hardware.gpu.name for p in prices}
    if len(kinds) > 1:
        raise ValueError(f"prices must be on one GPU kind (one memory line), got {sorted(kinds)}")
    return prices


def _axes(ax: Any, height_in: float) -> tuple[Any, Any]:
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(figsize=(FIG_WIDTH_IN, height_in))
    return fig, fig.add_subplot()


def _tick_label(layout: Layout) -> str:
    """:func:`short_label` for a bar's tick: a split of four or more dimensions in two lines
    (``"dp1 tp8 pp32\\ncp2"``), so that it stays within its bar's slot beside the next one."""
    split, *how = short_label(layout).split("\n")
    dims = split.split()
    if len(dims) > 3:
        split = " ".join(dims[:3]) + "\n" + " ".join(dims[3:])
    return "\n".join([split, *how])


def _layout_ticks(ax: Any, prices: Sequence[LayoutPrice], fontsize: float) -> None:
    ax.set_xticks(range(len(prices)), [_tick_label(p.layout) for p in prices],
                  fontsize=fontsize)
    for tick, p in zip(ax.get_xticklabels(), prices, strict=False):   # none when hidden
        if not p.fits:
            tick.set_color(_NOT_FIT)
    ax.set_xlim(-0.6, len(prices) - 0.4)


def _mark_not_fit(bars: Any, prices: Sequence[LayoutPrice]) -> None:
    """Hatch the bars of layouts that do not fit, with a red edge: a pattern no part's colour
    can be mistaken for."""
    for bar, p in zip(bars, prices, strict=True):
        if not p.fits:
            bar.set_hatch(_NOT_FIT_HATCH)
            bar.set_edgecolor(_NOT_FIT)
            bar.set_linewidth(0.8)


def _not_fit_handle() -> Patch:
    """The legend's entry for :func:`_mark_not_fit`'s bars."""
    return Patch(facecolor="white", edgecolor=_NOT_FIT, hatch=_NOT_FIT_HATCH, linewidth=0.8,
                 label="hatched, red edge: does not fit")


def _part_sums(values: Mapping[str, float], parts: Mapping[str, tuple[str, ...]]
               ) -> dict[str, float]:
    return {name: sum(values.get(k, 0.0) for k in keys) for name, keys in parts.items()}


def _gib(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _label_height(ax: Any, text: str, fontsize: float) -> float:
    """The height of ``text`` at ``fontsize`` points (its box's padding included) in ``ax``'s
    data units, from the axes' size in the figure (its y limits already set)."""
    lines = text.count("\n") + 1
    points = fontsize * (1.1 * lines + 0.5)
    height_in = ax.get_position().height * ax.figure.get_size_inches()[1]
    low, high = ax.get_ylim()
    return points / 72.0 / max(height_in, 1e-9) * (high - low)


def memory_figure(prices: Sequence[LayoutPrice], *, title: str | None = None, ax: Any = None,
                  cap: float = 2.2, fontsize: float = 8.0) -> Any:
    """Memory per GPU of each of ``prices`` (one GPU kind), stacked by :data:`MEMORY_PARTS` in
    GiB, the GPU's memory a dashed line. Each bar's total stands above it, in red with ``does
    not fit`` where it exceeds the GPU (the layout's name in red too). The axis reaches
    ``cap`` times the GPU's memory, or above the largest total that fits or stays under that,
    with room for its label; a taller bar is cut there with its total written inside its top.
    ``ax``: draw into these axes (its figure is returned). Returns the Figure."""
    prices = _check_prices(prices)
    fig, ax = _axes(ax, 4.2)
    gpu = prices[0].step.hardware.gpu
    limit = gpu.memory_bytes / GIB
    totals = [p.memory.total / GIB for p in prices]
    # room above every bar drawn whole (one that fits, or one under the cap) for its label
    top = max([limit * cap] + [t * 1.18 for t, p in zip(totals, prices, strict=True)
                               if p.fits or t <= limit * cap])
    if max(totals) * 1.18 <= top:
        top = max(limit, max(totals)) * 1.22
    bottom = [0.0] * len(prices)
    for name in MEMORY_PARTS:
        heights = [_part_sums(p.memory.parts(), MEMORY_PARTS)[name] / GIB for p in prices]
        bars = ax.bar(range(len(prices)), heights, 0.62, bottom=bottom, color=colour(name),
                      edgecolor=_EDGE, linewidth=0.3, label=name)
        _mark_not_fit(bars, prices)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    margin = tight_margin_bytes(prices[0].step.hardware)
    ax.axhspan(limit - margin / GIB, limit, color=_TIGHT, alpha=0.14, lw=0,
               label=f"{TIGHT}: within the model's\n{RESERVED_ERROR_P90:.1f}% p90 error "
                     f"({size_in(margin, 'GiB')})")
    ax.axhline(limit, color="black", ls="--", lw=1.0, label=f"GPU memory ({_gib(limit)} GiB)")
    ax.set_ylim(0, top)
    for i, (total, p) in enumerate(zip(totals, prices, strict=True)):
        text = f"{_gib(total)} GiB" + ("" if p.fits else "\ndoes not fit") + (
            f"\n{TIGHT}: {p.headroom_bytes / GIB:+.1f}" if p.tight else "")
        c = _TIGHT if p.tight else "black" if p.fits else _NOT_FIT
        if total > top:
            ax.text(i, top * 0.97, text.replace(" GiB", " GiB ↑", 1), ha="center", va="top",
                    fontsize=fontsize, color=c, linespacing=1.1,
                    bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": c,
                          "linewidth": 0.6})
        else:
            # a label that would sit on the GPU-memory line goes above it
            y = total + top * 0.015
            if y <= limit + top * 0.005 and y + _label_height(ax, text, fontsize) >= limit:
                y = limit + top * 0.012
            ax.text(i, y, text, ha="center", va="bottom", fontsize=fontsize,
                    color=c, linespacing=1.1, bbox=_BEHIND)
    _layout_ticks(ax, prices, fontsize)
    ax.set_ylabel("GiB per GPU")
    ax.grid(axis="y", alpha=0.3)
    hw = prices[0].step.hardware
    ax.set_title(title if title is not None else
                 f"memory per GPU, most loaded GPU of each layout ({hw.gpus}x {gpu.name})",
                 fontsize="medium")
    handles, labels = ax.get_legend_handles_labels()
    by_label = dict(zip(labels, handles, strict=True))
    # each part as its colour alone (a bar's own handle would carry the first bar's hatch)
    by_label |= {name: Patch(facecolor=colour(name), edgecolor=_EDGE, linewidth=0.3)
                 for name in MEMORY_PARTS}
    labels = [*reversed(MEMORY_PARTS), *(x for x in labels if x not in MEMORY_PARTS)]
    handles = [by_label[x] for x in labels]   # the stack's top part first, then the lines
    if not all(p.fits for p in prices):
        handles.append(_not_fit_handle())
        labels.append(handles[-1].get_label())
    ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def step_figure(prices: Sequence[LayoutPrice], *, title: str | None = None, ax: Any = None,
                fontsize: float = 8.0) -> Any:
    """The step of each of ``prices`` stacked by the registered dimensions' stacks
    (:func:`distlab.plan.dimensions.stack_parts`) in seconds (the slowest
    rank's compute, exposed tensor/context-parallel and data-parallel/FSDP communication, the
    pipeline bubble, the optimizer's step, and what a registered dimension adds, in a spare
    colour where the palette has none), tokens per second per GPU above each bar. A layout
    that does not fit keeps its parts' colours, hatched with a red edge, its name in red.
    ``ax``: draw into these axes. Returns the Figure."""
    prices = _check_prices(prices)
    fig, ax = _axes(ax, 4.2)
    # a model with experts adds the expert-parallel stack
    stacks = stack_parts(next((p.step.model for p in prices if p.step.model.moe), None))
    fills = colours(stacks)
    bottom = [0.0] * len(prices)
    for name in stacks:
        heights = [_part_sums(p.step.parts(), stacks)[name] for p in prices]
        bars = ax.bar(range(len(prices)), heights, 0.62, bottom=bottom, color=fills[name],
                      edgecolor=_EDGE, linewidth=0.3, label=name)
        _mark_not_fit(bars, prices)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    top = max(bottom) * 1.2
    for i, p in enumerate(prices):
        ax.text(i, bottom[i] + top * 0.015, f"{p.step.tokens_per_s_per_gpu:,.0f}",
                ha="center", va="bottom", fontsize=fontsize,
                color="black" if p.fits else _NOT_FIT)
    ax.set_ylim(0, top)
    _layout_ticks(ax, prices, fontsize)
    ax.set_ylabel("seconds per step")
    ax.grid(axis="y", alpha=0.3)
    batch = prices[0].layout.global_batch
    same = all(p.layout.global_batch == batch for p in prices)
    ax.set_title(title if title is not None else
                 "one step" + (f" of {batch} sequences" if same else "")
                 + " by part; tokens/s per GPU above each bar", fontsize="medium")
    handles = [Patch(facecolor=fills[name], edgecolor=_EDGE, linewidth=0.3, label=name)
               for name in reversed(stacks)]               # the stack's top part first
    if not all(p.fits for p in prices):
        handles.append(_not_fit_handle())
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@dataclass(frozen=True)
class ScalingSeries:
    """The first layout of the planner's ranking (``None``: nothing fits) of ``model`` for each
    GPU count of ``gpus``, on one GPU kind and network, ``global_batch`` sequences per step."""

    label: str
    model: ModelSpec
    global_batch: int
    gpus: tuple[int, ...]
    best: tuple[LayoutPrice | None, ...]

    def tokens_per_s_per_gpu(self) -> list[float | None]:
        """Tokens/s per GPU of each count's best layout (``None`` where nothing fits)."""
        return [None if b is None else b.step.tokens_per_s_per_gpu for b in self.best]

    def labels(self) -> list[str | None]:
        """Each count's best layout's :attr:`~distlab.plan.layout.Layout.label`."""
        return [None if b is None else b.layout.label for b in self.best]


def best_by_gpus(model: ModelSpec | str, gpus: Sequence[int], global_batch: int, *,
                 gpu: str = "h100", network: str | None = None, label: str | None = None,
                 **choices: Any) -> ScalingSeries:
    """:func:`~distlab.plan.planner.plan` of ``model`` on each count of ``gpus`` (``gpu``
    GPUs, 8 per node, ``network`` between nodes: :func:`~distlab.plan.layout.hardware`'s
    default when None) for ``global_batch`` sequences; the first of its ranking each time, as
    ``python -m distlab.plan`` ranks it. ``choices`` narrow the layouts tried
    (``micro_batches=(1,)``: a third of the time; the command tries them all); ``label`` names
    the series (default the model, sequence and network)."""
    spec = model_spec(model) if not isinstance(model, ModelSpec) else model
    counts = tuple(int(g) for g in gpus)
    if not counts:
        raise ValueError("gpus must hold at least one GPU count, got none")
    best = tuple(plan(spec, hardware(gpu, g, network=network), global_batch, top=1,
                      **choices).best for g in counts)
    net = network or hardware(gpu, 16).network       # the default between nodes
    where = f"over {net}" if max(counts) > 8 else "on one node"
    name = label or f"{spec.name}, sequence {spec.seq_len}, {where}"
    return ScalingSeries(name, spec, global_batch, counts, best)


def scaling_table(series: ScalingSeries) -> str:
    """One series as a text table: each GPU count, its best layout (``-``: nothing fits),
    tokens/s per GPU and MFU."""
    if not isinstance(series, ScalingSeries):
        raise TypeError(f"series must be a ScalingSeries, got {type(series).__name__}")
    rows = [{"gpus": g, "layout": "nothing fits" if b is None else b.layout.label,
             "tokens": None if b is None else b.step.tokens_per_s_per_gpu,
             "mfu": None if b is None else b.step.mfu} for g, b in zip(series.gpus, series.best,
                                                                       strict=True)]
    return format_table(rows, [Column("GPUs", "gpus"), Column("best layout", "layout", align="<"),
                               Column("tok/s/GPU", "tokens", ".0f"),
                               Column("MFU %", "mfu", ".1f", scale=100)])


def scaling_figure(series: Sequence[ScalingSeries], *, title: str | None = None,
                   fontsize: float = 7.0) -> Any:
    """Tokens/s per GPU of the best layout against the GPU count (log 2), one panel per
    series (its points and line in its colour, the other series faint grey behind for
    comparison, both named in a legend under the panels), each point labelled with its
    layout's :func:`short_label` on a white box the grey lines pass behind; a count where
    nothing fits is an ``x`` on the axis marked ``nothing fits``. Returns the Figure."""
    series = list(series)
    if not series:
        raise ValueError("series must hold at least one ScalingSeries, got none")
    for s in series:
        if not isinstance(s, ScalingSeries):
            raise TypeError(f"series must hold ScalingSeries (best_by_gpus), got "
                            f"{type(s).__name__}")
    values = [t for s in series for t in s.tokens_per_s_per_gpu() if t is not None]
    top = max(values, default=1.0) * 1.42
    fig = new_figure(figsize=(FIG_WIDTH_IN, 0.85 + 2.05 * len(series)))
    axes = fig.subplots(len(series), 1, squeeze=False, sharex=True, sharey=True)[:, 0]
    counts = sorted({g for s in series for g in s.gpus})
    for k, (ax, s) in enumerate(zip(axes, series, strict=True)):
        for other in series:
            if other is not s:
                pts = [(g, t) for g, t in zip(other.gpus, other.tokens_per_s_per_gpu(),
                                              strict=True) if t is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=True), "-", color=_LINE, lw=0.9, alpha=0.6)
        pts = [(g, t) for g, t in zip(s.gpus, s.tokens_per_s_per_gpu(), strict=True)
               if t is not None]
        c = _SERIES[k % len(_SERIES)]
        if pts:
            ax.plot(*zip(*pts, strict=True), "o-", color=c, lw=1.6, ms=5)
        for g, b in zip(s.gpus, s.best, strict=True):
            if b is None:
                ax.plot([g], [0], "x", color=_NOT_FIT, ms=7, mew=1.5, clip_on=False)
                ax.annotate("nothing fits", (g, 0), xytext=(0, 6), textcoords="offset points",
                            ha="center", va="bottom", fontsize=fontsize, color=_NOT_FIT)
            else:
                ax.annotate(short_label(b.layout), (g, b.step.tokens_per_s_per_gpu),
                            xytext=(0, 5), textcoords="offset points", ha="center",
                            va="bottom", fontsize=fontsize, linespacing=1.0, color=c,
                            bbox=_OPAQUE, zorder=4)   # the faint lines pass behind it
        ax.set_title(f"{s.label}, global batch {s.global_batch}", fontsize="medium",
                     loc="left", color=c)
        ax.set_ylabel("tokens/s per GPU", fontsize="small")
        ax.grid(alpha=0.3)
    ax = axes[-1]
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(g) for g in counts])
    ax.xaxis.set_minor_locator(NullLocator())
    lo, hi = min(counts), max(counts)
    ax.set_xlim(lo / 1.45, hi * 1.45)
    ax.set_ylim(0, top)
    ax.set_xlabel("GPUs")
    handles = [Line2D([], [], color=_SERIES[0], marker="o", lw=1.6, ms=5,
                      label="the panel's series: its best layout at each count, labelled")]
    if len(series) > 1:
        handles.append(Line2D([], [], color=_LINE, lw=0.9, alpha=0.6,
                              label="the other panels' series, for comparison"))
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize="small", frameon=False)
    fig.get_layout_engine().set(rect=(0, 0.045 if len(series) > 1 else 0.06, 1, 0.955))
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig


def judged_figure(judgement: PlanJudgement, *, band_pct: float = 30.0) -> Any:
    """The planner judged on published runs (:func:`~distlab.evidence.plan.judged.
    judge_published`). Left: every run's published step against the model's, log-log, the
    diagonal and a band of ``+-band_pct`` % around it, calibration runs (the compute rate was
    fitted on them) and held-out runs (never fitted on) apart. Right: each source's median
    ``|error|`` as a bar, its p90 as a tick, sources grouped by split, the target median
    (:data:`~distlab.evidence.plan.judged.STEP_TARGET`) dashed. Returns the Figure."""
    if not isinstance(judgement, PlanJudgement):
        raise TypeError(f"judgement must be a PlanJudgement (judge_published), got "
                        f"{type(judgement).__name__}")
    runs = judgement.runs
    fig = new_figure(figsize=(FIG_WIDTH_IN, 5.2))
    left, right = fig.subplots(1, 2, width_ratios=(1.0, 0.95))
    xs = [r.model_step_s for r in runs]
    ys = [r.measured_step_s for r in runs]
    lo, hi = min(xs + ys) / 1.6, max(xs + ys) * 1.6
    band = band_pct / 100.0
    left.fill_between([lo, hi], [lo * (1 - band), hi * (1 - band)],
                      [lo * (1 + band), hi * (1 + band)], color="#e8e8e8", lw=0,
                      label=f"within ±{band_pct:g}% of the model")
    left.plot([lo, hi], [lo, hi], "-", color="0.4", lw=0.8, label="measured = model")
    styles = {"calibration": ("o", 18), "held_out": ("^", 26)}
    for split, (marker, size) in styles.items():
        mine = [r for r in runs if r.split == split]
        if not mine:
            continue
        name = "held out" if split == "held_out" else split
        left.scatter([r.model_step_s for r in mine], [r.measured_step_s for r in mine],
                     s=size, marker=marker, color=colour(name), alpha=0.85, lw=0,
                     label=f"{name} ({len(mine)} runs)")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlim(lo, hi)
    left.set_ylim(lo, hi)
    left.set_xlabel("model step (s)")
    left.set_ylabel("published step (s)")
    left.set_title("every published run, priced as it states its layout", fontsize="medium")
    left.grid(alpha=0.3, which="major")

    split_of = {r.inputs.run.source: r.split for r in runs}
    order = ([s for s in judgement.sources if split_of[s] == "calibration"]
             + [s for s in judgement.sources if split_of[s] != "calibration"])
    summaries = [judgement.step_summary(source=s) for s in order]
    ypos = list(range(len(order)))[::-1]
    for y, src, summ in zip(ypos, order, summaries, strict=True):
        name = "held out" if split_of[src] == "held_out" else "calibration"
        right.barh(y, summ.median, 0.62, color=colour(name), alpha=0.85)
        right.plot([summ.p90], [y], "|", color="black", ms=9, mew=1.4)
        right.text(max(summ.p90, summ.median) + 2.0, y, f"{summ.n}", va="center",
                   fontsize=7, color="0.3")
    right.axvline(STEP_TARGET[0], color="black", ls="--", lw=0.8)
    right.set_yticks(ypos, order, fontsize=7)
    right.set_ylim(-0.7, len(order) - 0.3)
    xmax = max(s.p90 for s in summaries) * 1.12 + 6
    right.set_xlim(0, xmax)
    right.set_xlabel("|error| of the step (%)")
    right.set_title("per source: median (bar), p90 (|), runs", fontsize="medium")
    right.grid(axis="x", alpha=0.3)
    right.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    handles, _ = left.get_legend_handles_labels()
    handles.append(Line2D([], [], color="black", ls="--", lw=0.8,
                          label=f"target median |error| {STEP_TARGET[0]:g}%"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize="small", frameon=False)
    fig.get_layout_engine().set(rect=(0, 0.1, 1, 0.9))
    return fig


def fit_grid_figure(runs: Sequence[GridRun], *, band_pct: float = 5.0) -> Any:
    """The planner beside measured GPU runs (:func:`~distlab.judge.fit_grid.judge_grid` of a
    verify grid). Left: each run's measured peak reserved bytes against the model's, GiB, the
    diagonal and a band of ``+-band_pct`` % around it; a run whose allocator was capped (a
    smaller GPU's memory) drawn hollow; a run that ran out of memory under a cap as a red ``x``
    at the model's reserve with memory to spare and the cap it hit; dotted, what the allocator
    of an uncapped run could take (the GPU's memory less what lies outside the allocator).
    Right: each run's measured step against the model's, log-log (a capped run's step is not
    judged). Calibration and held-out runs apart (:data:`~distlab.judge.fit_grid.
    CALIBRATION_MODELS`); each panel's title gives the held-out median ``|error|``. Returns the
    Figure."""
    runs = list(runs)
    if not runs:
        raise ValueError("runs must hold at least one GridRun (judge_grid), got none")
    for r in runs:
        if not isinstance(r, GridRun):
            raise TypeError(f"runs must hold GridRun (distlab.judge.fit_grid.judge_grid), got "
                            f"{type(r).__name__}")
    band = band_pct / 100.0
    fig = new_figure(figsize=(FIG_WIDTH_IN, 4.9))
    left, right = fig.subplots(1, 2)
    held = grid_summaries(runs, "held_out")
    styles = {"calibration": ("o", 22), "held_out": ("^", 30)}
    names = {"calibration": "calibration", "held_out": "held out"}

    def allocator_gib(r: GridRun) -> float:
        return (r.price.step.hardware.gpu.memory_bytes - r.price.memory.device) / GIB

    def diagonal(ax: Any, lo: float, hi: float) -> None:
        xs = list(np.geomspace(lo, hi, 16)) if ax is right else [lo, hi]
        ax.fill_between(xs, [x * (1 - band) for x in xs], [x * (1 + band) for x in xs],
                        color="#e8e8e8", lw=0)
        ax.plot([lo, hi], [lo, hi], "-", color="0.4", lw=0.8)

    ran = [r for r in runs if r.reserved is not None]
    oom = [r for r in runs if r.oom is not None]
    uncapped = {allocator_gib(r) for r in runs if not r.capped}
    limit = next(iter(uncapped)) if len(uncapped) == 1 else None
    hi = 1.08 * max([r.reserved / GIB for r in ran] + [r.price.memory.reserved / GIB for r in runs]
                    + [allocator_gib(r) for r in oom] + ([limit] if limit else []))
    diagonal(left, 0.0, hi)
    for split, (marker, size) in styles.items():
        for capped in (False, True):
            pts = [r for r in ran if r.split == split and r.capped == capped]
            if pts:
                c = colour(names[split])
                left.scatter([r.price.memory.reserved / GIB for r in pts],
                             [r.reserved / GIB for r in pts], s=size, marker=marker,
                             facecolors="none" if capped else c, edgecolors=c,
                             linewidths=1.0 if capped else 0.0, alpha=0.9, zorder=3)
    if oom:
        left.scatter([r.price.memory.reserved / GIB for r in oom], [allocator_gib(r) for r in oom],
                     s=40, marker="x", color=_NOT_FIT, linewidths=1.5, zorder=4)
    if limit is not None:
        left.axhline(limit, color="black", ls=":", lw=0.9)
    left.set_xlim(0, hi)
    left.set_ylim(0, hi)
    left.set_xlabel("model's peak reserved (GiB)")
    left.set_ylabel("measured peak reserved (GiB)")
    left.set_title(f"peak reserved: held-out median |error| {held['reserved'].median:.1f}%",
                   fontsize="medium")
    left.grid(alpha=0.3)

    timed = [r for r in runs if r.step_error_pct is not None]
    if timed:
        xs = [r.price.step.step_s for r in timed] + [r.step_s or 0.0 for r in timed]
        lo, top = min(xs) / 1.3, max(xs) * 1.3
        diagonal(right, lo, top)
        for split, (marker, size) in styles.items():
            pts = [r for r in timed if r.split == split]
            if pts:
                right.scatter([r.price.step.step_s for r in pts], [r.step_s for r in pts],
                              s=size, marker=marker, color=colour(names[split]), alpha=0.9,
                              lw=0, zorder=3)
        right.set_xscale("log")
        right.set_yscale("log")
        right.set_xlim(lo, top)
        right.set_ylim(lo, top)
        for axis in (right.xaxis, right.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
        right.set_title(f"step: held-out median |error| {held['step'].median:.1f}%",
                        fontsize="medium")
    else:
        right.text(0.5, 0.5, "no run timed against the model", ha="center", va="center",
                   transform=right.transAxes)
    right.set_xlabel("model's step (s)")
    right.set_ylabel("measured step (s)")
    right.grid(alpha=0.3, which="both")

    handles: list[Artist] = [
        Line2D([], [], ls="none", marker=styles[s][0], ms=6, color=colour(names[s]),
               label=grid_counts(runs, s).line(s))
        for s in styles if any(r.split == s for r in runs)]
    if any(r.capped for r in ran):
        handles.append(Line2D([], [], ls="none", marker="o", ms=6, mfc="none", color="0.3",
                              label="hollow: allocator capped"))
    if oom:
        handles.append(Line2D([], [], ls="none", marker="x", ms=6, mew=1.5, color=_NOT_FIT,
                              label=f"out of memory under a cap ({len(oom)} runs)"))
    handles += [Line2D([], [], color="0.4", lw=0.8, label="measured = model"),
                Patch(facecolor="#e8e8e8", label=f"within ±{band_pct:g}% of the model")]
    if limit is not None:
        gpu = next(r for r in runs if not r.capped).price.step.hardware.gpu.name
        handles.append(Line2D([], [], color="black", ls=":", lw=0.9,
                              label=f"{gpu}'s allocator limit ({size_in(limit * GIB, 'GiB')})"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize="small", frameon=False)
    fig.get_layout_engine().set(rect=(0, 0.14, 1, 0.86))
    return fig


def kernels_figure(documents: Mapping[str, Mapping[str, Any]], *,
                   rate: ComputeRate = SHIPPED) -> Any:
    """A layer's kernels alone beside the planner's rate, from ``python -m distlab.bench
    kernels`` JSON documents (a label, e.g. the GPU, -> its document; each priced as one of the
    planner's GPU kinds). Left: each layer's matrix products' efficiency of the GPU's 16-bit peak
    against the width ``w = hidden / tp`` (one marker per document), and the planner's
    whole-step rate ``efficiency x w / (w + width_scale)`` of each document's GPU. Right: each
    attention kernel's measured rate in the planner's units (over the peak times the 16-bit
    efficiency, no width term: :func:`~distlab.plan.kernels.attention_factor`, recomputed from
    the rows' TFLOP/s with ``rate``), the median over the document's rows at each sequence
    length, and the planner's attention for each kernel (``rate.attention`` times its measured
    speed) dashed. Returns the
    Figure. ``ValueError`` for a document the planner did not price (no ``gpu_kind``)."""
    if not documents:
        raise ValueError("kernels_figure needs at least one bench kernels document")
    for label, doc in documents.items():
        if not doc.get("gpu_kind"):
            raise ValueError(f"{label}: the bench priced no GPU kind (a CPU run?); nothing to "
                             "set beside the planner")
    fig = new_figure(figsize=(FIG_WIDTH_IN, 4.6))
    left, right = fig.subplots(1, 2)
    shade = {label: _SERIES[1 + i % (len(_SERIES) - 1)] for i, label in enumerate(documents)}
    hollow = {label: i % 2 == 1 for i, label in enumerate(documents)}   # the second drawn open
    widths = [r["width"] for d in documents.values() for r in d["rows"]]
    ticks = [2 ** k for k in range(8, 16) if min(widths) / 2 < 2 ** k < max(widths) * 2]
    curve = [2 ** (k / 4) for k in range(4 * 8, 4 * 15)]   # 256 .. 16384
    drawn: set[str] = set()
    for label, doc in documents.items():
        layers = [r for r in doc["rows"] if r["product"] == "layer"]
        left.scatter([r["width"] for r in layers], [r["efficiency"] for r in layers], s=30,
                     facecolors="none" if hollow[label] else shade[label],
                     edgecolors=shade[label], linewidths=1.2,
                     label=f"{label}: one layer's matmuls", zorder=3)
        hw = Hardware(gpu_kind(doc["gpu_kind"]), 1, gpus_per_node=1)
        key = rate_key(hw, "bf16")
        if key not in drawn:   # one curve per architecture: H100 and H200 share theirs
            drawn.add(key)
            left.plot(curve, [rate.flops_per_s(hw, int(w)) / hw.gpu.peak_flops for w in curve],
                      "--", color="0.35", lw=1.2, label=f"planner's whole step ({key})")
    left.set_xscale("log", base=2)
    left.set_xticks(ticks)
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.xaxis.set_minor_locator(NullLocator())
    left.set_ylim(0, 1)
    left.set_xlabel("layer width per GPU, hidden / tp")
    left.set_ylabel("of the 16-bit peak")
    left.set_title("matrix products: kernels vs the planner's rate", fontsize="medium")
    left.grid(alpha=0.3)
    left.legend(fontsize="x-small", loc="lower right")
    markers = {"flash": "o", "cudnn": "s", "efficient": "^", "math": "v"}
    lengths: set[int] = set()
    for label, doc in documents.items():
        hw = Hardware(gpu_kind(doc["gpu_kind"]), 1, gpus_per_node=1)
        rows = [r for r in doc.get("attention", []) if r.get("tflops") is not None]
        for backend in dict.fromkeys(r["backend"] for r in rows):
            mine = [r for r in rows if r["backend"] == backend]
            seqs = sorted({r["seq_len"] for r in mine})
            lengths.update(seqs)
            right.plot(seqs, [statistics.median(attention_factor(rate, hw.gpu, r["tflops"] * 1e12)
                                                for r in mine if r["seq_len"] == s)
                              for s in seqs], "--" if hollow[label] else "-",
                       marker=markers.get(backend, "o"), color=shade[label], lw=1.3, ms=5,
                       mfc="white" if hollow[label] else shade[label],
                       label=f"{label}: {backend}")
    arch_hw = Hardware(gpu_kind(next(iter(documents.values()))["gpu_kind"]), 1,
                       gpus_per_node=1)
    for backend, style in (("flash", ":"), ("cudnn", "--")):
        speed = rate.kernel_factor(arch_hw, backend)
        if speed is not None:
            right.axhline(rate.attention * speed, ls=style, color="0.3", lw=1,
                          label=f"planner: {backend} ({rate.attention * speed:.2f})")
    right.set_xscale("log", base=2)
    right.set_xticks(sorted(lengths))
    right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1024:g}k"))
    right.xaxis.set_minor_locator(NullLocator())
    top = max([max(line.get_ydata()) for line in right.get_lines()] + [0.1])
    right.set_ylim(0, 1.6 * top)   # room above the curves for the legend
    right.set_xlabel("tokens per sequence")
    right.set_ylabel("attention FLOP/s / (16-bit peak x efficiency)")
    right.set_title("causal attention kernels, in the planner's units", fontsize="medium")
    right.grid(alpha=0.3)
    right.legend(fontsize="x-small", loc="upper left", ncol=2)
    return fig


def pipeline_figure(priced: LayoutPrice, *, title: str | None = None) -> Any:
    """The simulated step of a pipeline layout: one row per pipeline rank (one GPU of each),
    every forward and backward of every microbatch on the stage times the planner priced
    (:func:`distlab.viz.pipeline_parallel.simulation_gantt`), titled with the step and its
    bubble as :func:`step_figure` counts it (the idle time of the busiest rank). ``ValueError``
    when the layout has no simulated step (``pp == 1``, or priced with
    ``simulate_pipeline=False``)."""
    if not isinstance(priced, LayoutPrice):
        raise TypeError(f"priced must be a LayoutPrice, got {type(priced).__name__}")
    sim = priced.step.simulation
    if sim is None:
        why = ("pp=1: no pipeline" if priced.layout.pp == 1 else
               "it was priced without the simulation (simulate_pipeline=False)")
        raise ValueError(f"{priced.layout.label} has no simulated step: {why}")
    step = priced.step
    title = title if title is not None else (
        f"{priced.layout.label}: {sim.plan.microbatches} microbatches, step "
        f"{seconds(step.step_s)}, bubble {seconds(step.bubble_s)} "
        f"({step.bubble_s / step.step_s:.0%})")
    return simulation_gantt(sim, title=title)


def plan_table(prices: Sequence[LayoutPrice], *, columns: Sequence[Column] = PLAN_COLUMNS,
               start: int = 1) -> str:
    """``prices`` as a text table (:func:`distlab.plan.table.plan_rows`, the command's
    rows) in ``columns`` (:data:`PLAN_COLUMNS`, :data:`MEMORY_COLUMNS`, :data:`STEP_COLUMNS`),
    numbered from ``start``; where a layout is tight and the table shows ``fits``, the
    command's line saying what that means under it (:func:`distlab.plan.table.tight_note`)."""
    text = format_table(plan_rows(list(prices), start=start), list(columns))
    note = tight_note(list(prices))
    if note is not None and any(c.header == "fits" for c in columns):
        text += "\n" + note
    return text


def _check_option(name: str, value: Any, options: Sequence[Any]) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(str, options))}, got {value!r}")


_NCCL_KINDS = [name for name, kind in GPU_KINDS.items() if kind.library == "nccl"]
"""The GPU kinds the explorer offers: those whose networks are the explorer's (NCCL's)."""


class PlannerExplorer(Explorer):
    """The planner for chosen settings: the first layouts of its ranking, their memory and step.

    Controls: ``model`` (a preset of :data:`~distlab.transformer.PRESETS`), ``gpus``, ``gpu``
    (a kind of :data:`~distlab.plan.layout.GPU_KINDS` whose collectives NCCL runs, the
    networks below being NCCL's), ``network`` (between nodes, a key of
    :data:`~distlab.nccl.multinode.NETWORKS`; off on one node),
    ``seq_len`` and ``global_batch`` (sequences per step). Each change runs
    :func:`~distlab.plan.planner.plan` (on a 2-core machine about a second for an 8B model on
    16 GPUs, 4-7 s for a 70B or 405B model on 64-512 GPUs, up to a minute for a 405B model's
    long sequences on many GPUs; the line above the figure counts the layouts as they are
    priced meanwhile: :func:`planning_line`) and draws the ``top`` first layouts of its
    ranking (where none fits, the least short) with :func:`memory_figure` above
    :func:`step_figure`, the line above it from :func:`plan_summary`;
    the table under the figure (``table``, an HTML widget) gives their numbers in
    :data:`PLAN_COLUMNS`. ``plan`` is the last :class:`~distlab.plan.planner.Plan` (None with
    ``error`` saying why), ``seconds`` how long it took.
    """

    def __init__(self, model: str = "llama3-8b", gpus: int = 16, *,
                 gpu: str = gpu_kind("h100").name, network: str = "ib_ndr400x8",
                 seq_len: int = 8192,
                 global_batch: int = 64, top: int = 5,
                 gpu_counts: Sequence[int] = (8, 16, 32, 64, 128, 256, 512),
                 seq_lens: Sequence[int] = (2048, 4096, 8192, 16384, 32768),
                 global_batches: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024)) -> None:
        for name, value, options in (("model", model, list(PRESETS)), ("gpus", gpus, gpu_counts),
                                     ("gpu", gpu, _NCCL_KINDS),
                                     ("network", network, list(NETWORKS)),
                                     ("seq_len", seq_len, seq_lens),
                                     ("global_batch", global_batch, global_batches)):
            _check_option(name, value, list(options))
        if not isinstance(top, int) or top < 1:
            raise ValueError(f"top must be an int >= 1, got {top!r}")
        st = {"description_width": "90px"}
        lay = w.Layout(width="250px")
        self.top = top
        self.model = w.Dropdown(options=list(PRESETS), value=model, description="model",
                                style=st, layout=lay)
        self.gpus = w.Dropdown(options=list(gpu_counts), value=gpus, description="GPUs",
                               style=st, layout=lay)
        self.gpu = w.Dropdown(options=_NCCL_KINDS, value=gpu, description="GPU kind",
                              style=st, layout=lay)
        self.network = w.Dropdown(options=list(NETWORKS), value=network, description="network",
                                  style=st, layout=lay)
        self.seq_len = w.Dropdown(options=list(seq_lens), value=seq_len, description="sequence",
                                  style=st, layout=lay)
        self.global_batch = w.Dropdown(options=list(global_batches), value=global_batch,
                                       description="global batch", style=st, layout=lay)
        self.table = w.HTML()
        self.plan: Plan | None = None
        self.error = ""
        self.seconds = 0.0
        controls = [self.model, self.gpus, self.gpu, self.network, self.seq_len,
                    self.global_batch]
        super().__init__(controls, rows=[w.HBox([self.model, self.gpus, self.gpu]),
                                         w.HBox([self.network, self.seq_len,
                                                 self.global_batch])])
        self.widget.children = (*self.widget.children, self.table)

    def settle(self) -> None:
        self.network.disabled = self.gpus.value <= 8   # one node: no network

    def draw(self) -> Drawing:
        start = time.perf_counter()
        written = [0.0]   # when the line was last written

        def progress(bounded: int, total: int, priced: int) -> None:
            now = time.perf_counter()
            if now - written[0] >= 0.25:
                written[0] = now
                line = planning_line(bounded, total, priced, now - start)
                self.summary_html.value = f"<code>{line}</code>"

        progress(0, 0, 0)
        try:
            spec = model_spec(self.model.value, seq_len=self.seq_len.value)
            hw = hardware(self.gpu.value, self.gpus.value, network=self.network.value)
            result = plan(spec, hw, self.global_batch.value, top=self.top, progress=progress)
        except ValueError as exc:
            self.plan, self.error, self.table.value = None, str(exc), ""
            return Drawing(message_figure(self.error, width_in=FIG_WIDTH_IN), self.error)
        self.plan, self.error = result, ""
        self.seconds = time.perf_counter() - start
        shown = list(result.ranked) or list(result.rejected)
        took = f"planned in {seconds(self.seconds, 2)}"
        if not shown:
            self.table.value = ""
            text = "; ".join(result.advice)
            return Drawing(message_figure(text, width_in=FIG_WIDTH_IN), f"{text} ({took})")
        fig = new_figure(figsize=(FIG_WIDTH_IN, 7.4))
        top_ax, bottom_ax = fig.subplots(2, 1, sharex=True)
        head = (f"the first {len(shown)} of the ranking" if result.ranked else
                f"the {len(shown)} least short (nothing fits)")
        memory_figure(shown, ax=top_ax, title=f"{spec.name} on {hw.gpus}x {hw.gpu.name}: {head}, "
                      "memory per GPU")
        step_figure(shown, ax=bottom_ax, title="their step by part; tokens/s per GPU above")
        top_ax.tick_params(labelbottom=False)
        rows = HtmlTable(plan_rows(shown), PLAN_COLUMNS, max_height_px=220)
        self.table.value = rows._repr_html_()
        return Drawing(fig, plan_summary(result, took=took))


def planning_line(bounded: int, total: int, priced: int, elapsed_s: float) -> str:
    """The explorer's line while it plans: the layouts priced cheaply of those tried, then
    how many were priced in full (pipeline simulated, step replayed), and the time so far."""
    if not total:
        return "planning: listing the layouts..."
    done = (f"{bounded} of {total} layouts bounded" if bounded < total else
            f"{total} layouts bounded; {priced} priced in full")
    return f"planning: {done} ({seconds(elapsed_s, 2)})..."


def plan_summary(result: Plan, *, took: str = "") -> str:
    """One line on ``result``: the model and GPUs, how many layouts fit, the first of the
    ranking with its step,
    tokens/s per GPU and MFU, and, where a layout shown after it runs faster (by less than
    :data:`~distlab.plan.planner.TIE`, in more memory), which and by how much; where nothing
    fits, the least short. ``took`` is added in brackets."""
    if not isinstance(result, Plan):
        raise TypeError(f"result must be a Plan (distlab.plan.planner.plan), got "
                        f"{type(result).__name__}")
    after = f" ({took})" if took else ""
    hw = result.hardware
    what = f"{result.model.name} on {hw.gpus}x {hw.gpu.name}: "
    best = result.best
    if best is None:
        if not result.rejected:
            return what + "; ".join(result.advice) + after
        least = result.rejected[0]
        return (f"{what}nothing fits: {result.tried} layouts tried, the least short "
                f"{least.layout.label} needs {size_in(least.memory.total, 'GiB', '.1f')} per "
                f"GPU; {result.advice[-1].split('; ')[0]}{after}")
    text = (f"{what}at most {result.fitting} of {result.tried} layouts fit; first "
            f"{best.layout.label}: "
            f"{seconds(best.step.step_s)} per step, {best.step.tokens_per_s_per_gpu:,.0f} "
            f"tokens/s per GPU, MFU {best.step.mfu:.0%}")
    faster = min(result.ranked, key=lambda p: p.step.step_s)
    if faster is not best:
        gain = error_pct(best.step.step_s, faster.step.step_s) / 100
        more = (faster.memory.total - best.memory.total) / GIB
        text += (f"; {faster.layout.label} is {gain:.1%} faster in {more:.1f} GiB more "
                 f"(the ranking charges memory up to {TIE:.0%} of the step)")
    return text + after
