"""Figures of a judged run of torch.profiler traces (:mod:`distlab.judge.trace_command`), and a
widget to pick trace, rank and step.

- :func:`rank_gantt`: every rank on one time axis (ms from the run's first step): steps, data
  loader, compute, communication split into the wait for the last rank and the transfer.
- :func:`breakdown_figure`: per rank, stacked % of the span (idle, compute, exposed comm, memory,
  other), the comm share overlapped by compute, and the idle causes.
- :func:`straggler_figure`: per collective call, each rank's wait for the last one.
- :func:`model_figure`: each priced collective kernel's transfer time beside the NCCL model.
- :class:`TraceExplorer`: dropdowns for the trace, the rank and the step over those figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w
import numpy as np

from distlab.judge.trace_judgement import TraceJudgement, judge_trace
from distlab.trace.breakdown import activity_intervals, step_windows
from distlab.trace.collectives import clock_shift_us
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.viz.layout_check import legend_clear_of_data
from distlab.viz.palette import colour

__all__ = ["BREAKDOWN_COLORS", "TraceExplorer", "breakdown_figure", "model_figure",
           "rank_gantt", "straggler_figure"]

BREAKDOWN_COLORS = {"idle": colour("gpu idle"), "compute": colour("compute"),
                    "communication": colour("comm"), "memory": colour("copy"),
                    "other": colour("other time")}
"""The breakdown's parts: compute and communication as every distlab Gantt draws them."""
CAUSE_COLORS = {"host": colour("host launch"), "data_loader": colour("io"),
                "synchronize": colour("synchronize"), "other": colour("other idle")}
_WAIT = colour("wait")


def _origin(j: TraceJudgement) -> tuple[float, dict[int, float]]:
    shift = clock_shift_us(j.run)
    starts = []
    for r, rt in j.run.ranks.items():
        acts = activity_intervals(rt)
        for s, _ in acts.values():
            if len(s):
                starts.append(float(np.min(s)) + shift[r])
    return (min(starts) if starts else 0.0), shift


def past_last_step_ms(j: TraceJudgement, ranks: Sequence[int] | None = None,
                      activity: Mapping[int, Mapping[str, Any]] | None = None
                      ) -> dict[int, float]:
    """Per rank whose communication ends more than 1 ms after its last ``ProfilerStep`` ends,
    by how much (ms): collectives left running when the recorded steps ended, which a Gantt
    otherwise shows as a step bar that stops long before the communication does.
    ``activity``: the ranks' :func:`activity_intervals` where the caller has them already."""
    out = {}
    for r in j.run.ranks if ranks is None else ranks:
        rt = j.run.ranks[r]
        windows = step_windows(rt)
        acts = activity[r] if activity is not None and r in activity else activity_intervals(rt)
        comm = acts.get("communication")
        if not windows or comm is None or not len(comm[1]):
            continue
        late = (float(comm[1].max()) - max(e for _, e in windows.values())) / 1000
        if late > 1.0:
            out[r] = late
    return out


def rank_gantt(j: TraceJudgement, *, step: int | None = None, ax: Any = None,
               ranks: Sequence[int] | None = None) -> Any:
    """Every rank (or those of ``ranks``) on one time axis (see the module docstring); ``step``
    zooms to that ProfilerStep (its span on the ranks that have it). A data-loader row is drawn
    only where some drawn rank's trace has data-loader activity."""
    ranks = list(j.run.ranks) if ranks is None else list(ranks)
    unknown = [r for r in ranks if r not in j.run.ranks]
    if unknown:
        raise ValueError(f"ranks must be among {sorted(j.run.ranks)}, got {unknown}")
    fig = None
    if ax is None:
        fig = new_figure(figsize=(9.4, 1.0 + 0.9 * len(ranks)))
        ax = fig.add_subplot()
    t0, shift = _origin(j)
    activity = {r: activity_intervals(j.run.ranks[r]) for r in ranks}
    loader = any(len(activity[r].get("data_loader", ((),))[0]) for r in ranks)
    rows = ["step"] + (["data_loader"] if loader else []) + ["compute", "communication"]
    colors = {"step": colour("step window"), "data_loader": CAUSE_COLORS["data_loader"],
              "compute": BREAKDOWN_COLORS["compute"],
              "communication": BREAKDOWN_COLORS["communication"]}
    window: list[float] = []
    yticks, ylabels = [], []
    for i, r in enumerate(ranks):
        acts = activity[r]
        base = i * (len(rows) + 1)
        for k, kind in enumerate(rows):
            y = base + len(rows) - 1 - k
            s, e = acts.get(kind, (np.zeros(0), np.zeros(0)))
            s = (np.asarray(s, dtype=float) + shift[r] - t0) / 1000
            e = (np.asarray(e, dtype=float) + shift[r] - t0) / 1000
            if kind == "communication":
                continue  # drawn from the matched calls below (wait + transfer)
            ax.broken_barh(list(zip(s, e - s, strict=True)), (y - 0.4, 0.8),
                           color=colors[kind], lw=0)
            yticks.append(y)
            ylabels.append(f"rank {r} {kind.replace('_', ' ')}")
        ycomm = base
        yticks.append(ycomm)
        ylabels.append(f"rank {r} communication")
        if step is not None:
            win = step_windows(j.run.ranks[r]).get(step)
            if win is not None:
                window += [(win[0] + shift[r] - t0) / 1000, (win[1] + shift[r] - t0) / 1000]
    yc = {r: i * (len(rows) + 1) for i, r in enumerate(ranks)}
    for call in j.collectives.calls:
        for r, c in call.calls.items():
            if r not in yc:
                continue
            s = (c.start_us - t0) / 1000
            wait = min(max(0.0, call.last_start_us - c.start_us), c.end_us - c.start_us) / 1000
            dur = (c.end_us - c.start_us) / 1000
            if wait > 0:
                ax.broken_barh([(s, wait)], (yc[r] - 0.4, 0.8), color=_WAIT, lw=0)
            ax.broken_barh([(s + wait, dur - wait)], (yc[r] - 0.4, 0.8),
                           color=BREAKDOWN_COLORS["communication"], lw=0)
    ax.set_yticks(yticks, ylabels, fontsize=7)
    ax.set_xlabel("time (ms) from the run's first event")
    past = past_last_step_ms(j, ranks, activity)
    if past:
        ax.text(0.99, 0.97, "\n".join(f"rank {r}: communication runs {ms:.0f} ms past its last "
                                       "ProfilerStep (calls left running)"
                                       for r, ms in past.items()),
                transform=ax.transAxes, ha="right", va="top", fontsize=7)
    if window:
        pad = 0.02 * (max(window) - min(window))
        ax.set_xlim(min(window) - pad, max(window) + pad)
    from matplotlib.patches import Patch
    handles = ([Patch(color=colors["data_loader"], label="data loader")] if loader else []) + [
        Patch(color=colors["compute"], label="compute"),
        Patch(color=_WAIT, label="waiting for the last rank"),
        Patch(color=BREAKDOWN_COLORS["communication"], label="transfer")]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles),
              fontsize=7, frameon=False)
    return fig if fig is not None else ax.figure


def breakdown_figure(j: TraceJudgement, *, step: int | None = None) -> Any:
    """Per rank: the breakdown (% of span), the overlap and the idle causes (ms)."""
    fig = new_figure(figsize=(9.4, 3.2))
    ax1, ax2, ax3 = fig.subplots(1, 3, gridspec_kw={"width_ratios": [3, 1.2, 3]})
    ranks = [r for r in j.run.ranks if j.breakdown(r, step) is not None]
    x = np.arange(len(ranks))
    bottom = np.zeros(len(ranks))
    for part, color in BREAKDOWN_COLORS.items():
        v = np.array([j.breakdown(r, step).pct(part) for r in ranks])  # type: ignore[union-attr]
        ax1.bar(x, v, bottom=bottom, color=color, label=part)
        bottom += v
    ax1.set_xticks(x, [f"rank {r}" for r in ranks])
    ax1.set_ylabel("% of span")
    basis = {j.breakdown(r, step).basis for r in ranks}  # type: ignore[union-attr]
    ax1.set_title(f"breakdown ({'/'.join(sorted(basis))})", fontsize=9)
    ax1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3,
               frameon=False)
    ov = [j.breakdown(r, step).overlap_pct for r in ranks]  # type: ignore[union-attr]
    ax2.bar(x, np.nan_to_num(ov), color=BREAKDOWN_COLORS["communication"])
    ax2.set_xticks(x, [str(r) for r in ranks])
    ax2.set_ylim(0, 100)
    ax2.set_title("comm overlapped\nby compute (%)", fontsize=9)
    bottom = np.zeros(len(ranks))
    for cause, color in CAUSE_COLORS.items():
        v = np.array([j.breakdown(r, step).idle_causes_us[cause] / 1000  # type: ignore[union-attr]
                      for r in ranks])
        ax3.bar(x, v, bottom=bottom, color=color, label=cause.replace("_", " "))
        bottom += v
    ax3.set_xticks(x, [f"rank {r}" for r in ranks])
    ax3.set_ylabel("ms")
    ax3.set_title("idle causes", fontsize=9)
    ax3.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2,
               frameon=False)
    return fig


def straggler_figure(j: TraceJudgement) -> Any:
    """Per collective call seen on 2+ ranks: each rank's wait for the last one (ms)."""
    fig = new_figure(figsize=(9.4, 3))
    ax = fig.add_subplot()
    calls = j.collectives.multi_rank()
    ranks = list(j.run.ranks)
    width = 0.8 / max(len(ranks), 1)
    for i, r in enumerate(ranks):
        v = [c.wait_us(r) / 1000 if r in c.calls else 0.0 for c in calls]
        ax.bar(np.arange(len(calls)) + i * width, v, width, label=f"rank {r}")
    ax.set_xticks(np.arange(len(calls)) + 0.4 - width / 2,
                  [f"{c.group}:{c.seq}\nlast r{c.last_rank}" for c in calls], fontsize=7)
    ax.set_ylabel("wait for the last rank (ms)")
    strag = j.collectives.stragglers()
    ax.set_xlabel("call (group:sequence) and the rank that came last")
    ax.set_title("per call: each rank's wait for the last; stragglers: "
                 + (", ".join(f"rank {r}" for r in strag) if strag else "none"), fontsize=9)
    if ranks:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def model_figure(j: TraceJudgement) -> Any:
    """Each priced kernel's transfer time against the model's (log-log, the line y = x); when
    none is priced, the reasons as text."""
    fig = new_figure(figsize=(5, 4))
    ax = fig.add_subplot()
    priced = [p for p in j.prices if p.model_us is not None]
    if not priced:
        reasons = sorted({p.why or "" for p in j.prices}) or ["no collective kernels"]
        ax.text(0.5, 0.5, "not priced:\n" + "\n".join(reasons), ha="center", va="center",
                fontsize=8, wrap=True, transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    m = np.array([p.model_us for p in priced])
    t = np.array([p.measured_us for p in priced])
    known = np.array([p.transfer_us is not None for p in priced])
    if known.any():
        ax.loglog(m[known], t[known], "o", ms=4, label="transfer: kernel after the last peer "
                                                       "arrived")
    if not known.all():
        ax.loglog(m[~known], t[~known], "s", ms=4, mfc="none",
                  label="whole kernel: peers' traces absent,\nso the wait in it is unknown")
    lo, hi = min(m.min(), t.min()) * 0.7, max(m.max(), t.max()) * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="model = measured")
    ax.set_xlabel("NCCL model (us)")
    ax.set_ylabel("measured (us): " + ("transfer" if known.all() else
                                        "whole kernel" if not known.any() else
                                        "transfer or whole kernel"))
    legend_clear_of_data(ax, fontsize=7)   # measured kernel times fall anywhere
    return fig


class TraceExplorer(Explorer):
    """Dropdowns for the trace (``traces``: label -> path), the rank (all or one) and the step
    (whole trace or ProfilerStep#N); draws the Gantt and the breakdown. ``summary`` says the
    breakdown of the chosen rank/step and the stragglers."""

    def __init__(self, traces: Mapping[str, Any]) -> None:
        if not traces:
            raise ValueError("traces must name at least one trace folder")
        self._judged: dict[str, TraceJudgement] = {}
        self._paths = dict(traces)
        self.trace = w.Dropdown(options=list(self._paths), description="trace")
        self.rank = w.Dropdown(options=[("all", -1)], value=-1, description="rank")
        self.step = w.Dropdown(options=[("whole trace", -1)], value=-1, description="step")
        self._refill()
        super().__init__([self.trace, self.rank, self.step])

    def judged(self, label: str | None = None) -> TraceJudgement:
        label = label or self.trace.value
        if label not in self._judged:
            self._judged[label] = judge_trace(self._paths[label])
        return self._judged[label]

    def _refill(self) -> None:
        self._filled_for = self.trace.value
        j = self.judged()
        self.rank.options = [("all", -1)] + [(str(r), r) for r in j.run.ranks]
        self.rank.value = -1
        steps = sorted({n for a in j.analyses.values() for n in a.steps})
        self.step.options = [("whole trace", -1)] + [(f"#{n}", n) for n in steps]
        self.step.value = -1

    def settle(self) -> None:
        """A new trace refills the rank and step choices."""
        if self.trace.value != self._filled_for:
            self._refill()

    def draw(self) -> Drawing:
        j = self.judged()
        step = None if self.step.value == -1 else self.step.value
        ranks = list(j.run.ranks) if self.rank.value == -1 else [self.rank.value]
        fig = new_figure(figsize=(9.4, 2.0 + 0.9 * len(ranks)))
        ax = fig.add_subplot()
        rank_gantt(j, step=step, ax=ax, ranks=ranks)
        parts = []
        for r in ranks:
            b = j.breakdown(r, step)
            if b is None:
                parts.append(f"rank {r}: no events")
                continue
            parts.append(f"rank {r} ({b.basis}): idle {b.pct('idle'):.1f}%, compute "
                         f"{b.pct('compute'):.1f}%, comm {b.pct('communication'):.1f}%")
        strag = j.collectives.stragglers()
        parts.append("stragglers: " + (", ".join(map(str, strag)) if strag else "none"))
        return Drawing(fig, "; ".join(parts))
