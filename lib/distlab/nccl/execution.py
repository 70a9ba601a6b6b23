"""How long NCCL's allreduce takes when it runs, not what NCCL estimates to choose it.

:mod:`~distlab.nccl.tuning` is NCCL's own tuning model: the quantity NCCL
minimizes to pick an (algorithm, protocol). This module keeps that pick (for the NCCL release
asked, :mod:`~distlab.nccl.versions`) and times *the execution* NCCL launches
for it, term by term:

``seconds = max(host, gpu)`` with ``gpu = latency + transfer + exposed_steps * step_sync``
(``host + gpu`` where the harness waits for every call: see below)

- **host** (calibrated): the time the benchmark's host thread needs to enqueue one collective.
  Back-to-back collectives (how nccl-tests and torch loops time them) run at the slower of the
  host's enqueue rate and the GPUs. One thread enqueues one kernel launch per GPU it drives
  (``ncclGroupEnd`` launches each GPU's kernel in turn: ``src/group.cc`` ``doLaunches``), so
  the host term is ``host_us_per_gpu * gpus_per_process``: 8 under ``all_reduce_perf -g 8``
  (one process drives the node), 1 under torchrun. A harness that times *one* call on an idle
  GPU (``torch-isolated``: a barrier, a CUDA event, the call, a CUDA event, a synchronize)
  charges the host's time to reach the kernel launch to that call: there the host term is
  torch's overhead per call, :data:`TORCH_CALL_OVERHEAD_US` (a stated figure, not fitted), and
  it adds to the GPUs' time instead of overlapping it.
- **transfer** (NCCL's bandwidth): ``nbytes`` at the estimate's algorithm bandwidth (NVLS: NCCL
  2.28.9's, whatever the release, :data:`NVLS_RATE_VERSION`), scaled by
  the channels NCCL really launches over those it has (``src/enqueue.cc`` ``topoGetAlgoInfo``:
  ``while (nBytes < nc*nt*threadThreshold) nc--``, a ring LL threshold times the ranks; each
  channel carries ``1/nChannels`` of the graph's bandwidth; ``src/graph/connect.cc`` doubles
  the search's ring channels, up to ``MAXCHANNELS``).
- **latency** (NCCL's constants): tree and NVLS keep the estimate's fixed term
  (``src/graph/tuning.cc`` ``ncclTopoTuneModel``). A ring pays its base latency once and, per
  step, only the part of the per-step hop latency its copy does not hide:
  ``base + steps * max(0, hop - transfer/steps)`` (the next step's hop overlaps this step's
  copy; NCCL's estimate adds ``2(n-1)`` whole hops to the transfer).
- **exposed steps x step_sync** (calibrated): every pipeline step waits for a flag from its
  peer before it copies, a wait NCCL's estimate leaves out. A connection holds ``NCCL_STEPS``
  (8) steps in flight, so once a channel's pipeline is full the waits overlap the copies in
  flight: only the first ``min(steps, NCCL_STEPS)`` are exposed (the pipeline fill).

Steps follow NCCL's chunking (``src/enqueue.cc`` ``calcCollChunking``: step = buffer /
``NCCL_STEPS``; a Simple ring allreduce chunk is ``ALLREDUCE_CHUNKSTEPS`` steps sent in slices
of ``ALLREDUCE_SLICESTEPS``; LL halves the chunk, LL128 keeps 15/16 of it; NVLS chunks shrink
with the concurrent operations):

- ring: ``2(n-1)`` steps per loop, ``ceil(nbytes / (nc * n * chunk))`` loops, a Simple chunk
  in ``chunkSteps / sliceSteps`` slices;
- tree (a chain on one node): a pipeline ``2(n-1)`` deep, one step per chunk of a channel;
- NVLS: one step per chunk of each of the ``nc * nHeads`` concurrent operations.

The sync cost differs by protocol: Simple and LL128 wait on a flag per slice and NVLS on the
switch's multimem operations per chunk (two fitted constants); LL carries its flag in every
8-byte line, so its receiver polls the data itself and has no step wait: ``ll_step_us`` is 0 by
design, not fitted (its cost is NCCL's 50% LL efficiency). With the host's, three constants.

Every size goes through one pipeline, :func:`~distlab.nccl.per_size.run_size`,
shared with the multi-node model and the other collectives; this module gives it the one-node
allreduce's layout (:class:`OneNodeLayout`) and is the public boundary: the box is resolved and
every argument checked once, here.

The constants (:class:`ExecutionConstants`) are fitted by
:mod:`distlab.evidence.nccl.fit_execution` on a named calibration set (the published
tables the project holds) and judged leave-one-source-out there.

Units: bytes and seconds at the public functions, microseconds and GB/s (1e9 B/s) inside, as
NCCL's tables are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_choice, check_instance, check_int
from distlab.nccl import versions
from distlab.nccl.boxes import BoxLike, GpuBox, NcclGraph, box_graphs, gpu_box
from distlab.nccl.multinode import multinode_execution
from distlab.nccl.per_size import (
    BUFFER_BYTES,
    CONSTANT_NAMES,
    HARNESSES,
    MAX_THREADS,
    THREAD_THRESHOLD,
    TORCH_CALL_OVERHEAD_US,
    Channels,
    Execution,
    ExecutionConstants,
    Harness,
    Pick,
    allreduce_steps,
    chunk_bytes,
    exposed_steps,
    hidden_hop_latency_us,
    launched_channels,
    nvls_channels,
    pick_of,
    run_size,
    shipped_constants,
)
from distlab.nccl.tuning import (
    ALGORITHMS,
    PROTOCOLS,
    base_and_hop_us,
    box_choices,
    box_table,
    check_sizes,
    check_subset,
)
from distlab.nccl.versions import NcclConstants

# The pipeline's types, NCCL's rules and the shipped constants are
# :mod:`~distlab.nccl.per_size`'s, named here too for the callers of this model.
__all__ = ["BUFFER_BYTES", "CONSTANT_NAMES", "HARNESSES", "MAX_THREADS", "NVLS_RATE_VERSION",
           "THREAD_THRESHOLD", "TORCH_CALL_OVERHEAD_US", "Execution", "ExecutionConstants",
           "Harness", "OneNodeLayout", "chunk_bytes", "exposed_steps", "launched_channels",
           "nccl_execution", "nvls_channels", "one_node_execution", "predict_nccl_measured",
           "shipped_constants"]

NVLS_RATE_VERSION = "2.28"
"""The release whose NVLS bandwidth times an NVLS allreduce, whatever release chose it: NCCL
2.28.9's ``nvlsEfficiency`` formula (``tuning.cc``: per channel, the NVLink speed x 0.85 on
Hopper, 0.74 on Blackwell, x (channels-1)/channels, x 2 for the pipelined halves, at the ring's
algorithm ratio), which replaced the older ``nChannels * min(bwIntra, bwInter)`` at 5/6. The
kernel moves data at the hardware's rate; the older figure only chose. On 8 Hopper GPUs the two
agree within 2% (272 vs 267 GB/s); on Blackwell and on a 72-GPU NVLink domain the older one is
30% above what 2.28 states and what published Blackwell runs show."""


def nccl_execution(preset: BoxLike, world_size: int, sizes_bytes: Sequence[int], *,
                   harness: str = "torch", constants: ExecutionConstants | None = None,
                   algorithms: Iterable[str] | None = None,
                   protocols: Iterable[str] | None = None,
                   nccl_version: str | NcclConstants | None = None, nodes: int = 1,
                   network: str | None = None) -> list[Execution]:
    """NCCL's choice for each allreduce size and the time of its execution.

    Args:
        preset: a :class:`GpuBox` or a name of
            :data:`~distlab.nccl.boxes.GPU_BOXES` (one node).
        world_size: GPUs in all: in ``[2, preset.gpus]`` on one node, ``nodes`` times the GPUs
            per node across nodes.
        sizes_bytes: message sizes, bytes (ints >= 1).
        harness: a key of :data:`HARNESSES` (how the calls are issued and timed).
        constants: the calibrated constants; default: the shipped calibration
            (:func:`shipped_constants`).
        algorithms, protocols: restrict NCCL's choice as ``NCCL_ALGO`` / ``NCCL_PROTO`` do.
        nccl_version: the NCCL release (``"2.18"`` ... ``"2.30"``, or a patch release;
            one the model does not hold is priced with its neighbour:
            :mod:`~distlab.nccl.versions`); ``None``: 2.28.9.
        nodes: boxes joined by ``network``
            (:mod:`~distlab.nccl.multinode`; NCCL 2.28.9's constants but for
            the release's Blackwell rows).
        network: a key of :data:`~distlab.nccl.multinode.NETWORKS`, required
            when ``nodes > 1``.
    """
    version = versions.nccl_constants(nccl_version)
    box = gpu_box(preset)
    nodes = check_int("nodes", nodes, minimum=1)
    check_choice("harness", harness, HARNESSES)
    if constants is not None:
        check_instance("constants", constants, ExecutionConstants)
    if nodes > 1 or network is not None:
        return multinode_execution(box, world_size, sizes_bytes, nodes, network, harness,
                                   constants, algorithms, protocols, version)
    n = check_int("world_size", world_size, minimum=2, maximum=box.gpus)
    how = HARNESSES[check_choice("harness", harness, HARNESSES)]
    if constants is None:
        constants = shipped_constants()
    sizes = check_sizes(sizes_bytes)
    algos = check_subset("algorithms", algorithms, ALGORITHMS)
    protos = check_subset("protocols", protocols, PROTOCOLS)
    return one_node_execution(box, n, sizes, how, constants, algos, protos, version,
                              asked=(algorithms, protocols))


def one_node_execution(box: GpuBox, n: int, sizes: Sequence[int], how: Harness,
                       constants: ExecutionConstants, algos: tuple[str, ...],
                       protos: tuple[str, ...], version: NcclConstants, *,
                       asked: tuple[Any, Any] | None = None) -> list[Execution]:
    """:func:`nccl_execution` on one node inside the model: every argument resolved and checked
    by the caller (``n`` in ``[2, box.gpus]``; ``asked``: as
    :func:`~distlab.nccl.tuning.box_choices`)."""
    choices = box_choices(box, n, sizes, algos, protos, version, asked=asked)
    layout = OneNodeLayout(box, n, box_graphs(box, n, version=version), version)
    nvls_algbw = [e.algbw_gbps for e in box_table(box, n, ALGORITHMS, PROTOCOLS,
                                                  versions.nccl_constants(NVLS_RATE_VERSION))
                  if e.algorithm == "nvls"]
    host = how.term(constants, n, box)
    return [run_size(pick_of(ch, nvls_algbw[0] if ch.algorithm == "nvls" else None), layout, n,
                     host, constants) for ch in choices]


@dataclass(frozen=True)
class OneNodeLayout:
    """An allreduce of ``n`` GPUs of one box laid out on NCCL's channels
    (:class:`~distlab.nccl.per_size.ChannelLayout`): a ring or tree on twice its
    graph's channels (at most the release's ``MAXCHANNELS``), NVLS on its own; NCCL's chunking
    and steps (:func:`chunk_bytes`,
    :func:`~distlab.nccl.per_size.allreduce_steps`); a ring's hops hidden
    under its copies at the release's latencies."""

    box: GpuBox
    n: int
    graphs: dict[str, NcclGraph]
    version: NcclConstants

    def channels(self, pick: Pick) -> Channels:
        """NVLS's channels, else twice the graph's (``ncclTopoPostset``); those launched."""
        total = nvls_channels(self.box) if pick.algorithm == "nvls" else \
            min(self.version.max_channels, 2 * self.graphs[pick.algorithm].n_channels)
        nc, nt = launched_channels(pick.algorithm, pick.protocol, pick.nbytes, total,
                                   world_size=self.n)
        return Channels(nc, total, nt)

    def chunk_bytes(self, pick: Pick, launched: int) -> int:
        """:func:`chunk_bytes` on one node."""
        return chunk_bytes(pick.algorithm, pick.protocol, pick.nbytes, launched, self.n)

    def steps(self, pick: Pick, launched: int, chunk: int) -> int:
        """:func:`~distlab.nccl.per_size.allreduce_steps`."""
        return allreduce_steps(pick.algorithm, pick.protocol, pick.nbytes, launched, self.n,
                               chunk)

    def ring_latency_us(self, pick: Pick, steps: int, transfer_us: float) -> float:
        """The release's base and per-step hop, each hop hidden under the step's copy."""
        base, hop = base_and_hop_us(self.graphs["ring"], pick.protocol, self.version)
        return hidden_hop_latency_us(base, hop, steps, transfer_us)


def predict_nccl_measured(preset: BoxLike, world_size: int, sizes_bytes: Sequence[int],
                          **kwargs: Any) -> list[float]:
    """Seconds of NCCL's allreduce as measured, one per size (:func:`nccl_execution`'s
    arguments); 0 for one rank (no communication)."""
    if check_int("world_size", world_size, minimum=1) == 1:  # no communication, same checks
        gpu_box(preset)
        check_choice("harness", kwargs.get("harness", "torch"), HARNESSES)
        versions.resolve_nccl_version(kwargs.get("nccl_version"))
        return [0.0 for _ in check_sizes(sizes_bytes)]
    return [e.seconds for e in nccl_execution(preset, world_size, sizes_bytes, **kwargs)]
