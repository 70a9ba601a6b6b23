"""The breakdown's own definitions on hand-made traces, exact: idle causes (data loader,
synchronize, host, other), the split of non-compute time, overlap, and per-step selection."""

from __future__ import annotations

import json

import pytest

from distlab.trace.breakdown import analyze_run
from distlab.trace.torch_trace import read_run


def _k(name, ts, dur, corr, stream=7, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr}}


def _launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
            "ts": ts, "dur": 1, "args": {"correlation": corr}}


def _host(name, ts, dur, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _run(tmp_path, events):
    (tmp_path / "rank0.json").write_text(json.dumps(
        {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1},
         "deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}]}))
    return analyze_run(read_run(tmp_path))[0]


def test_idle_causes_exact(tmp_path) -> None:
    ev = [_launch(0, 1), _k("gemm", 5, 10, 1),            # busy [5, 15)
          _host("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 20, 10),
          _host("cudaDeviceSynchronize", 30, 5, cat="cuda_runtime"),
          _launch(38, 2), _k("gemm", 45, 10, 2),           # gap [15, 45): launched at 38 > 15
          _launch(50, 3), _k("gemm", 60, 5, 3)]            # gap [55, 60): launched at 50 < 55
    a = _run(tmp_path, ev)
    b = a.whole
    assert (b.span_us, b.idle_us, b.compute_us) == (60.0, 35.0, 25.0)
    assert b.idle_causes_us == {"data_loader": 10.0, "synchronize": 5.0, "host": 15.0,
                                "other": 5.0}
    assert a.missing and "no ProfilerStep" in a.missing[0]


def test_non_compute_split_and_overlap_exact(tmp_path) -> None:
    ev = [_launch(0, 1), _k("gemm", 0, 100, 1),
          _launch(1, 2), _k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 60, 80, 2, stream=30),
          _launch(2, 3), _k("Memcpy DtoH (Device -> Pinned)", 150, 20, 3, stream=9,
                            cat="gpu_memcpy"),
          _launch(3, 4), _k("Memcpy DtoD (Device -> Device)", 130, 30, 4, stream=11,
                            cat="gpu_memcpy")]
    b = _run(tmp_path, ev).whole
    # span [0, 170); compute [0,100); comm [60,140): 40 under compute; memory [130,170): 10
    # under comm; idle none
    assert (b.span_us, b.idle_us, b.compute_us) == (170.0, 0.0, 100.0)
    assert (b.communication_us, b.comm_total_us, b.overlap_us) == (40.0, 80.0, 40.0)
    assert b.overlap_pct == pytest.approx(50.0)
    assert b.memory_us == 30.0 and b.other_us == 0.0
    assert b.non_compute_us == b.communication_us + b.memory_us + b.other_us


def test_per_step_takes_the_kernels_its_cpu_side_launched(tmp_path) -> None:
    ev = [_host("ProfilerStep#7", 0, 50), _launch(10, 1), _k("gemm", 60, 10, 1),
          _host("ProfilerStep#8", 50, 50), _launch(55, 2), _k("gemm", 75, 5, 2),
          _launch(60, 3), _k("gemm", 90, 5, 3)]
    a = _run(tmp_path, ev)
    assert a.steps == [7, 8]
    assert a.per_step[7].span_us == 10.0      # the kernel runs after step 7 ended on the host
    assert (a.per_step[8].span_us, a.per_step[8].idle_us) == (20.0, 10.0)
    # the whole trace leaves the last step out (HTA's rule): only step 7's kernel
    assert a.whole.span_us == 10.0
