"""Figures for ZeRO stage 3: peak bytes per rank (model against measured), the prefetch model
(step time against batch size with the crossover drawn), and traced steps side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distlab.collectives.model.presets import LinkPreset
from distlab.timeline import Timeline
from distlab.viz.figure import new_figure
from distlab.viz.gantt import gantt
from distlab.viz.palette import colour
from distlab.zero.memory_model import byte_unit
from distlab.zero.prefetch_model import crossover, simulate_step, unit_times

__all__ = ["STAGE3_COLORS", "peak_figure", "prefetch_figure", "stage3_gantts"]

#: One colour per span category of a stage-3 trace.
STAGE3_COLORS = {k: colour(k) for k in ("forward", "backward", "all_gather", "reduce_scatter",
                                         "wait", "step")}


def peak_figure(rows: Sequence[Mapping[str, Any]], *, ax: Any = None, title: str = "") -> Any:
    """One bar per row (a :func:`distlab.zero.measure.stage3_peak_rank` result): the model's
    shards and units in flight stacked, the measured peak as a black bar beside it."""
    fig = ax.figure if ax is not None else new_figure(figsize=(8, 3.8))
    ax = ax if ax is not None else fig.subplots()
    unit, scale = byte_unit([r["peak_bytes"] for r in rows] + [r["model"]["total"]
                                                                for r in rows])
    xs = range(len(rows))
    shards = [r["model"]["states"] / scale for r in rows]
    flight = [(r["model"]["total"] - r["model"]["states"]) / scale for r in rows]
    ax.bar([x - 0.18 for x in xs], shards, 0.34, color="C0", label="model: shards")
    ax.bar([x - 0.18 for x in xs], flight, 0.34, bottom=shards, color="C1",
           label="model: units in flight")
    ax.bar([x + 0.18 for x in xs], [r["peak_bytes"] / scale for r in rows], 0.34, color="0.25",
           label="measured peak (live tensors)")
    ax.set_xticks(list(xs), [f"prefetch {r['prefetch']}\n{r['precision']}" for r in rows])
    ax.set_ylabel(f"bytes per rank ({unit})")
    ax.set_title(title or "ZeRO-3 peak model states per rank: model against measured")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def prefetch_figure(unit_params: int, units: int, world_size: int, preset: LinkPreset,
                    flops_per_s: float, tokens: Sequence[int], *, itemsize: int = 2,
                    ax: Any = None) -> Any:
    """Modelled step time against tokens per batch for ``units`` equal units of
    ``unit_params`` parameters on ``world_size`` ranks of ``preset``: compute only, and
    prefetch 0, 1, 2 (:func:`distlab.zero.prefetch_model.simulate_step`; forward ``2 P t /
    flops_per_s`` seconds per unit, backward twice). A dotted vertical line marks the crossover
    (:func:`~distlab.zero.prefetch_model.crossover`): from there on prefetch 1 hides the
    all-gathers. Returns the figure."""
    fig = ax.figure if ax is not None else new_figure(figsize=(9, 4.2))
    ax = ax if ax is not None else fig.subplots()
    per_token = 2.0 * unit_params / flops_per_s

    def times(t: int) -> Any:
        return unit_times([unit_params] * units, world_size, preset,
                          forward_s=[per_token * t] * units, itemsize=itemsize)

    ax.plot(tokens, [3 * per_token * t * units * 1e3 for t in tokens], "k--", lw=1,
            label="compute only")
    for p, style in ((0, "o-"), (1, "s-"), (2, "^-")):
        ax.plot(tokens, [simulate_step(times(t), p).step_s * 1e3 for t in tokens], style,
                color=f"C{p + 3}", ms=4, label=f"prefetch {p}")
    f = crossover(times(1)[0], units, 1)
    at = f / per_token
    ax.axvline(at, color="k", ls=":", lw=1)
    ax.text(at, 0.97, f" crossover: {at:,.0f} tokens", transform=ax.get_xaxis_transform(),
            va="top", fontsize="small")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per batch per rank")
    ax.set_ylabel("modelled step time (ms)")
    ax.set_title(f"{units} units x {unit_params / 1e6:g} M params, N={world_size}, "
                 f"{preset.name}, {flops_per_s / 1e12:g} TFLOP/s")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="both", alpha=0.3)
    return fig


def stage3_gantts(traces: Mapping[str, Sequence[Mapping[str, Any]]], rank: int = 0) -> Any:
    """One Gantt chart per traced step (``label -> span dicts``, as
    :func:`distlab.zero.measure.trace_stage3_step` returns), ``rank``'s lanes only, on one
    time axis (milliseconds from each step's start)."""
    lanes = [f"rank{rank}/{k}" for k in ("forward", "backward", "all_gather", "reduce_scatter",
                                         "wait", "step")]
    fig = new_figure(figsize=(9.4, 2.6 * len(traces)), layout=None)
    axes = fig.subplots(len(traces), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (label, spans) in zip(axes, traces.items(), strict=True):
        tl = Timeline()
        tl.extend([s for s in spans if s["lane"] in lanes])
        gantt(tl, ax=ax, lanes=[ln for ln in lanes if ln in tl.lanes], title=label,
              colors=STAGE3_COLORS)
    fig.subplots_adjust(hspace=0.45, left=0.16, right=0.84, top=0.93, bottom=0.12)
    return fig
