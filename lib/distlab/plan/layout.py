"""A parallel layout and the hardware it runs on, as the planner reads them.

:class:`Layout` is one way to train: data-parallel replicas (plain, or ZeRO 1/2/3 = FSDP's
full shard), tensor parallelism with or without sequence parallelism, pipeline stages with a
schedule and microbatches, context parallelism, the micro and global batch, activation
recompute and the precision of the model states. :class:`Hardware` is the GPUs: a
:class:`GpuKind` (:class:`distlab.gpus.Gpu`, from the one GPU registry: memory, peak dense
16-bit FLOP/s, its collective library and the box that library's model prices it in), how
many, how many per node, and the network between nodes.

Ranks are laid out as Megatron-LM lays them out by default (``tp`` innermost, then ``cp``,
``dp``, and ``pp`` outermost): :func:`group_span` says how many nodes a group of each kind
spans, which is what its collectives are priced for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from distlab._checks import check_bool, check_choice, check_int
from distlab.gpus import GPUS, Gpu, gpu_aliases, user_gpu
from distlab.pipeline_parallel.schedules.registry import schedule_name
from distlab.plan.libraries import library_of
from distlab.recompute import RECOMPUTE, RECOMPUTES, Recompute, recompute_policy

__all__ = ["ATTENTION_KERNELS", "COMPUTE_DTYPES", "DIMS", "GPU_KINDS", "PRECISIONS", "RECOMPUTE",
           "RECOMPUTE_LABELS", "GpuKind", "GroupSpan", "Hardware", "Layout", "check_layout_fits",
           "gpu_kind", "group_span", "hardware", "parse_layout", "user_gpu_kind"]

GiB = 2**30

RECOMPUTE_LABELS = {name: rc.label for name, rc in RECOMPUTES.items() if rc.label}
"""The short name of each recompute other than ``"none"`` in a layout's label
(:attr:`distlab.recompute.Recompute.label`); :data:`RECOMPUTE`, the names, is
:data:`distlab.recompute.RECOMPUTE`."""

PRECISIONS: dict[str, tuple[int, int, int]] = {
    "mixed": (2, 2, 12),
    "mixed-fp32-grads": (2, 4, 12),
    "fsdp-mixed": (4, 4, 8),
    "fp32": (4, 4, 8),
}
"""Bytes per parameter of ``(parameter, gradient, optimizer state)`` for Adam:

- ``"mixed"``: 16-bit parameters and gradients, fp32 master copy and two moments (ZeRO's
  ``2 + 2 + 12``; DeepSpeed), the master copy kept at every ZeRO stage (ZeRO 3 shards it with
  the rest);
- ``"mixed-fp32-grads"``: 16-bit parameters, fp32 gradients (accumulated in fp32, Megatron-LM's
  default ``main_grads``), fp32 master copy and moments (``2 + 4 + 12``);
- ``"fsdp-mixed"``: torch FSDP2 with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)``: fp32 sharded parameters and gradients and two fp32 moments
  (``4 + 4 + 8``), plus the 16-bit copy of each unit while it is gathered;
- ``"fp32"``: everything fp32 (``4 + 4 + 8``).
"""

ATTENTION_KERNELS = ("flash", "cudnn")
"""The causal attention kernel a layout runs: ``"flash"`` (FlashAttention-2, torch SDPA's
default on NVIDIA GPUs; the rate the planner's attention is fitted at) or ``"cudnn"`` (cuDNN's
fused attention, which Transformer Engine, and so Megatron-Core and NeMo, prefers on Hopper and
later): priced by :attr:`~distlab.plan.calibration.ComputeRate.kernel_speed`."""

COMPUTE_DTYPES = ("bf16", "fp8")
"""What the matrix products run in (the GPU's peak is its dense 16-bit one either way; the
calibration holds a rate per GPU and dtype)."""

DIMS = ("tp", "cp", "dp", "pp")
"""The layout's dimensions from innermost (neighbouring ranks) to outermost."""


GpuKind = Gpu
"""One GPU model: :class:`distlab.gpus.Gpu` (the one registry), under the planner's name."""

GPU_KINDS: dict[str, GpuKind] = {name: g for name, g in GPUS.items() if g.box}
"""GPU models the planner knows: every GPU of :data:`distlab.gpus.GPUS` whose collective
library's model holds its box (its own, or a stand-in: :attr:`distlab.gpus.Gpu.box_stand_in`);
short names (``"h100"``, ``"mi300x"``) resolve through :func:`gpu_kind`; a user's own GPU
through :func:`user_gpu_kind`."""


def gpu_kind(kind: GpuKind | str) -> GpuKind:
    """``kind`` itself, a key of :data:`GPU_KINDS`, or a short name (``"h100"``, any case)."""
    if isinstance(kind, GpuKind):
        return kind
    if isinstance(kind, str):
        key = gpu_aliases().get(kind.lower(), kind)
        if key in GPU_KINDS:
            return GPU_KINDS[key]
    aliases = [a for a, name in gpu_aliases().items() if name in GPU_KINDS]
    raise ValueError(f"gpu must be one of {', '.join(GPU_KINDS)} (or {', '.join(aliases)}); "
                     f"got {kind!r}")


def user_gpu_kind(spec: str | dict[str, object]) -> GpuKind:
    """A user's own GPU (:func:`distlab.gpus.user_gpu`: ``"name=X,memory_gib=24,
    bf16_tflops=71,bandwidth_gbs=936"`` or a JSON file), its box checked against its collective
    library's model.

    Raises:
        ValueError: as :func:`~distlab.gpus.user_gpu`, or a ``box`` the library does not hold.
    """
    g = user_gpu(spec)
    try:
        library_of(g).gpus_per_node(g.box)
    except ValueError as exc:
        raise ValueError(f"gpu-spec: box={g.box!r} is not a box of "
                         f"{g.library.upper()}'s model: {exc}") from None
    return g


@dataclass(frozen=True)
class Hardware:
    """The GPUs a layout runs on.

    Attributes:
        gpu: the GPU model.
        gpus: GPUs in all.
        gpus_per_node: GPUs in each node (at most the box's, as the GPU's collective
            library holds it: :func:`~distlab.plan.libraries.library_of`).
        network: between nodes, a network of that library
            (:data:`~distlab.nccl.multinode.NETWORKS` for NCCL, the NICs of
            :data:`~distlab.rccl.boxes.AMD_NICS` for RCCL); ``None`` on one node.
    """

    gpu: GpuKind
    gpus: int
    gpus_per_node: int = 8
    network: str | None = None

    def __post_init__(self) -> None:
        check_int("gpus", self.gpus, minimum=1)
        lib = library_of(self.gpu)
        check_int("gpus_per_node", self.gpus_per_node, minimum=1,
                  maximum=lib.gpus_per_node(self.gpu.box))
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus={self.gpus} must fill whole nodes of "
                             f"gpus_per_node={self.gpus_per_node}")
        if self.nodes > 1:
            if self.network is None:
                raise ValueError(f"{self.nodes} nodes need a network, one of "
                                 f"{', '.join(lib.networks())}")
            check_choice("network", self.network, lib.networks())
        elif self.network is not None:
            check_choice("network", self.network, lib.networks())

    @property
    def nodes(self) -> int:
        """Nodes: ``ceil(gpus / gpus_per_node)``."""
        return -(-self.gpus // self.gpus_per_node)

    @property
    def recompute_policy(self) -> Recompute:
        """The :class:`~distlab.recompute.Recompute` policy :attr:`recompute` names."""
        return RECOMPUTES[self.recompute]

    @property
    def label(self) -> str:
        """E.g. ``"64x H100-80GB-SXM (8 nodes over ib_ndr400x8)"``."""
        where = (f"{self.nodes} nodes over {self.network}" if self.nodes > 1
                 else "one node")
        return f"{self.gpus}x {self.gpu.name} ({where})"


def hardware(gpu: GpuKind | str = "h100", gpus: int = 8, *, gpus_per_node: int = 8,
             network: str | None = None) -> Hardware:
    """A :class:`Hardware` from a GPU name (:func:`gpu_kind`) and counts; with several
    nodes and no ``network``, the GPU's usual one (:attr:`distlab.gpus.Gpu.default_network`:
    InfiniBand NDR for H100/H200/B200, HDR for A100, the NIC AMD's clusters were published
    with for MI300X/MI325X/MI355X)."""
    kind = gpu_kind(gpu)
    gpus = check_int("gpus", gpus, minimum=1)
    per_node = check_int("gpus_per_node", gpus_per_node, minimum=1)
    if network is None and gpus > per_node:
        network = kind.default_network
    return Hardware(kind, gpus, min(per_node, gpus), network)


@dataclass(frozen=True)
class Layout:
    """One way to train a model on ``dp * tp * pp * cp`` GPUs.

    Attributes:
        dp: data-parallel replicas (the ZeRO/FSDP shard group is the ``dp`` ranks).
        tp: tensor-parallel ranks (Megatron's column/row split of every layer).
        pp: pipeline stages' ranks.
        cp: context-parallel ranks (the sequence split across ranks, ring attention).
        zero: 0 (DDP: replicated states), 1 (optimizer state sharded over ``dp``; Megatron's
            distributed optimizer), 2 (+ gradients), 3 (+ parameters: FSDP's full shard).
        sequence_parallel: with ``tp > 1``, the norms and dropouts split along the sequence.
        schedule: the pipeline schedule (a name of
            :data:`~distlab.pipeline_parallel.schedules.registry.SCHEDULES`), used when
            ``pp > 1``.
        stages_per_rank: pipeline stages each rank holds (2 or more: interleaved/V schedules).
        micro_batch: sequences per microbatch.
        global_batch: sequences per optimizer step, over every replica.
        recompute: one of :data:`RECOMPUTE` (or its :class:`~distlab.recompute.Recompute`,
            stored by name); :attr:`recompute_policy` is the policy.
        precision: one of :data:`PRECISIONS` (the bytes of the model states).
        compute_dtype: what the matrix products run in, ``"bf16"`` or ``"fp8"`` (float8
            training: the states stay as ``precision`` says).
        tp_overlap: tensor-parallel collectives overlapped with the layer's matrix products
            (Megatron-LM's ``--tp-comm-overlap``, torch's async TP); ``False``: run between
            them, fully exposed.
        attention_kernel: one of :data:`ATTENTION_KERNELS`.
        ep: expert-parallel ranks: each MoE layer's routed experts are divided over ``ep``
            ranks of the ranks that hold the same layers (torchtitan's rule and
            Megatron-Core's with ``etp = tp``: ``ep`` divides ``dp * cp``; Megatron-Core's
            parallel folding with ``etp = 1``: ``ep`` divides ``tp * dp * cp``); the experts
            are replicated, and ZeRO-sharded, over the other :attr:`expert_dp` ranks. 1 for a
            dense model.
        etp: expert tensor parallelism, the ranks each expert's matrices are split over: ``tp``
            (``None``, the default: the experts split as the dense MLP is) or 1 (whole experts
            on every GPU, Megatron-Core's ``--expert-tensor-parallel-size 1``).
        ep_overlap: the expert-parallel all-to-alls overlapped with another microbatch's
            compute (Megatron-Core's ``--overlap-moe-expert-parallel-comm``, DeepSeek's
            DualPipe); ``False``: run between the layer's kernels, fully exposed.
        expert_capacity: how the routed tokens reach their experts. ``None`` (the default):
            dropless, every routed token computed where the router sends it (Megatron-Core's
            default; the busiest rank's rows are :data:`~distlab.plan.experts.IMBALANCE`
            times the mean). A number ``c > 0``: token drop padded to capacity
            (Megatron-Core's ``--moe-expert-capacity-factor c`` with
            ``--moe-pad-expert-input-to-capacity``): each expert computes exactly ``c`` times
            its balanced share of the routed rows, those past it dropped, those short of it
            padded, so the shapes are static. Ignored by a dense model.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 0
    sequence_parallel: bool = False
    schedule: str = "1F1B"
    stages_per_rank: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"
    precision: str = "mixed"
    compute_dtype: str = "bf16"
    tp_overlap: bool = False
    attention_kernel: str = "flash"
    ep: int = 1
    ep_overlap: bool = False
    etp: int | None = None
    expert_capacity: float | None = None

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "ep", "stages_per_rank", "micro_batch",
                     "global_batch"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("zero", self.zero, minimum=0, maximum=3)
        check_bool("sequence_parallel", self.sequence_parallel)
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)  # nothing to split
        object.__setattr__(self, "schedule", schedule_name(self.schedule))
        object.__setattr__(self, "recompute", recompute_policy(self.recompute).name)
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        check_choice("attention_kernel", self.attention_kernel, ATTENTION_KERNELS)
        check_bool("tp_overlap", self.tp_overlap)
        if self.tp == 1:
            object.__setattr__(self, "tp_overlap", False)
        etp = self.tp if self.etp is None else self.etp
        if etp not in (1, self.tp):
            raise ValueError(f"etp={self.etp} must be 1 or tp={self.tp}")
        # stored as None where it is tp, so a copy with another tp keeps "as tp"
        object.__setattr__(self, "etp", None if etp == self.tp else etp)
        if (self.dp * self.cp * self.tp // etp) % self.ep:
            ranks = "dp * cp" if etp == self.tp else "tp * dp * cp (etp=1)"
            raise ValueError(f"ep={self.ep} must divide {ranks} = "
                             f"{self.dp * self.cp * self.tp // etp} (experts are divided over "
                             "ranks that hold the same layers)")
        check_bool("ep_overlap", self.ep_overlap)
        if self.ep == 1:
            object.__setattr__(self, "ep_overlap", False)
        if self.expert_capacity is not None:
            cap = self.expert_capacity
            if isinstance(cap, bool) or not isinstance(cap, (int, float)) \
                    or not math.isfinite(cap) or cap <= 0:
                raise ValueError(f"expert_capacity={cap!r} must be None (dropless) or a "
                                 "capacity factor > 0 (token drop padded to capacity)")
            object.__setattr__(self, "expert_capacity", float(cap))
        per_step = self.dp * self.micro_batch
        if self.global_batch % per_step:
            raise ValueError(f"global_batch={self.global_batch} must be a multiple of dp * "
                             f"micro_batch = {self.dp} * {self.micro_batch} = {per_step}")

    @property
    def gpus(self) -> int:
        """``dp * tp * pp * cp``."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """:attr:`etp` resolved (``tp`` where not given)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same experts (the expert-data-parallel group, over which ZeRO
        shards their states): ``tp * dp * cp / (ep * etp)`` (``dp * cp / ep`` with
        ``etp = tp``)."""
        return self.tp * self.dp * self.cp // (self.ep * self.expert_tp)

    @property
    def microbatches(self) -> int:
        """Microbatches each replica runs per step: ``global_batch / (dp * micro_batch)``."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def stages(self) -> int:
        """Pipeline stages in all, ``pp * stages_per_rank``."""
        return self.pp * self.stages_per_rank

    @property
    def recompute_policy(self) -> Recompute:
        """The :class:`~distlab.recompute.Recompute` policy :attr:`recompute` names."""
        return RECOMPUTES[self.recompute]

    @property
    def label(self) -> str:
        """A short name, e.g. ``"dp8 tp8 pp4 zero1 sp Interleaved1F1Bx2 mb1 sel"``."""
        parts = [f"dp{self.dp}"]
        parts += [f"{d}{getattr(self, d)}" for d in ("tp", "pp", "cp", "ep")
                  if getattr(self, d) > 1]
        if self.zero:
            parts.append("fsdp" if self.zero == 3 else f"zero{self.zero}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.tp_overlap:
            parts.append("async-tp")
        if self.ep_overlap:
            parts.append("ep-overlap")
        if self.expert_tp != self.tp:
            parts.append(f"etp{self.expert_tp}")
        if self.expert_capacity is not None:
            parts.append(f"cap{self.expert_capacity:g}")
        if self.pp > 1:
            parts.append(self.schedule + (f"x{self.stages_per_rank}"
                                          if self.stages_per_rank > 1 else ""))
        parts.append(f"mb{self.micro_batch}")
        if self.recompute_policy.label:
            parts.append(self.recompute_policy.label)
        if self.compute_dtype != "bf16":
            parts.append(self.compute_dtype)
        if self.attention_kernel != "flash":
            parts.append(f"{self.attention_kernel}-attn")
        return " ".join(parts)

    def with_(self, **changes: Any) -> Layout:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def stride(self, dim: str) -> int:
        """Ranks between neighbours of a ``dim`` group (the product of the inner dims)."""
        check_choice("dim", dim, DIMS)
        out = 1
        for d in DIMS[:DIMS.index(dim)]:
            out *= getattr(self, d)
        return out


@dataclass(frozen=True)
class GroupSpan:
    """Where a group of ``size`` ranks lies: ``per_node`` of them in each of ``nodes`` nodes."""

    size: int
    per_node: int
    nodes: int


def group_span(size: int, stride: int, gpus_per_node: int) -> GroupSpan:
    """The nodes a group of ``size`` ranks ``stride`` apart spans, ranks placed node by node
    (``gpus_per_node`` consecutive ranks per node)."""
    size = check_int("size", size, minimum=1)
    stride = check_int("stride", stride, minimum=1)
    gpus_per_node = check_int("gpus_per_node", gpus_per_node, minimum=1)
    if stride >= gpus_per_node:
        return GroupSpan(size, 1, size)
    per_node = min(size, gpus_per_node // stride)
    return GroupSpan(size, per_node, math.ceil(size / per_node))


def check_layout_fits(layout: Layout, hw: Hardware) -> None:
    """``ValueError`` unless ``layout`` uses exactly ``hw``'s GPUs."""
    if layout.gpus != hw.gpus:
        raise ValueError(f"layout {layout.label} uses dp*tp*pp*cp = {layout.gpus} GPUs; the "
                         f"hardware has {hw.gpus}")



_LAYOUT_KEYS = {"dp": "dp", "tp": "tp", "pp": "pp", "cp": "cp", "zero": "zero",
                "sp": "sequence_parallel", "schedule": "schedule", "v": "stages_per_rank",
                "stages_per_rank": "stages_per_rank", "mb": "micro_batch",
                "micro_batch": "micro_batch", "gbs": "global_batch",
                "global_batch": "global_batch", "recompute": "recompute",
                "precision": "precision", "dtype": "compute_dtype",
                "async_tp": "tp_overlap", "attention": "attention_kernel", "ep": "ep",
                "ep_overlap": "ep_overlap", "etp": "etp", "capacity": "expert_capacity"}


def parse_layout(text: str, *, gpus: int | None = None, **defaults: Any) -> Layout:
    """A :class:`Layout` from ``"dp=8,tp=8,pp=4,zero=1,schedule=Interleaved1F1B,v=2,mb=1,
    recompute=selective"`` (commas or spaces; ``sp`` 0/1, on by default with ``tp > 1``;
    ``async_tp`` 0/1, ``dtype`` bf16/fp8, ``attention`` flash/cudnn; ``ep`` the expert-parallel
    ranks, ``ep_overlap`` 0/1, ``etp`` 1 or tp;
    ``fsdp`` alone means ``zero=3``). ``defaults`` fill what the text leaves out (e.g.
    ``global_batch``). With ``gpus``, a layout whose ``dp * tp * pp * cp`` is not ``gpus`` is
    refused before anything else about it (the batch, ``ep``) is checked.

    Raises:
        ValueError: naming an unknown key (with the keys allowed), a known key whose value is
            not of its kind, a field given twice (``tp=8,tp=16``; ``v`` and
            ``stages_per_rank``; ``fsdp`` and ``zero``), or a GPU count other than ``gpus``.
    """
    values: dict[str, Any] = dict(defaults)
    given_sp = False
    given: dict[str, str] = {}   # field -> the item that set it
    for item in text.replace(",", " ").split():
        key, sep, value = ("zero", "=", "3") if item == "fsdp" else item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"layout: {item!r} is not KEY=VALUE (or 'fsdp')")
        if key not in _LAYOUT_KEYS:
            raise ValueError(f"layout: unknown key {key!r} in {item!r}; the keys are "
                             f"{', '.join(_LAYOUT_KEYS)} (or 'fsdp')")
        field_name = _LAYOUT_KEYS[key]
        if field_name in given:
            raise ValueError(f"layout: {given[field_name]!r} and {item!r} both set "
                             f"{field_name}: give each key once")
        given[field_name] = item
        if field_name in ("schedule", "recompute", "precision", "compute_dtype",
                          "attention_kernel"):
            values[field_name] = value
        elif field_name in ("sequence_parallel", "tp_overlap", "ep_overlap"):
            if value not in ("0", "1", "true", "false"):
                raise ValueError(f"layout: {key}={value!r} must be 0 or 1")
            values[field_name] = value in ("1", "true")
            given_sp = given_sp or field_name == "sequence_parallel"
        elif field_name == "expert_capacity":
            try:
                values[field_name] = float(value)
            except ValueError:
                raise ValueError(f"layout: {key}={value!r} must be a number") from None
        else:
            try:
                values[field_name] = int(value)
            except ValueError:
                raise ValueError(f"layout: {key}={value!r} must be an integer") from None
    if not given_sp:
        values["sequence_parallel"] = values.get("tp", 1) > 1
    if gpus is not None:
        dims = {d: values.get(d, 1) for d in ("dp", "tp", "pp", "cp")}
        used = math.prod(dims.values())
        if used != gpus:
            shown = ",".join(f"{d}={n}" for d, n in dims.items() if d in values)
            raise ValueError(f"layout {shown or text!r} uses dp*tp*pp*cp = {used} GPUs; "
                             f"--gpus is {gpus}")
    return Layout(**values)
