"""viz.noise: the noise scatter draws every judged row once, in a few colours a reader can tell
apart (one per machine), with a legend that names them, and no texts that collide."""

from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pytest

from distlab.judge.refit import TARGET_ALGORITHMS, TARGET_MIN_BYTES, refit_profile
from distlab.judge.verdict import profile_facts
from distlab.viz.figure import DisplayFigure
from distlab.viz.layout_check import layout_problems
from distlab.viz.noise import machine_label, noise_figure
from helpers.paths import PROFILES

#: The profiles notebook 11 judges (13 profiles, 26 runs: one pastel series each, before).
NAMES = ["vm-2026-11-23", "vm-1core-2026-11-23", "vm-2core-2026-11-23", "h100-2026-11-23",
         "vm-quiet-2026-11-23", "vm-1core-quiet-2026-11-23", "vm-2core-quiet-2026-11-23",
         "vm-quiet-rerun-2026-11-23", "vm-1core-quiet-rerun-2026-11-23",
         "vm-2core-quiet-rerun-2026-11-23", "vm-quiet-80rounds-2026-11-23",
         "vm-quiet-40rounds-2026-11-23", "vm-quiet-run3-2026-11-23"]


@pytest.fixture(scope="module")
def drawn() -> tuple[list, dict, DisplayFigure]:
    paths = [PROFILES / n for n in NAMES]
    runs = [run for p in paths for run in refit_profile(p)]
    cpus = {f["profile"]: f["cpus"] for f in profile_facts(paths)}
    return runs, cpus, noise_figure(runs, cpus=cpus)


def _colours(fig: DisplayFigure) -> set[str]:
    """Every colour the dots are drawn in (face or edge, alpha dropped)."""
    out = set()
    for ax in fig.axes:
        for coll in ax.collections:
            for c in [*coll.get_facecolors(), *coll.get_edgecolors()]:
                if c[3] > 0:
                    out.add(mcolors.to_hex(c, keep_alpha=False))
    return out


def _judged(run) -> list[dict]:
    return [r for r in run.rows if r["nbytes"] >= TARGET_MIN_BYTES
            and r["algorithm"] in TARGET_ALGORITHMS and r.get("noise_pct") is not None]


def test_a_few_colours_one_per_machine_and_a_legend_that_names_them(drawn) -> None:
    runs, cpus, fig = drawn
    machines = {cpus[run.profile] for run in runs}
    assert machines == {1, 2, 16}
    assert len(_colours(fig)) == len(machines), "one colour per machine, not per profile"
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) <= 8, texts
    for n in sorted(machines):
        inside = sum(bool(r["within_noise"]) for run in runs if cpus[run.profile] == n
                     for r in _judged(run))
        total = sum(len(_judged(run)) for run in runs if cpus[run.profile] == n)
        assert f"{machine_label(n)}: {inside}/{total} inside" in texts
    assert {"judged by the mean", "judged by the median", "|error| = noise"} <= set(texts)
    assert layout_problems(fig) == []


def test_one_panel_per_world_size_with_every_judged_row_once(drawn) -> None:
    runs, cpus, fig = drawn
    assert [ax.get_title().split(":")[0] for ax in fig.axes] == ["2 ranks", "4 ranks"]
    for ax, ws in zip(fig.axes, (2, 4), strict=True):
        got = sorted(map(tuple, np.concatenate([c.get_offsets() for c in ax.collections])))
        want = sorted((max(r["noise_pct"], 0.1), max(abs(r["error_pct"]), 0.1))
                      for run in runs if run.world_size == ws for r in _judged(run))
        assert np.allclose(got, want, rtol=1e-9)
        # hollow dots: the rows judged by the median
        hollow = sum(len(c.get_offsets()) for c in ax.collections
                     if not any(f[3] > 0 for f in c.get_facecolors()))
        assert hollow == sum(len(_judged(run)) for run in runs
                             if run.world_size == ws and run.statistic == "median")


def test_profile_folders_bring_their_own_cpus_and_rows_need_rounds() -> None:
    fig = noise_figure([PROFILES / "vm-2026-11-23", PROFILES / "vm-1core-2026-11-23"])
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("ranks on 1 CPU:") for t in texts)
    assert any(t.startswith("ranks on 2 CPUs:") for t in texts)
    run = refit_profile(PROFILES / "vm-2026-11-23")[0]
    run.rows = [dict(r, noise_pct=None) for r in run.rows]
    with pytest.raises(ValueError, match="kept its rounds"):
        noise_figure([run])
    assert machine_label(None) == "CPUs not recorded"
