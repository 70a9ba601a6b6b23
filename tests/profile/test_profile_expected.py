"""What each profile row should measure (distlab.profile.expected): the committed H100's pinned
copies are ok against its PCIe Gen5 x16 link, halved they are low; rows without an expectation get
no verdict; the thresholds decide every ratio."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlab.collectives.model.presets import PCIE_ACHIEVED_FRACTION
from distlab.links import pcie_gbps
from distlab.profile.expected import (
    MODEL_MIN_BYTES,
    THRESHOLDS,
    UNSURE,
    VERDICTS,
    judge_interval,
    judge_ratio,
    low_lines,
    ordered,
    profile_verdicts,
    verdict_table,
)
from helpers.paths import PROFILES

H100 = PROFILES / "h100-2026-11-23"


def _parts(folder):
    index = json.loads((folder / "profile.json").read_text())
    return {n: json.loads((folder / e["file"]).read_text())
            for n, e in index["parts"].items() if e.get("file") and (folder / e["file"]).is_file()}


def _halved_h2d(parts):
    out = copy.deepcopy(parts)
    for dev in out["transfers"]["devices"]:
        for row in dev["rows"]:
            if row["path"] == "h2d" and row.get("gbps"):
                row["gbps"] /= 2
    return out


def test_h100_pinned_copies_are_ok_against_the_link() -> None:
    verdicts = {v.row: v for v in profile_verdicts(_parts(H100)) if v.part == "transfers"}
    assert sorted(verdicts) == ["cuda:0 d2h/pinned peak", "cuda:0 h2d/pinned peak"]
    h2d = verdicts["cuda:0 h2d/pinned peak"]
    expected = pcie_gbps(5, 16) * PCIE_ACHIEVED_FRACTION   # 63.0 x 0.87 = 54.8 GB/s
    assert h2d.expected == pytest.approx(expected) and 54 < expected < 56
    assert h2d.measured == pytest.approx(55.23, abs=0.01)
    assert h2d.verdict == "ok" and "Gen5 x16" in h2d.basis


def test_halved_h2d_is_low_and_leads_the_summary_lines() -> None:
    parts = _halved_h2d(_parts(H100))
    verdicts = {v.row: v for v in profile_verdicts(parts) if v.part == "transfers"}
    assert verdicts["cuda:0 h2d/pinned peak"].verdict == "low"
    assert verdicts["cuda:0 h2d/pinned peak"].ratio == pytest.approx(0.5, abs=0.02)
    assert verdicts["cuda:0 d2h/pinned peak"].verdict == "ok"
    lines = low_lines(profile_verdicts(parts))
    assert lines[1].startswith("- LOW transfers cuda:0 h2d/pinned peak")  # link rows lead


def test_a_profile_without_a_gpu_link_has_no_transfer_verdict() -> None:
    parts = _parts(PROFILES / "vm-2026-11-23")
    assert "transfers" in parts
    assert not [v for v in profile_verdicts(parts) if v.part == "transfers"]


def _run(rows, ws=4, backend="nccl"):
    return {"collectives": {"status": "ok", "runs": [
        {"backend": backend, "world_size": ws, "rows": rows}]}}


def _row(nbytes, time_us, predicted_us, algorithm="builtin", wrong=0):
    return {"nbytes": nbytes, "count": nbytes // 4, "algorithm": algorithm, "time_us": time_us,
            "busbw_gbps": 10.0, "predicted_us": predicted_us, "wrong": wrong}


def test_collective_rows_compare_bus_bandwidth_against_the_stored_prediction() -> None:
    rows = [_row(1 << 20, 200.0, 100.0), _row(1 << 20, 100.0, 100.0, "ring"),
            _row(1 << 20, 50.0, 200.0, "tree"),
            _row(MODEL_MIN_BYTES // 2, 10.0, 1.0),           # too small: no verdict
            _row(1 << 20, 100.0, None, "naive"),             # no prediction: no verdict
            _row(1 << 20, 100.0, 100.0, "rabenseifner", wrong=3)]  # wrong result: no verdict
    verdicts = profile_verdicts(_run(rows))
    assert [(v.row, v.verdict) for v in verdicts] == [
        ("nccl ws4 builtin 1M busbw", "ok"), ("nccl ws4 ring 1M busbw", "ok"),
        ("nccl ws4 tree 1M busbw", "high")]
    assert verdicts[0].ratio == pytest.approx(0.5) and verdicts[0].expected == pytest.approx(20.0)
    assert "NCCL" in verdicts[0].basis and "cost model" in verdicts[1].basis
    assert profile_verdicts({"collectives": {"status": "skipped", "runs": []}}) == []


@given(st.sampled_from(sorted(THRESHOLDS)), st.floats(0, 10, allow_nan=False))
def test_verdict_follows_the_thresholds(kind, ratio) -> None:
    low, high = THRESHOLDS[kind]
    want = "low" if ratio < low else "high" if ratio > high else "ok"
    assert judge_ratio(ratio, kind) == want


@pytest.mark.parametrize("ratio, kind", [(-0.1, "link"), (float("nan"), "link"),
                                         (float("inf"), "model"), (1.0, "spec"), ("1", "link")])
def test_bad_ratio_or_kind_is_refused(ratio, kind) -> None:
    with pytest.raises(ValueError):
        judge_ratio(ratio, kind)


def test_low_lines_say_none_and_cap_the_list() -> None:
    assert "no row of this profile has an expectation" in low_lines([])[0]
    rows = [_row(1 << 20, 1000.0, 100.0, f"a{i}") for i in range(12)]
    lines = low_lines(profile_verdicts(_run(rows)), max_low=8)
    assert lines[0].startswith("- 12 low, 0 high, 0 unsure, 0 ok of 12 rows")
    assert len(lines) == 10 and lines[-1] == "- ... and 4 more low rows"


def test_summary_md_opens_with_the_verdict() -> None:
    text = (H100 / "summary.md").read_text()
    sections = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert sections[0] == "## verdict"


def test_the_other_collectives_are_judged_with_their_op_named() -> None:
    part = {"status": "ok", "runs": [], "collective_runs": [
        {"op": "all_to_all", "backend": "gloo", "world_size": 2,
         "rows": [_row(1 << 20, 100.0, 100.0, "pairwise"), _row(1 << 20, 100.0, None)]}]}
    verdicts = profile_verdicts({"collectives": part})
    assert [(v.row, v.verdict) for v in verdicts] == [("gloo ws2 all_to_all pairwise 1M busbw",
                                                       "ok")]


def test_ddp_step_rate_against_the_step_model() -> None:
    rows = [{"variant": "overlap", "bucket_cap_mb": 25, "step_s": 0.2, "predicted_step_s": 0.1,
             "wrong": 0},
            {"variant": "torch", "bucket_cap_mb": 25, "step_s": 0.1, "predicted_step_s": None},
            {"variant": "naive", "bucket_cap_mb": None, "step_s": 0.1, "predicted_step_s": 0.1,
             "wrong": 0}]
    verdicts = profile_verdicts({"ddp": {"status": "ok", "rows": rows}})
    assert [(v.row, v.unit, v.verdict) for v in verdicts] == [
        ("overlap cap 25 MB step rate", "steps/s", "ok"), ("naive step rate", "steps/s", "ok")]
    assert verdicts[0].measured == pytest.approx(5.0) and verdicts[0].ratio == pytest.approx(0.5)


def _rounds_row(median_us, spread, algorithm="ring", n=5):
    """A row of ``n`` rounds around ``median_us`` (the slowest rank's), each ``spread`` times
    further out: rounds that cannot tell a factor of two when ``spread`` is large."""
    rounds = sorted(median_us * 1e-6 * spread ** k for k in range(-(n // 2), n - n // 2))
    row = _row(1 << 20, median_us, 100.0, algorithm)
    row["seconds_per_rank"] = [rounds, [r * 0.9 for r in rounds]]
    return row


def test_a_row_whose_rounds_reach_back_inside_is_unsure() -> None:
    tight = _rounds_row(300.0, 1.01, "ring")   # 3x slower than predicted, known to 1%: low
    loose = _rounds_row(300.0, 3.0, "tree")    # 3x slower, rounds from 1/9 to 9x: cannot tell
    verdicts = {v.row.split()[2]: v for v in profile_verdicts(_run([tight, loose]))}
    assert verdicts["ring"].verdict == "low"
    assert verdicts["tree"].verdict == UNSURE
    assert "rounds put the ratio anywhere in" in verdicts["tree"].basis
    no_rounds = _row(1 << 20, 300.0, 100.0, "naive")  # no rounds: the point verdict stands
    assert profile_verdicts(_run([no_rounds]))[0].verdict == "low"


@given(st.sampled_from(sorted(THRESHOLDS)), st.floats(0.01, 10), st.floats(1.0, 4.0))
def test_interval_verdicts_are_never_surer_than_the_point(kind, ratio, widen) -> None:
    point = judge_ratio(ratio, kind)
    lo, hi = THRESHOLDS[kind]
    verdict = judge_interval(ratio, ratio / widen, ratio * widen, kind)
    if point == "ok":
        assert verdict == "ok"
    elif (point == "low" and ratio * widen < lo) or (point == "high" and ratio / widen > hi):
        assert verdict == point
    else:
        assert verdict == UNSURE
    assert judge_interval(ratio, ratio, ratio, kind) == point  # no noise: the point verdict


def test_listings_put_low_rows_first() -> None:
    rows = [_row(1 << 20, 100.0, 100.0, "ring"), _row(1 << 20, 50.0, 200.0, "tree"),
            _row(1 << 20, 400.0, 100.0, "naive"), _rounds_row(300.0, 3.0, "rabenseifner")]
    verdicts = profile_verdicts(_run(rows))
    assert [v.verdict for v in verdicts] == ["ok", "high", "low", UNSURE]
    assert [v.verdict for v in ordered(verdicts)] == ["low", "high", UNSURE, "ok"]
    shown = [ln.split()[-1] for ln in verdict_table(verdicts).splitlines()[1:]]
    assert shown == ["low", "high", UNSURE, "ok"]
    assert VERDICTS[0] == "low"
