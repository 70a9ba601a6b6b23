"""How long NCCL's allreduce takes when it runs, not what NCCL estimates to choose it.

:mod:`~distlab.collectives.model.nccl.estimate` is NCCL's own tuning model: the quantity NCCL
minimizes to pick an (algorithm, protocol). This module keeps that pick (for the NCCL release
asked, :mod:`~distlab.collectives.model.nccl.versions`) and times *the execution* NCCL launches
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

The constants (:class:`ExecutionConstants`) are fitted by
:mod:`distlab.collectives.model.nccl.fit_execution` on a named calibration set (the published
tables the project holds) and judged leave-one-source-out there.

Units: bytes and seconds at the public functions, microseconds and GB/s (1e9 B/s) inside, as
NCCL's tables are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from distlab._checks import check_choice, check_int
from distlab.collectives.model.nccl.boxes import gpu_box, nccl_graphs
from distlab.collectives.model.nccl.estimate import (
    base_and_hop_us,
    busbw_gbps,
    nccl_allreduce,
    nccl_version_of,
    tuning_table,
)
from distlab.collectives.model.nccl.versions import NcclVersion
from distlab.report.jsonfile import read_json

__all__ = ["HARNESSES", "TORCH_CALL_OVERHEAD_US", "Execution", "ExecutionConstants", "Harness",
           "chunk_bytes", "exposed_steps", "launched_channels", "nccl_execution", "nvls_channels",
           "predict_nccl_measured", "run_terms", "shipped_constants"]

SHIPPED_PATH = Path(__file__).with_name("execution_calibration.json")
"""The shipped constants (JSON: the constants, the sources fitted on, how to regenerate them)."""
CONSTANT_NAMES = ("host_us_per_gpu", "slice_sync_us", "ll_step_us", "nvls_chunk_us")
"""The calibrated constants, in :class:`ExecutionConstants`' order."""

# NVIDIA/nccl v2.28.9-1 (boxes.NCCL_TAG), the file beside each.
NCCL_STEPS = 8
"""``src/include/device.h``: slots of a connection's buffer."""
ALLREDUCE_CHUNKSTEPS = NCCL_STEPS // 2
"""``src/include/collectives.h``: steps per chunk of a Simple ring allreduce."""
ALLREDUCE_SLICESTEPS = NCCL_STEPS // 4
"""``src/include/collectives.h``: steps per slice (a chunk goes in 2 slices)."""
MAX_CHANNELS = 64
"""``MAXCHANNELS`` (``src/include/device.h``); ``src/graph/connect.cc`` ``ncclTopoPostset``
doubles the search's ring channels (``nChannels = min(MAXCHANNELS, nChannels*2)``)."""
NVLS_CHANNELS_SM90 = 16
"""``src/transport/nvls.cc`` ``NVLS_NCHANNELS_SM90``: NVLS channels on Hopper."""
NVLS_RATE_VERSION = "2.28"
"""The release whose NVLS bandwidth times an NVLS allreduce, whatever release chose it: NCCL
2.28.9's ``nvlsEfficiency`` formula (``tuning.cc``: per channel, the NVLink speed x 0.85 on
Hopper, 0.74 on Blackwell, x (channels-1)/channels, x 2 for the pipelined halves, at the ring's
algorithm ratio), which replaced the older ``nChannels * min(bwIntra, bwInter)`` at 5/6. The
kernel moves data at the hardware's rate; the older figure only chose. On 8 Hopper GPUs the two
agree within 2% (272 vs 267 GB/s); on Blackwell and on a 72-GPU NVLink domain the older one is
30% above what 2.28 states and what published Blackwell runs show."""
NVLS_CHANNELS_SM100 = 32
"""``NVLS_NCHANNELS_SM100``: NVLS channels on Blackwell across nodes."""
NVLS_CHANNELS_SM100_NVL = 24
"""``NVLS_NCHANNELS_SM100_NVL``: NVLS channels on Blackwell in one node or one multi-node NVLink
domain (``ncclNvlsInit``: "a reduced number of channels for single node/MNNVL domain")."""


def nvls_channels(box: Any, *, multinode: bool = False) -> int:
    """The NVLS channels NCCL launches (``src/transport/nvls.cc`` ``ncclNvlsInit``, 2.28.9 to
    2.30.7): 16 on Hopper; on Blackwell 24 inside one NVLink domain, 32 across nodes."""
    if gpu_box(box).sm < 100:
        return NVLS_CHANNELS_SM90
    return NVLS_CHANNELS_SM100 if multinode else NVLS_CHANNELS_SM100_NVL
NVLS_CHUNK_BYTES = 128 * 1024
"""``NCCL_NVLS_CHUNKSIZE`` default (``src/init.cc``): the NVLS chunk cap."""
LL128_LINE_ELEMS = 16
"""``NCCL_LL128_LINEELEMS``: 8-byte words per 128-byte LL128 line, one of them the flag."""
#: ``comm->buffSizes`` defaults (``src/init.cc``): Simple 4 MiB (``DEFAULT_BUFFSIZE``); LL
#: ``NCCL_LL_LINES_PER_THREAD * NCCL_LL_MAX_NTHREADS * NCCL_STEPS * 16``; LL128
#: ``NCCL_LL128_ELEMS_PER_THREAD * NCCL_LL128_MAX_NTHREADS * NCCL_STEPS * 8``.
BUFFER_BYTES = {"Simple": 4 << 20, "LL": 8 * 512 * NCCL_STEPS * 16,
                "LL128": 120 * 640 * NCCL_STEPS * 8}
#: ``NCCL_{SIMPLE,LL,LL128}_MAX_NTHREADS`` (``src/include/device.h``).
MAX_THREADS = {"Simple": 512, "LL": 512, "LL128": 640}
#: ``NCCL_{SIMPLE,LL,LL128}_THREAD_THRESHOLD`` (``src/include/comm.h``): bytes per thread
#: below which ``topoGetAlgoInfo`` launches fewer channels.
THREAD_THRESHOLD = {"Simple": 64, "LL": 8, "LL128": 8}
TORCH_CALL_OVERHEAD_US = 25.0
"""torch's host time from a ``dist.all_reduce`` call to NCCL's kernel launch, us: the middle of
the "20-30us of host overhead per call" that S. Bekman's ``all_reduce_bench.py`` notes measure on
an 8x H200 node (github.com/stas00/ml-engineering, ``network/benchmarks/README.md`` at 0cc3de5,
"How the calls are timed"). Stated there, not fitted here; used by the ``torch-isolated``
harness only."""


@dataclass(frozen=True)
class Harness:
    """How the collectives are issued and timed.

    Attributes:
        key: short name.
        gpus_per_process: GPUs one host thread drives (and launches a kernel on) per collective.
        description: in words.
    """

    key: str
    gpus_per_process: int | None
    description: str
    call_overhead_us: float | None = None

    def gpus(self, world_size: int) -> int:
        """GPUs one host thread launches on for a collective over ``world_size`` GPUs of a node."""
        return world_size if self.gpus_per_process is None else self.gpus_per_process

    def host_gpus(self, box: Any, world_size: int) -> int:
        """:meth:`gpus`, at most the GPUs one host holds (``box.gpus_per_host``: a GB200 NVL72's
        72 GPUs sit in trays of 4, each with its own host process)."""
        return min(self.gpus(world_size), gpu_box(box).gpus_per_host)

    @property
    def waits_each_call(self) -> bool:
        """True when every timed call starts on an idle GPU, so the host's time to launch it
        adds to the GPUs' time (``call_overhead_us`` is set); False for back-to-back calls."""
        return self.call_overhead_us is not None

    def host_us(self, constants: ExecutionConstants, gpus_of_node: int,
                box: Any = None) -> float:
        """The host term, us: the stated overhead per call of a harness that waits for each
        call, else the calibrated enqueue time per GPU times the GPUs one thread drives (at most
        the GPUs of one of ``box``'s hosts)."""
        if self.call_overhead_us is not None:
            return self.call_overhead_us
        gpus = self.gpus(gpus_of_node) if box is None else self.host_gpus(box, gpus_of_node)
        return constants.host_us_per_gpu * gpus


HARNESSES: dict[str, Harness] = {
    "nccl-tests": Harness("nccl-tests", None,
                          "nccl-tests all_reduce_perf -g <GPUs of the node>: one process and "
                          "thread drives every GPU of a node, back-to-back collectives"),
    "torch": Harness("torch", 1, "torch.distributed under torchrun: one process per GPU, "
                                 "back-to-back collectives"),
    "torch-isolated": Harness("torch-isolated", 1,
                              "torch.distributed under torchrun, one call per timed trial: a "
                              "barrier, then CUDA events around one all_reduce on an idle GPU "
                              "(torch's host overhead per call is charged to every call)",
                              call_overhead_us=TORCH_CALL_OVERHEAD_US),
}


@dataclass(frozen=True)
class ExecutionConstants:
    """What no NCCL file states, calibrated (see the module doc), microseconds.

    Attributes:
        host_us_per_gpu: host enqueue time per GPU one thread launches on.
        slice_sync_us: flag wait per Simple or LL128 slice step.
        ll_step_us: per LL step (0 in the shipped constants: LL has no flag wait).
        nvls_chunk_us: per NVLS chunk of one concurrent operation.
        calibrated_on: the sources they were fitted on.
    """

    host_us_per_gpu: float
    slice_sync_us: float
    ll_step_us: float
    nvls_chunk_us: float
    calibrated_on: tuple[str, ...] = ()

    def step_us(self, algorithm: str, protocol: str) -> float:
        """The sync cost of one step of ``algorithm`` / ``protocol``, us."""
        if algorithm.startswith("nvls"):
            return self.nvls_chunk_us
        return self.ll_step_us if protocol == "LL" else self.slice_sync_us


@dataclass(frozen=True)
class Execution:
    """NCCL's allreduce of ``nbytes`` as it runs (see the module doc for every term).

    Attributes:
        nbytes, world_size: the call.
        algorithm, protocol: NCCL's choice (its estimate's cheapest pair).
        channels: channels launched (after the channel tuning); ``channels_total`` the
            communicator's.
        threads: threads per channel block.
        chunk_bytes: data bytes per step chunk.
        steps: pipeline steps of one channel (see the module doc).
        host_us, latency_us, transfer_us, sync_us: the terms, us.
        estimate_us: NCCL's own estimate of the pair (what it minimized).
        serial: the harness waits for every call, so host and GPU times add (else the slower
            of the two bounds back-to-back calls).
    """

    nbytes: int
    world_size: int
    algorithm: str
    protocol: str
    channels: int
    channels_total: int
    threads: int
    chunk_bytes: int
    steps: int
    host_us: float
    latency_us: float
    transfer_us: float
    sync_us: float
    estimate_us: float
    serial: bool = False

    @property
    def gpu_us(self) -> float:
        """What the GPUs take: latency + transfer + steps' sync, us."""
        return self.latency_us + self.transfer_us + self.sync_us

    @property
    def seconds(self) -> float:
        """The measured time this model predicts: the slower of host and GPUs, or their sum
        where the harness waits for every call (:attr:`serial`)."""
        if self.serial:
            return (self.host_us + self.gpu_us) * 1e-6
        return max(self.host_us, self.gpu_us) * 1e-6

    @property
    def bound(self) -> str:
        """``"host"`` when the host's enqueue rate bounds the time, else ``"gpu"``."""
        return "host" if self.host_us > self.gpu_us else "gpu"

    @property
    def busbw_gbps(self) -> float:
        """nccl-tests' bus bandwidth of :attr:`seconds`, GB/s."""
        return busbw_gbps(self.nbytes, self.seconds, self.world_size)


def nccl_execution(preset: Any, world_size: int, sizes_bytes: Sequence[int], *,
                   harness: str = "torch", constants: ExecutionConstants | None = None,
                   algorithms: Iterable[str] | None = None,
                   protocols: Iterable[str] | None = None,
                   nccl_version: str | NcclVersion | None = None, nodes: int = 1,
                   network: str | None = None) -> list[Execution]:
    """NCCL's choice for each allreduce size and the time of its execution.

    Args:
        preset: a :class:`GpuBox` or a name of
            :data:`~distlab.collectives.model.nccl.boxes.GPU_BOXES` (one node).
        world_size: GPUs in all: in ``[2, preset.gpus]`` on one node, ``nodes`` times the GPUs
            per node across nodes.
        sizes_bytes: message sizes, bytes (ints >= 1).
        harness: a key of :data:`HARNESSES` (how the calls are issued and timed).
        constants: the calibrated constants; default: the shipped calibration
            (:func:`shipped_constants`).
        algorithms, protocols: restrict NCCL's choice as ``NCCL_ALGO`` / ``NCCL_PROTO`` do.
        nccl_version: the NCCL release (``"2.18"`` ... ``"2.30"``, or a patch release;
            one the model does not hold is priced with its neighbour:
            :mod:`~distlab.collectives.model.nccl.versions`); ``None``: 2.28.9.
        nodes: boxes joined by ``network``
            (:mod:`~distlab.collectives.model.nccl.multinode`; NCCL 2.28.9's constants but for
            the release's Blackwell rows).
        network: a key of :data:`~distlab.collectives.model.nccl.multinode.NETWORKS`, required
            when ``nodes > 1``.
    """
    version = nccl_version_of(nccl_version)
    box = gpu_box(preset)
    nodes = check_int("nodes", nodes, minimum=1)
    if nodes > 1 or network is not None:
        return _multinode_execution(box, world_size, sizes_bytes, nodes, network, harness,
                                    constants, algorithms, protocols, version)
    n = check_int("world_size", world_size, minimum=2, maximum=box.gpus)
    how = HARNESSES[check_choice("harness", harness, HARNESSES)]
    if constants is None:
        constants = shipped_constants()
    choices = nccl_allreduce(box, n, sizes_bytes, algorithms=algorithms, protocols=protocols,
                             nccl_version=version)
    graphs = nccl_graphs(box, n, version=version)
    nvls_algbw = [e.algbw_gbps for e in tuning_table(box, n, nccl_version=NVLS_RATE_VERSION)
                  if e.algorithm == "nvls"]
    out = []
    for ch in choices:
        cand = next(c for c in ch.candidates
                    if (c.algorithm, c.protocol) == (ch.algorithm, ch.protocol))
        graph = graphs[ch.algorithm]
        total = nvls_channels(box) if ch.algorithm == "nvls" else \
            min(version.max_channels, 2 * graph.n_channels)
        nc, nt = launched_channels(ch.algorithm, ch.protocol, ch.nbytes, total, world_size=n)
        chunk = chunk_bytes(ch.algorithm, ch.protocol, ch.nbytes, nc, n)
        steps = _steps(ch.algorithm, ch.protocol, ch.nbytes, nc, n, chunk)
        algbw = nvls_algbw[0] if ch.algorithm == "nvls" else cand.algbw_gbps
        transfer = ch.nbytes / (1e3 * algbw) * total / nc
        latency = cand.latency_us
        if ch.algorithm == "ring":  # the hop latency a step's copy does not hide
            base, hop = base_and_hop_us(graph, ch.protocol, version)
            latency = base + steps * max(0.0, hop - transfer / steps)
        out.append(run_terms(ch.nbytes, n, ch.algorithm, ch.protocol, (nc, total, nt),
                             chunk, steps, how.host_us(constants, n, box), latency,
                             transfer, constants, ch.seconds * 1e6,
                             serial=how.waits_each_call))
    return out


def run_terms(nbytes: int, world_size: int, algorithm: str, protocol: str,
              channels: tuple[int, int, int], chunk: int, steps: int, host_us: float,
              latency_us: float, transfer_us: float, constants: ExecutionConstants,
              estimate_us: float, *, serial: bool = False) -> Execution:
    """An :class:`Execution` from its terms; ``channels`` is ``(launched, total, threads)``, the
    sync term is the exposed steps' wait (:func:`exposed_steps`) and ``serial`` says whether
    host and GPU times add (:attr:`Harness.waits_each_call`)."""
    nc, total, nt = channels
    return Execution(nbytes=nbytes, world_size=world_size, algorithm=algorithm,
                     protocol=protocol, channels=nc, channels_total=total, threads=nt,
                     chunk_bytes=chunk, steps=steps, host_us=host_us, latency_us=latency_us,
                     transfer_us=transfer_us,
                     sync_us=exposed_steps(steps) * constants.step_us(algorithm, protocol),
                     estimate_us=estimate_us, serial=serial)


def _multinode_execution(box: Any, world_size: int, sizes_bytes: Sequence[int], nodes: int,
                         network: str | None, harness: str,
                         constants: ExecutionConstants | None,
                         algorithms: Iterable[str] | None,
                         protocols: Iterable[str] | None,
                         version: NcclVersion | None = None) -> list[Execution]:
    """:func:`nccl_execution` across nodes: the same terms on NCCL's multi-node choice. A ring's
    steps cross the network ``2(nodes-1)`` times per loop (each hop hidden under the step's copy
    as on one node, the network hop instead of NVLink's); tree and NVLS-Tree keep the
    estimate's latency; the host term counts the GPUs of one node (one process per node under
    nccl-tests)."""
    from distlab.collectives.model.nccl import multinode as mn

    if network is None:
        raise ValueError(f"nodes={nodes} needs a network: one of {', '.join(mn.NETWORKS)}")
    net = mn.network(network)
    nodes = check_int("nodes", nodes, minimum=2)
    n = check_int("world_size", world_size, minimum=nodes, maximum=nodes * box.gpus)
    how = HARNESSES[check_choice("harness", harness, HARNESSES)]
    constants = shipped_constants() if constants is None else constants
    choices = mn.multinode_choices(box, n, sizes_bytes, nodes, net, algorithms=algorithms,
                                   protocols=protocols, version=version)
    graph = mn.multinode_graphs(box, nodes, net, version=version)
    ppn = n // nodes
    out = []
    for ch in choices:
        cand = next(c for c in ch.candidates
                    if (c.algorithm, c.protocol) == (ch.algorithm, ch.protocol))
        nvls = ch.algorithm == "nvls_tree"
        total = nvls_channels(box, multinode=True) if nvls else graph.runtime_channels
        nc, nt = launched_channels("nvls" if nvls else ch.algorithm, ch.protocol, ch.nbytes,
                                   total, world_size=n)
        chunk = chunk_bytes("tree" if nvls else ch.algorithm, ch.protocol, ch.nbytes, nc, n,
                            nodes=nodes)
        if nvls:
            chunk = mn.nvls_tree_chunk(ch.nbytes, nc, ppn, nodes)
        if ch.algorithm == "ring":
            steps = _steps("ring", ch.protocol, ch.nbytes, nc, n, chunk)
        else:  # a pipeline as deep as the tree (chain in the node, log2 nodes across)
            depth = 2 * (ppn - 1 + max(1, math.ceil(math.log2(nodes))))
            ops = nc * (ppn if nvls else 1)
            steps = depth + math.ceil(ch.nbytes / (ops * chunk)) - 1
        transfer = ch.nbytes / (1e3 * cand.algbw_gbps) * total / nc
        latency = cand.latency_us
        if ch.algorithm == "ring":
            latency = mn.ring_exposed_latency_us(box, ch.protocol, n, nodes, steps, transfer,
                                                 ch.nbytes, graph.runtime_channels)
        out.append(run_terms(ch.nbytes, n, ch.algorithm, ch.protocol, (nc, total, nt),
                             chunk, steps, how.host_us(constants, ppn, box), latency,
                             transfer, constants, ch.seconds * 1e6,
                             serial=how.waits_each_call))
    return out


def predict_nccl_measured(preset: Any, world_size: int, sizes_bytes: Sequence[int],
                          **kwargs: Any) -> list[float]:
    """Seconds of NCCL's allreduce as measured, one per size (:func:`nccl_execution`'s
    arguments); 0 for one rank (no communication)."""
    if check_int("world_size", world_size, minimum=1) == 1:
        gpu_box(preset)
        return [0.0 for _ in sizes_bytes]
    return [e.seconds for e in nccl_execution(preset, world_size, sizes_bytes, **kwargs)]


@cache
def shipped_constants() -> ExecutionConstants:
    """The constants distlab ships (:data:`SHIPPED_PATH`, written by
    :func:`distlab.collectives.model.nccl.fit_execution.write_shipped`)."""
    data = read_json(SHIPPED_PATH)
    c = data["constants"]
    return ExecutionConstants(*(float(c[k]) for k in CONSTANT_NAMES),
                              calibrated_on=tuple(data["calibrated_on"]))


def exposed_steps(steps: int) -> int:
    """Steps whose flag wait is not hidden: a connection holds ``NCCL_STEPS`` steps in flight,
    so once a channel's pipeline is full each wait overlaps the copies already in flight; only
    the first ``NCCL_STEPS`` (the pipeline fill) are exposed."""
    return min(steps, NCCL_STEPS)


def launched_channels(algorithm: str, protocol: str, nbytes: int, channels: int, *,
                      world_size: int = 1) -> tuple[int, int]:
    """Channels and threads per channel NCCL launches (``src/enqueue.cc`` ``topoGetAlgoInfo``):
    NVLS keeps its ``nvlsChannels``; ring and tree drop a channel while
    ``nbytes < nc * nt * threadThreshold``, then halve the threads (multiples of 128) while it
    still holds. A ring's LL threshold is multiplied by the ranks (``src/graph/tuning.cc``:
    ``threadThresholds[RING][LL] *= nRanks``). Returns ``(nc, nt)`` before the extra sync warps
    Simple adds."""
    nt = MAX_THREADS[protocol]
    if algorithm == "nvls":
        return channels, nt
    nc, threshold = channels, THREAD_THRESHOLD[protocol]
    if (algorithm, protocol) == ("ring", "LL"):
        threshold *= world_size
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    while nbytes < nc * nt * threshold and nt % 128 == 0:
        nt //= 2
    return nc, nt


def chunk_bytes(algorithm: str, protocol: str, nbytes: int, channels: int, n: int, *,
                nodes: int = 1) -> int:
    """Data bytes per step chunk (``src/enqueue.cc`` ``calcCollChunking``): the protocol's
    buffer / ``NCCL_STEPS`` times ``ALLREDUCE_CHUNKSTEPS`` for a Simple ring; LL halves it (a
    flag per data word), LL128 keeps 15 of every 16 words; NVLS caps it at ``nvlsChunkSize``
    and drops to 64, 32 and 16 KiB while ``nbytes`` is under 64, 8 and 2 chunks per concurrent
    operation (``channels * nHeads``, one head per GPU of the node); a tree's LL128 chunk halves
    (down to 128 KiB, then 32 KiB) while a channel's share is under ``64`` (then ``16``) chunks
    per ``(1 + log2(nodes) + 0.1 * ppn) / ppn`` (``n`` GPUs over ``nodes`` nodes)."""
    step = BUFFER_BYTES[protocol] // NCCL_STEPS
    chunk = step * (ALLREDUCE_CHUNKSTEPS if (protocol, algorithm) == ("Simple", "ring") else 1)
    if protocol == "LL":
        chunk //= 2
    elif protocol == "LL128":
        chunk = chunk // LL128_LINE_ELEMS * (LL128_LINE_ELEMS - 1)
    if (algorithm, protocol) == ("tree", "LL128"):
        ppn = n / nodes
        depth = 1 + int(math.log2(nodes)) + 0.1 * ppn
        while nbytes // (channels * chunk) < depth * 64 / ppn and chunk > 131072:
            chunk //= 2
        while nbytes // (channels * chunk) < depth * 16 / ppn and chunk > 32768:
            chunk //= 2
    if algorithm == "nvls":
        chunk = min(chunk, NVLS_CHUNK_BYTES)
        ops = channels * n
        for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
            if nbytes < factor * ops * chunk and chunk > floor:
                chunk = floor
    return chunk


def _steps(algorithm: str, protocol: str, nbytes: int, nc: int, n: int, chunk: int) -> int:
    """Pipeline steps on one channel's critical path (see the module doc)."""
    if algorithm == "nvls":
        ops = nc * n  # concurrent operations: channels x NVLS heads (one per GPU on a node)
        return math.ceil(nbytes / (ops * chunk))
    if algorithm == "tree":
        return 2 * (n - 1) + math.ceil(nbytes / (nc * chunk)) - 1
    loops = math.ceil(nbytes / (nc * n * chunk))
    slices = ALLREDUCE_CHUNKSTEPS // ALLREDUCE_SLICESTEPS if protocol == "Simple" else 1
    return 2 * (n - 1) * loops * slices

