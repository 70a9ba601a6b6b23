"""The GPUs of one host, as the multi-GPU copy measurements see them: CUDA, or a rehearsal.

A :class:`GpuHost` allocates a buffer on each GPU and pinned host buffers bound to a NUMA node,
and times a set of copies issued together (one GPU-to-GPU copy, both directions of a pair, or every
GPU copying host memory at once). :mod:`distlab.transfers.peer_matrix` and
:mod:`distlab.transfers.host_to_all` only talk to this interface, so the same code runs on:

- :class:`CudaBox`: the GPUs torch sees. Copies of one set run on a stream each (on the GPU that
  drives the copy: the source of a GPU-to-GPU copy, the GPU of a host copy), every stream held by
  a spin kernel while the whole set is enqueued, then timed by its own events (nvbandwidth's
  method; the spins start a few microseconds apart, so "together" is within that).
- :class:`RehearsalBox`: a fake box for rehearsing a multi-GPU run on a CPU machine. Host memory
  stands in for each GPU, a thread per copy stands in for a copy engine, the topology is one of
  :data:`~distlab.transfers.gpu_topology.FAKE_TOPOLOGIES`. Its timings are real host memcpy
  times, labelled ``rehearsal`` wherever they go, and never judged as a GPU's.

Host buffers are bound to a NUMA node by first touch: the allocating thread is moved onto the
node's CPUs (the ``CPU Affinity`` of the node's GPUs in ``nvidia-smi topo -m``, as far as this
process may use them), touches every page, then the memory is page-locked in place
(``cudaHostRegister``). Where the node's CPUs are not available to this process the buffer is left
unbound, and :attr:`HostBuffer.bound` says why.

Units: bytes, seconds.
"""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from distlab._checks import check_choice, check_int
from distlab.envinfo import gpu_topology
from distlab.transfers.gpu_topology import FAKE_TOPOLOGIES, Topology, parse_topology

__all__ = ["REHEARSAL_BOXES", "Copy", "CudaBox", "GpuHost", "HostBuffer", "RehearsalBox",
           "box_here", "node_cpus", "parse_cpu_list", "rehearsal_box", "rehearsal_pcie_link"]

#: fake boxes a run can rehearse on: name -> (topology maker, peer access between GPUs, the
#: PCIe generation each GPU pretends to have; x16 lanes)
REHEARSAL_BOXES: dict[str, tuple[str, bool, int]] = {
    "dgx_h100_like": ("dgx_h100_like", True, 5),
    "pcie_two_switches": ("pcie_two_switches", True, 4),
    "pcie_peer_off": ("pcie_two_switches", False, 4),
    "single_gpu": ("single_gpu", True, 5),
}


def parse_cpu_list(text: str) -> set[int]:
    """CPU numbers of a list as ``nvidia-smi topo -m`` and ``taskset`` print it
    (``"0-55,112-167"``); an empty text is the empty set.

    Raises:
        ValueError: a part that is no number or range, or a range that runs backwards.
    """
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r} (part {part!r})")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"not a CPU list: {text!r} (range {part!r} runs backwards)")
        out.update(range(a, b + 1))
    return out


def node_cpus(topo: Topology, node: int, allowed: set[int]) -> tuple[set[int], str]:
    """The CPUs a thread runs on to bind memory to NUMA node ``node`` by first touch: the CPU
    affinity of every GPU on that node, as far as ``allowed`` (this process's CPUs) goes; and ""
    or why there are none (pure)."""
    listed: set[int] = set()
    for gpu in topo.gpus:
        if topo.numa.get(gpu) == node and topo.cpus.get(gpu):
            listed |= parse_cpu_list(topo.cpus[gpu])
    if not listed:
        return set(), f"nvidia-smi topo -m lists no CPUs for NUMA node {node}"
    usable = listed & allowed
    if not usable:
        return set(), (f"NUMA node {node}'s CPUs ({_span(listed)}) are not among this process's "
                       f"CPUs ({_span(allowed)})")
    return usable, ""


def _span(cpus: set[int]) -> str:
    s = sorted(cpus)
    return f"{s[0]}-{s[-1]}" if len(s) > 1 else (str(s[0]) if s else "none")


@contextmanager
def _on_cpus(cpus: set[int]) -> Iterator[None]:
    """Run the calling thread on ``cpus`` for the block (Linux affinity of this thread only)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@dataclass
class HostBuffer:
    """``data`` (1-D uint8, page-locked where the box can pin) meant for NUMA node ``node``;
    ``bound`` is ``"node N"`` when first-touched from that node's CPUs, else ``"unbound"`` and
    ``why`` says why."""

    data: torch.Tensor
    node: int | None
    bound: str
    why: str = ""


@dataclass(frozen=True)
class Copy:
    """One copy of a set issued together: ``src`` into ``dst`` (same size), driven by GPU
    ``engine`` (its stream and copy engine)."""

    dst: torch.Tensor
    src: torch.Tensor
    engine: int


class GpuHost(ABC):
    """The GPUs of a host (see the module docstring)."""

    name: str = "abstract"
    rehearsal: bool = False

    def __init__(self, n_gpus: int, topology: Topology | None) -> None:
        self.n_gpus = check_int("n_gpus", n_gpus, minimum=0)
        self.topology = topology

    @abstractmethod
    def peer_access(self, src: int, dst: int) -> bool:
        """Whether GPU ``src`` can copy into GPU ``dst`` directly (else the driver stages the
        copy through host memory)."""

    @abstractmethod
    def device_buffer(self, gpu: int, nbytes: int) -> torch.Tensor:
        """``nbytes`` uninitialised bytes on GPU ``gpu``."""

    @abstractmethod
    def _pin(self, data: torch.Tensor) -> None:
        """Page-lock ``data`` in place (a no-op where there is no driver)."""

    @abstractmethod
    def time_together(self, copies: Sequence[Copy], iters: int) -> list[float]:
        """Issue every copy ``iters`` times, all copies at once; seconds per copy of each."""

    def release(self, buf: HostBuffer) -> None:  # noqa: B027 (nothing to undo without a driver)
        """Undo what :meth:`host_buffer` pinned."""

    def host_buffer(self, nbytes: int, node: int | None) -> HostBuffer:
        """``nbytes`` of host memory bound to NUMA ``node`` by first touch (None: unbound),
        then page-locked; release it with :meth:`release`."""
        nbytes = check_int("nbytes", nbytes, minimum=1)
        cpus, why = (set(), "not bound (no node asked)") if node is None else \
            (node_cpus(self.topology, node, os.sched_getaffinity(0)) if self.topology is not None
             else (set(), "no topology to read the node's CPUs from"))
        data = torch.empty(nbytes, dtype=torch.uint8)
        if cpus:
            with _on_cpus(cpus):
                data.numpy().fill(0)   # first touch from this thread, on the node's CPUs
            bound, why = f"node {node}", ""
        else:
            data.numpy().fill(0)
            bound = "unbound"
        self._pin(data)
        return HostBuffer(data, node, bound, why)

    def describe(self) -> dict[str, object]:
        """JSON-able: name, GPU count, whether this is a rehearsal."""
        return {"box": self.name, "gpus": self.n_gpus, "rehearsal": self.rehearsal}


class CudaBox(GpuHost):
    """The GPUs torch sees (``topology``: ``nvidia-smi topo -m`` read, or None)."""

    name = "cuda"

    def __init__(self, topology: Topology | None, spin_cycles: int = 20_000_000) -> None:
        super().__init__(torch.cuda.device_count(), topology)
        self.spin_cycles = spin_cycles

    def peer_access(self, src: int, dst: int) -> bool:
        return src == dst or bool(torch.cuda.can_device_access_peer(src, dst))

    def device_buffer(self, gpu: int, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", gpu))

    def _pin(self, data: torch.Tensor) -> None:
        err = torch.cuda.cudart().cudaHostRegister(data.data_ptr(), data.numel(), 0)
        if int(err) != 0:
            raise RuntimeError(f"cudaHostRegister returned error {int(err)}")

    def release(self, buf: HostBuffer) -> None:
        torch.cuda.cudart().cudaHostUnregister(buf.data.data_ptr())

    def time_together(self, copies: Sequence[Copy], iters: int) -> list[float]:
        iters = check_int("iters", iters, minimum=1)
        for g in range(self.n_gpus):
            torch.cuda.synchronize(g)
        timed = []
        for c in copies:
            with torch.cuda.device(c.engine):
                stream = torch.cuda.Stream()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    torch.cuda._sleep(self.spin_cycles)   # hold the stream while all enqueue
                    start.record(stream)
                    for _ in range(iters):
                        c.dst.copy_(c.src, non_blocking=True)
                    end.record(stream)
            timed.append((start, end))
        for _, end in timed:
            end.synchronize()
        return [start.elapsed_time(end) / 1e3 / iters for start, end in timed]


class RehearsalBox(GpuHost):
    """A fake box (``box``: a key of :data:`REHEARSAL_BOXES`): host memory for each GPU, one
    thread per copy, the fake topology's NUMA nodes. Real host timings, labelled rehearsal."""

    rehearsal = True

    def __init__(self, box: str) -> None:
        box = check_choice("box", box, list(REHEARSAL_BOXES))
        maker, self._peer, _ = REHEARSAL_BOXES[box]
        topo = parse_topology(FAKE_TOPOLOGIES[maker]())
        super().__init__(len(topo.gpus), topo)
        self.name = f"rehearsal:{box}"

    def peer_access(self, src: int, dst: int) -> bool:
        return src == dst or self._peer

    def device_buffer(self, gpu: int, nbytes: int) -> torch.Tensor:
        check_int("gpu", gpu, minimum=0, maximum=self.n_gpus - 1)
        return torch.empty(nbytes, dtype=torch.uint8)

    def _pin(self, data: torch.Tensor) -> None:
        return None

    def time_together(self, copies: Sequence[Copy], iters: int) -> list[float]:
        iters = check_int("iters", iters, minimum=1)
        start = threading.Barrier(len(copies))
        seconds: list[float] = [0.0] * len(copies)
        errors: list[BaseException] = []

        def engine(k: int, c: Copy) -> None:
            dst, src = c.dst.numpy(), c.src.numpy()
            try:
                start.wait()
                t0 = time.perf_counter()
                for _ in range(iters):
                    np.copyto(dst, src)      # releases the GIL: the copies do run together
                seconds[k] = (time.perf_counter() - t0) / iters
            except BaseException as exc:  # surfaced in the caller below
                errors.append(exc)
                start.abort()

        threads = [threading.Thread(target=engine, args=(k, c), daemon=True)
                   for k, c in enumerate(copies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return seconds


def rehearsal_pcie_link(box: str, n_gpus: int) -> list[dict[str, object]]:
    """The PCIe links the fake box ``box`` pretends its GPUs have, shaped as
    :func:`distlab.envinfo.pcie_links` reports real ones (and marked ``rehearsal``)."""
    gen = REHEARSAL_BOXES[check_choice("box", box, list(REHEARSAL_BOXES))][2]
    return [{"gpu": g, "gen": gen, "width": 16, "rehearsal": True} for g in range(n_gpus)]


def rehearsal_box(name: str) -> RehearsalBox:
    """The fake box ``name`` (a key of :data:`REHEARSAL_BOXES`)."""
    return RehearsalBox(name)


def box_here(rehearse: str | None = None) -> tuple[GpuHost | None, str]:
    """The box to measure: the rehearsal ``rehearse`` names, else the CUDA GPUs (topology read
    from ``nvidia-smi topo -m`` where it prints one), else None and why (no CUDA device)."""
    if rehearse:
        return rehearsal_box(rehearse), ""
    if not torch.cuda.is_available():
        return None, "no CUDA device (torch.cuda.is_available() is False)"
    text = gpu_topology()
    try:
        topo = parse_topology(text) if text else None
    except ValueError:
        topo = None
    return CudaBox(topo), ""
