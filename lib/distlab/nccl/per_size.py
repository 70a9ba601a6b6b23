"""One size of one NCCL collective as it runs: the pipeline every execution model shares.

NCCL's pick for a size (its estimate's cheapest algorithm and protocol, :class:`Pick`) goes
through the same steps whichever collective and however many nodes:

    pick -> channels launched -> chunk -> pipeline steps -> transfer -> latency -> Execution

:func:`run_size` is that pipeline, written once. What differs between the one-node allreduce
(:mod:`~distlab.nccl.execution`), the allreduce across nodes
(:mod:`~distlab.nccl.multinode`) and the other collectives
(:mod:`~distlab.nccl.family`) is how a size is laid out on the channels: each
gives a :class:`ChannelLayout` (its channel count, chunk, steps and a ring's exposed hop
latency), and
:func:`run_size` applies the shared terms (see the module doc of
:mod:`~distlab.nccl.execution`):

- ``transfer = nbytes / algbw * channels_total / channels_launched``;
- latency: the estimate's fixed term, but for a ring the layout's exposed hops;
- sync: the first ``NCCL_STEPS`` steps' wait (:func:`exposed_steps`) at the protocol's cost;
- host: the harness's term (:class:`HostTerm`), computed once per call.

The constants from NCCL's source (NVIDIA/nccl ``v2.28.9-1``, the file beside each) that these
rules read are defined here once; the calibrated ones are :class:`ExecutionConstants`, shipped as
``execution_calibration.json`` beside this module (read with :mod:`importlib.resources`).

Units: bytes, microseconds and GB/s (1e9 B/s), as NCCL's tables are; :attr:`Execution.seconds`
in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Protocol

from distlab.nccl.boxes import GpuBox, gpu_box
from distlab.nccl.tuning import Choice, busbw_gbps
from distlab.report.jsonfile import read_json

__all__ = ["ALLREDUCE_CHUNKSTEPS", "ALLREDUCE_SLICESTEPS", "BUFFER_BYTES", "CONSTANT_NAMES",
           "HARNESSES", "LL128_LINE_ELEMS", "MAX_CHANNELS", "MAX_THREADS", "NCCL_STEPS",
           "NVLS_CHANNELS_SM90", "NVLS_CHANNELS_SM100", "NVLS_CHANNELS_SM100_NVL",
           "NVLS_CHUNK_BYTES", "SHIPPED_RESOURCE", "THREAD_THRESHOLD", "TORCH_CALL_OVERHEAD_US",
           "ChannelLayout", "Channels", "Execution", "ExecutionConstants", "Harness", "HostTerm",
           "Pick",
           "RunTerms", "allreduce_steps", "chunk_bytes", "execution_of", "exposed_steps",
           "hidden_hop_latency_us", "launched_channels", "nvls_channels", "pick_of", "run_size",
           "shipped_constants"]


SHIPPED_RESOURCE = ("distlab.nccl", "execution_calibration.json")
"""The shipped constants, ``(package, file)`` for :mod:`importlib.resources` (JSON: the
constants, the sources fitted on, how to regenerate them)."""
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
"""``MAXCHANNELS`` (``src/include/device.h``, 2.26 on); ``src/graph/connect.cc``
``ncclTopoPostset`` doubles the search's ring channels (``nChannels = min(MAXCHANNELS,
nChannels*2)``). Older releases:
:attr:`~distlab.nccl.versions.NcclConstants.max_channels`."""
NVLS_CHANNELS_SM90 = 16
"""``src/transport/nvls.cc`` ``NVLS_NCHANNELS_SM90``: NVLS channels on Hopper."""
NVLS_CHANNELS_SM100 = 32
"""``NVLS_NCHANNELS_SM100``: NVLS channels on Blackwell across nodes."""
NVLS_CHANNELS_SM100_NVL = 24
"""``NVLS_NCHANNELS_SM100_NVL``: NVLS channels on Blackwell in one node or one multi-node NVLink
domain (``ncclNvlsInit``: "a reduced number of channels for single node/MNNVL domain")."""
NVLS_CHUNK_BYTES = 128 * 1024
"""``NCCL_NVLS_CHUNKSIZE`` default (``src/init.cc``): the NVLS chunk cap, and NVLS-Tree's
starting chunk (``src/enqueue.cc``)."""
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


def nvls_channels(box: GpuBox, *, multinode: bool = False) -> int:
    """The NVLS channels NCCL launches (``src/transport/nvls.cc`` ``ncclNvlsInit``, 2.28.9 to
    2.30.7): 16 on Hopper; on Blackwell 24 inside one NVLink domain, 32 across nodes."""
    if box.sm < 100:
        return NVLS_CHANNELS_SM90
    return NVLS_CHANNELS_SM100 if multinode else NVLS_CHANNELS_SM100_NVL


# --- the calibrated constants and the harness --------------------------------------------------

@dataclass(frozen=True)
class ExecutionConstants:
    """What no NCCL file states, calibrated (see the module doc of
    :mod:`~distlab.nccl.execution`), microseconds.

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


@cache
def shipped_constants() -> ExecutionConstants:
    """The constants distlab ships (:data:`SHIPPED_RESOURCE`, written by
    :func:`distlab.evidence.nccl.fit_execution.write_shipped` and copied into the
    package by whoever regenerates them)."""
    package, name = SHIPPED_RESOURCE
    data = read_json(resources.files(package).joinpath(name))
    c = data["constants"]
    values = {k: float(c[k]) for k in CONSTANT_NAMES}
    return ExecutionConstants(**values, calibrated_on=tuple(data["calibrated_on"]))


@dataclass(frozen=True)
class HostTerm:
    """The host's part of one call, the same for every size of it.

    Attributes:
        host_us: the host term, us (:meth:`Harness.host_us`).
        serial: the harness waits for every call, so host and GPU times add (else the slower of
            the two bounds back-to-back calls).
    """

    host_us: float
    serial: bool


@dataclass(frozen=True)
class Harness:
    """How the collectives are issued and timed.

    Attributes:
        key: short name.
        gpus_per_process: GPUs one host thread drives (and launches a kernel on) per collective.
        description: in words.
        call_overhead_us: the host's time per call, us, of a harness that waits for each call
            (None: back-to-back calls).
    """

    key: str
    gpus_per_process: int | None
    description: str
    call_overhead_us: float | None = None

    def gpus(self, world_size: int) -> int:
        """GPUs one host thread launches on for a collective over ``world_size`` GPUs of a node."""
        return world_size if self.gpus_per_process is None else self.gpus_per_process

    def host_gpus(self, box: GpuBox, world_size: int) -> int:
        """:meth:`gpus`, at most the GPUs one host holds (``box.gpus_per_host``: a GB200 NVL72's
        72 GPUs sit in trays of 4, each with its own host process)."""
        return min(self.gpus(world_size), box.gpus_per_host)

    @property
    def waits_each_call(self) -> bool:
        """True when every timed call starts on an idle GPU, so the host's time to launch it
        adds to the GPUs' time (``call_overhead_us`` is set); False for back-to-back calls."""
        return self.call_overhead_us is not None

    def host_us(self, constants: ExecutionConstants, gpus_of_node: int,
                box: GpuBox | str | None = None) -> float:
        """The host term, us: the stated overhead per call of a harness that waits for each
        call, else the calibrated enqueue time per GPU times the GPUs one thread drives (at most
        the GPUs of one of ``box``'s hosts; a box or its name)."""
        if self.call_overhead_us is not None:
            return self.call_overhead_us
        gpus = self.gpus(gpus_of_node) if box is None else self.host_gpus(gpu_box(box),
                                                                           gpus_of_node)
        return constants.host_us_per_gpu * gpus

    def term(self, constants: ExecutionConstants, gpus_of_node: int, box: GpuBox) -> HostTerm:
        """The :class:`HostTerm` of a call over ``gpus_of_node`` GPUs of each of ``box``'s nodes
        (:meth:`host_us` inside the model: ``box`` already resolved)."""
        if self.call_overhead_us is not None:
            return HostTerm(self.call_overhead_us, serial=True)
        return HostTerm(constants.host_us_per_gpu * self.host_gpus(box, gpus_of_node),
                        serial=False)


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


# --- what one size is ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Execution:
    """NCCL's collective of ``nbytes`` as it runs (see the module doc of
    :mod:`~distlab.nccl.execution` for every term).

    Attributes:
        nbytes, world_size: the call.
        algorithm, protocol: NCCL's choice (its estimate's cheapest pair).
        channels: channels launched (after the channel tuning); ``channels_total`` the
            communicator's.
        threads: threads per channel block.
        chunk_bytes: data bytes per step chunk.
        steps: pipeline steps of one channel.
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
        """nccl-tests' allreduce bus bandwidth of :attr:`seconds`, GB/s."""
        return busbw_gbps(self.nbytes, self.seconds, self.world_size)


@dataclass(frozen=True)
class Pick:
    """NCCL's pick for one size: the pair its estimate found cheapest, and its terms there.

    Attributes:
        nbytes: the size NCCL priced (``nBytes``), bytes.
        algorithm, protocol: the pair.
        latency_us: the estimate's fixed term of the pair, us.
        algbw_gbps: the algorithm bandwidth the transfer runs at, GB/s.
        estimate_us: NCCL's estimate of the pair, us (what it minimized).
    """

    nbytes: int
    algorithm: str
    protocol: str
    latency_us: float
    algbw_gbps: float
    estimate_us: float


def pick_of(choice: Choice, algbw_gbps: float | None = None) -> Pick:
    """The :class:`Pick` of an estimate's ``choice``: its chosen candidate's latency and
    bandwidth (``algbw_gbps`` instead of the candidate's where given)."""
    cand = next(c for c in choice.candidates
                if (c.algorithm, c.protocol) == (choice.algorithm, choice.protocol))
    return Pick(choice.nbytes, choice.algorithm, choice.protocol, cand.latency_us,
                cand.algbw_gbps if algbw_gbps is None else algbw_gbps, choice.seconds * 1e6)


@dataclass(frozen=True)
class Channels:
    """Channels of one call: ``launched`` (after the channel tuning) of the communicator's
    ``total``, ``threads`` per channel block."""

    launched: int
    total: int
    threads: int


@dataclass(frozen=True)
class RunTerms:
    """One size laid out on the GPUs, before the host and sync terms: what
    :func:`execution_of` turns into an :class:`Execution`.

    Attributes:
        pick: NCCL's pick.
        world_size: GPUs in all.
        channels: launched, total and threads.
        chunk_bytes: data bytes per step chunk.
        steps: pipeline steps of one channel.
        latency_us, transfer_us: the GPU terms, us.
    """

    pick: Pick
    world_size: int
    channels: Channels
    chunk_bytes: int
    steps: int
    latency_us: float
    transfer_us: float


class ChannelLayout(Protocol):
    """How one execution model lays a size out on the channels (one per model and call)."""

    def channels(self, pick: Pick) -> Channels:
        """The channels of the communicator and those launched for ``pick``."""
        ...

    def chunk_bytes(self, pick: Pick, launched: int) -> int:
        """Data bytes per step chunk on ``launched`` channels."""
        ...

    def steps(self, pick: Pick, launched: int, chunk: int) -> int:
        """Pipeline steps of one channel."""
        ...

    def ring_latency_us(self, pick: Pick, steps: int, transfer_us: float) -> float:
        """A ring's latency as it runs: the part of its hops the copies do not hide, us."""
        ...


def run_size(pick: Pick, layout: ChannelLayout, world_size: int, host: HostTerm,
             constants: ExecutionConstants) -> Execution:
    """The one per-size pipeline: ``pick`` laid out by ``layout`` (channels, chunk, steps),
    its transfer at the pick's bandwidth over the channels launched, its latency (a ring's as
    the layout exposes it, else the estimate's) and the host and sync terms."""
    ch = layout.channels(pick)
    chunk = layout.chunk_bytes(pick, ch.launched)
    steps = layout.steps(pick, ch.launched, chunk)
    transfer = pick.nbytes / (1e3 * pick.algbw_gbps) * ch.total / ch.launched
    latency = pick.latency_us
    if pick.algorithm == "ring":
        latency = layout.ring_latency_us(pick, steps, transfer)
    return execution_of(RunTerms(pick, world_size, ch, chunk, steps, latency, transfer), host,
                        constants)


def execution_of(terms: RunTerms, host: HostTerm, constants: ExecutionConstants) -> Execution:
    """An :class:`Execution` from its terms; the sync term is the exposed steps' wait
    (:func:`exposed_steps`) at the pick's step cost."""
    p = terms.pick
    return Execution(nbytes=p.nbytes, world_size=terms.world_size, algorithm=p.algorithm,
                     protocol=p.protocol, channels=terms.channels.launched,
                     channels_total=terms.channels.total, threads=terms.channels.threads,
                     chunk_bytes=terms.chunk_bytes, steps=terms.steps, host_us=host.host_us,
                     latency_us=terms.latency_us, transfer_us=terms.transfer_us,
                     sync_us=exposed_steps(terms.steps) * constants.step_us(p.algorithm,
                                                                            p.protocol),
                     estimate_us=p.estimate_us, serial=host.serial)


# --- NCCL's rules ---------------------------------------------------------------------------------

def hidden_hop_latency_us(base_us: float, hop_us: float, steps: int, transfer_us: float) -> float:
    """A ring's latency on one node as it runs: the base once and, per step, the part of the
    hop the step's copy does not hide: ``base + steps * max(0, hop - transfer / steps)``, us."""
    return base_us + steps * max(0.0, hop_us - transfer_us / steps)


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


def allreduce_steps(algorithm: str, protocol: str, nbytes: int, nc: int, n: int,
                    chunk: int) -> int:
    """Pipeline steps of an allreduce on one channel's critical path (the module doc of
    :mod:`~distlab.nccl.execution`): a ring's ``2(n-1)`` steps per loop, in
    slices for Simple; a chain ``2(n-1)`` deep, one step per chunk; NVLS one step per chunk of
    each concurrent operation."""
    if algorithm == "nvls":
        ops = nc * n  # concurrent operations: channels x NVLS heads (one per GPU on a node)
        return math.ceil(nbytes / (ops * chunk))
    if algorithm == "tree":
        return 2 * (n - 1) + math.ceil(nbytes / (nc * chunk)) - 1
    loops = math.ceil(nbytes / (nc * n * chunk))
    slices = ALLREDUCE_CHUNKSTEPS // ALLREDUCE_SLICESTEPS if protocol == "Simple" else 1
    return 2 * (n - 1) * loops * slices
