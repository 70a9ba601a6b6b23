"""The NCCL model (on AMD GPUs the RCCL model) beside every collective kernel of a user's trace.

For each rank's call of each matched collective (:mod:`distlab.trace.collectives`) the kernel's
time (microseconds) is split into *waiting for the last peer* (the last rank's kernel start minus
this rank's, capped at the kernel) and *moving data* (the rest). Where the trace states the
message (collective, ``In msg nelems`` / ``Out msg nelems``, ``dtype``, ``Group size``: this
rank's own or a matched rank's, :attr:`KernelPrice.size_source` says which) and the GPU is one of
the NCCL model's boxes, the moving-data time stands beside the model's time for that collective
and size, with NCCL's algorithm and protocol, and the error ``(measured - model) / model``
(:func:`distlab.vocabulary.error_pct`'s sign: positive, the run was slower than the model).

What prices each collective (``nbytes``: NCCL's ``nBytes``, bytes; one node of the box):

- ``all_reduce``: :func:`~distlab.nccl.execution.nccl_execution` (the time of
  the execution NCCL chooses, ``harness="torch"``; the same number as
  ``predict_builtin(box, n, [nbytes], nccl_model="measured")``), at the trace's NCCL release;
- ``all_gather``, ``reduce_scatter``, ``broadcast``:
  :func:`~distlab.nccl.family.nccl_collective` (NCCL 2.28's tuning; a trace of
  another release says so in its note);
- ``reduce``: as a broadcast of the same bytes (NCCL's tuner gives reduce and broadcast the same
  ring steps and latency; the reduction's arithmetic is not modelled; the note says so);
- ``all_to_all`` (NCCL runs it as grouped sends and receives to every peer, a ``SendRecv``
  kernel; ``nbytes``: what each rank sends in all, e.g. the ``Input Dims`` of its
  ``nccl:all_to_all`` span): NCCL's all-to-all through the collective-library interface,
  ``NCCL.times(..., collective="all_to_all")`` (:mod:`distlab.nccl.library`; algorithm
  ``"p2p"``, NCCL's p2p protocol); a
  group larger than the box spans ``group / box GPUs`` nodes joined by the box's usual network
  (:data:`ALLTOALL_NETWORKS`, its NIC rate per GPU; the trace states none, the note says so);
- ``send``, ``recv``, ``sendrecv`` (NCCL's ``SendRecv`` kernel): one operation of ``nbytes``
  over NVLink, :func:`distlab.nccl.alltoall.p2p_time` (the peer is not in the trace).

On AMD GPUs (torch's ``nccl`` backend is RCCL there, which keeps NCCL's kernel names, adds
MSCCL's ``mscclKernel_...`` and writes its own version in ``nccl_version``), GPU names map to
the RCCL model by :data:`RCCL_PATTERNS` (``MI300X``, ``MI325X`` -> gfx942, ``MI350X``,
``MI355X`` -> gfx950; another AMD GPU says it is none of the RCCL model's):

- ``all_reduce`` over one whole 8-GPU node (a group of 8):
  :func:`distlab.rccl.rccl_allreduce_times` ``(1, [nbytes], release=..., arch=...)`` (gfx950 at
  the gfx942 fit's xGMI rates scaled by the links' speeds, said in the note), at the trace's RCCL
  release as :func:`~distlab.rccl.resolve_release` reads it (none stated: its default; the note
  says which release's tables priced it), the algorithm and protocol RCCL chooses (MSCCL's
  ``allpairs`` up to 16-20 MiB); an RCCL kernel (``nccl...``) where the model would run MSCCL
  says MSCCL did not run, so it is priced with MSCCL off (:data:`RCCL_NOT_MSCCL`);
- every other collective is not priced (:data:`RCCL_ALL_REDUCE_ONLY`), nor a group of 2-7
  ranks (the model is of whole nodes), a group beyond 8 (the network is not in the trace), the
  sizes the RCCL model does not price (its own reason).

gloo's calls on a CPU trace (``library`` ``"gloo"``), where every rank of the group has its
trace here (ranks of one job on one host), are priced on the loopback calibration shipped with
distlab (:func:`~distlab.collectives.model.choice.shipped_calibration`, gloo over loopback on a
2-core VM; :data:`GLOO_NOTE` says so on every such row): ``all_reduce`` as gloo's own ring
(:func:`~distlab.collectives.model.predict.predict_builtin` ``"loopback"``), ``all_gather`` and
``reduce_scatter`` as distlab's ring plan of the call, ``broadcast`` as its binomial tree. gloo's
``send`` / ``recv`` are not priced: torch ends their spans when the program waits on them
(:data:`GLOO_P2P_WHY`), so a span's length is the program's order, not a transfer.

Otherwise one line says why: gloo with peers' traces absent or a collective the gloo model
does not price, no GPU name, a GPU of no box, a collective the model has no
price for (gather, scatter, an expert-parallel library's own dispatch/combine), no message size
on any rank, no group size, a group of one, a group larger than the box (the network is not in
the trace).

NVIDIA GPU names map to boxes by :data:`BOX_PATTERNS` (a list a user extends): ``A100`` -> the
A100 SXM box, ``H100`` -> the H100 SXM box, ``H200``, ``B200``, ``RTX PRO 6000`` -> the PCIe box.
Only ranks whose traces are given can be waited for: where a peer of the group has no trace
here, the wait is unknown (``wait_us`` and ``transfer_us`` are None, not 0), the whole kernel
stands beside the model (``measured_us``, ``measured`` says which) and the note says so.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from distlab.collectives.algorithms.registry import build_plan
from distlab.collectives.model.choice import schedule_seconds, shipped_calibration
from distlab.collectives.model.predict import predict_builtin
from distlab.nccl.alltoall import fabric, p2p_time
from distlab.nccl.boxes import GPU_BOXES
from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.nccl.library import NCCL
from distlab.nccl.multinode import NETWORKS
from distlab.nccl.versions import (
    DEFAULT_NCCL_VERSION,
    NcclReleaseWarning,
    release_key,
)
from distlab.rccl import rccl_allreduce_times, resolve_release
from distlab.rccl.execution import ONE_NODE_ARCHS, one_node_note
from distlab.rccl.tables import GPU_ARCHS
from distlab.rccl.tuning import GPUS_PER_NODE as RCCL_NODE_GPUS
from distlab.trace.collectives import P2P, Collectives, RankCall
from distlab.vocabulary import collective_name, dtype_bytes, error_pct

__all__ = ["ALLTOALL_NETWORKS", "BOX_PATTERNS", "GLOO_NOTE", "GLOO_P2P_WHY", "GLOO_PRICED",
           "P2P_LL_THRESHOLD_BYTES",
           "PEERS_ABSENT", "PRICED", "RCCL_ALL_REDUCE_ONLY", "RCCL_ARCHS_PRICED",
           "RCCL_NOT_MSCCL", "RCCL_PATTERNS", "KernelPrice",
           "box_for_gpu", "collective_library", "price_collectives", "rccl_arch_for_gpu"]

BOX_PATTERNS: list[tuple[str, str]] = [(r".*A100", "a100_sxm8"), (r".*H100", "h100_sxm8"),
                                       (r".*H200", "h200_sxm8"), (r".*B200", "b200_sxm8"),
                                       (r".*RTX PRO 6000", "pcie5_8")]
"""(regex on ``deviceProperties[0].name``, key of GPU_BOXES), first match wins."""

RCCL_PATTERNS: list[tuple[str, str]] = [
    *((rf".*\b{gpu}\b", arch) for gpu, arch in GPU_ARCHS.items()),
    (r".*\(gfx94x\)", "gfx942"), (r".*\(gfx95x\)", "gfx950")]
"""(regex on the trace's GPU name, AMD GPU architecture), first match wins: the GPUs of
:data:`distlab.rccl.tables.GPU_ARCHS` whose collectives the RCCL model is asked about
(``AMD Instinct MI300X``, ``... MI300X VF``,
``AMD Instinct MI325X``, and HIP's generic name with compute 9.4, ``AMD Radeon Graphics
(gfx94x)``: :func:`distlab.trace.torch_trace.gpu_name`; MI350X / MI355X and 9.5, ``(gfx95x)``:
gfx950)."""
RCCL_ARCHS_PRICED: tuple[str, ...] = ONE_NODE_ARCHS
"""The architectures whose one-node all_reduce :mod:`distlab.rccl` prices (what a trace holds):
:data:`distlab.rccl.execution.ONE_NODE_ARCHS`, gfx942 (MI300X, MI325X) as fitted and gfx950
(MI350X, MI355X: RCCL 2.26.6's table 6) at the gfx942 fit's xGMI rates scaled by the links'
speeds (:func:`distlab.rccl.execution.one_node_note`, said in each kernel's note)."""
_AMD_GPU = re.compile(r".*\b(AMD|Instinct|Radeon)\b")

ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALL_TO_ALL = (
    collective_name(c) for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                 "reduce", "all_to_all"))
FAMILY = (ALL_GATHER, REDUCE_SCATTER, BROADCAST)
PRICED: tuple[str, ...] = (ALL_REDUCE, *FAMILY, REDUCE, ALL_TO_ALL, *P2P)
"""The collectives priced (module docstring); the others are named, not priced."""

P2P_LL_THRESHOLD_BYTES = 16384
"""NCCL's ``NCCL_P2P_LL_THRESHOLD`` default (``src/enqueue.cc``), bytes: a point-to-point
transfer up to this size (per channel) runs the LL protocol, a larger one Simple."""

PEERS_ABSENT = ("peers' traces absent: the wait for them is unknown, so the whole kernel stands "
                "beside the model")
"""The note of a kernel whose group has ranks without a trace here."""
REDUCE_AS_BROADCAST = ("reduce priced as a broadcast of the same bytes (NCCL's tuner gives the "
                       "two the same ring steps and latency); the reduction is not modelled")
P2P_NOTE = ("send/recv priced as one operation of NCCL's all-to-all model over NVLink "
            "(distlab.nccl.alltoall.p2p_time): the peer is not in the trace")
RCCL_ALL_REDUCE_ONLY = "the RCCL model prices all_reduce only"
"""The end of the why-line of any other collective on an AMD GPU."""
RCCL_NOT_MSCCL = ("an RCCL kernel, not MSCCL's, where the RCCL model would run MSCCL: "
                  "priced with MSCCL off")
"""The note of an ``nccl...`` kernel at a size the model gives to MSCCL (MSCCL disabled, or a
call it does not take)."""
ALL_TO_ALL_NOTE = ("all_to_all priced as NCCL runs it, grouped send/recv to the n-1 peers "
                   "(distlab.nccl.alltoall, calibrated on published alltoall_perf tables)")
ALLTOALL_NETWORKS: dict[str, str] = {"a100_sxm8": "ib_hdr200x8", "h100_sxm8": "ib_ndr400x8",
                                     "h200_sxm8": "ib_ndr400x8", "b200_sxm8": "ib_ndr400x8"}
"""The network an all-to-all of a group larger than its box is priced over (the trace states
none): the box's usual InfiniBand rails, one port per GPU (DGX A100: HDR 200 Gb/s; DGX H100,
H200, B200: NDR 400 Gb/s)."""


def box_for_gpu(gpu: str | None) -> str | None:
    """The NCCL model's box for a GPU name, or None."""
    if not gpu:
        return None
    for rx, key in BOX_PATTERNS:
        if re.match(rx, gpu) and key in GPU_BOXES:
            return key
    return None


def rccl_arch_for_gpu(gpu: str | None) -> str | None:
    """The AMD architecture (``"gfx942"``, ``"gfx950"``) of a GPU name by
    :data:`RCCL_PATTERNS`, or None."""
    if not gpu:
        return None
    return next((arch for rx, arch in RCCL_PATTERNS if re.match(rx, gpu)), None)


def collective_library(gpu: str | None) -> str:
    """``"RCCL"`` for an AMD GPU (torch's ``nccl`` backend is RCCL there), else ``"NCCL"``."""
    return "RCCL" if gpu and (rccl_arch_for_gpu(gpu) or _AMD_GPU.match(gpu)) else "NCCL"


@dataclass
class KernelPrice:
    """One rank's collective kernel beside the model (microseconds); ``why`` when not priced.
    ``wait_us`` and ``transfer_us`` are None where the wait is unknown (a peer's trace is
    absent). ``nbytes``: NCCL's ``nBytes``, bytes; ``size_source``: where the size came from
    (:attr:`distlab.trace.collectives.RankCall.size_source`); ``algorithm`` / ``protocol``:
    NCCL's (on an AMD GPU RCCL's) choice for that size in the model (``"p2p"`` for
    point-to-point), None when not priced."""

    rank: int
    group: str
    seq: int
    step: int | None
    collective: str | None
    name: str
    nbytes: int | None
    group_size: int | None
    kernel_us: float
    wait_us: float | None
    transfer_us: float | None
    peers_seen: int
    model_us: float | None
    why: str | None
    note: str | None = None
    algorithm: str | None = None
    protocol: str | None = None
    size_source: str = "none"
    library: str = "?"

    @property
    def measured(self) -> str:
        """What :attr:`measured_us` is: ``"transfer"`` (after the last peer arrived) or
        ``"kernel (wait unknown)"``."""
        return "transfer" if self.transfer_us is not None else "kernel (wait unknown)"

    @property
    def measured_us(self) -> float:
        """The time beside the model: the transfer where the wait is known, else the kernel."""
        return self.transfer_us if self.transfer_us is not None else self.kernel_us

    @property
    def error_percent(self) -> float | None:
        """:func:`distlab.vocabulary.error_pct` of :attr:`measured_us` against the model,
        percent, or None (not priced)."""
        if self.model_us is None or self.model_us <= 0:
            return None
        return error_pct(self.measured_us, self.model_us)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["measured"], d["measured_us"] = self.measured, self.measured_us
        d["error_pct"] = self.error_percent
        return d


@dataclass(frozen=True)
class _Model:
    """One price: microseconds, NCCL's algorithm and protocol, and a note (or None)."""

    us: float
    algorithm: str
    protocol: str
    note: str | None



def _family_note(nccl_version: str | None) -> str | None:
    """The note of a collective priced with NCCL 2.28's tuning when the trace names another."""
    try:
        other = nccl_version is not None and release_key(nccl_version) != \
            release_key(DEFAULT_NCCL_VERSION)
    except ValueError:
        other = True
    return (f"all_gather/reduce_scatter/broadcast: the model holds NCCL {DEFAULT_NCCL_VERSION}'s "
            f"tuning only; NCCL {nccl_version} priced as {DEFAULT_NCCL_VERSION}") if other else None


def _model(box: str, gpu: str, collective: str, n: int, nbytes: int,
           nccl_version: str | None) -> _Model:
    """The model's price of one ``collective`` of ``nbytes`` bytes on ``n`` GPUs of ``box``
    (one of :data:`PRICED`; module docstring)."""
    if collective == ALL_REDUCE:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", NcclReleaseWarning)
            e = nccl_execution(box, n, [nbytes], harness="torch", nccl_version=nccl_version)[0]
        notes = [str(w.message) for w in said if issubclass(w.category, NcclReleaseWarning)]
        return _Model(e.seconds * 1e6, e.algorithm, e.protocol, notes[0] if notes else None)
    if collective in FAMILY or collective == REDUCE:
        run = nccl_collective(box, n, [nbytes], BROADCAST if collective == REDUCE
                              else collective)[0]
        notes = [x for x in (REDUCE_AS_BROADCAST if collective == REDUCE else None,
                             _family_note(nccl_version)) if x]
        return _Model(run.seconds * 1e6, run.algorithm, run.protocol, "; ".join(notes) or None)
    box_gpus = GPU_BOXES[box].gpus
    if collective == ALL_TO_ALL:
        nodes = 1 if n <= box_gpus else n // box_gpus  # _why_not_size: a whole number of boxes
        note, network = ALL_TO_ALL_NOTE, None
        if nodes > 1:
            net = NETWORKS[ALLTOALL_NETWORKS[box]]
            network = net.key
            note += (f"; {n} ranks span {nodes} nodes of {box}: the trace states no network, "
                     f"priced over {net.key} ({net.name}), {net.gbps_per_gpu(box_gpus):g} GB/s "
                     "of NIC per GPU")
        run = NCCL.times(box, n, [nbytes], collective=ALL_TO_ALL, nodes=nodes,
                         network=network)[0]
        return _Model(run.seconds * 1e6, run.choice.algorithm, run.choice.protocol, note)
    one = p2p_time(fabric(box, box_gpus), nbytes, cross_node=False)
    return _Model(one.seconds * 1e6, "p2p", one.layout.protocol, P2P_NOTE)


GLOO_PLANS = {ALL_GATHER: "ring", REDUCE_SCATTER: "ring", BROADCAST: "binomial"}
"""gloo collectives priced as the cost of one of distlab's plans of the same call."""
GLOO_PRICED: tuple[str, ...] = (ALL_REDUCE, *GLOO_PLANS)
GLOO_P2P_WHY = "gloo send/recv: a span ends when the program waits on it, not when its bytes arrive"
GLOO_NOTE = ("gloo priced on distlab's shipped loopback calibration (a 2-core VM): another "
             "host's gloo will differ")


def _gloo_model(collective: str, n: int, nbytes: int, itemsize: int) -> _Model:
    """The gloo model's price of one call (see the module docstring)."""
    if collective == ALL_REDUCE:
        seconds = predict_builtin("loopback", n, [nbytes], itemsize=itemsize)[0]
        return _Model(seconds * 1e6, "gloo ring", "tcp", GLOO_NOTE)
    algorithm = GLOO_PLANS[collective]
    plan = build_plan(collective, algorithm, n, nbytes // itemsize)
    return _Model(schedule_seconds(shipped_calibration(), plan, itemsize) * 1e6,
                  f"{algorithm} plan", "tcp", GLOO_NOTE)


def _why_not_gloo(c: RankCall, known: bool) -> str | None:
    """Why a gloo call is not priced, or None."""
    if c.collective in P2P:
        return GLOO_P2P_WHY
    if c.collective not in GLOO_PRICED:
        return (f"gloo {c.collective or 'call of no named collective'}: the gloo model prices "
                f"{', '.join(GLOO_PRICED)}")
    if c.nbytes is None or not c.group_size:
        return "gloo call with no size or group size (record with record_shapes=True)"
    if not known:
        return ("gloo with peers' traces absent: the loopback model prices a group whose ranks' "
                "traces are all here")
    if c.group_size < 2 or c.nbytes == 0:
        return "nothing moves (a group of 1 rank, or 0 bytes)"
    if c.collective in GLOO_PLANS and (c.nbytes // (dtype_bytes(c.dtype) or 1)) % c.group_size:
        return "gloo call whose elements do not split over the group: not priced"
    return None


def _why_not(c: RankCall, gpu: str | None, box: str | None) -> str | None:
    """The one line why ``c`` (an NCCL-family call: gloo's ask :func:`_why_not_gloo`) is not
    priced, or None (it can be)."""
    if gpu is None:
        return "GPU not stated in the trace (no deviceProperties): no box to price on"
    if box is None:
        return f"GPU {gpu!r} is none of the NCCL model's boxes ({', '.join(GPU_BOXES)})"
    if c.collective is None:
        if c.library.startswith("NCCL"):
            return ("NCCL kernel of no named collective (no 'Collective name' arg, a generic "
                    "kernel name): nothing to price")
        return (f"{c.library} kernels: the library's own transfers, not an NCCL collective: the "
                "NCCL model does not price them")
    if c.collective not in PRICED:
        return f"collective {c.collective}: the NCCL model has no price for it"
    return _why_not_size(c, GPU_BOXES[box].gpus, box)


def _why_not_size(c: RankCall, node_gpus: int, node: str, whole_node: bool = False
                  ) -> str | None:
    """Why a collective the model prices is not priced for its size or group (one node of
    ``node_gpus`` GPUs named ``node``; ``whole_node``: only a group of the whole node), or
    None."""
    if c.size_note:
        return c.size_note
    if c.nbytes is None:
        return ("message size unknown on every rank (no In/Out msg nelems and dtype in this "
                "rank's trace or a matched rank's; record with record_shapes=True)")
    if not c.group_size:
        return "group size unknown"
    if c.group_size < 2:
        return "group of 1 rank: nothing moves between GPUs"
    if c.group_size > node_gpus and not (
            c.collective == ALL_TO_ALL and node in ALLTOALL_NETWORKS
            and c.group_size % node_gpus == 0):
        return (f"group of {c.group_size} ranks spans nodes of {node}: the network is not "
                "in the trace")
    if whole_node and c.group_size < node_gpus:
        return (f"group of {c.group_size} ranks: the RCCL model prices an all_reduce over a "
                f"whole {node_gpus}-GPU node only")
    if c.nbytes == 0:
        return "0 bytes: nothing moves"
    return None


def _why_not_rccl(c: RankCall, gpu: str, arch: str | None) -> str | None:
    """The one line why ``c`` on an AMD GPU is not priced by the RCCL model, or None (it can be;
    the model may still decline the size: :func:`_rccl_model`)."""
    if arch is None:
        return (f"GPU {gpu!r} is none of the RCCL model's GPUs (MI300X, MI325X: gfx942; "
                "MI350X, MI355X: gfx950)")
    if arch not in RCCL_ARCHS_PRICED:
        return (f"GPU {gpu!r} is {arch}: the RCCL model does not time {arch}'s one-node "
                "all_reduce (python -m distlab.rccl --boxes)")
    if c.collective is None:
        if c.library.startswith("NCCL"):
            return ("RCCL kernel of no named collective (no 'Collective name' arg, a generic "
                    "kernel name): nothing to price")
        return (f"{c.library} kernels of no named collective: the RCCL model does not price "
                "them")
    if c.collective != ALL_REDUCE:
        return f"collective {c.collective}: {RCCL_ALL_REDUCE_ONLY}"
    return _why_not_size(c, RCCL_NODE_GPUS, f"{RCCL_NODE_GPUS} x {arch}", whole_node=True)


def _rccl_dtype(dtype: str | None) -> str:
    """A trace's dtype (``BFloat16``, ``c10::BFloat16``) as :mod:`distlab.rccl` reads it."""
    return str(dtype or "float32").lower().removeprefix("torch.").removeprefix("c10::")


def _rccl_model(nbytes: int, dtype: str, version: str | None, msccl_kernel: bool | None,
                arch: str = "gfx942") -> _Model | str:
    """The RCCL model's price of an all_reduce of ``nbytes`` over one 8-GPU ``arch`` node at the
    trace's RCCL ``version``, or the one line why it has none. ``msccl_kernel``: the kernel is
    MSCCL's (True), RCCL's own (False: MSCCL did not run) or unknown (None)."""
    try:
        resolved = resolve_release(version, arch)
        said = (resolved.note or None) if version is not None else \
            f"RCCL release not stated in the trace: priced as {resolved.tables.release}"
    except ValueError:
        resolved = resolve_release(None, arch)
        said = f"RCCL release {version!r} not read as one: priced as {resolved.tables.release}"
    release = resolved.tables.release
    (t,), _ = rccl_allreduce_times(1, [nbytes], release=release, dtype=dtype, arch=arch)
    notes = [f"RCCL model (distlab.rccl): RCCL {release}'s {arch} tables", said,
             one_node_note(arch)]
    if t.choice.path == "msccl" and msccl_kernel is False:
        (t,), _ = rccl_allreduce_times(1, [nbytes], release=release, dtype=dtype, msccl=False,
                                       arch=arch)
        notes.append(RCCL_NOT_MSCCL)
    elif t.choice.path != "msccl" and msccl_kernel:
        notes.append("an MSCCL kernel where the RCCL model runs no MSCCL: priced as the model "
                     "chooses")
    if t.seconds is None:
        return f"the RCCL model: {t.why}"
    return _Model(t.seconds * 1e6, t.choice.algorithm, t.choice.protocol,
                  "; ".join(n for n in notes if n))


def price_collectives(col: Collectives, gpus: dict[int, str | None],
                      nccl_versions: dict[int, str | None]) -> list[KernelPrice]:
    """Every rank's call of every collective beside the model (see the module docstring).

    Args:
        col: the run's matched calls (times in microseconds).
        gpus: rank -> GPU name (``RankTrace.gpu``); None for a CPU trace.
        nccl_versions: rank -> NCCL release from the trace, or None.
    """
    out: list[KernelPrice] = []
    cache: dict[tuple[Any, ...], _Model] = {}
    rccl_cache: dict[tuple[Any, ...], _Model | str] = {}
    for call in col.calls:
        last = call.last_start_us
        for r, c in call.calls.items():
            kernel = c.end_us - c.start_us
            seen = len(call.calls)
            known = seen > 1 and (not c.group_size or seen >= c.group_size)
            wait = min(max(0.0, last - c.start_us), kernel) if known else None
            transfer = kernel - wait if wait is not None else None
            note = None if known else PEERS_ABSENT
            gpu = gpus.get(r)
            box = box_for_gpu(gpu)
            model = None
            if c.library == "gloo":
                why = _why_not_gloo(c, known)
                if why is None:
                    assert c.collective is not None and c.nbytes is not None
                    itemsize = dtype_bytes(c.dtype) or 1
                    key = ("gloo", c.collective, c.group_size, c.nbytes, itemsize)
                    if key not in cache:
                        cache[key] = _gloo_model(c.collective, int(c.group_size or 0),
                                                 c.nbytes, itemsize)
                    model = cache[key]
                    note = "; ".join(x for x in (note, model.note) if x) or None
            elif gpu is not None and collective_library(gpu) == "RCCL":
                arch = rccl_arch_for_gpu(gpu)
                why = _why_not_rccl(c, gpu, arch)
                if why is None:
                    assert c.nbytes is not None and arch is not None
                    msccl = True if c.library == "MSCCL" else \
                        False if c.library.startswith("NCCL") else None
                    key = (c.nbytes, _rccl_dtype(c.dtype), nccl_versions.get(r), msccl, arch)
                    if key not in rccl_cache:
                        rccl_cache[key] = _rccl_model(*key)
                    priced = rccl_cache[key]
                    if isinstance(priced, str):
                        why = priced
                    else:
                        model = priced
                        note = "; ".join(x for x in (note, model.note) if x) or None
            else:
                why = _why_not(c, gpu, box)
            if why is None and model is None:
                assert box is not None and gpu is not None and c.collective is not None
                assert c.group_size is not None and c.nbytes is not None
                key = (box, c.collective, c.group_size, c.nbytes, nccl_versions.get(r))
                if key not in cache:
                    cache[key] = _model(box, gpu, c.collective, c.group_size, c.nbytes,
                                        nccl_versions.get(r))
                model = cache[key]
                note = "; ".join(x for x in (note, model.note) if x) or None
            out.append(KernelPrice(
                r, call.group, call.seq, c.step, c.collective, c.name, c.nbytes, c.group_size,
                kernel, wait, transfer, len(call.calls), None if model is None else model.us,
                why, note, None if model is None else model.algorithm,
                None if model is None else model.protocol, c.size_source, c.library))
    return out
