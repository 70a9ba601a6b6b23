"""NCCL's all-to-all (and a single send/recv) on GPU boxes: grouped sends and receives, laid out
as NCCL's source lays them out, timed with a few calibrated constants.

NCCL runs ``ncclAlltoAll`` (and torch's ``all_to_all_single``, and nccl-tests' ``alltoall_perf``)
as one group of ``n - 1`` sends and ``n - 1`` receives of ``S / n`` bytes each plus a local copy
(NVIDIA/nccl ``v2.28.9-1`` ``src/enqueue.cc`` ``taskAppend``: ``p2pTaskAppend`` per peer unless a
copy-engine collective is asked for). The layout below is read from that source, file beside
each constant:

- **p2p channels** (``src/graph/paths.cc`` ``ncclTopoComputeP2pChannels``): ``p2pnChannels =
  pow2Up(min(comm channels, MAXCHANNELS))`` where the comm's channels are twice the ring graph's
  (``src/graph/connect.cc`` ``ncclTopoPostset``); per peer ``pow2Up(2 * NVLinks)`` through
  NVSwitch, capped by ``p2pnChannels``; across nodes :data:`NET_CHANNELS_PER_PEER`, halved while
  ``channels * nRanks > 4 * p2pnChannels``.
- **channels per operation** (``src/enqueue.cc`` ``scheduleP2pTasksToPlan`` /
  ``addP2pToPlan``): ``nChannelsMin`` = the per-peer count halved while ``nChannelsMin * nRanks >
  p2pnChannels``; an operation of ``m`` bytes takes ``min(nChannelsMin, ceil(m / minPart))``
  channels, doubled while its part exceeds ``maxPart`` (``minPart = step / 8``, ``maxPart = step
  * 32`` on one node; ``step / 2`` and ``step`` across nodes), parts 4 KiB aligned.
- **protocol** (``src/enqueue.cc``): LL when ``m <= channels per peer * NCCL_P2P_LL_THRESHOLD``
  (16384), else Simple; p2p never runs LL128.
- **step** (``src/init.cc`` ``computeBuffSizes``): Simple moves ``NCCL_P2P_NVL_CHUNKSIZE`` (512
  KiB) per step inside an NVLink domain, ``NCCL_P2P_NET_CHUNKSIZE`` (128 KiB) across nodes, each
  at most ``NCCL_BUFFSIZE / NCCL_STEPS``; LL its buffer's step (``8*512*8*16 / 8`` = 64 KiB), half
  of it data.
- **batches** (``src/include/device.h`` ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` = 8): a channel runs
  at most 8 operations at once; the ``(n - 1) * channels`` operations spread over
  ``p2pnChannels`` channels run in ``ceil(ops per channel / 8)`` batches.
- **PXN** (``src/graph/paths.cc`` ``NCCL_PXN_DISABLE`` 0, ``src/graph/search.cc``
  ``NCCL_P2P_PXN_LEVEL`` 2): a message to a GPU on another node leaves through the NIC of the
  local GPU on the peer's rail, reached over NVLink; every GPU's NIC carries the same share, and
  NVLink also carries the ``(g - 1) / g`` of the remote bytes forwarded to another local GPU.

The chunk sizes and the LL threshold are the same from NCCL 2.18.3 to 2.30.7 (read at tags
v2.18.3-1, v2.21.5-1, v2.23.4-1, v2.26.2-1, v2.27.3-1, v2.30.7-1), so the model takes no release;
the network peers' channel rule is 2.21-2.28's (2.18 used a flat 2, 2.30 counts channels by NIC
bandwidth).

Time of one call, microseconds (:func:`alltoall_times`): ``base + bytes over the bottleneck /
(efficiency * link) + steps * batches * step_us``, per protocol, where the bytes over NVLink are
those leaving the GPU (``S (n - 1) / n``, plus PXN's forwarding across nodes) against NCCL's own
NVLink figure (:attr:`~distlab.nccl.boxes.GpuBox.nccl_link_gbps`), and across nodes the bytes for
other nodes (``S (N - 1) / N``) against the slower of two: the GPU's NIC rate
(:attr:`Fabric.nic_gbps`, every NIC the GPU's channels reach) and its **proxy**. NCCL moves
network bytes one step at a time through one CPU proxy thread per GPU (``src/proxy.cc``
progresses every network send and receive of the rank; ``src/transport/net.cc`` posts one
``isend`` / ``irecv`` per step of ``NCCL_P2P_NET_CHUNKSIZE`` bytes), so a proxy that spends
``net_proxy_us`` per step moves at most ``step bytes / net_proxy_us`` per direction, whatever the
NICs: a larger ``NCCL_P2P_NET_CHUNKSIZE`` (:attr:`Fabric.net_chunk_bytes`) raises that bound.
``base``, ``efficiency``, ``step_us`` and ``net_proxy_us`` (per protocol, inside a domain and
across nodes) are what no NCCL file states: :class:`AlltoallConstants`, calibrated on named
published tables (:mod:`distlab.evidence.nccl.alltoall_judged`) and shipped in
``alltoall_calibration.json``. Nothing here reads a published table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from distlab._checks import check_int
from distlab.nccl.boxes import BoxLike, GpuBox, box_graphs, gpu_box
from distlab.nccl.per_size import BUFFER_BYTES, MAX_CHANNELS, NCCL_STEPS
from distlab.report.jsonfile import read_json
from distlab.vocabulary import busbw_factor, collective_name, gb_per_s

__all__ = ["CALIBRATION_RESOURCE", "LL_BUFFER_BYTES", "LL_THRESHOLD_BYTES", "MAX_CHANNELS",
           "MAX_P2P_PER_BATCH", "NET_CHANNELS_PER_PEER", "NET_CHUNK_BYTES", "NVL_CHUNK_BYTES",
           "P2P_PROTOCOLS", "AlltoallConstants", "AlltoallLayout", "AlltoallRun", "Fabric",
           "alltoall_layout", "alltoall_times", "fabric", "p2p_time", "shipped_alltoall"]

# NVIDIA/nccl v2.28.9-1, the file beside each.
LL_THRESHOLD_BYTES = 16384
"""``NCCL_P2P_LL_THRESHOLD`` default (``src/enqueue.cc``): LL up to this many bytes per channel
of a peer."""
NVL_CHUNK_BYTES = 512 * 1024
"""``NCCL_P2P_NVL_CHUNKSIZE`` default (``src/init.cc``): a Simple step inside an NVLink domain."""
NET_CHUNK_BYTES = 128 * 1024
"""``NCCL_P2P_NET_CHUNKSIZE`` default (``src/init.cc``): a Simple step across nodes."""
DEFAULT_BUFFSIZE = BUFFER_BYTES["Simple"]
"""``DEFAULT_BUFFSIZE`` (``src/init.cc``): the Simple buffer; a p2p chunk is at most 1/8 of it
(NCCL's constants are defined once, in :mod:`distlab.nccl.per_size`)."""
LL_BUFFER_BYTES = BUFFER_BYTES["LL"]
"""``NCCL_LL_LINES_PER_THREAD * NCCL_LL_MAX_NTHREADS * NCCL_STEPS * 16`` (``src/init.cc``); one
LL step is 1/8 of it, half of which is data (each 16-byte line carries 8 data bytes)."""
MAX_P2P_PER_BATCH = 8
"""``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` (``src/include/device.h``)."""
NET_CHANNELS_PER_PEER = 2
"""``ncclTopoGetNchannels`` (``src/graph/paths.cc``): a peer on another node starts at 2
channels (``NCCL_NCHANNELS_PER_NET_PEER`` unset)."""
PART_ALIGN = 4 << 10
"""``ncclP2pPartBounds`` (``src/include/device.h``): parts are 4 KiB aligned."""
P2P_PROTOCOLS = ("LL", "Simple")
"""The protocols a p2p operation runs (no LL128)."""
CALIBRATION_RESOURCE = ("distlab.nccl", "alltoall_calibration.json")
"""``(package, file)`` of the shipped constants for :mod:`importlib.resources`."""


def _pow2_up(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


@dataclass(frozen=True)
class Fabric:
    """Where the ranks of one all-to-all sit: ``nodes`` NVLink domains (an 8-GPU box, or a
    multi-node NVLink rack that NCCL treats as one node) of ``gpus_per_node`` GPUs of ``box``,
    joined by ``nic_gbps`` GB/s of NIC per GPU (bytes per second / 1e9, per direction, all the
    ports the GPU's channels reach; unused on one node), with ``net_chunk_bytes`` the run's
    ``NCCL_P2P_NET_CHUNKSIZE`` (a Simple step across nodes, bytes)."""

    box: GpuBox
    nodes: int
    gpus_per_node: int
    nic_gbps: float = 0.0
    net_chunk_bytes: int = NET_CHUNK_BYTES

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def fabric(box: BoxLike, world_size: int, *, nodes: int = 1, nic_gbps: float = 0.0,
           net_chunk_bytes: int = NET_CHUNK_BYTES) -> Fabric:
    """A :class:`Fabric` checked at the boundary: ``world_size`` GPUs in ``[2, nodes *
    box.gpus]``, a multiple of ``nodes``; ``nic_gbps > 0`` when ``nodes > 1``;
    ``net_chunk_bytes`` (``NCCL_P2P_NET_CHUNKSIZE``) a multiple of 4 KiB in ``[4 KiB,
    NCCL_BUFFSIZE / NCCL_STEPS]`` (NCCL caps a step at its buffer's share)."""
    b = gpu_box(box)
    nodes = check_int("nodes", nodes, minimum=1)
    n = check_int("world_size", world_size, minimum=2, maximum=nodes * b.gpus)
    if n % nodes:
        raise ValueError(f"world_size must be a multiple of nodes={nodes}, got {n}")
    if nodes > 1 and not (isinstance(nic_gbps, (int, float)) and 0 < nic_gbps <= 1000):
        raise ValueError(f"nic_gbps must be in (0, 1000] GB/s across nodes, got {nic_gbps!r}")
    chunk = check_int("net_chunk_bytes", net_chunk_bytes, minimum=PART_ALIGN,
                      maximum=DEFAULT_BUFFSIZE // NCCL_STEPS)
    if chunk % PART_ALIGN:
        raise ValueError(f"net_chunk_bytes must be a multiple of {PART_ALIGN}, got {chunk}")
    return Fabric(b, nodes, n // nodes, float(nic_gbps), chunk)


@dataclass(frozen=True)
class AlltoallConstants:
    """What no NCCL file states, per protocol (keys of :data:`P2P_PROTOCOLS`), calibrated.

    Attributes:
        base_us: fixed time of one call inside an NVLink domain, us.
        efficiency: the share of NCCL's NVLink figure the bytes move at, in (0, 1].
        step_us: time per step of one channel's part and batch inside a domain, us.
        net_base_us, net_efficiency, net_step_us: the same across nodes, the efficiency
            against the GPU's NIC rate.
        net_proxy_us: across nodes, the proxy's time per step of network data (a step's
            send and its receive), us: the network moves at most ``step bytes /
            net_proxy_us`` per GPU (module doc).
        calibrated_on: the published tables they were fitted on.
    """

    base_us: dict[str, float]
    efficiency: dict[str, float]
    step_us: dict[str, float]
    net_base_us: dict[str, float]
    net_efficiency: dict[str, float]
    net_step_us: dict[str, float]
    net_proxy_us: dict[str, float]
    calibrated_on: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in ("base_us", "efficiency", "step_us", "net_base_us",
                                               "net_efficiency", "net_step_us",
                                               "net_proxy_us")} | {
            "calibrated_on": list(self.calibrated_on)}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> AlltoallConstants:
        def proto(key: str) -> dict[str, float]:
            v = d[key]
            if not isinstance(v, dict) or set(v) != set(P2P_PROTOCOLS):
                raise ValueError(f"{key} must map {P2P_PROTOCOLS} to numbers, got {v!r}")
            return {p: float(v[p]) for p in P2P_PROTOCOLS}
        on = d.get("calibrated_on", [])
        return cls(proto("base_us"), proto("efficiency"), proto("step_us"),
                   proto("net_base_us"), proto("net_efficiency"), proto("net_step_us"),
                   proto("net_proxy_us"), tuple(str(x) for x in on) if isinstance(on, list) else ())


@cache
def shipped_alltoall() -> AlltoallConstants:
    """The shipped constants (``alltoall_calibration.json``: ``constants`` and how they were
    fitted)."""
    package, name = CALIBRATION_RESOURCE
    path = resources.files(package).joinpath(name)
    with resources.as_file(path) as p:
        data = read_json(p)
    return AlltoallConstants.from_dict(data["constants"])


@dataclass(frozen=True)
class AlltoallLayout:
    """One call laid out as NCCL lays it out (module doc). Bytes, counts.

    Attributes:
        per_peer_bytes: ``m``, bytes to each peer (nccl-tests' ``count * eltsize``).
        protocol: ``"LL"`` or ``"Simple"``.
        p2p_channels: ``p2pnChannels``.
        channels_per_peer: NVLink peers' (across nodes: network peers') channel count.
        op_channels: channels one operation is split over.
        steps: steps of one channel's part.
        step_bytes: data bytes one step carries (LL: half its step; Simple: the chunk).
        batches: batches of up to 8 operations each channel runs in turn.
        nvl_bytes: bytes over the GPU's NVLink (out), PXN's forwarding included.
        net_bytes: bytes over the GPU's NIC (out); 0 on one node.
    """

    per_peer_bytes: int
    protocol: str
    p2p_channels: int
    channels_per_peer: int
    op_channels: int
    steps: int
    step_bytes: int
    batches: int
    nvl_bytes: int
    net_bytes: int


def _op_channels(m: int, cmin: int, cmax: int, step: int, multinode: bool) -> int:
    """``addP2pToPlan``: channels of one operation of ``m`` bytes."""
    min_part, max_part = (step // 2, step) if multinode else (step // 8, step * 32)
    nch = max(1, min(cmin, math.ceil(m / max(1, min_part))))
    while math.ceil(m / nch) > max_part and nch <= cmax // 2:
        nch *= 2
    return nch


def alltoall_layout(f: Fabric, nbytes: int, *, peers: int | None = None) -> AlltoallLayout:
    """The layout of one all-to-all of ``nbytes`` per rank on ``f`` (module doc); ``peers``:
    a single send/recv of ``nbytes`` to one peer instead (``peers=1``; ``nbytes`` is then the
    message)."""
    n, g, nodes = f.world_size, f.gpus_per_node, f.nodes
    ring = box_graphs(f.box, min(max(2, g), f.box.gpus))["ring"].n_channels
    p2p = _pow2_up(min(2 * ring, MAX_CHANNELS))
    nvl_peer = min(_pow2_up(2 * f.box.nvlinks) if f.box.fabric == "nvswitch" else 2, p2p)
    multinode = nodes > 1
    per_peer = nvl_peer
    if multinode:
        per_peer = NET_CHANNELS_PER_PEER
        while per_peer > 1 and per_peer * n > 4 * p2p:
            per_peer //= 2
    cmin = per_peer
    while cmin > 1 and cmin * n > p2p:
        cmin //= 2
    single = peers == 1
    m = nbytes if single else nbytes // n
    protocol = "LL" if m <= per_peer * LL_THRESHOLD_BYTES else "Simple"
    chunk = min(f.net_chunk_bytes if multinode else NVL_CHUNK_BYTES, DEFAULT_BUFFSIZE // NCCL_STEPS)
    step = LL_BUFFER_BYTES // NCCL_STEPS if protocol == "LL" else chunk
    data_step = step // 2 if protocol == "LL" else step
    nch = _op_channels(m, cmin, per_peer, step, multinode)
    part = math.ceil(math.ceil(m / nch) / PART_ALIGN) * PART_ALIGN if m else 0
    steps = math.ceil(part / data_step) if m else 0
    ops = 1 if single else n - 1
    batches = math.ceil(math.ceil(ops * nch / p2p) / MAX_P2P_PER_BATCH)
    if single:
        nvl, net = (0, m) if multinode else (m, 0)
    else:
        remote = m * (nodes - 1) * g
        local = m * (g - 1)
        nvl = local + (remote * (g - 1) // g if multinode else 0)  # PXN forwards to the rail GPU
        net = remote
    return AlltoallLayout(m, protocol, p2p, per_peer, nch, steps, data_step, batches, nvl, net)


@dataclass(frozen=True)
class AlltoallRun:
    """One all-to-all (or send/recv) as it runs: its layout and time.

    ``nbytes``: bytes each rank sends in all (nccl-tests' ``size``); ``seconds``: the call's
    time; :attr:`algbw_gbps` and :attr:`busbw_gbps` as nccl-tests defines them (GB/s)."""

    nbytes: int
    world_size: int
    layout: AlltoallLayout
    seconds: float
    bound: str
    collective: str = "all_to_all"

    @property
    def algbw_gbps(self) -> float:
        return gb_per_s(self.nbytes, self.seconds) if self.seconds > 0 else 0.0

    @property
    def busbw_gbps(self) -> float:
        factor = busbw_factor(self.collective, self.world_size) if \
            self.collective == "all_to_all" else 1.0
        return self.algbw_gbps * (factor or 0.0)


def _time_us(f: Fabric, lay: AlltoallLayout, c: AlltoallConstants) -> tuple[float, str]:
    """Microseconds of one laid-out call, and its bound (``"nvlink"`` or ``"network"``)."""
    p = lay.protocol
    nvl_us = lay.nvl_bytes / (c.efficiency[p] * f.box.nccl_link_gbps * 1e3)
    if lay.net_bytes == 0:
        return c.base_us[p] + nvl_us + lay.steps * lay.batches * c.step_us[p], "nvlink"
    net_us = max(lay.net_bytes / (c.net_efficiency[p] * f.nic_gbps * 1e3),
                 lay.net_bytes / lay.step_bytes * c.net_proxy_us[p])
    bound = "network" if net_us >= nvl_us else "nvlink"
    return (c.net_base_us[p] + max(net_us, nvl_us) + lay.steps * lay.batches * c.net_step_us[p],
            bound)


def alltoall_times(f: Fabric, sizes_bytes: Sequence[int],
                   constants: AlltoallConstants | None = None) -> list[AlltoallRun]:
    """NCCL's all-to-all of each size (bytes each rank sends in all, ints >= 0) on ``f``
    (:func:`fabric`), with ``constants`` (default :func:`shipped_alltoall`)."""
    c = shipped_alltoall() if constants is None else constants
    out = []
    for i, s in enumerate(sizes_bytes):
        s = check_int(f"sizes_bytes[{i}]", s, minimum=0)
        lay = alltoall_layout(f, s)
        us, bound = _time_us(f, lay, c) if s else (0.0, "none")
        out.append(AlltoallRun(s, f.world_size, lay, us * 1e-6, bound,
                               collective_name("all_to_all")))
    return out


def p2p_time(f: Fabric, nbytes: int, *, cross_node: bool,
             constants: AlltoallConstants | None = None) -> AlltoallRun:
    """One send/recv of ``nbytes`` between two GPUs of ``f``: on one node (NVLink) or across
    nodes (one NIC of ``f.nic_gbps``; ``ValueError`` without one), laid out and timed as one
    operation of an all-to-all."""
    c = shipped_alltoall() if constants is None else constants
    nbytes = check_int("nbytes", nbytes, minimum=0)
    if cross_node and not f.nic_gbps > 0:
        raise ValueError("cross_node=True needs a fabric with nic_gbps > 0 (a network), got "
                         f"nic_gbps={f.nic_gbps!r}")
    g = f if cross_node == (f.nodes > 1) else Fabric(
        f.box, 2 if cross_node else 1, 1 if cross_node else max(2, f.gpus_per_node),
        f.nic_gbps, f.net_chunk_bytes)
    lay = alltoall_layout(g, nbytes, peers=1)
    us, bound = _time_us(g, lay, c) if nbytes else (0.0, "none")
    return AlltoallRun(nbytes, 2, lay, us * 1e-6, bound, "sendrecv")
