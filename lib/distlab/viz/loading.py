"""Figures and widget explorers for loading pipelines and the async part loader.

Figures take timelines (measured or simulated, one type) and return matplotlib Figures. The
explorers are small classes holding their widgets, their last figure and their last model and
measurement, so tests drive them by setting ``.value`` on a widget and reading the state; in a
notebook, display ``explorer.widget``.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ipywidgets as w

from distlab.loading.bottleneck import (
    Station,
    bound_s,
    plan_for_stages,
    simulate_pipeline,
    startup_s,
    sync_time_s,
)
from distlab.loading.executors import EXECUTORS, RunResult, make_executor
from distlab.loading.part_loader_model import part_load_times, parts_idle_fraction, simulate_parts
from distlab.loading.stage import Stage
from distlab.loading.synthetic_stages import BurnStage, SleepStage
from distlab.timeline import Timeline
from distlab.trace import write_chrome_trace
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.viz.gantt import gantt
from distlab.viz.layout_check import legend_clear_of_data
from distlab.viz.palette import colour
from distlab.vocabulary import error_pct

__all__ = ["LoadingExplorer", "PartsExplorer", "compare_loading_gantt", "explorer_stages",
           "idle_vs_queue_figure", "parts_gantt", "runs_gantt", "startup_note", "startup_s",
           "steady_lanes"]


COLORS = {k: colour(k) for k in ("io", "cpu", "copy", "compute", "blocked", "startup")}

_WORKER = re.compile(r"worker(\d+)$")
"""A worker lane's name after the prefix: ``worker3`` (ours, and the simulated station's
servers) or ``dl_worker3`` (torch's DataLoader)."""


def steady_lanes(timeline: Timeline, consumer: str | None = None) -> list[str]:
    """The timeline's lanes without worker start-up (``"<prefix>/startup"``): the steady
    pipeline, which wall, stall and the model cover; start-up is reported as its own number.

    In the one lane order of every loading Gantt, measured or simulated: the worker lanes in
    numeric order (``worker0``, ``worker1``, ...), then the trainer's stages in pipeline order
    (the order their first spans start, since the first item passes them in turn), then
    ``consumer`` (the last stage, where the training step runs) when it is given.
    """
    lanes = [lane for lane in timeline.lanes if not lane.endswith("/startup")]
    first: dict[str, float] = {}
    for s in timeline.spans:
        first[s.lane] = min(first.get(s.lane, s.start_us), s.start_us)

    def key(lane: str) -> tuple[int, float, str]:
        worker = _WORKER.search(lane.rsplit("/", 1)[-1])
        if lane == consumer:
            return 2, 0.0, ""
        if worker is not None:
            return 0, float(worker.group(1)), lane
        return 1, first[lane], ""

    return sorted(lanes, key=key)   # stable: equal starts keep their first appearance


def startup_note(result: RunResult) -> str:
    """The one wording of a run's worker start-up (:func:`startup_s`, the figure the
    benchmark's table shows) in loading figures and summaries: ``"worker start-up 6766 ms,
    not drawn"``, or ``"no worker start-up"`` for executors that start no workers."""
    su = startup_s(result)
    return f"worker start-up {su * 1e3:.0f} ms, not drawn" if su > 0 else "no worker start-up"


def _drawn_end_ms(timeline: Timeline, lanes: Sequence[str], origin_us: float) -> float:
    """Milliseconds from ``origin_us`` to the end of the last span on ``lanes`` (0 if none)."""
    chosen = set(lanes)
    return max(((s.end_us - origin_us) / 1e3 for s in timeline.spans if s.lane in chosen),
               default=0.0)


def _steady_axis(ax: Any, end_ms: float) -> None:
    """The time axis of a steady pipeline: from its start (0 ms) to ``end_ms`` and a margin."""
    ax.set_xlim(0.0, end_ms * 1.02 if end_ms > 0 else 1.0)


def compare_loading_gantt(measured: Timeline, simulated: Timeline, *,
                          measured_origin_us: float, measured_consumer: str,
                          simulated_consumer: str, title: str = "") -> Any:
    """Measured (top) and simulated (bottom) Gantt charts on one time axis: milliseconds from
    the start of each run's steady pipeline (``measured_origin_us``, ``RunResult.start_us``;
    the simulation starts at 0), to the end of the later one. Worker start-up is not drawn
    (put its :func:`startup_note` in ``title``); both panels order their lanes alike
    (:func:`steady_lanes`); the consumer's idle gaps (where a GPU would wait) are shaded red.
    """
    lanes_m = steady_lanes(measured, measured_consumer)
    lanes_s = steady_lanes(simulated, simulated_consumer)
    fig = new_figure(figsize=(9.4, 1.2 + 0.4 * (len(lanes_m) + len(lanes_s))), layout=None)
    ax1, ax2 = fig.subplots(2, 1, sharex=True,
                            height_ratios=[max(1, len(lanes_m)), max(1, len(lanes_s))])
    if lanes_m:
        gantt(measured, ax1, origin_us=measured_origin_us, lanes=lanes_m,
              highlight_idle=measured_consumer, colors=COLORS)
    else:
        ax1.text(0.5, 0.5, "no measurement for these settings: press 'run measured'",
                 ha="center", va="center", transform=ax1.transAxes)
    gantt(simulated, ax2, origin_us=0.0, lanes=lanes_s, highlight_idle=simulated_consumer,
          colors=COLORS)
    _steady_axis(ax2, max(_drawn_end_ms(measured, lanes_m, measured_origin_us),
                          _drawn_end_ms(simulated, lanes_s, 0.0)))
    ax1.set_title("measured" + (f": {title}" if title else ""), loc="left", fontsize="medium")
    ax2.set_title("simulated (model)", loc="left", fontsize="medium")
    ax1.set_xlabel("")
    fig.tight_layout()
    return fig


def runs_gantt(results: Sequence[RunResult], titles: Sequence[str] | None = None) -> Any:
    """One Gantt per run, stacked, on one time axis (ms from the start of each run's steady
    pipeline to the end of the longest); worker start-up is left out of the chart and given
    in the title (:func:`startup_note`)."""
    results = list(results)
    lanes = [steady_lanes(r.timeline, r.consumer_lane) for r in results]
    heights = [max(1, len(ln)) for ln in lanes]
    fig = new_figure(figsize=(9.4, 1.0 + 0.4 * sum(heights)), layout=None)
    axes = fig.subplots(len(results), 1, sharex=True, squeeze=False, height_ratios=heights)
    for i, (ax, r) in enumerate(zip(axes[:, 0], results, strict=False)):
        gantt(r.timeline, ax, origin_us=r.start_us, lanes=lanes[i],
              highlight_idle=r.consumer_lane, colors=COLORS)
        name = titles[i] if titles else r.executor
        extra = f" (+ {startup_note(r)})" if startup_s(r) > 0 else ""
        ax.set_title(f"{name}: {r.wall_s * 1e3:.0f} ms, consumer stall {r.stall_s * 1e3:.0f} ms"
                     f"{extra}", loc="left", fontsize="medium")
        if i < len(results) - 1:
            ax.set_xlabel("")
    if results:
        _steady_axis(axes[0, 0], max(_drawn_end_ms(r.timeline, ln, r.start_us)
                                     for r, ln in zip(results, lanes, strict=True)))
    fig.tight_layout()
    return fig


def explorer_stages(read_ms: float, decode_ms: float, compute_ms: float) -> list[Stage]:
    """The explorer's three stages: read (sleep, I/O), decode (CPU burn), compute (sleep standing
    for a GPU step: the CPU waits while the GPU works)."""
    read = SleepStage(read_ms / 1e3, name="read")
    decode = BurnStage(decode_ms / 1e3, name="decode")
    compute = SleepStage(compute_ms / 1e3, name="compute")
    compute.category, compute.placement = "compute", "host"
    return [read, decode, compute]


def _sim_for(stages: Sequence[Stage], executor: str, n: int, workers: int,
             depth: int) -> tuple[list[Station], Timeline]:
    plan = plan_for_stages(executor, stages, workers=workers, queue_depth=depth)
    return plan, simulate_pipeline(plan, n)


class LoadingExplorer(Explorer):
    """Sliders for stage costs, queue depth, workers, items and the executor; the simulated
    Gantt follows every change, the measured one is taken when "run measured" is pressed (and
    once at construction with ``measure_now=True``).

    Every measurement is kept, keyed by the settings it depends on (:meth:`measurement_key`:
    the stage costs, the items and the executor's own settings), so moving a control away and
    back shows the measurement of those settings again, and a control the executor does not
    use (workers, for ``threads``) keeps it. Worker start-up is not drawn: the measured panel
    spans the steady pipeline, and its title and the summary give the start-up
    (:func:`startup_note`).

    State after each change: ``plan``, ``sim`` (Timeline), ``result`` (the measured
    RunResult of the current settings, or None when they have not been measured),
    ``summary`` (str), ``figure``, ``png``; ``controls`` (the value widgets), ``widget`` (the
    box to display).
    """

    def __init__(self, *, read_ms: float = 3.0, decode_ms: float = 3.0, compute_ms: float = 3.0,
                 queue_depth: int = 2, workers: int = 2, items: int = 24,
                 executor: str = "threads", trace_dir: str | None = None,
                 measure_now: bool = False) -> None:
        style = {"description_width": "110px"}
        fs = dict(min=0.0, max=20.0, step=0.5, continuous_update=False, style=style)
        self.read_ms = w.FloatSlider(value=read_ms, description="read ms", **fs)
        self.decode_ms = w.FloatSlider(value=decode_ms, description="decode ms", **fs)
        self.compute_ms = w.FloatSlider(value=compute_ms, description="compute ms", **fs)
        self.queue_depth = w.IntSlider(value=queue_depth, min=1, max=8, description="queue depth",
                                       continuous_update=False, style=style)
        self.workers = w.IntSlider(value=workers, min=0, max=4, description="workers",
                                   continuous_update=False, style=style)
        self.items = w.IntSlider(value=items, min=1, max=200, description="items",
                                 continuous_update=False, style=style)
        self.executor = w.Dropdown(options=list(EXECUTORS), value=executor,
                                   description="executor", style=style)
        self.run_button = w.Button(description="run measured", icon="play")
        self.trace_button = w.Button(description="write trace", icon="download",
                                     tooltip="write the last run as Chrome trace JSON (Perfetto)")
        self.trace_dir = Path(trace_dir) if trace_dir else Path(tempfile.mkdtemp("distlab"))
        self.trace_path: Path | None = None
        self.controls = [self.read_ms, self.decode_ms, self.compute_ms, self.queue_depth,
                         self.workers, self.items, self.executor]
        self.result: RunResult | None = None
        self.measurements: dict[tuple[Any, ...], RunResult] = {}
        if measure_now:
            self._run()
        self.run_button.on_click(lambda _: self.measure())
        self.trace_button.on_click(lambda _: self.write_trace())
        super().__init__(self.controls, rows=[
            w.HBox([w.VBox(self.controls[:3]), w.VBox(self.controls[3:])]),
            w.HBox([self.run_button, self.trace_button])])

    def stages(self) -> list[Stage]:
        """The stages for the current slider values."""
        return explorer_stages(self.read_ms.value, self.decode_ms.value, self.compute_ms.value)

    def _executor(self) -> Any:
        return make_executor(self.executor.value, queue_depth=self.queue_depth.value,
                             workers=self.workers.value)

    def measurement_key(self) -> tuple[Any, ...]:
        """The settings a measurement depends on: the stage costs (ms), the items and the
        executor's own settings (its ``config()``: ``sync`` has none, ``threads`` its queue
        depth, ``processes`` and ``torch`` also their workers)."""
        config = self._executor().config()   # makes the object only: workers start in run()
        return (self.read_ms.value, self.decode_ms.value, self.compute_ms.value,
                self.items.value, tuple(sorted(config.items())))

    def _run(self) -> RunResult:
        key, stages, items = self.measurement_key(), self.stages(), self.items.value
        with self._executor() as ex:
            result = ex.run(stages, items)
        self.measurements[key] = self.result = result
        return result

    def draw(self) -> Drawing:
        """The model for the current controls, beside their measurement if there is one."""
        self.result = self.measurements.get(self.measurement_key())
        stages, n = self.stages(), self.items.value
        self.plan, self.sim = _sim_for(stages, self.executor.value, n, self.workers.value,
                                       self.queue_depth.value)
        b, sync = bound_s(self.plan, n), sync_time_s(self.plan, n)
        text = (f"{self.executor.value}: bound {b * 1e3:.1f} ms, simulated "
                f"{self.sim.wall_us() / 1e3:.1f} ms, no-overlap {sync * 1e3:.1f} ms")
        title = self.executor.value
        if self.result is not None:
            r = self.result
            sim_s = self.sim.wall_us() * 1e-6
            err = f"{error_pct(r.wall_s, sim_s):+.0f}%" if sim_s > 0 else "n/a"
            text += (f"; measured {r.wall_s * 1e3:.1f} ms steady (efficiency "
                     f"{b / r.wall_s:.2f}, model error {err}, stall {r.stall_s * 1e3:.1f} ms); "
                     f"{startup_note(r)}")
            title += f" (+ {startup_note(r)})" if startup_s(r) > 0 else ""
        measured = self.result.timeline if self.result else Timeline()
        last = self.result
        fig = compare_loading_gantt(measured, self.sim,
                                    measured_origin_us=last.start_us if last else 0.0,
                                    measured_consumer=last.consumer_lane if last else "",
                                    simulated_consumer=self.sim.lanes[-1] if len(self.sim) else "",
                                    title=title)
        return Drawing(fig, text)

    def measure(self) -> RunResult:
        """Run the current settings for real, then redraw with the measurement on top."""
        result = self._run()
        self.update()
        return result

    def write_trace(self) -> Path | None:
        """Write the last measurement (or the simulation) as Chrome trace JSON for Perfetto."""
        tl = self.result.timeline if self.result is not None else self.sim
        self.trace_path = write_chrome_trace(tl, self.trace_dir / "pipeline_trace.json")
        self.show_note(f"wrote {self.trace_path}: open it in https://ui.perfetto.dev")
        return self.trace_path


def parts_gantt(sync: Timeline, asyn: Timeline, *, titles: tuple[str, str] = ("sync", "async"),
                origins_us: tuple[float, float] = (0.0, 0.0)) -> Any:
    """Sync and async part-loader timelines, stacked, trainer idle shaded."""
    fig = new_figure(figsize=(9.4, 3.6), layout=None)
    axes = fig.subplots(2, 1, sharex=True)
    for ax, tl, title, origin in zip(axes, (sync, asyn), titles, origins_us, strict=False):
        lanes = [lane for lane in ("producer/load", "trainer/load", "trainer/compute")
                 if lane in tl.lanes]
        gantt(tl, ax, origin_us=origin, lanes=lanes, highlight_idle="trainer/compute",
                 colors=COLORS)
        ax.set_title(title, loc="left", fontsize="medium")
    axes[0].set_xlabel("")
    fig.tight_layout()
    return fig


def idle_vs_queue_figure(n_parts: int, load_times_s: Sequence[float], train_s: float,
                         queue_sizes: Sequence[int] = (1, 2, 3, 4, 6, 8),
                         measured: dict[int, float] | None = None, ax: Any = None) -> Any:
    """Model curve of the trainer's idle fraction versus queue size (async), with the sync
    level as a line and optional measured points ``{queue_size: idle_fraction}``."""
    if ax is None:
        fig = new_figure(figsize=(6, 3.4), layout=None)
        ax = fig.subplots()
    else:
        fig = ax.figure
    ys = [parts_idle_fraction(n_parts, list(load_times_s), train_s, queue_size=q)
          for q in queue_sizes]
    ax.plot(list(queue_sizes), ys, "o-", label="async (model)")
    ax.axhline(parts_idle_fraction(n_parts, list(load_times_s), train_s, mode="sync"),
               color="tab:red", ls="--", label="sync (model)")
    if measured:
        ax.plot(list(measured), list(measured.values()), "k^", ms=8, label="async (measured)")
    ax.set_xlabel("queue size (parts)")
    ax.set_ylabel("trainer idle fraction")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    legend_clear_of_data(ax, fontsize="small")   # measured idle fractions fall anywhere
    return fig


class PartsExplorer(Explorer):
    """Sliders for queue size, mean part load time, load jitter and train time per part; shows
    the simulated sync and async timelines and the idle-vs-queue-size curve (pure model, fast).

    State: ``idle_sync``, ``idle_async`` (predicted idle fractions), ``summary``, ``figure``,
    ``png``, ``widget``.
    """

    def __init__(self, *, n_parts: int = 16, queue_size: int = 2, load_ms: float = 30.0,
                 jitter: float = 1.0, train_ms: float = 40.0, seed: int = 0) -> None:
        style = {"description_width": "110px"}
        self.n_parts, self.seed = n_parts, seed
        self.queue_size = w.IntSlider(value=queue_size, min=1, max=8, description="queue size",
                                      continuous_update=False, style=style)
        self.load_ms = w.FloatSlider(value=load_ms, min=1.0, max=200.0, step=1.0,
                                     description="load ms", continuous_update=False, style=style)
        self.jitter = w.FloatSlider(value=jitter, min=0.0, max=2.0, step=0.1,
                                    description="load jitter", continuous_update=False,
                                    style=style)
        self.train_ms = w.FloatSlider(value=train_ms, min=1.0, max=200.0, step=1.0,
                                      description="train ms", continuous_update=False,
                                      style=style)
        super().__init__([self.queue_size, self.load_ms, self.jitter, self.train_ms],
                         rows=[w.HBox([w.VBox([self.queue_size, self.load_ms]),
                                       w.VBox([self.jitter, self.train_ms])])])

    def draw(self) -> Drawing:
        """The model for the current sliders: both timelines and the idle curve."""
        loads = part_load_times(self.n_parts, self.load_ms.value / 1e3, self.jitter.value,
                                self.seed)
        train = self.train_ms.value / 1e3
        q = self.queue_size.value
        sync = simulate_parts(self.n_parts, loads, train, mode="sync")
        asyn = simulate_parts(self.n_parts, loads, train, queue_size=q)
        self.idle_sync = parts_idle_fraction(self.n_parts, loads, train, mode="sync")
        self.idle_async = parts_idle_fraction(self.n_parts, loads, train, queue_size=q)
        summary = (f"trainer idle: sync {self.idle_sync:.0%}, async (queue {q}) "
                   f"{self.idle_async:.0%}; wall {sync.wall_us() / 1e3:.0f} ms -> "
                   f"{asyn.wall_us() / 1e3:.0f} ms")
        fig = new_figure(figsize=(9.4, 3.8), layout=None)
        gs = fig.add_gridspec(2, 2, width_ratios=[2.2, 1])
        for row, (tl, title) in enumerate(((sync, "sync (model)"),
                                           (asyn, f"async, queue {q} (model)"))):
            ax = fig.add_subplot(gs[row, 0])
            lanes = [ln for ln in ("producer/load", "trainer/load", "trainer/compute")
                     if ln in tl.lanes]
            gantt(tl, ax, origin_us=0.0, lanes=lanes, highlight_idle="trainer/compute",
                  colors=COLORS)
            ax.set_title(title, loc="left", fontsize="medium")
        idle_vs_queue_figure(self.n_parts, loads, train, ax=fig.add_subplot(gs[:, 1]))
        fig.tight_layout()
        return Drawing(fig, summary)
