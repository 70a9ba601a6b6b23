"""One MoE layer's step read back from an annotated chrome trace: parts' spans and kernel time
from a small trace written here, and the shipped H200 trace's parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.moe.step_trace import (
    FORWARD_PARTS,
    MEASURED_SHAPE,
    measured_layer_step_trace,
    read_layer_step_trace,
)


def _ev(name: str, cat: str, ts: float, dur: float) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 0, "tid": 0}


def test_parts_spans_kernels_and_syncs_from_a_small_trace(tmp_path: Path) -> None:
    events = [
        _ev("moe/router", "gpu_user_annotation", 0, 100),
        _ev("k1", "kernel", 0, 10), _ev("k2", "kernel", 90, 10),       # 80 us idle between
        _ev("moe/experts", "gpu_user_annotation", 100, 50),
        _ev("gemm", "kernel", 100, 50),
        _ev("bwd1", "kernel", 200, 30), _ev("bwd2", "kernel", 240, 60),  # after the forward
        _ev("cudaStreamSynchronize", "cuda_runtime", 5, 1),
        _ev("cudaStreamSynchronize", "cuda_runtime", 50, 1),
        _ev("cudaDeviceSynchronize", "cuda_runtime", 300, 1),           # the tool's, not counted
        {"name": "meta", "ph": "M"},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = read_layer_step_trace(path)
    assert [p.name for p in t.parts] == ["router", "experts", "backward"]
    router, experts, back = t.parts
    assert (router.span_s, router.kernel_s, router.kernels) == pytest.approx((100e-6, 20e-6, 2))
    assert router.idle_s == pytest.approx(80e-6)
    assert (experts.span_s, experts.kernel_s) == pytest.approx((50e-6, 50e-6))
    assert (back.span_s, back.kernel_s, back.kernels) == pytest.approx((100e-6, 90e-6, 2))
    assert t.span_s == pytest.approx(300e-6) and t.kernel_s == pytest.approx(160e-6)
    assert t.busy == pytest.approx(160 / 300) and t.syncs == 2
    assert t.part("experts") is experts
    with pytest.raises(KeyError, match="combine"):
        t.part("combine")


def test_a_trace_without_annotated_parts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [_ev("k", "kernel", 0, 1)]}))
    with pytest.raises(ValueError, match="moe/<part>"):
        read_layer_step_trace(path)


def test_the_shipped_h200_trace_holds_every_forward_part_and_the_backward() -> None:
    t = measured_layer_step_trace()
    assert [p.name for p in t.parts] == [*FORWARD_PARTS, "backward"]
    assert MEASURED_SHAPE["model"] == "qwen3-30b-a3b"
    # the parts lie one after another inside the step, and the kernels in them are all of it
    assert sum(p.span_s for p in t.parts) <= t.span_s
    assert sum(p.kernel_s for p in t.parts) == pytest.approx(t.kernel_s, rel=1e-9)
    assert 0 < t.busy < 1 and t.syncs == 12
    # the committed result and the package's copy are one trace
    root = Path(__file__).resolve().parents[2]
    copy = root / "results" / "gpu-h200-2026-11-28-moe-step" / "moe_layer_trace.json"
    assert read_layer_step_trace(copy) == t
