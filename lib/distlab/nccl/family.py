"""NCCL's all-gather, reduce-scatter and broadcast on one node: its choice and the time it runs.

The traffic of FSDP and ZeRO. The same two steps as the allreduce
(:mod:`~distlab.nccl.tuning`, :mod:`~distlab.nccl.execution`),
from NVIDIA/nccl ``v2.28.9-1``:

- **what NCCL prices** (``src/enqueue.cc`` ``getAlgoInfo``): all-gather and reduce-scatter are
  priced on ``nBytes = n * count * elementSize``, the whole gathered buffer
  (``ncclFuncMaxSendRecvCount``); broadcast on its buffer.
- **candidates** (``src/graph/tuning.cc`` ``ncclTopoTuneModel``): ring with every protocol for
  all three; NVLS (Simple) for all-gather and reduce-scatter where the box has it; tree and
  NVLS-Tree run only allreduce; PAT needs one GPU per node.
- **bandwidth**: the ring's ``nChannels * bwIntra`` with the allreduce's protocol factors,
  converted with ``nRanks / nsteps`` (``nsteps`` = ``n - 1`` for all-gather and reduce-scatter,
  ``n`` for broadcast); NVLS ``bwIntra * nvlsEfficiency * (nCh-1)/nCh * (ppn-1)/ppn`` per
  channel, no conversion.
- **latency**: all-gather and reduce-scatter rings ``base + (n-1) * hop``; a broadcast ring whose
  channels are all the same ring (one node) ``base + hop``; NVLS its flat 25 us.

Execution as for the allreduce (the module doc of
:mod:`~distlab.nccl.execution`): the harness's host bound, the channels NCCL
launches, a ring's ``n - 1`` steps per loop in ``ALLGATHER_CHUNKSTEPS / SLICESTEPS`` slices
(broadcast: a pipeline of ``n - 1`` hops, one step per chunk), the exposed flag waits, with the
constants calibrated on the allreduce tables (no published all-gather, reduce-scatter or
broadcast table is held): the same per-size pipeline
(:func:`~distlab.nccl.per_size.run_size`), laid out by :class:`FamilyLayout`.
nccl-tests' bus bandwidth: ``algbw * (n-1)/n`` for all-gather and reduce-scatter, ``algbw``
for broadcast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from distlab._checks import check_choice, check_instance, check_int
from distlab.nccl.boxes import BoxLike, GpuBox, NcclGraph, box_graphs, gpu_box
from distlab.nccl.per_size import (
    ALLREDUCE_CHUNKSTEPS,
    ALLREDUCE_SLICESTEPS,
    BUFFER_BYTES,
    HARNESSES,
    MAX_CHANNELS,
    NCCL_STEPS,
    Channels,
    Execution,
    ExecutionConstants,
    Pick,
    chunk_bytes,
    hidden_hop_latency_us,
    launched_channels,
    nvls_channels,
    run_size,
    shipped_constants,
)
from distlab.nccl.tuning import (
    BASE_LATENCY_US,
    HOP_LATENCY_US,
    LL128_DATA_FRACTION,
    LL_MAX_BUSBW_GBPS,
    NVLS_EFFICIENCY,
    RING_LL128_PER_CHANNEL_GBPS,
)
from distlab.vocabulary import busbw_factor, collective_name, gb_per_s

__all__ = ["FAMILY", "FamilyLayout", "FamilyRun", "nccl_collective"]

FAMILY = ("all_gather", "reduce_scatter", "broadcast")
"""The collectives priced here (the allreduce: :mod:`~distlab.nccl.execution`)."""
NVLS_LATENCY_US = 25.0
"""``hwLatencies[NVLINK][NVLS][SIMPLE]`` (2.24 on)."""


@dataclass(frozen=True)
class FamilyRun(Execution):
    """One collective of ``nbytes`` (NCCL's ``nBytes``) as it runs: an
    :class:`~distlab.nccl.execution.Execution` of ``collective``."""

    collective: str = "all_gather"

    @property
    def busbw_gbps(self) -> float:
        """nccl-tests' bus bandwidth of :attr:`seconds`
        (:func:`distlab.vocabulary.busbw_factor`), GB/s."""
        factor = busbw_factor(self.collective, self.world_size) or 0.0
        return gb_per_s(self.nbytes, self.seconds) * factor if self.seconds > 0 else 0.0


def _candidates(box: GpuBox, n: int, collective: str) -> list[tuple[str, str, float, float]]:
    """``(algorithm, protocol, latency_us, algbw_gbps)`` of every pair NCCL may pick."""
    graphs = box_graphs(box, n)
    ring = graphs["ring"]
    gen = box.generation
    hop_class = ring.hop_class
    nsteps = n if collective == "broadcast" else n - 1
    out = []
    for p in ("LL", "LL128", "Simple"):
        if p == "LL128" and ring.path != "NVL":
            continue
        bus = ring.busbw_gbps
        if p == "LL":
            bus = min(LL_MAX_BUSBW_GBPS[gen], bus * 0.5)
        elif p == "LL128":
            bus = min(bus * LL128_DATA_FRACTION, ring.n_channels * RING_LL128_PER_CHANNEL_GBPS[gen])
        hop = HOP_LATENCY_US[hop_class][("ring", p)]
        lat = BASE_LATENCY_US[("ring", p)] + (hop if collective == "broadcast" else nsteps * hop)
        out.append(("ring", p, lat, bus * n / nsteps))
    if collective != "broadcast" and "nvls" in graphs:
        g = graphs["nvls"]
        k = g.n_channels
        per = min(g.bw_intra_gbps * NVLS_EFFICIENCY[gen] * (k - 1) / k * (n - 1) / n,
                  g.bw_inter_gbps)
        out.append(("nvls", "Simple", NVLS_LATENCY_US, k * per))
    return out


def _broadcast_chunk(protocol: str) -> int:
    """One step (``BROADCAST_CHUNKSTEPS`` = 1) of data: the protocol's buffer / ``NCCL_STEPS``,
    LL halved, LL128 15/16."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    if protocol == "LL":
        return step // 2
    if protocol == "LL128":
        return step // 16 * 15
    return step


def nccl_collective(preset: BoxLike, world_size: int, sizes_bytes: Sequence[int],
                    collective: str, *, harness: str = "torch",
                    constants: ExecutionConstants | None = None) -> list[FamilyRun]:
    """NCCL's choice and the time it runs for ``collective`` on ``world_size`` GPUs of one box.

    Args:
        preset: a GPU box or its name.
        world_size: GPUs, in ``[2, preset.gpus]``.
        sizes_bytes: NCCL's ``nBytes`` per call: the whole gathered (all-gather) or scattered
            (reduce-scatter) buffer, the broadcast buffer; ints >= 1.
        collective: one of :data:`FAMILY`, in any spelling
            :func:`distlab.vocabulary.collective_name` reads (nccl-tests' ``allgather``), as
            the command takes it.
        harness, constants: as :func:`~distlab.nccl.execution.nccl_execution`.
    """
    box = gpu_box(preset)
    n = check_int("world_size", world_size, minimum=2, maximum=box.gpus)
    collective = check_choice("collective", collective_name(collective), FAMILY)
    how = HARNESSES[check_choice("harness", harness, HARNESSES)]
    constants = shipped_constants() if constants is None else \
        check_instance("constants", constants, ExecutionConstants)
    cands = _candidates(box, n, collective)
    layout = FamilyLayout(box, n, collective, box_graphs(box, n)["ring"])
    host = how.term(constants, n, box)
    out = []
    for i, s in enumerate(sizes_bytes):
        s = check_int(f"sizes_bytes[{i}]", s, minimum=1)
        a, p, lat, bw = min(cands, key=lambda c: c[2] + s / (1e3 * c[3]))
        run = run_size(Pick(s, a, p, lat, bw, lat + s / (1e3 * bw)), layout, n, host, constants)
        out.append(FamilyRun(**{f.name: getattr(run, f.name) for f in fields(run)},
                             collective=collective))
    return out


@dataclass(frozen=True)
class FamilyLayout:
    """All-gather, reduce-scatter or broadcast of ``n`` GPUs of one box laid out on NCCL's
    channels (:class:`~distlab.nccl.per_size.ChannelLayout`): a ring on twice its
    graph's channels (at most ``MAXCHANNELS``), NVLS on its own; a ring's ``n - 1`` steps per
    loop in ``ALLGATHER_CHUNKSTEPS / SLICESTEPS`` slices, a broadcast a pipeline ``n - 1`` hops
    deep of one step per chunk, NVLS one step per chunk of each concurrent operation."""

    box: GpuBox
    n: int
    collective: str
    ring: NcclGraph

    def channels(self, pick: Pick) -> Channels:
        """NVLS's channels, else twice the ring graph's; those launched."""
        total = nvls_channels(self.box) if pick.algorithm == "nvls" else \
            min(MAX_CHANNELS, 2 * self.ring.n_channels)
        nc, nt = launched_channels(pick.algorithm, pick.protocol, pick.nbytes, total,
                                   world_size=self.n)
        return Channels(nc, total, nt)

    def chunk_bytes(self, pick: Pick, launched: int) -> int:
        """A broadcast ring's one step of data (:func:`_broadcast_chunk`), else the
        allreduce's chunk rules."""
        if pick.algorithm != "nvls" and self.collective == "broadcast":
            return _broadcast_chunk(pick.protocol)
        return chunk_bytes(pick.algorithm, pick.protocol, pick.nbytes, launched, self.n)

    def steps(self, pick: Pick, launched: int, chunk: int) -> int:
        """Pipeline steps of one channel (see the class doc)."""
        s, n = pick.nbytes, self.n
        if pick.algorithm == "nvls":
            return math.ceil(s / (launched * n * chunk))
        if self.collective == "broadcast":  # a pipeline n-1 hops deep, one step per chunk
            return n - 1 + math.ceil(s / (launched * chunk)) - 1
        slices = ALLREDUCE_CHUNKSTEPS // ALLREDUCE_SLICESTEPS if pick.protocol == "Simple" else 1
        return (n - 1) * math.ceil(s / (launched * n * chunk)) * slices

    def ring_latency_us(self, pick: Pick, steps: int, transfer_us: float) -> float:
        """NCCL's base and per-step hop (2.28.9), each hop hidden under the step's copy."""
        return hidden_hop_latency_us(BASE_LATENCY_US[("ring", pick.protocol)],
                                     HOP_LATENCY_US[self.ring.hop_class][("ring", pick.protocol)],
                                     steps, transfer_us)
