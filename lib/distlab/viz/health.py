"""A judged nccl-tests log drawn, and a box to paste or upload one in a notebook.

- :func:`health_figure`: measured bandwidth over the model's (``share``) per size, the band a
  healthy run stays in shaded, each row coloured by its verdict, the first cause as the title;
- :class:`LogBox`: a text area to paste a log into (or a file to upload), the flags a log
  cannot state, and a button that prints the report and draws the figure.
"""

from __future__ import annotations

import textwrap
from typing import Any

import ipywidgets as w
from matplotlib.ticker import FuncFormatter, NullFormatter

from distlab.health.verdict import RunVerdict
from distlab.viz.axes import bytes_axis
from distlab.viz.figure import DisplayFigure, message_figure, new_figure

__all__ = ["VERDICT_COLOURS", "LogBox", "health_figure"]

VERDICT_COLOURS = {"ok": "#2ca02c", "low": "#d62728", "high": "#1f77b4"}
"""A row's verdict: inside its band, slower than it, faster than it."""

SHARE_TICKS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5,
               10)
"""The shares labelled on the y axis (those inside its range): plain numbers a reader says."""


def health_figure(v: RunVerdict, *, width_in: float = 9.2) -> DisplayFigure:
    """``v``'s rows: measured bandwidth over the model's against size (1: as priced), the
    healthy band shaded (``1 / (1 + error)`` at its edges), points by verdict.

    Args:
        v: a judged run (:func:`distlab.health.verdict.judge_run`).
        width_in: the figure's width, inches.

    Returns:
        The figure; a message figure where the run was not priced.
    """
    if v.not_priced or not v.rows:
        return message_figure(f"not priced: {v.not_priced or 'no rows'}", width_in=width_in)
    fig = new_figure(figsize=(width_in, 3.6))
    ax = fig.add_subplot()
    sizes = [r.nbytes for r in v.rows]
    top = [1 / (1 + r.band.low_pct / 100) for r in v.rows]
    bottom = [1 / (1 + r.band.high_pct / 100) for r in v.rows]
    ax.fill_between(sizes, bottom, top, step="mid", color="#d9d9d9", alpha=0.8,
                    label="healthy (the model's held-out error)")
    ax.axhline(1.0, color="#525252", lw=1, ls="--", label="as the model prices it")
    for verdict, colour in VERDICT_COLOURS.items():
        rows = [r for r in v.rows if r.verdict == verdict]
        if rows:
            ax.plot([r.nbytes for r in rows], [r.share for r in rows], "o", color=colour,
                    label=f"{verdict} ({len(rows)})")
    bytes_axis(ax)
    shares = [r.share for r in v.rows] + top + bottom
    lo, hi = min(shares) / 1.3, max(shares) * 1.3
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.set_yticks([t for t in SHARE_TICKS if lo <= t <= hi])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda t, _pos: f"{t:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("measured / model bandwidth")
    s = v.setup
    cause = f": {v.causes[0].name}" if v.causes else ""
    ax.set_title(textwrap.shorten(f"{v.run.collective}, {s.world_size} GPUs, {s.box.key}"
                                  f"{f' x {s.nodes} nodes' if s.nodes > 1 else ''}: "
                                  f"{v.verdict}{cause}", 100), fontsize="medium")
    ax.legend(fontsize="small", loc="best")
    return fig


class LogBox:
    """Paste or upload an nccl-tests log, say what it cannot, and judge it.

    ``widget`` is the box to display; ``judge()`` runs what the button runs and returns the
    judged runs (also kept as ``verdicts``), printing the report and drawing the figures into
    ``output``. Bad input prints one line saying what is wrong, as the command does.
    """

    def __init__(self) -> None:
        self.text = w.Textarea(placeholder="paste all_reduce_perf's output here",
                               layout=w.Layout(width="100%", height="12em"))
        self.upload = w.FileUpload(accept=".log,.txt,.json", multiple=False,
                                   description="or upload")
        self.nics = w.BoundedIntText(value=0, min=0, max=64, description="NICs/node",
                                     layout=w.Layout(width="12em"))
        self.nic_gbps = w.BoundedFloatText(value=400, min=25, max=800, description="Gb/s each",
                                           layout=w.Layout(width="12em"))
        self.fabric = w.Dropdown(options=["ib", "roce", "efa"], value="ib", description="fabric",
                                 layout=w.Layout(width="12em"))
        self.env = w.Text(value="", placeholder="NCCL_ALGO=Ring NCCL_PROTO=Simple",
                          description="env", layout=w.Layout(width="30em"))
        self.button = w.Button(description="judge", button_style="primary")
        self.output = w.Output()
        self.verdicts: list[RunVerdict] = []
        self.button.on_click(lambda _: self.judge())
        self.widget = w.VBox([self.text, w.HBox([self.upload, self.nics, self.nic_gbps,
                                                 self.fabric]),
                              w.HBox([self.env, self.button]), self.output])

    def _log_text(self) -> str:
        files = self.upload.value
        if files:
            item = files[0] if isinstance(files, (list, tuple)) else next(iter(files.values()))
            return bytes(item["content"]).decode(errors="replace")
        return self.text.value

    def judge(self) -> list[RunVerdict]:
        """Judge what was pasted or uploaded; print the report and draw each run."""
        from IPython.display import display

        from distlab.health.report import run_lines
        from distlab.health.setup import setup_of
        from distlab.health.verdict import judge_run
        from distlab.logs.nccl_tests import read_log

        self.output.clear_output()
        self.verdicts = []
        with self.output:
            try:
                runs = read_log("pasted log", text=self._log_text())
                flags: dict[str, Any] = {}
                if self.nics.value:
                    flags = {"nics": self.nics.value, "nic_gbits": self.nic_gbps.value,
                             "fabric": self.fabric.value}
                for run in runs:
                    setup = setup_of(run, env=self.env.value.split(), **flags)
                    self.verdicts.append(judge_run(run, setup))
            except ValueError as exc:
                print(f"cannot judge it: {exc}")
                return []
            for v in self.verdicts:
                print("\n".join(run_lines(v)))
                display(health_figure(v))
        return self.verdicts
