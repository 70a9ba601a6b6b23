"""Synthetic Kineto GPU traces for tests/trace: what torch.profiler writes on a CUDA box (CPU
ops, cudaLaunchKernel runtime calls, kernels on streams linked by ``correlation``, NCCL kernels
with torch's collective args, ProfilerStep#N, DataLoader ``__next__``, cudaDeviceSynchronize),
with random durations from a seed, so HTA and distlab can be compared on traces of any shape."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

COMPUTE = ["void at::native::vectorized_elementwise_kernel<4>", "sm90_xmma_gemm_f16f16",
           "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>"]
MEMCPY = ["Memcpy HtoD (Pageable -> Device)", "Memset (Device)"]


def synth_rank(rank: int, world_size: int, *, seed: int, steps: int = 3, kernels: int = 30,
               late_us: float = 0.0, ns: bool = False, base_time: bool = True,
               gpu: str | None = "NVIDIA A100-SXM4-80GB", nccl_version: str | None = "2.21.5",
               collective_args: bool = True, comm_starts: list[float] | None = None
               ) -> dict[str, Any]:
    """One rank's trace dict. ``late_us`` delays this rank's collectives' launch (a straggler);
    ``comm_starts``, when given, fixes each step's NCCL kernel start (microseconds)."""
    rng = np.random.default_rng(seed * 1000 + rank)
    ev: list[dict[str, Any]] = []
    t = 1000.0
    corr = 100_000  # HTA 0.5.0 with pandas 3 fails on a correlation column that fits int8

    def r(x: float) -> float:
        return round(float(x), 3) if ns else float(int(x))

    for s in range(steps):
        step_start = t
        step_ev: list[dict[str, Any]] = []
        dl = rng.uniform(50, 400)
        step_ev.append({"ph": "X", "cat": "user_annotation",
                        "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                        "pid": 1, "tid": 1, "ts": r(t + 1), "dur": r(dl)})
        host = t + 2 + dl
        gpu_t = host + 5
        for k in range(kernels):
            host += rng.uniform(2, 40)
            kind = rng.uniform()
            stream = 7 if kind < 0.8 else 20
            name = COMPUTE[k % 3] if kind < 0.85 else MEMCPY[k % 2]
            cat = "kernel" if name in COMPUTE else \
                ("gpu_memcpy" if "Memcpy" in name else "gpu_memset")
            dur = rng.uniform(1, 120)
            launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                      "tid": 1, "ts": r(host), "dur": r(4), "args": {"correlation": corr}}
            gpu_t = max(gpu_t, host + rng.uniform(3, 10)) + rng.uniform(0, 30)
            kern = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": r(gpu_t),
                    "dur": r(dur), "args": {"stream": stream, "correlation": corr, "device": 0}}
            step_ev += [launch, kern]
            corr += 1
            if kind > 0.4:
                gpu_t += dur
        # one allreduce per step on the NCCL stream
        host += rng.uniform(5, 20) + late_us
        nelems = int(rng.choice([1 << 16, 1 << 20, 1 << 22]))
        comm_args = {"Collective name": "allreduce", "In msg nelems": nelems,
                     "Out msg nelems": nelems, "Group size": world_size, "dtype": "Float",
                     "Process Group Name": "0", "Process Group Ranks": str(list(range(world_size)))}
        rpc = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
               "ts": r(host - 1), "dur": r(8), "args": dict(comm_args)}
        launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                  "tid": 1, "ts": r(host), "dur": r(4), "args": {"correlation": corr}}
        start = comm_starts[s] if comm_starts is not None else host + 6
        kargs = {"stream": 30, "correlation": corr}
        if collective_args:
            kargs.update(comm_args)
        kern = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                "pid": 0, "tid": 30, "ts": r(start), "dur": r(rng.uniform(50, 300)),
                "args": kargs}
        corr += 1
        step_ev += [rpc, launch, kern]
        host += 20
        sync = {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1,
                "tid": 1, "ts": r(host), "dur": r(rng.uniform(10, 200))}
        step_ev.append(sync)
        host = sync["ts"] + sync["dur"] + 3
        end = max(host, max(e["ts"] + e["dur"] for e in step_ev)) + 2
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}",
                   "pid": 1, "tid": 1, "ts": r(step_start), "dur": r(end - step_start)})
        ev += step_ev
        t = end + rng.uniform(20, 200)
    ev += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
           {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": 0,
            "ts": 900.0, "dur": t - 900.0}]
    d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": ev,
                         "distributedInfo": {"backend": "nccl", "rank": rank,
                                             "world_size": world_size}}
    if nccl_version:
        d["distributedInfo"]["nccl_version"] = nccl_version
    if gpu:
        d["deviceProperties"] = [{"id": 0, "name": gpu}]
    if base_time:
        d["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    return d


def write_run(folder: Path, world_size: int, *, gz: bool = True, **kw: Any) -> Path:
    """``world_size`` ranks' traces under ``folder``; ``kw`` to :func:`synth_rank` (``late``:
    {rank: late_us})."""
    folder.mkdir(parents=True, exist_ok=True)
    late = kw.pop("late", {})
    for rank in range(world_size):
        d = synth_rank(rank, world_size, late_us=late.get(rank, 0.0), **kw)
        text = json.dumps(d, indent=1)
        if gz:
            (folder / f"rank{rank}.1.pt.trace.json.gz").write_bytes(gzip.compress(text.encode()))
        else:
            (folder / f"rank{rank}.1.pt.trace.json").write_text(text)
    return folder
