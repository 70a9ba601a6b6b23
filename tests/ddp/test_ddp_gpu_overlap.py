"""The real GPU overlap of a DDP step from a torch.profiler trace, checked on a
Kineto-shaped trace with hand-placed kernels (a GPU trace has the same shape: cat "kernel", pid
the device, tid the stream), so the arithmetic is tested without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.ddp.gpu_overlap import is_nccl_kernel, kernel_overlap, kernel_timeline
from distlab.trace import from_torch_profiler, trace_events


def _trace(tmp_path: Path, kernels: list[tuple[str, int, float, float]]) -> Path:
    """A Kineto trace: host cpu_ops on pid 100, kernels (name, stream, ts, dur) on pid 0."""
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 1, "ts": 0.0,
               "dur": 5.0}]
    events += [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": stream, "ts": ts,
                "dur": dur} for n, stream, ts, dur in kernels]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0,
                                "distributedInfo": {"rank": 3}}))
    return path


def test_exposed_communication_is_nccl_time_no_compute_kernel_hid(tmp_path) -> None:
    # backward kernels on stream 7 from 0 to 100 us (a gap 40..50); NCCL on stream 20: bucket 1
    # 30..60 (hidden 30..40 and 50..60: 20 us, exposed 40..50), bucket 2 90..130 (hidden 90..100)
    tl = from_torch_profiler(_trace(tmp_path, [
        ("sm90_gemm_bwd", 7, 0.0, 40.0), ("elementwise", 7, 50.0, 50.0),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 30.0, 30.0),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 90.0, 40.0)]), clock_offset_us=0.0)
    got = kernel_overlap(tl)
    assert got.compute_us == pytest.approx(90.0) and got.comm_us == pytest.approx(70.0)
    assert got.overlapped_us == pytest.approx(30.0) and got.exposed_us == pytest.approx(40.0)
    assert got.nccl_kernels == 2 and got.overlap_fraction == pytest.approx(30 / 70)
    lanes = kernel_timeline(tl)
    assert lanes.lanes == ["rank3/gpu compute", "rank3/gpu nccl"]
    assert {s.category for s in lanes.spans} == {"compute", "nccl"}
    assert all(e["ph"] != "X" or e["tid"] for e in trace_events(lanes))  # draws and exports


def test_no_nccl_kernel_means_nothing_exposed(tmp_path) -> None:
    tl = from_torch_profiler(_trace(tmp_path, [("gemm", 7, 0.0, 10.0), ("gemm", 8, 5.0, 10.0)]),
                             clock_offset_us=0.0)
    got = kernel_overlap(tl)
    assert (got.comm_us, got.exposed_us, got.nccl_kernels) == (0.0, 0.0, 0)
    assert got.compute_us == pytest.approx(15.0)  # two streams overlap: counted once
    assert got.overlap_fraction == 1.0


def test_kernel_names() -> None:
    assert is_nccl_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert is_nccl_kernel("ncclKernel_AllReduce_RING_LL_Sum_float")
    assert not is_nccl_kernel("void at::native::vectorized_elementwise_kernel<4>")


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_traced_step_on_cpu_ranks_has_host_lanes_and_no_kernels() -> None:
    """On the CPU the profiled step is today's host lanes (aten ops, gloo) and no kernel: the
    overlap reads zero communication instead of inventing any."""
    from distlab import launch
    from distlab.ddp.gpu_overlap import traced_step_rank
    from distlab.timeline import Timeline

    out = launch.run(traced_step_rank, 2, args=(3, 64, 8, 0.01), timeout=120)
    for rank, res in enumerate(out):
        tl = Timeline(res["spans"])
        assert res["device"] == "cpu" and len(tl) > 10
        assert all(lane.startswith(f"rank{rank}/") for lane in tl.lanes)
        assert any(s.name.startswith("aten::") for s in tl.spans)
        assert res["overlap"]["nccl_kernels"] == 0 and res["overlap"]["comm_us"] == 0.0
