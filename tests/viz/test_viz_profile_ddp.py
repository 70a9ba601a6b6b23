"""Notebook 07's DDP chart and NCCL figure, read from what they draw on the committed profiles:
no colliding texts, one colour per DDP variant, overlap 0 above the variants that do not overlap,
the overlap's definition in the figure, legends a reader can read (>= 8 pt)."""

from __future__ import annotations

import json
from collections import defaultdict

import matplotlib.colors as mcolors
import pytest

from distlab.bench.ddp import OVERLAP_DEFINITION
from distlab.profile.load import load_profile
from distlab.viz import profile as vp
from distlab.viz.layout_check import layout_problems
from distlab.viz.nccl import nccl_busbw_figure
from helpers.paths import PROFILES

COMMITTED = ("vm-2026-11-23", "h100-2026-11-23", "vm-2026-11-23-quick")


def _bars(ax) -> list[tuple[float, float, str, bool]]:
    """(x centre, height, colour hex, hatched) of every drawn bar with a width."""
    return [(b.get_x() + b.get_width() / 2, b.get_height(),
             mcolors.to_hex(b.get_facecolor(), keep_alpha=False), bool(b.get_hatch()))
            for b in ax.patches if b.get_width() > 0]


@pytest.mark.parametrize("name", COMMITTED)
def test_ddp_chart_reads_cleanly_and_says_overlap_0_for_the_variants_that_do_not(name) -> None:
    prof = load_profile(PROFILES / name)
    rows = prof.part("ddp")["rows"]
    fig = vp.ddp_figure(prof)
    ax = fig.axes[0]
    assert layout_problems(fig) == []
    assert OVERLAP_DEFINITION in ax.get_title()
    legend = ax.get_legend()
    assert min(t.get_fontsize() for t in legend.get_texts()) >= 8
    assert [t.get_text() for t in legend.get_texts()] == [
        "naive", "no-overlap", "overlap", "torch", "exposed communication"]
    bars = _bars(ax)
    assert len(bars) == 2 * len(rows)          # per row: its step, then its exposed part
    colour = defaultdict(set)
    numbers = {round(t.get_position()[0], 6): t.get_text() for t in ax.texts}
    for r, (step, exposed) in zip(rows, zip(bars[::2], bars[1::2], strict=True), strict=True):
        assert step[1] == pytest.approx(r["step_s"] * 1e3)
        assert exposed[1] == pytest.approx(r["exposed_s"] * 1e3) and exposed[3]
        assert step[0] == exposed[0]
        colour[r["variant"]] |= {step[2], exposed[2]}
        shown = numbers[round(step[0], 6)]
        assert shown == f"{r['overlap_fraction']:.2f}"
        if r["variant"] in ("naive", "no-overlap"):
            assert shown == "0.00"
    assert all(len(c) == 1 for c in colour.values()), colour   # one colour per variant
    assert len({next(iter(c)) for c in colour.values()}) == len(colour)


def test_the_stored_overlap_is_derived_again_at_load_time() -> None:
    """The committed vm profile stores 0.31 for naive (1 - exposed / modelled allreduce); the
    loader derives the measured overlap from the stored exposed times, the file unchanged."""
    raw = json.loads((PROFILES / "vm-2026-11-23" / "ddp.json").read_text())
    stored = {(r["variant"], r["bucket_cap_mb"]): r for r in raw["rows"]}
    assert stored[("naive", None)]["overlap_fraction"] > 0.3
    loaded = {(r["variant"], r["bucket_cap_mb"]): r
              for r in load_profile(PROFILES / "vm-2026-11-23").part("ddp")["rows"]}
    assert loaded[("naive", None)]["overlap_fraction"] == 0.0
    for (variant, cap), r in loaded.items():
        if variant in ("overlap", "torch"):
            want = 1 - r["exposed_s"] / stored[("no-overlap", cap)]["exposed_s"]
            assert r["overlap_fraction"] == pytest.approx(min(1.0, max(0.0, want)), abs=1e-12)
        assert r["exposed_s"] == stored[(variant, cap)]["exposed_s"]


def test_nccl_figure_legends_are_readable_and_nothing_collides() -> None:
    fig = nccl_busbw_figure()
    assert layout_problems(fig) == []
    for ax in fig.axes:
        sizes = [t.get_fontsize() for t in ax.get_legend().get_texts()]
        assert sizes and min(sizes) >= 8, sizes
        # a (algorithm, protocol) pair's picked markers and its estimate line share a colour
        by_pair = defaultdict(set)
        for ln in ax.lines:
            label = ln.get_label()
            if label.startswith(("picked: ", "estimate: ")):
                by_pair[label.split(": ", 1)[1]].add(mcolors.to_hex(ln.get_color()))
        assert by_pair and all(len(c) == 1 for c in by_pair.values()), by_pair
