"""Every GPU fed at once: each GPU copies pinned host memory at the same time (and back).

Runs come from :func:`~distlab.transfers.host_to_all_plan.numa_bindings`: ``local`` (each GPU's
host buffer on its own NUMA node) and ``remote`` (on another node: the copy crosses the CPUs'
interconnect); where the GPUs' nodes are unknown, one ``unbound`` run. For each run and direction
(``h2d``: host to every GPU; ``d2h``: every GPU to the host) all GPUs copy together
(:meth:`~distlab.transfers.gpu_box.GpuHost.time_together`), and the rows are:

- one per GPU: its own seconds per copy (median over ``repeats``) and GB/s;
- ``gpu = "all"``: the aggregate, every GPU's bytes over the slowest GPU's time: the rate at which
  the host feeds the whole box (all must finish before the step can go on).

``bound`` says how each buffer was bound (``node N``, or ``unbound`` with ``why``), ``#wrong``
counts bytes that differ from the pattern after the last copy. GB/s = 1e9 bytes per second.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from distlab._checks import check_int
from distlab.transfers.adapter import pattern
from distlab.transfers.gpu_box import Copy, GpuHost
from distlab.transfers.host_to_all_plan import Binding, numa_bindings
from distlab.vocabulary import gb_per_s

__all__ = ["HOST_DIRECTIONS", "HostToAllRow", "host_to_all_rows"]

HOST_DIRECTIONS = ("h2d", "d2h")


@dataclass
class HostToAllRow:
    """One GPU's (or, with ``gpu == "all"``, the box's) rate in one run and direction."""

    run: str
    direction: str
    gpu: int | str
    node: int | None
    nbytes: int
    time_us: float
    gbps: float
    bound: str
    wrong: int
    rehearsal: bool = False
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _runs(box: GpuHost) -> tuple[dict[str, list[Binding | None]], list[str]]:
    runs, skipped = numa_bindings(box.topology, box.n_gpus)
    out: dict[str, list[Binding | None]] = {k: list(v) for k, v in runs.items()}
    if not out and box.n_gpus >= 2:   # nodes unknown: every GPU at once all the same, unbound
        out["unbound"] = [None] * box.n_gpus
    return out, skipped


def host_to_all_rows(box: GpuHost, nbytes: int, *, repeats: int = 5, iters: int = 10,
                     warmup: int = 2, progress: Callable[[], None] | None = None
                     ) -> tuple[list[HostToAllRow], list[str]]:
    """Measure every run the box allows at ``nbytes`` per GPU; returns the rows and one
    ``skipped: why`` line per run that cannot be made. ``progress`` is called once per run and
    direction."""
    nbytes = check_int("nbytes", nbytes, minimum=1)
    repeats = check_int("repeats", repeats, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    runs, skipped = _runs(box)
    rows: list[HostToAllRow] = []
    expected = pattern(nbytes, seed=3)
    for run, bindings in runs.items():
        hosts = [box.host_buffer(nbytes, b.node if b else None) for b in bindings]
        devs = [box.device_buffer(g, nbytes) for g in range(box.n_gpus)]
        try:
            for direction in HOST_DIRECTIONS:
                for h in hosts:
                    h.data.copy_(expected if direction == "h2d" else torch.zeros_like(expected))
                if direction == "d2h":
                    for d in devs:
                        d.copy_(expected)
                copies = [Copy(d, h.data, g) if direction == "h2d" else Copy(h.data, d, g)
                          for g, (h, d) in enumerate(zip(hosts, devs, strict=True))]
                if warmup:
                    box.time_together(copies, warmup)
                times = [box.time_together(copies, iters) for _ in range(repeats)]
                per_gpu = [statistics.median(t[g] for t in times) for g in range(box.n_gpus)]
                for g, (s, h) in enumerate(zip(per_gpu, hosts, strict=True)):
                    dst = devs[g] if direction == "h2d" else h.data
                    wrong = int((dst.cpu() != expected).sum())
                    rows.append(HostToAllRow(run, direction, g, h.node, nbytes, s * 1e6,
                                             gb_per_s(nbytes, s), h.bound, wrong, box.rehearsal,
                                             h.why))
                slowest = max(per_gpu)
                rows.append(HostToAllRow(
                    run, direction, "all", None, nbytes * box.n_gpus, slowest * 1e6,
                    gb_per_s(nbytes * box.n_gpus, slowest),
                    "/".join(sorted({h.bound.split()[0] for h in hosts})),
                    sum(r.wrong for r in rows[-box.n_gpus:]), box.rehearsal))
                if progress is not None:
                    progress()
        finally:
            for h in hosts:
                box.release(h)
    return rows, skipped
