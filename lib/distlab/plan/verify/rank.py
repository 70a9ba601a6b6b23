"""One rank of a verify run: a planned layout trained for a few steps on this machine, its step
time and peak memory measured.

:func:`run_rank` is a rank function for :func:`distlab.launch.run` (local ranks, or every rank
under ``torchrun``): it builds the :class:`~distlab.plan.verify.decoder.Decoder` of the case's
model on the meta device, splits it as the layout says with torch's own APIs, as torchtitan
composes them (tensor parallelism with ``parallelize_module`` on the ``"tp"`` dimension of a
torch ``DeviceMesh``, pipeline stages with ``torch.distributed.pipelining``, recompute with
``torch.utils.checkpoint``, then FSDP2's ``fully_shard`` per block and at the root on the
``"dp"`` dimension for ZeRO 3 (``reshard_after_forward=False`` under a pipeline, and for ZeRO 2),
torch DDP for ZeRO 0, DDP with ``ZeroRedundancyOptimizer`` for ZeRO 1), materialises it on the
device, and trains ``warmup + steps`` steps of the layout's global batch with AdamW, bf16
compute and fp32 states (``MixedPrecisionPolicy(bf16, fp32)``, or autocast without FSDP: the
planner's ``"fsdp-mixed"`` precision).

What it measures (:class:`RankMeasurement`): each timed step's seconds (CUDA events on a GPU,
the host clock on a CPU) and its phases, and the peak memory of each phase
(:mod:`~distlab.plan.verify.meter`: the caching allocator's allocated and reserved bytes on a
GPU; on a host, every byte torch's CPU allocator handed out). An out-of-memory error is raised
as :class:`MeasuredOutOfMemory`, which says what the step asked for and what was reserved.
A model with experts runs each MoE layer as :mod:`distlab.moe`'s block
(:mod:`~distlab.plan.verify.decoder`). Expert parallelism (``ep > 1``) is composed as torchtitan
composes it: ``ep`` borrows from data parallelism, the mesh is ``("pp", "edp", "ep", "tp")``
with ``"dp"`` the flattened ``("edp", "ep")`` (``dp = expert_dp * ep``), every MoE layer's
routed experts are split over ``mesh["ep"]`` by :class:`distlab.moe.ExpertParallel` (their
tokens sent by all-to-all), and then, for ZeRO 2/3, the experts get their own ``fully_shard``
over ``mesh["edp"]`` (the ranks holding the same experts) with
``set_gradient_divide_factor(dp)``, since their gradients already sum the tokens of the ``ep``
ranks, and the rest of each block is sharded over ``mesh["dp"]``; for ZeRO 0 and 1, DDP over
``mesh["dp"]`` ignores the experts, whose gradients are all-reduced over ``mesh["edp"]`` and
divided by ``dp`` (ZeRO 1: one ``ZeroRedundancyOptimizer`` over the rest on ``mesh["dp"]``,
one over the experts on ``mesh["edp"]``). Either way every parameter's gradient is that of
the mean loss over all data-parallel ranks, as at ``ep = 1``. Under a pipeline the same holds
stage by stage: each stage's experts are split over the ``ep`` ranks of its ``mesh["ep"]``
(the data-parallel ranks of that stage, which run the same schedule, so their all-to-alls
meet in the same order), the stages wrapped as the whole model is at ``pp = 1``. With tensor
parallelism, experts run as torchtitan runs them with expert-tensor-parallel degree 1
(``etp=1``): ``ep`` borrows every tp rank and ``ep / tp`` data-parallel ranks (the mesh
``("pp", "edp", "epd", "tp")``, ``"ep"`` the flattened ``("epd", "tp")``), each expert stays
whole, and every MoE block takes its input whole on each tp rank (all-gathered from the
sequence chunk under sequence parallelism) and routes, dispatches, computes and combines
only the tp rank's share of the ``batch * seq`` tokens, so no token goes out twice; the
ranks' outputs, zero outside their share, are summed back (reduce-scatter, or all-reduce
without sequence parallelism). Two differences from torchtitan, same numbers: torchtitan
routes every token on every tp rank before keeping the share (routing is per token), and
splits the shared experts over tp where verify runs them whole on the share. The router and
shared experts stay whole on every tp rank and are sharded by their own FSDP2 over
``dp * tp`` with gradient divide factor ``dp``, which sums their tp ranks' shares.

Pipeline stages sit on ranks as torch's schedule places them: one per rank, looped
(``pp_rank + pp * j``), or in a V for ZBV and DualPipeV (``pp_rank`` and
``2 * pp - 1 - pp_rank``). :func:`unsupported_reason` says, before anything starts, what is
not run: context parallelism (torch's ``context_parallel`` is experimental), experts split
over tp (``etp=tp``, torchtitan's ``ExpertTensorParallel``), ``etp=1`` with ``ep`` not a
multiple of ``tp`` or with ZeRO 0/1, ZeRO 0/1 (DDP) over ``dp > 1`` under a schedule that
splits the backward (torch's pipelining computes those weight gradients with
``torch.autograd.grad``, outside the hooks DDP averages them in), and per-op recompute with
``ep > 1`` under ZeRO 2/3 (the experts' nested FSDP2 runs other ops in recompute than in
forward, which torch's selective checkpoint refuses).
"""

from __future__ import annotations

import gc
import json
import re
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from distlab._checks import check_choice, check_instance, check_int
from distlab.pipeline_parallel.schedules.registry import schedule_info
from distlab.plan.layout import Layout
from distlab.plan.partition import layers_per_stage
from distlab.plan.verify.decoder import Decoder, build_decoder, gqa_in_kernel, init_parameters
from distlab.plan.verify.meter import CudaMeter, HostMeter, PhasePeak, cuda_memory_stats
from distlab.plan.verify.recompute import RUNS_AS, Checkpointed, apply_recompute
from distlab.transformer import ModelSpec

__all__ = ["ATTENTION_BACKENDS", "DTYPES", "OPTIMIZERS", "OOM_MARK", "MeasuredOutOfMemory",
           "RankMeasurement", "VerifyCase", "run_rank", "unsupported_reason"]

OPTIMIZERS = ("fused", "foreach")
"""AdamW's implementation: one fused kernel per parameter group, or torch's ``foreach`` lists
(which allocates temporaries the size of the shard)."""

ATTENTION_BACKENDS = ("flash", "cudnn", "efficient", "default")
"""The SDPA kernel forced on a GPU (``default``: SDPA picks); a host runs its own."""

DTYPES = ("bf16", "fp32")
"""The compute dtypes a verify run trains in (the states are fp32 either way)."""

OOM_MARK = "distlab-verify-oom:"
"""The line an out-of-memory rank's error message carries, followed by its JSON details."""


@dataclass(frozen=True)
class VerifyCase:
    """What one verify run trains.

    Attributes:
        spec: the model (run with ``spec.layers`` layers: shorten it to run fewer).
        layout: the layout (its ``gpus`` are the ranks; ``cp`` must be 1).
        steps: timed steps, after ``warmup`` untimed ones (the first step allocates the
            optimizer state: its memory is measured, its time is not).
        optimizer: one of :data:`OPTIMIZERS`.
        attention: one of :data:`ATTENTION_BACKENDS` (GPU only).
        seed: weights and data.
        device: ``"cuda"`` (each rank on ``cuda:<local rank>``) or ``"cpu"``.
        dtype: the compute dtype, one of :data:`DTYPES`: ``"bf16"`` (what the planner prices)
            or ``"fp32"`` (no autocast, FSDP2 without a cast: to compare layouts exactly).
    """

    spec: ModelSpec
    layout: Layout
    steps: int = 3
    warmup: int = 1
    optimizer: str = "fused"
    attention: str = "flash"
    seed: int = 0
    device: str = "cpu"
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        check_instance("spec", self.spec, ModelSpec)
        check_instance("layout", self.layout, Layout)
        check_int("steps", self.steps, minimum=1)
        check_int("warmup", self.warmup, minimum=1)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("attention", self.attention, ATTENTION_BACKENDS)
        check_choice("device", self.device, ("cpu", "cuda"))
        check_choice("dtype", self.dtype, DTYPES)

    @property
    def compute_dtype(self) -> torch.dtype:
        """:attr:`dtype` as a torch dtype."""
        return torch.bfloat16 if self.dtype == "bf16" else torch.float32


def unsupported_reason(layout: Layout) -> str | None:
    """Why :func:`run_rank` cannot run ``layout``, or ``None``."""
    if layout.cp > 1:
        return ("context parallelism is not run: torch's context_parallel is experimental "
                "(the layout is priced, not verified)")
    if layout.pp > 1 and layout.zero in (0, 1) and layout.dp > 1 and _splits_backward(layout):
        return (f"ZeRO {layout.zero} with dp={layout.dp} is not run under {layout.schedule}: "
                "torch's pipelining computes its split backward's weight gradients outside "
                "autograd's hooks, so DDP never averages them (the layout is priced, not "
                "verified; use zero=2 or 3, or a schedule that does not split the backward)")
    if layout.ep > 1 and layout.zero in (2, 3) and RUNS_AS[layout.recompute] == "op":
        return (f"per-op recompute ({layout.recompute}) is not run with ep={layout.ep} and "
                f"ZeRO {layout.zero}: the experts' own FSDP2 inside a checkpointed block runs "
                "other ops in recompute than in forward, which torch's selective checkpoint "
                "refuses (the layout is priced, not verified; recompute=full or ZeRO 0 run)")
    if layout.ep > 1 and layout.tp > 1 and layout.etp is None:
        return (f"expert parallelism is not run with tp={layout.tp} and etp=tp: verify does "
                "not split each expert's matrices over tp; it runs ep with tp as torchtitan "
                "does with etp=1 only (the layout is priced, not verified)")
    if layout.ep > 1 and layout.tp > 1:
        if layout.ep % layout.tp:
            return (f"expert parallelism is not run with ep={layout.ep} not a multiple of "
                    f"tp={layout.tp}: verify's etp=1 has ep borrow every tp rank (torchtitan's "
                    "rule; the layout is priced, not verified)")
        if layout.zero in (0, 1):
            return (f"ZeRO {layout.zero} with tp={layout.tp} is not run with experts: the "
                    "router's and shared experts' gradients (each tp rank's share of the "
                    "tokens) are summed over tp only by their FSDP2 over dp * tp, and torch's "
                    "DDP does not take tensor-parallel parameters (the layout is priced, not "
                    "verified; use zero=2 or 3)")
    return None


def _splits_backward(layout: Layout) -> bool:
    """Whether ``layout``'s pipeline schedule runs its backward as input then weight."""
    return schedule_info(layout.schedule).splits_backward


@dataclass(frozen=True)
class RankMeasurement:
    """One rank's measurement (bytes, seconds).

    Attributes:
        rank, world_size: where it ran.
        device: the device's name (``"NVIDIA H200"``, ``"cpu"``).
        step_s: every timed step's seconds.
        phase_s: each phase's median seconds over the timed steps.
        peaks: each phase's :class:`~distlab.plan.verify.meter.PhasePeak` as a dict (the
            build, every step's forward, backward and optimizer; a pipeline's
            forward-and-backward is one phase, ``"schedule"``).
        cuda: the caching allocator's counters at the end (GPU only).
        recompute: what the blocks ran as (:data:`~distlab.plan.verify.recompute.RUNS_AS`).
        kv_repeated: key/value heads were repeated before the attention kernel.
        notes: what differs from the layout as priced.
    """

    rank: int
    world_size: int
    device: str
    step_s: tuple[float, ...]
    phase_s: dict[str, float]
    peaks: dict[str, dict[str, Any]]
    cuda: dict[str, int] | None
    recompute: str
    kv_repeated: bool
    notes: tuple[str, ...] = field(default=())

    @property
    def median_step_s(self) -> float:
        """The median timed step, seconds."""
        return statistics.median(self.step_s)

    @property
    def peak_allocated(self) -> int:
        """The most bytes tensors held, over every phase."""
        return max(p["allocated"] for p in self.peaks.values())

    @property
    def peak_reserved(self) -> int | None:
        """The most bytes the caching allocator reserved (``None`` on a host)."""
        vals = [p["reserved"] for p in self.peaks.values() if p["reserved"] is not None]
        return max(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


class MeasuredOutOfMemory(RuntimeError):
    """The device ran out of memory: ``details`` holds the phase, the bytes asked for (when the
    error says), and the allocator's allocated and reserved bytes at the failure."""

    def __init__(self, details: dict[str, Any]) -> None:
        self.details = details
        super().__init__(f"out of memory in {details.get('phase')}: "
                         f"{OOM_MARK}{json.dumps(details, sort_keys=True)}")

    @staticmethod
    def parse(text: str) -> dict[str, Any] | None:
        """The details in an error text (a rank's traceback), or ``None``."""
        m = re.search(re.escape(OOM_MARK) + r"(\{.*?\})", text)
        return json.loads(m.group(1)) if m else None


_GIB_RE = re.compile(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB|B)")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1}


def _oom_details(exc: BaseException, phase: str, device: torch.device) -> dict[str, Any]:
    m = _GIB_RE.search(str(exc))
    out: dict[str, Any] = {"phase": phase, "requested": None}
    if m:
        out["requested"] = int(float(m.group(1)) * _UNITS[m.group(2)])
    if device.type == "cuda":
        out["allocated"] = int(torch.cuda.memory_allocated(device))
        out["peak_allocated"] = int(torch.cuda.max_memory_allocated(device))
        out["reserved"] = int(torch.cuda.memory_reserved(device))
        out["peak_reserved"] = int(torch.cuda.max_memory_reserved(device))
    return out


# -- building ---------------------------------------------------------------------------------

class Stage(nn.Module):
    """The layers ``[first, last)`` of a :class:`Decoder` as one pipeline stage: the embeddings
    on the first stage, the final norm and output layer on the last; ids in on the first stage,
    logits out of the last, the hidden state between."""

    def __init__(self, model: Decoder, first: int, last: int, *, is_first: bool,
                 is_last: bool) -> None:
        super().__init__()
        self.spec = model.spec
        self.is_first, self.is_last = is_first, is_last
        self.tok_embeddings = model.tok_embeddings if is_first else None
        self.pos_embeddings = getattr(model, "pos_embeddings", None) if is_first else None
        if model.spec.positions is None:
            self.register_buffer("rope_cos", model.rope_cos, persistent=False)
            self.register_buffer("rope_sin", model.rope_sin, persistent=False)
        self.layers = nn.ModuleList(model.layers[first:last])
        self.norm = model.norm if is_last else None
        self.output = model.output if is_last else None
        if is_last and not is_first and model.spec.tied_embeddings:
            self.output = nn.Linear(model.spec.hidden, model.spec.vocab, bias=False)

    init_buffers = Decoder.init_buffers
    rope = Decoder.rope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:
            ids, x = x, self.tok_embeddings(x)
            if self.pos_embeddings is not None:
                x = x + self.pos_embeddings(torch.arange(ids.shape[1], device=ids.device))
        rope = self.rope(self.spec.seq_len, x.dtype)
        for layer in self.layers:
            x = layer(x, rope)
        if self.output is not None:
            x = self.output(self.norm(x))
        return x


def _tp_plan(spec: ModelSpec, sequence_parallel: bool, *, first: bool, last: bool,
             prefix: str = "layers.*", dense: list[int] | None = None) -> dict[str, Any]:
    """torchtitan's tensor-parallel plan of a decoder (or a stage), in torch's styles: the
    vocabulary-parallel embedding and output layer (logits left split over the vocabulary for
    ``loss_parallel``), Q/K/V and the MLP's first linears column-parallel, the output projection
    and last MLP linear row-parallel; with sequence parallelism the norms on the rank's
    sequence chunk and each block's input gathered once. ``dense``: the indices of the layers
    with a ``feed_forward`` (``None``: every layer ``prefix`` matches; an MoE block is
    :func:`_share_tokens_over_tp`'s)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    sp = sequence_parallel
    plan: dict[str, Any] = {}
    if first:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(),
                                                 output_layouts=Shard(1) if sp else Replicate())
    if last:
        plan["norm"] = SequenceParallel() if sp else None
        plan["output"] = ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(),
                                         output_layouts=Shard(-1), use_local_output=False)
    for w in ("wq", "wk", "wv"):
        plan[f"{prefix}.attention.{w}"] = ColwiseParallel()
    row = {"output_layouts": Shard(1)} if sp else {}
    plan[f"{prefix}.attention.wo"] = RowwiseParallel(**row)
    for ffn in ([f"{prefix}.feed_forward"] if dense is None
                else [f"layers.{i}.feed_forward" for i in dense]):
        plan[f"{ffn}.w1"] = ColwiseParallel()
        if spec.gated_ffn:
            plan[f"{ffn}.w3"] = ColwiseParallel()
        plan[f"{ffn}.w2"] = RowwiseParallel(**row)
        if sp:
            plan[ffn] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                use_local_output=True)
    if sp:
        plan[f"{prefix}.attention_norm"] = SequenceParallel()
        plan[f"{prefix}.ffn_norm"] = SequenceParallel()
        plan[f"{prefix}.attention"] = PrepareModuleInput(
            input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None),
            use_local_output=True)
    return {k: v for k, v in plan.items() if v is not None}


@dataclass
class _Built:
    modules: list[nn.Module]      # the rank's model, or its pipeline stages
    stage_ids: list[int]
    schedule: Any = None
    ddp: bool = False
    zero1: bool = False
    kv_repeated: bool = False
    recompute: str = "none"
    notes: list[str] = field(default_factory=list)
    dp_rank: int = 0
    ep_rank: int = 0
    # ZeRO 0 with ep > 1: the expert parameters DDP ignores, their group and divisor
    expert_params: list[nn.Parameter] = field(default_factory=list)
    expert_group: Any = None
    expert_divide: int = 1
    dp_group: Any = None


def _mesh(layout: Layout, device: torch.device) -> dict[str, Any]:
    """The one-dimensional torch ``DeviceMesh``\\ es of ``layout`` by name, sliced from
    ``("pp", "dp", "tp")``, or with ``ep > 1`` from ``("pp", "edp", "ep", "tp")`` with
    ``"dp"`` the flattened ``("edp", "ep")`` (data-parallel rank ``edp_rank * ep + ep_rank``:
    the same ranks as without ``ep``)."""
    from torch.distributed.device_mesh import init_device_mesh

    if layout.ep == 1:
        mesh = init_device_mesh(device.type, (layout.pp, layout.dp, layout.tp),
                                mesh_dim_names=("pp", "dp", "tp"))
        return {d: mesh[d] for d in ("pp", "dp", "tp")}
    if layout.tp == 1 or layout.etp is None:
        mesh = init_device_mesh(device.type,
                                (layout.pp, layout.expert_dp, layout.ep, layout.tp),
                                mesh_dim_names=("pp", "edp", "ep", "tp"))
        out = {d: mesh[d] for d in ("pp", "edp", "ep", "tp")}
        out["dp"] = mesh["edp", "ep"]._flatten("dp")    # kept here: torch will not slice it
        return out
    # etp=1: ep borrows every tp rank and ep / tp data-parallel ranks ("epd")
    epd = layout.ep // layout.tp
    mesh = init_device_mesh(device.type, (layout.pp, layout.dp // epd, epd, layout.tp),
                            mesh_dim_names=("pp", "edp", "epd", "tp"))
    out = {d: mesh[d] for d in ("pp", "edp", "tp")}
    out["dp"] = mesh["edp", "epd"]._flatten("dp")
    out["ep"] = mesh["epd", "tp"]._flatten("ep")
    out["dp_tp"] = mesh["edp", "epd", "tp"]._flatten("dp_tp")
    return out


def _expert_names(mod: nn.Module) -> list[str]:
    """The module names of the routed experts of every MoE layer of ``mod`` (a decoder or a
    :class:`Stage`, its blocks wrapped for recompute or not)."""
    names = []
    for i, b in enumerate(mod.layers):
        prefix = f"layers.{i}.block" if isinstance(b, Checkpointed) else f"layers.{i}"
        if hasattr(getattr(b, "block", b), "moe"):
            names.append(f"{prefix}.moe.experts")
    return names


def _expert_parallel(mod: nn.Module, mesh: Any) -> list[str]:
    """Split every MoE layer's routed experts of ``mod`` over ``mesh["ep"]``
    (:class:`distlab.moe.ExpertParallel`, each rank keeping its slice of its own weights: on
    the meta device there is nothing to broadcast); the experts' module names."""
    from torch.distributed.tensor.parallel import parallelize_module

    from distlab.moe import ExpertParallel

    names = _expert_names(mod)
    parallelize_module(mod, mesh["ep"], dict.fromkeys(names, ExpertParallel()),
                       src_data_rank=None)
    return names


def _stage_ids(layout: Layout, pp_rank: int) -> list[int]:
    """The pipeline stages pipeline rank ``pp_rank`` holds, as torch's schedule of
    ``layout.schedule`` places them: looped (``pp_rank + pp * j``), or in a V (ZBV, DualPipeV:
    ``pp_rank`` down, ``2 * pp - 1 - pp_rank`` back up)."""
    if layout.stages_per_rank == 1:
        return [pp_rank]
    if schedule_info(layout.schedule).style == "v":
        return [pp_rank, 2 * layout.pp - 1 - pp_rank]
    return [pp_rank + layout.pp * j for j in range(layout.stages_per_rank)]


class _GatherTokens(torch.autograd.Function):
    """The MoE block's input whole on every tp rank: all-gathered over the sequence from the
    rank's chunk (sequence parallelism) or as it is (already whole); the gradient, which
    holds only this rank's share of the tokens, summed over tp (reduce-scattered back to the
    chunk, or all-reduced)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, sp: bool) -> torch.Tensor:
        ctx.group, ctx.sp = group, sp
        return _all_gather_seq(x, group) if sp else x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, None, None]:
        return _sum_over_tp(grad.contiguous(), ctx.group, ctx.sp), None, None


class _SumPartial(torch.autograd.Function):
    """Each tp rank's partial MoE output (its share of the tokens, zeros elsewhere) summed:
    the sequence chunk of the sum under sequence parallelism (reduce-scatter), the whole sum
    without (all-reduce); the gradient gathered back (all-gather, or as it is)."""

    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, group: Any, sp: bool) -> torch.Tensor:
        ctx.group, ctx.sp = group, sp
        return _sum_over_tp(y.contiguous(), group, sp)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, None, None]:
        grad = grad.contiguous()
        return (_all_gather_seq(grad, ctx.group) if ctx.sp else grad), None, None


def _all_gather_seq(x: torch.Tensor, group: Any) -> torch.Tensor:
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=1)


def _sum_over_tp(y: torch.Tensor, group: Any, sp: bool) -> torch.Tensor:
    """``y`` summed over ``group``: whole, or (``sp``) this rank's chunk of dimension 1."""
    import torch.distributed as dist

    n, r = dist.get_world_size(group), dist.get_rank(group)
    if not sp:
        y = y.clone()
        dist.all_reduce(y, group=group)
        return y
    chunks = [c.contiguous() for c in y.chunk(n, dim=1)]
    if y.device.type == "cuda":
        out = torch.empty_like(chunks[r])
        dist.reduce_scatter(out, chunks, group=group)
        return out
    y = y.clone()           # gloo has no reduce-scatter: all-reduce, keep the chunk
    dist.all_reduce(y, group=group)
    return y.chunk(n, dim=1)[r].contiguous()


def _share_tokens_over_tp(moe: nn.Module, tp_mesh: Any, sequence_parallel: bool) -> None:
    """Run ``moe`` (a :class:`distlab.moe.MoE` whose experts are split over an ``ep`` that
    borrows every tp rank: torchtitan's etp=1) as torchtitan does: its input whole on every
    tp rank, the tp rank ``r`` of ``n`` routing, dispatching and computing only its share of
    the flattened ``batch * seq`` tokens (rows ``r * T / n`` to ``(r + 1) * T / n``, so no
    token is dispatched twice), shared experts included, its output zero elsewhere, and the
    ranks' outputs summed back to the sequence chunk (sequence parallelism) or whole. The
    router and shared experts stay whole on every tp rank; each rank's gradient of them holds
    its share of the tokens (summed over tp by their own FSDP over ``dp * tp``)."""
    group = tp_mesh.get_group()
    n, r = tp_mesh.size(), tp_mesh.get_local_rank()
    compute = moe.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        if hasattr(x, "to_local"):      # the sequence-parallel norm's DTensor
            x = x.to_local()
        whole = _GatherTokens.apply(x, group, sequence_parallel)
        flat = whole.reshape(-1, whole.shape[-1])
        if flat.shape[0] % n:
            raise ValueError(f"batch * seq = {flat.shape[0]} tokens do not split over "
                             f"tp={n}")
        share = flat.shape[0] // n
        mine = compute(flat[r * share:(r + 1) * share])
        out = torch.cat([mine.new_zeros(r * share, mine.shape[1]), mine,
                         mine.new_zeros((n - 1 - r) * share, mine.shape[1])])
        return _SumPartial.apply(out.view(whole.shape), group, sequence_parallel)

    moe.forward = forward


def _build(case: VerifyCase, rank: int, device: torch.device) -> _Built:
    spec, lay = case.spec, case.layout
    with _attention_kernel(case, device):
        kv_in_kernel = gqa_in_kernel(device, torch.bfloat16)
    full = build_decoder(spec, device="meta", kv_in_kernel=kv_in_kernel)
    built = _Built([], [], kv_repeated=full.kv_repeated)
    mesh = _mesh(lay, device) if lay.gpus > 1 else None
    pp_rank = mesh["pp"].get_local_rank() if mesh is not None else 0
    built.dp_rank = mesh["dp"].get_local_rank() if mesh is not None else 0
    built.ep_rank = mesh["ep"].get_local_rank() if mesh is not None and lay.ep > 1 else 0
    experts: list[str] = []
    if lay.pp > 1:
        split = layers_per_stage(spec.layers, lay.stages)
        starts = [sum(split[:i]) for i in range(lay.stages)]
        ids = _stage_ids(lay, pp_rank)
        modules: list[nn.Module] = [
            Stage(full, starts[s], starts[s] + split[s], is_first=s == 0,
                  is_last=s == lay.stages - 1) for s in ids]
        built.stage_ids = ids
    else:
        modules = [full]
        built.stage_ids = [0]
    for s, mod in zip(built.stage_ids, modules, strict=True):
        if lay.tp > 1:
            from torch.distributed.tensor.parallel import parallelize_module

            dense = [i for i, b in enumerate(mod.layers) if hasattr(b, "feed_forward")]
            parallelize_module(mod, mesh["tp"], _tp_plan(
                spec, lay.sequence_parallel, first=s == 0, last=s == lay.stages - 1,
                dense=dense))
        if lay.ep > 1:
            experts = _expert_parallel(mod, mesh)
            if lay.tp > 1:
                for name in experts:
                    _share_tokens_over_tp(mod.get_submodule(name.removesuffix(".experts")),
                                          mesh["tp"], lay.sequence_parallel)
        built.recompute = apply_recompute(mod, lay.recompute)
        experts = _expert_names(mod) if lay.ep > 1 else []    # as recompute left them
        if lay.zero in (2, 3):
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=case.compute_dtype,
                                      reduce_dtype=torch.float32)
            reshard = lay.zero == 3 and lay.pp == 1
            dp_mesh = mesh["dp"] if mesh is not None else None
            for name in experts:     # torchtitan's apply_fsdp: the experts over edp first
                sub = mod.get_submodule(name)
                fully_shard(sub, mesh=mesh["edp"], mp_policy=mp, reshard_after_forward=reshard)
                sub.set_gradient_divide_factor(lay.dp)
                if device.type == "cpu" and lay.expert_dp > 1:
                    # gloo has no PREMUL_SUM: sum, then divide (not on one rank, where torch
                    # 2.13 would divide twice)
                    sub.set_force_sum_reduction_for_comms(True)
                if lay.tp > 1:   # replicated over tp, each tp rank's gradient its tokens'
                    moe = mod.get_submodule(name.removesuffix(".experts"))
                    for sub in (moe.router, moe.shared_experts):
                        if sub is None:
                            continue
                        fully_shard(sub, mesh=mesh["dp_tp"], mp_policy=mp,
                                    reshard_after_forward=reshard)
                        sub.set_gradient_divide_factor(lay.dp)
                        if device.type == "cpu":
                            sub.set_force_sum_reduction_for_comms(True)
            for block in mod.layers:
                fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
            fully_shard(mod, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
    for mod in modules:
        mod.to_empty(device=device)
        _tie(mod, spec)
        mod.init_buffers()
        init_parameters(mod, seed=case.seed)
    if lay.zero in (0, 1) and lay.dp > 1:
        from torch.nn.parallel import DistributedDataParallel

        if lay.tp > 1:
            raise ValueError("ZeRO 0/1 with tensor parallelism is not run by verify "
                             "(torch's DDP does not take DTensor parameters): use zero=3")
        group = mesh["dp"].get_group() if mesh is not None else None
        if lay.ep > 1:   # DDP averages the rest; the experts are reduced over edp by the step
            for mod in modules:
                ignored = [f"{name}.{w}" for name in _expert_names(mod)
                           for w in ("w1", "w2", "w3")]
                DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(mod,
                                                                                    ignored)
                built.expert_params += [mod.get_parameter(n) for n in ignored]
            built.expert_group = mesh["edp"].get_group()
            built.dp_group = group
            built.expert_divide = lay.dp
        modules = [DistributedDataParallel(m, process_group=group) for m in modules]
        built.ddp = True
        built.zero1 = lay.zero == 1
    built.modules = modules
    if lay.pp > 1:
        built.schedule = _schedule(case, modules, built.stage_ids, mesh, device)
    if lay.zero == 2:
        built.notes.append("ZeRO 2 runs as FSDP2 without resharding after forward")
    return built


def _tie(mod: nn.Module, spec: ModelSpec) -> None:
    """Tie the output layer to the embedding again where the spec ties them: ``to_empty``
    gives each module its own tensor (FSDP2 keeps one shared parameter; a plain module does
    not)."""
    emb, out = getattr(mod, "tok_embeddings", None), getattr(mod, "output", None)
    if not spec.tied_embeddings or emb is None or out is None or out.weight is emb.weight:
        return
    if type(out.weight) is not type(emb.weight):  # a split (DTensor) layer: leave it
        return
    out.weight = emb.weight


def _loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(0, 1))


def _schedule(case: VerifyCase, modules: list[nn.Module], ids: list[int], mesh: Any,
              device: torch.device) -> Any:
    from torch.distributed import pipelining as pl

    lay = case.layout
    group = mesh["pp"].get_group()
    stages = [pl.PipelineStage(m, s, lay.stages, device, group=group)
              for m, s in zip(modules, ids, strict=True)]
    cls = getattr(pl, f"Schedule{lay.schedule}")
    if lay.stages_per_rank > 1:
        return cls(stages, n_microbatches=lay.microbatches, loss_fn=_loss)
    return cls(stages[0], n_microbatches=lay.microbatches, loss_fn=_loss)


def _loss_context(layout: Layout) -> Any:
    """torch's ``loss_parallel`` (cross entropy over vocabulary-sharded logits, forward and
    backward inside it) under tensor parallelism, else nothing."""
    if layout.tp == 1:
        return nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


# -- one step ----------------------------------------------------------------------------------

def _batch(case: VerifyCase, device: torch.device, rows: int, step: int, dp_rank: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` sequences of ids and their next-token targets for ``step`` of data-parallel
    rank ``dp_rank`` (each replica its own data; tensor-parallel and pipeline ranks of one
    replica the same)."""
    g = torch.Generator(device=device).manual_seed(case.seed * 1000003 + step * 1009 + dp_rank)
    ids = torch.randint(0, case.spec.vocab, (rows, case.spec.seq_len + 1), generator=g,
                        device=device)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


class _Optimizers:
    """Several optimizers stepped as one (ZeRO 1 with ``ep > 1``: each shards its states over
    its own group)."""

    def __init__(self, optimizers: list[Any]) -> None:
        self.optimizers = optimizers

    def step(self) -> None:
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)


def _optimizer(case: VerifyCase, params: list[nn.Parameter], zero1: bool,
               notes: list[str], built: _Built | None = None) -> Any:
    """AdamW over ``params`` (fp32 states; ``lr`` 1e-4, weight decay 0.1), as
    ``case.optimizer`` says: one parameter group per kind of tensor. ``zero1``: torch's
    ``ZeroRedundancyOptimizer`` over the default group, or, where ``built`` has expert
    parameters (``ep > 1``), one over the rest on the data-parallel group and one over the
    experts on the expert-data-parallel group (the ranks that hold the same experts)."""
    kw: dict[str, Any] = {"lr": 1e-4, "weight_decay": 0.1, case.optimizer: True}
    if zero1 and built is not None and built.expert_params:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        ids = {id(p) for p in built.expert_params}
        dense = [p for p in params if id(p) not in ids]
        experts = [p for p in params if id(p) in ids]
        return _Optimizers([
            ZeroRedundancyOptimizer(dense, optimizer_class=torch.optim.AdamW,
                                    process_group=built.dp_group, **kw),
            ZeroRedundancyOptimizer(experts, optimizer_class=torch.optim.AdamW,
                                    process_group=built.expert_group, **kw)])
    groups: dict[str, list[nn.Parameter]] = {}
    for p in params:   # a fused step takes one kind of tensor (DTensors of one mesh)
        mesh = getattr(p, "device_mesh", None)
        key = type(p).__name__ + ("" if mesh is None else f" {mesh.mesh_dim_names}")
        groups.setdefault(key, []).append(p)
    if zero1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, **kw)
    param_groups = [{"params": g} for g in groups.values()]
    try:
        return torch.optim.AdamW(param_groups, **kw)
    except (RuntimeError, ValueError) as exc:
        notes.append(f"AdamW {case.optimizer} refused here ({exc}); ran foreach")
        kw.pop(case.optimizer)
        return torch.optim.AdamW(param_groups, foreach=True, **kw)


class _Clock:
    """Phase times of one step: CUDA events on a GPU (read after the step), the host clock
    on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, Any]] = []

    def mark(self, name: str) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append((name, e))
        else:
            self.marks.append((name, time.perf_counter()))

    def phases(self) -> dict[str, float]:
        """Seconds per phase name: each mark ends a phase that began at the mark before it
        (repeated names, one per microbatch, are summed)."""
        if self.cuda:
            torch.cuda.synchronize()
        out: dict[str, float] = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:], strict=False):
            out[name] = out.get(name, 0.0) + ((a.elapsed_time(b) / 1e3) if self.cuda
                                              else (b - a))
        return out


@contextmanager
def _attention_kernel(case: VerifyCase, device: torch.device) -> Iterator[None]:
    if device.type != "cuda" or case.attention == "default":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[case.attention]
    with sdpa_kernel(backend):
        yield


def _train_step(case: VerifyCase, built: _Built, opt: Any,
                device: torch.device, meter: Any, step: int, clock: _Clock) -> float | None:
    """One optimizer step of ``built``; the rank's loss (the mean over its rows), or, under a
    pipeline, the mean of the last stage's microbatch losses on the rank that holds it and
    ``None`` on the others."""
    lay = case.layout
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16)
                if lay.zero in (0, 1) and case.dtype == "bf16" else nullcontext())
    rows = lay.micro_batch * lay.microbatches
    ids, target = _batch(case, device, rows, step, built.dp_rank)
    total: torch.Tensor | None = None     # read after the step: no sync inside it
    clock.mark("start")
    if built.schedule is not None:
        with meter.phase("schedule"), autocast, _loss_context(lay):
            first = 0 in built.stage_ids
            last = lay.stages - 1 in built.stage_ids
            kwargs: dict[str, Any] = {}
            if last:
                kwargs["target"] = target
                kwargs["losses"] = []
            built.schedule.step(*((ids,) if first else ()), **kwargs)
            if last:
                total = torch.stack([_whole(x.detach()) for x in kwargs["losses"]]).mean()
        clock.mark("forward+backward")
    else:
        model = built.modules[0]
        m = lay.microbatches
        for i in range(m):
            sl = slice(i * lay.micro_batch, (i + 1) * lay.micro_batch)
            sync = i == m - 1
            if hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(sync)
            ctx = model.no_sync() if built.ddp and not sync else nullcontext()
            with ctx:
                with meter.phase("forward"), autocast, _loss_context(lay):
                    loss = _loss(model(ids[sl]), target[sl]) / m
                total = loss.detach() if total is None else total + loss.detach()
                clock.mark("forward")
                with meter.phase("backward"), _loss_context(lay):
                    loss.backward()
                clock.mark("backward")
                del loss
    with meter.phase("optimizer"):
        _reduce_expert_grads(built)
        opt.step()
        opt.zero_grad(set_to_none=True)
    clock.mark("optimizer")
    return None if total is None else float(total)


def _whole(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain tensor (a replicated ``DTensor``, as ``loss_parallel`` gives, whole)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _reduce_expert_grads(built: _Built) -> None:
    """Under DDP with ``ep > 1``: the experts' gradients, which already sum their ``ep``
    ranks' tokens, summed over the ranks holding the same experts and divided by ``dp``
    (the mean over every data-parallel rank, as DDP gives the rest)."""
    import torch.distributed as dist

    for p in built.expert_params:
        if p.grad is not None:
            dist.all_reduce(p.grad, group=built.expert_group)
            p.grad.div_(built.expert_divide)


def run_rank(rank: int, world_size: int, case: VerifyCase) -> RankMeasurement:
    """Rank function (:func:`distlab.launch.run`): :class:`VerifyCase` ``case`` on this rank
    (the module docstring). Raises :class:`MeasuredOutOfMemory` on an out-of-memory error
    (after freeing what this rank held), ``ValueError`` for a layout it cannot run."""
    reason = unsupported_reason(case.layout)
    if reason:
        raise ValueError(reason)
    if case.layout.gpus != world_size:
        raise ValueError(f"layout {case.layout.label} needs {case.layout.gpus} ranks; "
                         f"{world_size} were started")
    if case.device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no GPU")
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        meter: Any = CudaMeter(device)
        host: Any = nullcontext()
    else:
        device = torch.device("cpu")
        meter = host = HostMeter()
    phase = "build"
    built: _Built | None = None
    opt = None
    try:
        with host:
            with meter.phase("build"):
                built = _build(case, rank, device)
                params = [p for m in built.modules for p in m.parameters()]
                opt = _optimizer(case, params, built.zero1, built.notes, built)
            steps: list[dict[str, float]] = []
            with _attention_kernel(case, device):
                for step in range(case.warmup + case.steps):
                    phase = f"step {step}"
                    clock = _Clock(device)
                    _train_step(case, built, opt, device, meter, step, clock)
                    if step >= case.warmup:
                        steps.append(clock.phases())
        cuda = cuda_memory_stats(device) if device.type == "cuda" else None
        peaks = {k: asdict(v) for k, v in meter.result().items()}
    except torch.OutOfMemoryError as exc:
        details = _oom_details(exc, phase, device)
        traceback.clear_frames(exc.__traceback__)   # the frames hold the step's tensors
        built = opt = None
        _release(device)
        raise MeasuredOutOfMemory(details) from None
    step_s = tuple(sum(s.values()) for s in steps)
    phase_s = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = RankMeasurement(rank, world_size, name, step_s, phase_s, peaks, cuda,
                          built.recompute, built.kv_repeated, tuple(built.notes))
    del built, opt
    _release(device)
    return out


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def phase_peak(m: RankMeasurement, phase: str) -> PhasePeak | None:
    """The :class:`PhasePeak` of ``phase`` in ``m``, or ``None``."""
    p = m.peaks.get(phase)
    return None if p is None else PhasePeak(**p)


RankFn = Callable[[int, int, VerifyCase], RankMeasurement]
