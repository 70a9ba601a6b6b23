"""distlab's breakdown, overlap and idle time equal HTA 0.5.0's (the reference, test extra) on
HTA's published traces and on synthetic GPU traces of random shape, within 0.1 percentage point."""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path

import pytest

from distlab.trace.breakdown import analyze_run
from distlab.trace.torch_trace import read_run
from helpers.paths import RESULTS
from helpers.trace_synth import write_run

hta = pytest.importorskip("hta.trace_analysis",
                          reason="HolisticTraceAnalysis 0.5.0 (pip install '.[test]') is the "
                                 "reference these tests compare with")

TRACES = RESULTS / "traces"
PP = 0.1  # percentage points


def _hta(folder: Path):
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hta.TraceAnalysis(trace_dir=str(folder))


def _compare(folder: Path) -> int:
    """Compare every rank; returns the number of numbers compared."""
    ours = analyze_run(read_run(folder))
    ref = _hta(folder)
    n = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tb = ref.get_temporal_breakdown(visualize=False)
        ov = ref.get_comm_comp_overlap(visualize=False)
    for _, row in tb.iterrows():
        b = ours[int(row["rank"])].whole
        assert b is not None and b.basis == "gpu"
        assert b.span_us == pytest.approx(row["kernel_time(us)"], abs=0.5)
        assert b.idle_us == pytest.approx(row["idle_time(us)"], abs=0.5)
        assert b.compute_us == pytest.approx(row["compute_time(us)"], abs=0.5)
        # distlab's idle causes split HTA's idle time, nothing more, nothing less
        assert sum(b.idle_causes_us.values()) == pytest.approx(b.idle_us, abs=1e-6)
        for part in ("idle", "compute", "non_compute"):
            assert abs(b.pct(part) - row[f"{part}_time_pctg"]) <= PP, (folder, part)
            n += 1
    for _, row in ov.iterrows():
        b = ours[int(row["rank"])].whole
        h = row["comp_comm_overlap_pctg"]
        if math.isnan(h):
            assert math.isnan(b.overlap_pct) or b.comm_total_us == 0
        else:
            assert abs(b.overlap_pct - h) <= PP, folder
            n += 1
    for r, a in ours.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idf = ref.get_idle_time_breakdown(ranks=[r], visualize=False)[0]
        mine = {(x["stream"], x["idle_category"]): x for x in a.whole.idle_by_stream}
        for _, row in idf.iterrows():
            m = mine.get((int(row["stream"]), row["idle_category"]))
            got = m["idle_time_us"] if m else 0.0
            assert got == pytest.approx(row["idle_time"], abs=0.01), (folder, r, row)
            total = idf[idf["stream"] == row["stream"]]["idle_time"].sum()
            if total and m:
                assert abs(100 * m["idle_time_ratio"] - 100 * row["idle_time"] / total) <= PP
            n += 1
    return n


@pytest.mark.parametrize("name", ["hta_sampled_2of128", "hta_a100_2ranks_rank0",
                                  "hta_rocm_mi250"])
def test_equal_to_hta_on_published_traces(name: str) -> None:
    assert _compare(TRACES / name) >= 4


@pytest.mark.parametrize("seed", range(4))
def test_equal_to_hta_on_synthetic_traces(tmp_path, seed: int) -> None:
    folder = write_run(tmp_path / "run", 2, seed=seed, steps=2 + seed % 3, ns=seed % 2 == 1,
                       base_time=seed != 2)
    assert _compare(folder) >= 10


def test_equal_to_hta_without_steps(tmp_path) -> None:
    """One step only: HTA keeps every event (no last-step filter), and so do we."""
    assert _compare(write_run(tmp_path / "one", 1, seed=7, steps=1)) >= 4


def test_per_step_equals_hta_on_that_step_alone(tmp_path) -> None:
    """HTA has no per-step breakdown: a trace holding only step N's events (its ProfilerStep span,
    the CPU events inside it and the GPU events they launched) gives HTA's numbers for step N,
    which must equal distlab's per-step breakdown of the whole trace."""
    import json

    from helpers.trace_synth import synth_rank

    d = synth_rank(0, 1, seed=11, steps=3)
    full = tmp_path / "full"
    full.mkdir()
    (full / "rank0.json").write_text(json.dumps(d))
    ours = analyze_run(read_run(full))[0]
    for n in (1, 2, 3):
        (step,) = [e for e in d["traceEvents"] if e.get("name") == f"ProfilerStep#{n}"]
        lo, hi = step["ts"], step["ts"] + step["dur"]
        cpu = [e for e in d["traceEvents"] if e.get("pid") == 1 and lo <= e.get("ts", -1) < hi]
        corr = {e["args"]["correlation"] for e in cpu if "correlation" in e.get("args", {})}
        gpu = [e for e in d["traceEvents"] if e.get("pid") == 0
               and e.get("args", {}).get("correlation") in corr]
        one = dict(d, traceEvents=cpu + gpu)
        folder = tmp_path / f"step{n}"
        folder.mkdir()
        (folder / "rank0.json").write_text(json.dumps(one))
        _compare(folder)  # HTA on the one-step trace equals distlab's whole of it
        alone = analyze_run(read_run(folder))[0].whole
        b = ours.per_step[n]
        for part in ("idle", "compute", "non_compute", "communication", "memory"):
            assert b.pct(part) == pytest.approx(alone.pct(part), abs=1e-9), (n, part)
        assert b.overlap_pct == pytest.approx(alone.overlap_pct, abs=1e-9)
        assert sum(b.idle_causes_us.values()) == pytest.approx(b.idle_us)


def test_hta_reads_no_breakdown_from_cpu_traces() -> None:
    """Why the gloo traces are compared with nothing: HTA 0.5.0 has no breakdown of a trace without
    GPU kernels (its temporal breakdown raises), where distlab gives the host's."""
    folder = TRACES / "gloo_ddp_2ranks"
    ref = _hta(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(IndexError):
            ref.get_temporal_breakdown(visualize=False)
    ours = analyze_run(read_run(folder))
    assert all(a.whole.basis == "host" and a.whole.span_us > 0 for a in ours.values())
