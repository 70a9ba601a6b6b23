"""viz.refit: the figures of the model's judgement (error, noise, windows)."""

from __future__ import annotations

import numpy as np
import pytest

from distlab.judge.refit import meets_target, refit_profile
from distlab.judge.windows import window_runs
from distlab.viz.figure import DisplayFigure
from distlab.viz.refit import refit_figure, windows_figure
from helpers.paths import PROFILES

VM, QUICK = PROFILES / "vm-2026-11-23", PROFILES / "vm-2026-11-23-quick"


def test_figure_has_a_panel_per_run_and_a_line_per_algorithm() -> None:
    runs = refit_profile(VM)
    fig = refit_figure(runs + refit_profile(QUICK))
    assert isinstance(fig, DisplayFigure)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 3
    assert {ln.get_label() for ln in shown[0].get_lines()} >= {"ring", "builtin"}
    ring = next(ln for ln in shown[0].get_lines() if ln.get_label() == "ring")
    rows = sorted((r for r in runs[0].rows if r["algorithm"] == "ring"), key=lambda r: r["nbytes"])
    assert list(ring.get_ydata()) == pytest.approx([r["time_us"] / r["predicted_us"]
                                                    for r in rows])


def test_windows_figure_draws_every_windows_median_and_p90_per_world_size() -> None:
    long = PROFILES / "vm-quiet-80rounds-2026-11-23"
    fig = windows_figure(long, [20, 80])
    assert isinstance(fig, DisplayFigure)
    assert [ax.get_title().split(" ")[0] for ax in fig.axes] == ["2", "4"]
    for ax, ws in zip(fig.axes, (2, 4), strict=False):
        windows = [w for n in (20, 80) for w in window_runs(long, n) if w.run.world_size == ws]
        for gid, key in (("median", "median"), ("p90", "p90")):
            drawn = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections
                                    if c.get_gid() == gid])
            assert sorted(drawn) == pytest.approx(sorted(getattr(w.stats(), key)
                                                         for w in windows))
        assert not ax.texts   # nothing written over the dots
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        met20 = sum(meets_target(w.stats()) for w in windows if w.rounds == 20)
        assert ticks == [f"20\n{met20}/4 met",
                         f"80\n{int(meets_target(windows[-1].stats()))}/1 met"]
    with pytest.raises(ValueError, match="kept 0 rounds"):
        windows_figure(VM, [5])
