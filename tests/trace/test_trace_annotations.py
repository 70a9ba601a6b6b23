"""An NCCL kernel's size read from torch's ``nccl:<collective>`` annotation span around its
launch: linked through the launch's correlation, the innermost span on the launch's thread; a
span whose collective disagrees with the kernel's name, or a kernel launched outside any span,
gives no size and says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distlab.trace.collectives import rank_calls
from distlab.trace.torch_trace import read_rank

SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def _trace(tmp_path: Path) -> Path:
    ev: list[dict[str, Any]] = []

    def span(name: str, ts: float, dur: float, dims: list[int], typ: str, tid: int = 7) -> None:
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid,
                   "ts": ts, "dur": dur, "args": {"Input Dims": [dims], "Input type": [typ]}})

    def kernel(name: str, launch_ts: float, corr: int, tid: int = 7) -> None:
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": tid, "ts": launch_ts, "dur": 2.0, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 20,
                   "ts": launch_ts + 50, "dur": 30.0,
                   "args": {"stream": 20, "correlation": corr, "device": 0}})

    span("nccl:all_to_all", 100.0, 20.0, [8, 1024, 16], "float")
    kernel(SENDRECV, 105.0, 1)
    span("nccl:all_reduce", 200.0, 20.0, [4096], "float")
    span("nccl:all_reduce", 300.0, 20.0, [1000], "int")
    kernel(ALLREDUCE, 205.0, 2, tid=8)  # launched on another thread: not this span's
    kernel(SENDRECV, 305.0, 3)  # a SendRecv kernel under nccl:all_reduce: they disagree
    span("nccl:all_to_all", 400.0, 20.0, [64], "long", tid=9)
    kernel(ALLREDUCE, 406.0, 4, tid=9)
    d = {"schemaVersion": 1, "traceEvents": ev,
         "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
         "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(d))
    return path


def test_kernels_take_their_span_sizes_or_say_why_not(tmp_path: Path) -> None:
    calls = rank_calls(read_rank(str(_trace(tmp_path))))
    assert len(calls) == 4
    a2a, other_thread, disagree, wrong_kind = calls
    assert (a2a.collective, a2a.nelems, a2a.dtype, a2a.size_source) == (
        "all_to_all", 8 * 1024 * 16, "float", "own annotation")
    assert a2a.nbytes == 8 * 1024 * 16 * 4 and a2a.size_note is None
    assert other_thread.nbytes is None and other_thread.collective == "all_reduce"
    assert "no nccl: annotation span" in (other_thread.size_note or "")
    assert disagree.nbytes is None and disagree.collective == "sendrecv"
    assert "nccl:all_reduce around an NCCL sendrecv kernel" in (disagree.size_note or "")
    assert wrong_kind.nbytes is None
    assert "nccl:all_to_all around an NCCL all_reduce kernel" in (wrong_kind.size_note or "")
