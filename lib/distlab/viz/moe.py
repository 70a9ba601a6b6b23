"""Tokens per expert and per expert-parallel rank: where an MoE layer's load goes.

    from distlab.moe import expert_load
    from distlab.viz.moe import load_figure
    load_figure(expert_load(moe.last_routing, ep_size=4, dim=512, hidden=1024))

Two panels of one :class:`~distlab.moe.load.ExpertLoad`. *Tokens per expert*: one bar per
expert, coloured by the rank that holds it (:func:`~distlab.viz.samplers.rank_colors`, the
colours every distlab figure gives ranks), the balanced share dashed. *Tokens per rank*: one
bar per expert-parallel rank in the same colours, the mean dashed, the slowest rank outlined
and named with its expert FLOPs relative to the mean rank's (the imbalance factor) and the
share of the ranks' expert time spent waiting for it. The figure is made with
:func:`~distlab.viz.figure.new_figure` (it displays once) and fits JupyterLab's 968 px.

:func:`alltoall_figure` draws NCCL's all-to-all as :func:`distlab.nccl.alltoall.alltoall_times`
prices it, bus bandwidth against size, one line per fabric. :class:`LoadExplorer` redraws
:func:`load_figure` for a fresh router's routing (:func:`distlab.moe.random_routing`) at the
expert-parallel size and top-k its sliders pick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ipywidgets as w
import numpy as np
from matplotlib.ticker import MaxNLocator

from distlab._checks import check_int
from distlab.moe.load import ExpertLoad, expert_load, random_routing
from distlab.moe.step_trace import LayerStepTrace
from distlab.nccl.alltoall import AlltoallRun
from distlab.viz.axes import bytes_axis, integer_ticks
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import DisplayFigure, new_figure
from distlab.viz.palette import COLOURS
from distlab.viz.samplers import rank_colors

__all__ = ["FIG_WIDTH_IN", "LoadExplorer", "alltoall_figure", "layer_step_figure", "load_figure",
           "load_summary"]

#: Figure width in inches: at the default 100 dpi the image stays within JupyterLab's 968 px.
FIG_WIDTH_IN = 9.2
_MEAN = "#555555"
_SLOWEST_EDGE = "#000000"


def _count(n: int, noun: str) -> str:
    """``"1 rank"``, ``"8 ranks"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _flops_text(flops: int) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops} FLOP"


def load_summary(load: ExpertLoad) -> str:
    """One line: the slowest rank, its load relative to the mean (its expert FLOPs relative
    to the mean rank's) and the share of expert time the ranks spend waiting."""
    if not isinstance(load, ExpertLoad):
        raise TypeError(f"load must be an ExpertLoad (distlab.moe.expert_load), got "
                        f"{type(load).__name__}")
    text = (f"slowest: rank {load.slowest_rank}, {load.rank_imbalance:.2f}x the mean rank's "
            f"expert FLOPs; ranks wait {load.idle_fraction:.0%} of expert time")
    if load.rank_flops is not None:
        text += f" ({_flops_text(max(load.rank_flops))} forward on the slowest)"
    return text


def load_figure(load: ExpertLoad, *, title: str | None = None) -> DisplayFigure:
    """Tokens per expert and per rank of ``load`` (module docstring); ``title`` above both
    panels (default: experts, ranks and tokens).

    Raises:
        TypeError: ``load`` is not an :class:`ExpertLoad`, or ``title`` not a str.
    """
    summary = load_summary(load)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    experts, ranks = load.num_experts, load.ep_size
    per_rank = experts // ranks
    colours = rank_colors(ranks)
    owner = np.repeat(np.arange(ranks), per_rank)
    fig = new_figure(figsize=(FIG_WIDTH_IN, 3.8))
    ax_e, ax_r = fig.subplots(1, 2, width_ratios=(2.6, 1.4))

    ax_e.bar(np.arange(experts), load.tokens_per_expert, color=colours[owner], width=0.85)
    ax_e.axhline(load.tokens / experts, color=_MEAN, ls="--", lw=1, label="balanced share")
    ax_e.set_xlabel("expert (colour: the rank that holds it)")
    ax_e.set_ylabel("tokens (routed assignments)")
    ax_e.set_title(f"per expert: max/mean {load.expert_imbalance:.2f}", fontsize=10)
    integer_ticks(ax_e, "x", experts, max_ticks=12)
    ax_e.set_xlim(-0.6, experts - 0.4)

    edges = [_SLOWEST_EDGE if r == load.slowest_rank else "none" for r in range(ranks)]
    ax_r.bar(np.arange(ranks), load.tokens_per_rank, color=colours, edgecolor=edges,
             linewidth=2, width=0.7)
    ax_r.axhline(load.tokens / ranks, color=_MEAN, ls="--", lw=1, label="mean")
    ax_r.set_xlabel("expert-parallel rank")
    ax_r.set_title(f"per rank: max/mean {load.rank_imbalance:.2f}", fontsize=10)
    integer_ticks(ax_r, "x", ranks, max_ticks=8)
    ax_r.set_xlim(-0.6, ranks - 0.4)
    top = max(max(load.tokens_per_rank), 1)
    ax_r.set_ylim(0, top * 1.25)
    ax_r.annotate(f"{load.rank_imbalance:.2f}x", (load.slowest_rank, top),
                  xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                  fontsize=8)
    ax_e.set_ylim(0, max(max(load.tokens_per_expert), 1) * 1.25)
    for ax in (ax_e, ax_r):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    fig.suptitle(title if title is not None else
                 f"{_count(experts, 'expert')} over {_count(ranks, 'rank')}, "
                 f"{_count(load.tokens, 'routed token')}",
                 fontsize=11)
    fig.supxlabel(summary, fontsize=9)
    return fig


def layer_step_figure(trace: LayerStepTrace, predicted: Mapping[str, float], *,
                      title: str = "one MoE layer step on one GPU") -> DisplayFigure:
    """Two stacked bars in milliseconds: the traced step by part (each part's span, its
    kernels' share solid and the GPU's wait on the host hatched), and ``predicted`` (part name
    -> seconds, e.g. the planner's ``{"experts forward": ..., "experts backward": ...}``).

    Raises:
        TypeError: ``trace`` not a :class:`~distlab.moe.step_trace.LayerStepTrace`.
        ValueError: ``predicted`` empty or holding a negative time.
    """
    if not isinstance(trace, LayerStepTrace):
        raise TypeError(f"trace must be a LayerStepTrace, got {type(trace).__name__}")
    if not isinstance(predicted, Mapping) or not predicted \
            or any(v < 0 for v in predicted.values()):
        raise ValueError(f"predicted must map parts to seconds >= 0, got {predicted!r:.80}")
    fig = new_figure(figsize=(FIG_WIDTH_IN, 3.2))
    ax = fig.subplots()
    left = 0.0
    for i, p in enumerate(trace.parts):
        colour = COLOURS.get(p.name, f"C{i}")
        ax.barh(1, p.kernel_s * 1e3, left=left, color=colour, label=p.name)
        ax.barh(1, p.idle_s * 1e3, left=left + p.kernel_s * 1e3, color="white",
                edgecolor=colour, hatch="///", lw=0.8)
        left += p.span_s * 1e3
    left = 0.0
    for j, (name, seconds) in enumerate(predicted.items()):
        ax.barh(0, seconds * 1e3, left=left, color="0.55" if j % 2 else "0.35", label=name)
        left += seconds * 1e3
    ax.set_yticks([1, 0], ["traced", "planner"])
    ax.set_xlabel("milliseconds (hatched: the GPU idle inside a part, waiting on the host)")
    ax.set_title(f"{title}: traced {trace.span_s * 1e3:.1f} ms, kernels busy "
                 f"{100 * trace.busy:.0f}%, {trace.syncs} host syncs; planner "
                 f"{sum(predicted.values()) * 1e3:.1f} ms", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4, fontsize=8,
              frameon=False)
    return fig


def alltoall_figure(series: Mapping[str, Sequence[AlltoallRun]], *,
                    title: str = "NCCL all-to-all as distlab.nccl.alltoall prices it"
                    ) -> DisplayFigure:
    """Bus bandwidth (GB/s, nccl-tests' definition) against the bytes each rank sends, one line
    per ``label -> runs`` of ``series`` (each :func:`~distlab.nccl.alltoall.alltoall_times`'
    runs, sizes > 0), the protocol of each point as its marker (LL ``o``, Simple ``s``).

    Raises:
        TypeError: ``series`` not a mapping of labels to runs.
        ValueError: an empty series, or a run of 0 bytes.
    """
    if not isinstance(series, Mapping) or not series:
        raise ValueError(f"series must map labels to all-to-all runs, got {series!r:.80}")
    fig = new_figure(figsize=(FIG_WIDTH_IN, 3.8))
    ax = fig.subplots()
    for i, (label, runs) in enumerate(series.items()):
        runs = list(runs)
        if not runs or not all(isinstance(r, AlltoallRun) for r in runs):
            raise TypeError(f"series[{label!r}] must hold AlltoallRun s (alltoall_times)")
        if any(r.nbytes <= 0 for r in runs):
            raise ValueError(f"series[{label!r}] holds a run of 0 bytes: no bandwidth to draw")
        colour = f"C{i}"
        sizes = [r.nbytes for r in runs]
        ax.plot(sizes, [r.busbw_gbps for r in runs], color=colour, lw=1.5, label=label)
        for proto, marker in (("LL", "o"), ("Simple", "s")):
            pts = [(r.nbytes, r.busbw_gbps) for r in runs if r.layout.protocol == proto]
            if pts:
                ax.plot(*zip(*pts, strict=True), ls="none", marker=marker, ms=4, color=colour)
    ax.plot([], [], ls="none", marker="o", color="grey", label="LL")
    ax.plot([], [], ls="none", marker="s", color="grey", label="Simple")
    bytes_axis(ax, "x", "bytes each rank sends")
    ax.set_ylabel("bus bandwidth, GB/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.set_title(title, fontsize=10)
    return fig


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class LoadExplorer(Explorer):
    """Sliders for the expert-parallel size (the divisors of ``num_experts``) and top-k; each
    change routes ``tokens`` random tokens through a fresh router
    (:func:`~distlab.moe.random_routing`, ``seed``) and redraws :func:`load_figure` with experts
    of ``dim`` x ``hidden`` (the summary: :func:`load_summary`). State: ``load`` (the last
    :class:`~distlab.moe.load.ExpertLoad`), ``summary``, ``figure``, ``png``, ``widget``."""

    def __init__(self, num_experts: int = 64, *, ep_size: int = 8, top_k: int = 2,
                 tokens: int = 4096, dim: int = 64, hidden: int = 128, seed: int = 0) -> None:
        self.num_experts = check_int("num_experts", num_experts, minimum=1)
        if ep_size not in _divisors(self.num_experts):
            raise ValueError(f"ep_size must divide num_experts={self.num_experts}, got {ep_size!r}")
        self.tokens = check_int("tokens", tokens, minimum=1)
        self.dim = check_int("dim", dim, minimum=1)
        self.hidden = check_int("hidden", hidden, minimum=1)
        self.seed = check_int("seed", seed, minimum=0)
        st = {"description_width": "110px"}
        self.ep = w.SelectionSlider(options=_divisors(self.num_experts), value=ep_size,
                                    description="ep ranks", continuous_update=False, style=st)
        self.top_k = w.IntSlider(value=check_int("top_k", top_k, minimum=1,
                                                 maximum=self.num_experts),
                                 min=1, max=min(8, self.num_experts), description="top-k",
                                 continuous_update=False, style=st)
        self.load: ExpertLoad | None = None
        super().__init__([self.ep, self.top_k])

    def draw(self) -> Drawing:
        """The load of the routing at the sliders' top-k over their ep ranks."""
        routing = random_routing(self.num_experts, self.top_k.value, self.tokens, dim=self.dim,
                                 seed=self.seed)
        self.load = expert_load(routing, self.ep.value, dim=self.dim, hidden=self.hidden)
        return Drawing(load_figure(self.load), f"ep={self.ep.value}, top-{self.top_k.value}: "
                       + load_summary(self.load))
