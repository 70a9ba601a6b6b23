"""Figures and the explorer for notebook 06 (DDP buckets, overlap, traffic). Pyplot-free."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w

from distlab.ddp.step_model import bucket_ready_s, buckets_for_sizes, mlp_ready_order, predict
from distlab.timeline import Timeline
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.viz.gantt import gantt
from distlab.viz.layout_check import legend_clear_of_data
from distlab.viz.palette import colour, colours
from distlab.vocabulary import size_in

_MB = 1024 * 1024


def buckets_figure(buckets: Sequence[Sequence[str]], sizes: Mapping[str, int], *,
                   title: str = "buckets in reduction order", ax: Any = None) -> Any:
    """One horizontal bar per bucket (top = reduced first), one segment per parameter (MiB)."""
    fig = new_figure(figsize=(9, 0.5 * len(buckets) + 1.4)) if ax is None else ax.figure
    ax = ax or fig.add_subplot()
    widest = max(sum(sizes[m] for m in names) for names in buckets) / _MB
    for y, names in enumerate(buckets):
        left = 0.0
        for n in names:
            w = sizes[n] / _MB
            ax.barh(y, w, left=left, color="C0" if n.endswith("weight") else "C1",
                    edgecolor="black", linewidth=0.4)
            if w > 0.06 * widest:  # label the big tensors (biases are slivers)
                ax.text(left + w / 2, y, n, ha="center", va="center", fontsize=7, color="white")
            left += w
        ax.text(left, y, f" {left:.2f} MiB", va="center", fontsize=8)
    ax.set_yticks(range(len(buckets)), [f"bucket {i}" for i in range(len(buckets))])
    ax.set_ylim(len(buckets) - 0.5, -0.5)
    ax.set_xlabel("MiB")
    ax.set_title(title)
    return fig


def predicted_timeline(prediction: Any, ready_s: Sequence[float], backward_s: float,
                       lane: str = "model") -> Timeline:
    """A Timeline of a :class:`StepPrediction`: backward, bucket-ready marks, allreduces (us)."""
    tl = Timeline()
    tl.record("backward", "backward", f"{lane}/backward", 0.0, backward_s * 1e6)
    for b, ((s, e), r) in enumerate(zip(prediction.comm_spans, ready_s, strict=True)):
        tl.record(f"bucket {b} ready", "ready", f"{lane}/backward", r * 1e6, 0.0)
        tl.record(f"allreduce bucket {b}", "allreduce", f"{lane}/allreduce", s * 1e6,
                  (e - s) * 1e6)
    return tl


def last_step(spans: Timeline) -> Timeline:
    """The spans of the last step of a measured DDP run: from the latest start of the span
    that opens backward (the first ``backward`` span's name) on; empty if there is none."""
    bw = [s for s in spans.spans if s.category == "backward"]
    if not bw:
        return Timeline()
    origin = max(s.start_us for s in bw if s.name == bw[0].name)
    return Timeline([s for s in spans.spans if s.start_us >= origin])


def measured_vs_model(measured: Timeline, model: Timeline, *, title: str = "") -> Any:
    """Measured per-rank Gantt (one synced step) above the simulated one, same time axis."""
    fig = new_figure(figsize=(9.4, 5))
    a1, a2 = fig.subplots(2, 1, sharex=True)
    colors = {k: colour(k) for k in ("backward", "allreduce", "ready")}
    if len(measured):
        gantt(measured, ax=a1, title=f"measured {title}", colors=colors)
    gantt(model, ax=a2, origin_us=0.0, title="model", colors=colors)
    return fig


def sweep_figure(caps_mb: Sequence[float], predicted_s: Sequence[float],
                 measured: Mapping[str, Sequence[tuple[float, float]]] | None = None) -> Any:
    """Step time (ms) vs bucket cap: the model's curve and measured points per variant."""
    fig = new_figure(figsize=(7, 4))
    ax = fig.add_subplot()
    ax.plot(caps_mb, [s * 1e3 for s in predicted_s], "-", color="gray", label="model (overlap)")
    for k, (name, pts) in enumerate((measured or {}).items()):
        ax.plot([c for c, _ in pts], [s * 1e3 for _, s in pts], "o", color=f"C{k}", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("bucket_cap_mb")
    ax.set_ylabel("step time (ms)")
    ax.grid(alpha=0.3)
    legend_clear_of_data(ax, fontsize="small")   # measured step times fall anywhere
    return fig


def traffic_figure(rows: Sequence[tuple[str, Any, Any]]) -> Any:
    """Per preset: DataParallel's phases vs DDP's allreduce, ms per step (model only); the
    phases' legend sits right of the axes, clear of the bars' labels."""
    fig = new_figure(figsize=(9.4, 3.5))
    ax = fig.add_subplot()
    phase_colour = colours(p for _preset, dp, ddp in rows for t in (dp, ddp)
                           for p, _b, _s in t.phases)
    for y, (_preset, dp, ddp) in enumerate(rows):
        for k, t in enumerate((dp, ddp)):
            left = 0.0
            for phase, _b, s in t.phases:
                ax.barh(2 * y + k, s * 1e3, left=left, color=phase_colour[phase], edgecolor="black",
                        linewidth=0.3, label=phase if y == 0 else None)
                left += s * 1e3
            ax.text(left, 2 * y + k, f" {t.name} {size_in(t.total_bytes, 'MiB', '.0f')}",
                    va="center", fontsize=8)
    ax.set_yticks(range(2 * len(rows)), [f"{r[0]} {n}" for r in rows for n in ("DP", "DDP")])
    ax.invert_yaxis()
    ax.set_xlim(0, ax.get_xlim()[1] * 1.3)  # room for the labels at the bars' ends
    ax.set_xlabel("ms per step (model only)")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


class DdpExplorer(Explorer):
    """Sliders for bucket_cap_mb, depth, width and world size; redraws the buckets torch would
    use and the simulated step (model only: the ready order and times of
    :func:`~distlab.ddp.step_model.mlp_ready_order` at ``backward_s_per_byte``; allreduces
    costed on ``link``).

    Attributes: ``cap``, ``layers``, ``width``, ``world`` (the controls), ``order`` (the
    current :class:`~distlab.ddp.step_model.ReadyOrder`), ``prediction`` (its
    :class:`~distlab.ddp.step_model.StepPrediction`), ``summary``, ``figure``, ``png``,
    ``image``, ``widget``.
    """

    def __init__(self, link: Any, backward_s_per_byte: float, *, bucket_cap_mb: float = 25.0,
                 layers: int = 8, width: int = 1024, world_size: int = 2) -> None:
        st = {"description_width": "110px"}
        self.link, self.rate = link, backward_s_per_byte
        self.cap = w.FloatLogSlider(value=bucket_cap_mb, base=10, min=-1, max=2, step=0.1,
                                    description="bucket cap MB", continuous_update=False, style=st)
        self.layers = w.IntSlider(value=layers, min=1, max=32, description="layers",
                                  continuous_update=False, style=st)
        self.width = w.IntSlider(value=width, min=64, max=4096, step=64, description="width",
                                 continuous_update=False, style=st)
        self.world = w.IntSlider(value=world_size, min=2, max=64, description="world size",
                                 continuous_update=False, style=st)
        super().__init__([self.cap, self.layers, self.width, self.world],
                         rows=[w.HBox([w.VBox([self.cap, self.layers]),
                                       w.VBox([self.width, self.world])])])

    def draw(self) -> Drawing:
        order = mlp_ready_order(self.layers.value, self.width.value, self.rate)
        cap = self.cap.value
        sizes = list(order.sizes)
        buckets = [[order.names[i] for i in b] for b in buckets_for_sizes(sizes, cap)]
        p = predict(sizes, order.ready_s, order.backward_s, self.link, self.world.value, cap)
        self.order, self.prediction = order, p
        summary = (f"{len(buckets)} buckets, step {p.step_s * 1e3:.2f} ms, exposed comm "
                   f"{p.exposed_s * 1e3:.2f} ms, overlap {p.overlap_fraction:.2f}")
        fig = new_figure(figsize=(9.4, 6))
        a1, a2 = fig.subplots(2, 1)
        buckets_figure(buckets, dict(zip(order.names, sizes, strict=True)), ax=a1,
                       title=f"bucket_cap_mb={cap:.3g}: {len(buckets)} buckets")
        gantt(predicted_timeline(p, bucket_ready_s(sizes, order.ready_s, cap), order.backward_s),
              ax=a2, origin_us=0.0, title=summary,
              colors={k: colour(k) for k in ("backward", "allreduce", "ready")})
        return Drawing(fig, summary)
