"""The real GPU overlap of a DDP step, read from its torch.profiler (Kineto) trace.

On a GPU the Python clock of :class:`distlab.ddp.DDP`'s timeline says when a bucket's allreduce was
*launched*; the kernels run later, on their own CUDA streams. A torch.profiler trace of the step
(CPU and CUDA activities) holds every kernel with its device times; read with
:func:`distlab.trace.from_torch_profiler`, kernels are spans of category ``"kernel"`` on lanes
``rank<r>/<GPU process> <stream>``. Here they are sorted into two lanes per rank,
``rank<r>/gpu compute`` (every kernel that is not NCCL's: backward, optimizer) and
``rank<r>/gpu nccl`` (kernels named ``nccl...``), and the exposed communication is measured from
the kernel times: NCCL kernel time during which no compute kernel ran.

    tl = from_torch_profiler("ddp_trace_rank0.json")
    lanes = kernel_timeline(tl)          # draw with distlab.viz.gantt.gantt
    kernel_overlap(tl).exposed_us
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from distlab._checks import check_instance
from distlab.ddp.wrapper import DDP
from distlab.nets import mlp
from distlab.timeline import Span, Timeline, split_lane
from distlab.trace import from_torch_profiler

__all__ = ["KernelOverlap", "is_nccl_kernel", "kernel_overlap", "kernel_timeline",
           "traced_step_rank"]


def is_nccl_kernel(name: str) -> bool:
    """NCCL's device kernels are named ``ncclDevKernel_...`` / ``ncclKernel_...``."""
    return name.lower().startswith("nccl")


def kernel_timeline(timeline: Timeline) -> Timeline:
    """The GPU kernels of an imported torch.profiler timeline, on lanes ``<proc>/gpu compute``
    and ``<proc>/gpu nccl`` (``<proc>`` the rank part of the source lane). Kernels of one lane
    may overlap (several streams): the Chrome trace writer spreads them over extra tracks."""
    check_instance("timeline", timeline, Timeline)
    out = Timeline(notes=timeline.notes)
    for s in timeline.spans:
        if s.category != "kernel":
            continue
        proc = split_lane(s.lane)[0]
        lane = f"{proc}/gpu {'nccl' if is_nccl_kernel(s.name) else 'compute'}"
        out.extend([Span(s.name, "nccl" if is_nccl_kernel(s.name) else "compute", lane,
                         s.start_us, s.duration_us, s.args)])
    return out


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _intersection(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0.0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class KernelOverlap:
    """Kernel time of one step, microseconds (unions: concurrent kernels count once).

    Attributes:
        compute_us: time some non-NCCL kernel ran.
        comm_us: time some NCCL kernel ran.
        overlapped_us: NCCL time during which a compute kernel also ran (hidden).
        exposed_us: ``comm_us - overlapped_us``: communication nothing hid.
        nccl_kernels: how many NCCL kernels the step launched (0: none ran, e.g. one rank).
    """

    compute_us: float
    comm_us: float
    overlapped_us: float
    exposed_us: float
    nccl_kernels: int

    @property
    def overlap_fraction(self) -> float:
        """Share of the communication hidden behind compute (1.0 when there was none)."""
        return self.overlapped_us / self.comm_us if self.comm_us > 0 else 1.0


def kernel_overlap(timeline: Timeline) -> KernelOverlap:
    """Measure a step's exposed communication from its kernels (see :class:`KernelOverlap`)."""
    kernels = kernel_timeline(timeline).spans
    comp = _union([(s.start_us, s.end_us) for s in kernels if s.category == "compute"])
    comm = _union([(s.start_us, s.end_us) for s in kernels if s.category == "nccl"])
    hidden = _intersection(comp, comm)
    return KernelOverlap(_length(comp), _length(comm), hidden, _length(comm) - hidden,
                         sum(1 for s in kernels if s.category == "nccl"))


def traced_step_rank(rank: int, world_size: int, layers: int, width: int, batch: int,
                     bucket_cap_mb: float, gpu_of_rank: tuple[int | None, ...] | None = None
                     ) -> dict[str, Any]:
    """A :func:`distlab.launch.run` rank function: three warm-up steps of distlab DDP on
    ``layers`` x Linear(``width``), then one step under torch.profiler (CUDA activity too when
    this rank has a GPU: ``gpu_of_rank`` from :func:`distlab.devices.ddp_placement`). Returns
    the imported timeline's span dicts and, from its kernels, :class:`KernelOverlap` as a dict
    (all zero on the CPU, where there are no kernels)."""
    gpu = gpu_of_rank[rank] if gpu_of_rank else None
    device = torch.device("cpu") if gpu is None else torch.device("cuda", gpu)
    if gpu is not None:
        torch.cuda.set_device(device)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(rank)).to(device)
    model = DDP(mlp(layers, width, 0).to(device), bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if gpu is not None:
            torch.cuda.synchronize(device)

    for _ in range(3):
        step()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu is not None else [])
    with profile(activities=acts) as prof:
        step()
    tl = from_torch_profiler(prof, rank=rank)
    return {"spans": tl.to_dicts(), "overlap": dataclasses.asdict(kernel_overlap(tl)),
            "device": str(device)}
