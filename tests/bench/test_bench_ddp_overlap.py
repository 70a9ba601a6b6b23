"""The DDP benchmark's overlap on a real run (2 gloo ranks, a tiny model): 0 for the variants
that launch nothing during backward, which their traced spans show, and the measured definition
for the others; the DDP chart of that run draws the same numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlab.bench.ddp import BENCHMARK as DDP_BENCH
from distlab.bench.ddp import DdpConfig, overlap_fraction, with_overlap
from distlab.profile.load import Profile
from distlab.viz import profile as vp
from distlab.viz.layout_check import layout_problems


@pytest.fixture(scope="module")
def report():
    return DDP_BENCH.run(DdpConfig(world_size=2, layers=2, width=64, batch=8,
                                   bucket_cap_mb=(0.01, 25.0), steps=2, rounds=1, device="cpu",
                                   timeout=300))


def _starts_inside_backward(row: dict) -> list[bool]:
    """Per allreduce span of rank 0's traced steps: does it start while a backward span runs?"""
    spans = row["spans"]
    backward = [(s["start_us"], s["start_us"] + s["duration_us"]) for s in spans
                if s["category"] == "backward"]
    assert backward, f"{row['variant']}: no backward span traced"
    return [any(b0 < s["start_us"] < b1 for b0, b1 in backward) for s in spans
            if s["category"] == "allreduce"]


def test_join_variants_only_when_asked(report) -> None:
    assert not any("+join" in r["variant"] for r in report.rows)
    assert report.data["join_vs_overlap"] == {}


def test_variants_that_do_not_overlap_show_0_and_their_spans_agree(report) -> None:
    rows = {(r["variant"], r["bucket_cap_mb"]): r for r in report.rows}
    assert set(rows) == {("naive", None), *((v, c) for v in ("no-overlap", "overlap", "torch")
                                             for c in (0.01, 25.0))}
    for key in (("naive", None), ("no-overlap", 0.01), ("no-overlap", 25.0)):
        assert rows[key]["overlap_fraction"] == 0.0
        inside = _starts_inside_backward(rows[key])
        assert inside and not any(inside), f"{key}: an allreduce started during backward"
    # two buckets at 0.01 MB: the first is launched while backward still runs
    assert any(_starts_inside_backward(rows[("overlap", 0.01)]))
    for cap in (0.01, 25.0):
        ref = rows[("no-overlap", cap)]["exposed_s"]
        for variant in ("overlap", "torch"):
            r = rows[(variant, cap)]
            want = min(1.0, max(0.0, 1 - r["exposed_s"] / ref)) if ref > 0 else None
            assert r["overlap_fraction"] == pytest.approx(want, abs=1e-12)
    assert all(r["wrong"] == 0 for r in report.rows)     # DDP still equals torch DDP
    assert report.head[-1].startswith("overlap = 1 - exposed / exposed(no-overlap, same cap)")


def test_the_chart_of_the_run_shows_0_for_naive_and_no_overlap(report) -> None:
    prof = Profile(Path("run"), {"parts": {"ddp": {"status": "ok"}}},
                   {"ddp": {"status": "ok", "rows": report.rows}})
    fig = vp.ddp_figure(prof)
    assert layout_problems(fig) == []
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == len(report.rows)
    for r, text in zip(report.rows, texts, strict=True):
        if r["variant"] in ("naive", "no-overlap"):
            assert text == "0.00"


def test_overlap_fraction_edges() -> None:
    rows = [{"variant": "naive", "bucket_cap_mb": None, "exposed_s": 0.4},
            {"variant": "no-overlap", "bucket_cap_mb": 1.0, "exposed_s": 0.2},
            {"variant": "overlap", "bucket_cap_mb": 1.0, "exposed_s": 0.05},
            {"variant": "torch", "bucket_cap_mb": 1.0, "exposed_s": 0.3},     # slower: 0
            {"variant": "overlap", "bucket_cap_mb": 5.0, "exposed_s": 0.05},   # no reference
            {"variant": "no-overlap", "bucket_cap_mb": 9.0, "exposed_s": 0.0},
            {"variant": "torch", "bucket_cap_mb": 9.0, "exposed_s": 0.0}]      # nothing to hide
    got = [overlap_fraction(r, rows) for r in rows]
    assert got == [0.0, 0.0, pytest.approx(0.75), 0.0, None, 0.0, None]
    stale = [{**r, "overlap_fraction": 0.31} for r in rows]
    assert [r["overlap_fraction"] for r in with_overlap(stale)] == got
    assert stale[0]["overlap_fraction"] == 0.31   # copies: the input is left alone
