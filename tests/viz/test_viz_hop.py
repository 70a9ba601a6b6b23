"""Figures of the hop and of Hogwild: the path picture says what was measured and what was
skipped (with the reason), the curves mark the crossover, the Hogwild figure shows every run."""

from __future__ import annotations

from distlab.hogwild.lost import LostUpdates
from distlab.hogwild.run import HogwildResult
from distlab.transfers.copy_model import Fit
from distlab.viz.figure import DisplayFigure
from distlab.viz.hop import (
    hogwild_figure,
    hop_curves_figure,
    hop_parts_figure,
    hop_path_figure,
    hop_path_steps,
)


def _row(path, nbytes, us, skipped=None):
    return {"path": path, "memory": "pageable", "nbytes": nbytes, "skipped": skipped,
            "time_us": us, "gbps": None if us is None else nbytes / us / 1e3,
            "model_gbps": None, "wrong": None if us is None else 0}


PARTS = [{"path": "hop_shm_fd", "nbytes": n, "ready_us": 10.0 + n / 1e3, "handle_us": 300.0,
          "map_us": n / 4e4, "segment_us": 20.0, "setup_us": None} for n in (4096, 1 << 20)]


def test_path_steps_and_picture() -> None:
    hops = [_row("hop_shm_fd", 4096, 330.0), _row("hop_shm_fd", 1 << 20, 1500.0)]
    copies = [_row("pageable_to_pinned", 4096, None, "no accelerator"),
              {**_row("h2d", 4096, 2.0), "memory": "pinned"}]
    copies[0]["memory"] = "pinned"
    steps = hop_path_steps(hops, PARTS, copies, 4096)
    assert [s["dst"] for s in steps] == ["shared memory", "trainer", "pinned", "GPU"]
    assert steps[0]["us"] == 10.0 + 4.096 and steps[1]["us"] == 300.0 + 4096 / 4e4
    assert steps[2]["us"] is None and steps[2]["skipped"] == "no accelerator"
    assert steps[3]["us"] == 2.0
    missing = hop_path_steps(hops, PARTS, copies, 8192)
    assert missing[0]["skipped"] == "hop_shm_fd not measured at 8192 B"
    assert missing[3]["skipped"] == "not in this sweep"
    fig = hop_path_figure(steps, 4096)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "skipped" in texts and "no accelerator" in " ".join(texts) and "300 us" in texts
    assert isinstance(fig, DisplayFigure)


def test_curves_parts_and_hogwild_figures() -> None:
    rows = [_row("hop_shm_fd", n, 300 + n / 1e3) for n in (4096, 65536, 1 << 20, 1 << 24)]
    fits = {"hop_shm_fd": Fit(300e-6, 1e9, 1.0)}
    fig = hop_curves_figure(rows, fits, [{**_row("h2h", 4096, 1.0)}, _row("h2h", 1 << 24, 2e3)])
    left = fig.axes[0]
    assert left.get_xscale() == "log" and left.get_yscale() == "log"
    assert any(ln.get_marker() == "|" for ln in left.lines), "the crossover tick (3e5 B)"
    assert "h2h" in " ".join(t.get_text() for t in fig.legends[0].get_texts())   # under both
    parts = hop_parts_figure(PARTS, [4096, 1 << 20])
    assert len(parts.axes) == 2 and all(len(ax.patches) == 3 for ax in parts.axes)
    lost = LostUpdates(5, 100, 4, 2, 10, 0.01)
    runs = [HogwildResult(n, False, 64, 32, 64 // (32 * n), 0.05, 1.0, 0.5, 2.0, 0.5, lost,
                          [(0.1 * k, 32 * (k + 1), 1.0 / (k + 1)) for k in range(2)])
            for n in (1, 2)]
    hw = hogwild_figure(runs, window=1)
    assert len(hw.axes[0].get_legend().get_texts()) == 2
    assert any("lost 5 of 100" in t.get_text() and "2 of 10 missing" in t.get_text()
               for t in hw.axes[1].texts)


# ---- layout: what a reader sees --------------------------------------------------------------

import pytest  # noqa: E402

from distlab.viz.layout_check import drawn_items, layout_problems  # noqa: E402

ALL_PARTS = [{"path": p, "nbytes": n, "ready_us": None if p == "hop_pickle" else 10.0 + n / 1e3,
              "handle_us": 300.0 + n / 1e4, "map_us": n / 4e4, "segment_us": 20.0,
              "setup_us": 5.0 if p == "hop_ring" else None}
             for n in (4096, 1 << 20, 1 << 28)
             for p in ("hop_shm_fd", "hop_shm_fs", "hop_pickle", "hop_ring")]


def _inside(fig, box) -> bool:
    w, h = fig.canvas.get_width_height()
    return box.x0 >= -1 and box.y0 >= -1 and box.x1 <= w + 1 and box.y1 <= h + 1


@pytest.mark.parametrize("sizes", [[4096], [4096, 1 << 20], [4096, 1 << 20, 1 << 28]])
def test_parts_title_and_legend_have_their_own_room(sizes) -> None:
    """"where a hop's time goes" is not cut by the legend (SMOKE=1 draws two sizes): the title,
    the legend and every label sit apart and inside the figure; the legend says what each
    part is."""
    fig = hop_parts_figure(ALL_PARTS, sizes)
    assert layout_problems(fig) == []
    items = drawn_items(fig)
    title = [i for i in items if i.kind == "suptitle"]
    legend = [i for i in items if i.kind == "legend"]
    assert [i.text for i in title] == ["where a hop's time goes"] and len(legend) == 1
    assert all(_inside(fig, i.box) for i in items), [i.describe() for i in items
                                                     if not _inside(fig, i.box)]
    assert title[0].box.y0 > max(i.box.y1 for i in items if i.kind != "suptitle") - 2, \
        "the title sits above everything else"
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["ready: worker, into shared memory", "handle: across",
                     "map: pages touched here"]


def test_hogwild_figure_layout_and_lock_wait() -> None:
    lost = LostUpdates(0, 557312, 0, 0, 2177, 0.0)
    runs = [HogwildResult(n, lock, 8192, 32, 8192 // (32 * n), 0.05, 1.0, 0.1, 4.3, 0.34, lost,
                          [(0.01 * k, 32 * (k + 1), 4.0 / (k + 1)) for k in range(8)],
                          lock_wait_s=0.02 if lock else 0.0, update_s=0.01)
            for n, lock in ((1, False), (2, False), (2, True))]
    fig = hogwild_figure(runs, window=2)
    assert layout_problems(fig) == []
    notes = [t.get_text() for t in fig.axes[1].texts]
    assert "waiting for the lock: 10.0% of the time" in notes[2]
    assert all("waiting" not in t for t in notes[:2])
