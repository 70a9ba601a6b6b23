"""Bytes per GPU of a layout as the GPU sees them: what torch allocates at its peak, with its
parts, what the caching allocator reserves for it, and what the process holds outside the
allocator.

:func:`memory_per_gpu` gives the most loaded GPU of a :class:`~distlab.plan.layout.Layout`
(:func:`memory_per_rank`: every pipeline rank) as a :class:`MemoryEstimate`. All counts are
bytes on one GPU unless a name says elements.

How it is computed: the step of each pipeline rank's GPU is written tensor by tensor
(:func:`distlab.plan.memory_step.step_program`: states, FSDP's gathers and reduce-scatters,
activations kept and recomputed, each layer's working set, the loss's vocabulary-sized tensors,
the optimizer's state and temporaries, each on its CUDA stream) and replayed through a model of
torch's caching allocator (:mod:`distlab.plan.allocator`). The peak allocated bytes and each
part's share at that moment come from the replay, and so do the reserved bytes: no fitted
overhead. What a GPU holds outside the allocator (:data:`DEVICE_BYTES`, the CUDA context and the
libraries' handles, measured; :data:`NCCL_COMMUNICATOR_BYTES` per NCCL communicator of more than
one rank, estimated) is added; :meth:`MemoryEstimate.fits` compares the whole with what CUDA
reports as the GPU's memory. Given the GPU (``hw``), a step whose reserve would not fit is
replayed again against the GPU's memory: torch's allocator, refused a new segment, releases its
cached segments and tries again, so a step can run in less reserve than it takes with memory to
spare (measured: Llama 3.2 3B steps that reserve 80-88 GiB on an H200 ran within 78.4 GiB, an
H100's, when the allocator was capped there); it fits if that replay completes.

Model states (parameters, gradients, optimizer state)
-----------------------------------------------------
The layers are split over the ``pp * stages_per_rank`` stages as
:func:`distlab.plan.partition.layers_per_stage` splits them (the first ``layers % stages``
stages one more, so the largest stage holds ``ceil(layers / stages)``); stages sit on ranks as
the schedule places them (:func:`distlab.plan.partition.rank_stages`). A rank holds its stages'
layers, the input embedding if it holds stage 0, the final norm and output layer if it holds
the last stage (a tied output layer on a rank without the embedding keeps its own copy, as
Megatron-LM's pipeline does: :attr:`RankParams.tied_copy`). Tensor parallelism follows
Megatron-LM (Shoeybi et al. 2019; ``megatron/core/tensor_parallel/layers.py``): the Q, K, V,
output, and MLP matrices and the column-parallel biases are divided by ``tp``; the norms, the
row-parallel linears' biases (output projection, second MLP linear) and learned position
embeddings are whole on every GPU of the group (Megatron replicates them; with sequence
parallelism too, their gradients all-reduced); the vocabulary is divided by ``tp``
(``VocabParallelEmbedding`` and the column-parallel output layer, padded to ``ceil(v / tp)``
rows), and so are the loss's logits unless the framework gathers them (``"hf"`` of
:data:`FRAMEWORKS`). Key/value heads fewer than ``tp`` are repeated, one head per GPU.

ZeRO shards over the ``dp * cp`` ranks that hold the same layers (Megatron-LM's distributed
optimizer and torchtitan's FSDP mesh both shard over data x context parallel): what each stage
shards is :func:`distlab.zero.memory_model.zero_memory`'s (stage 1 the optimizer state, 2 and the
gradients, 3 and the parameters, ``ceil(P / N)`` elements each), bytes per element from
:data:`~distlab.plan.layout.PRECISIONS` of the layout's precision.

Activations
-----------
Per layer, the tensors kept from forward for backward as :mod:`distlab.plan.activations`
counts them (Korthikanti et al. 2022, generalised to grouped-query attention, SwiGLU, fused
attention kernels, recompute none / selective / per-op / full, tensor, sequence and context
parallelism). :class:`ActivationBytes` is the analytic breakdown at the peak (the microbatches a
pipeline rank holds from its schedule's plan); :attr:`MemoryEstimate.activations` is what the
replay holds at the allocated peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from distlab._checks import check_bool, check_choice, check_float, check_instance, check_int
from distlab.pipeline_parallel.actions import Kind
from distlab.pipeline_parallel.cost import in_flight
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.plan.activations import (
    ATTENTION,
    LOSS_BYTES,
    LayerTerm,
    activation_options,
    check_split,
    edge_nbytes,
    layer_activation_nbytes,
    layer_activation_terms,
    layer_nbytes,
    loss_vocab,
)
from distlab.plan.allocator import OutOfMemory
from distlab.plan.experts import check_experts, moe_kept_tensors
from distlab.plan.layout import (
    PRECISIONS,
    GpuKind,
    Hardware,
    Layout,
    check_layout_fits,
    gpu_kind,
)
from distlab.plan.memory_program import ALLOCATED_PARTS, run_program
from distlab.plan.memory_step import (
    OPTIMIZERS,
    STEADY_ROUNDS,
    StepOptions,
    steady_microbatches,
    step_program,
)
from distlab.plan.memory_step import style as step_style
from distlab.plan.partition import (
    RankParams,
    layers_per_stage,
    rank_params,
    rank_stages,
    stage_moe_layers,
    stage_params,
)
from distlab.recompute import NONE, Again
from distlab.transformer import ModelSpec, model_spec
from distlab.zero.memory_model import zero_memory

__all__ = ["ATTENTION", "BOUND_OPTIONS", "DEFAULT_BUCKET_MB", "DEVICE_BYTES", "FRAMEWORKS",
           "NCCL_COMMUNICATOR_BYTES",
           "PARTS", "STEADY_ROUNDS", "ActivationBytes", "LayerTerm", "MemoryEstimate",
           "RankParams", "communicators", "layer_activation_nbytes", "layer_activation_terms",
           "memory_lower_bound", "memory_per_gpu", "memory_per_rank", "rank_params",
           "steady_microbatches"]

DEFAULT_BUCKET_MB = 25.0
"""MiB of one data-parallel gradient bucket (torch DDP's ``bucket_cap_mb`` default)."""

FRAMEWORKS: dict[str, dict[str, Any]] = {
    "default": {},
    "megatron": {"fused_swiglu": True, "moe_weighting": "activation"},
    "torch": {"sp_saves_gathered": True, "moe_weighting": "input", "float8_linear": "torchao"},
    "hf": {"sp_saves_gathered": True, "vocab_parallel_loss": False},
}
"""What a framework's kernels keep, as :func:`memory_per_gpu`'s keyword arguments
(``python -m distlab.plan --framework``): ``"default"`` the model's defaults (a SwiGLU of three
ops keeping SiLU's output, a routed expert's output weighted after it and so kept, the
sequence-parallel shard of a column-parallel input kept, as Megatron-LM does, Transformer
Engine's float8 linears); ``"megatron"`` Megatron-Core with ``bias_activation_fusion``
(Megatron Bridge's providers set it): the fused SwiGLU keeps its input only, and
``TEGroupedMLP`` weights each routed row inside it
(:data:`~distlab.plan.activations.MOE_WEIGHTINGS`); ``"torch"`` torch's own modules as
torchtitan runs them, eager: ``parallelize_module``'s ``SequenceParallel`` before a
``ColwiseParallel`` linear keeps the all-gathered input (autograd saves the matmul's input),
the SwiGLU of three ops, the router's scores applied to the routed input
(``score_before_experts=True``, torchtitan's default), and torchao's float8 linears, which keep
their 16-bit input without tensor parallelism
(:data:`~distlab.plan.activations.FLOAT8_LINEARS`); ``"hf"`` a Hugging Face model under its
``tp_plan`` (torch's ``parallelize_module`` styles, so the gathered input as ``"torch"``; an
expert's output weighted after it, as the default), whose output layer gathers the logits
onto every tensor-parallel rank before the loss: each holds all ``v`` columns of the fp32
logits and their gradient where Megatron-LM and torchtitan keep ``v / tp``
(:func:`~distlab.plan.activations.loss_vocab`; the gather's time is not priced). The
published Megatron runs are judged with the second
(:data:`distlab.evidence.plan.published_moe.MEMORY_OPTIONS`)."""

BOUND_OPTIONS = ("attention", "dropout", "dtype_bytes", "mask_bytes", "fused_swiglu",
                 "sp_saves_gathered", "moe_weighting", "float8_linear", "vocab_parallel_loss",
                 "device_bytes")
""":func:`memory_per_gpu`'s keyword arguments :func:`memory_lower_bound` takes too: a bound
computed without the ones a caller prices with is no bound."""

DEVICE_BYTES = 859_832_320
"""Bytes a training process holds on its GPU outside torch's caching allocator: the CUDA context,
cuBLAS's, cuDNN's and NCCL's handles. Measured on an H200 (torch 2.11, CUDA 13): device memory
in use minus the allocator's reserved bytes, 0.80 GiB, the same in every one of the 49 runs of
``results/gpu-h200-2026-11-27-fit`` (FSDP2 on a world of one, so one NCCL communicator of one
rank, no channel buffers). Taken for every GPU (the context is of the same order on each
generation)."""

NCCL_COMMUNICATOR_BYTES = 32 * (4 * 2**20 + 4_718_592 + 262_144)
"""Bytes an NCCL communicator of more than one rank holds on each GPU, estimated, not measured
here (the GPU here runs one rank): one receive buffer per channel for each protocol (Simple's
``NCCL_BUFFSIZE``, 4 MiB; LL128's, 4.5 MiB; LL's, 256 KiB) on 32 channels, NCCL's
``NCCL_MAX_NCHANNELS`` on NVLink boxes; about 280 MiB."""

@dataclass(frozen=True)
class ActivationBytes:
    """Activation bytes one GPU holds at its peak, by where they sit.

    Attributes:
        layers: transformer layers: :attr:`per_layer` x the layers of each stage x the
            microbatches that stage holds, summed over the rank's stages.
        embedding: the first stage's token ids and embedding dropout mask, x its microbatches.
        output: the last stage's final norm and output layer inputs, x its microbatches.
        logits: the last stage's logits (fp32 for the loss, and the 16-bit ones), x its
            microbatches.
        working: what backward holds beyond the stored activations at its peak: under full
            recompute, the one layer being recomputed (its activations without recompute);
            on the last stage, the fp32 gradient of one microbatch's logits.
        per_layer: one layer, one microbatch.
        stage_layers: layers on each of the rank's stages.
        in_flight: microbatches each of the rank's stages holds at the peak.
    """

    layers: int
    embedding: int
    output: int
    logits: int
    per_layer: int
    stage_layers: tuple[int, ...]
    in_flight: tuple[int, ...]
    working: int = 0

    @property
    def total(self) -> int:
        """``layers + embedding + output + logits + working``, bytes."""
        return self.layers + self.embedding + self.output + self.logits + self.working


PARTS = ALLOCATED_PARTS + ("allocator", "device")
"""The parts of a :class:`MemoryEstimate`, in order: what is allocated at the peak
(:data:`~distlab.plan.memory_program.ALLOCATED_PARTS`), what the caching allocator reserves
beyond it (``allocator``) and what the process holds outside the allocator (``device``). They
sum to :attr:`MemoryEstimate.total`."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one GPU holds at its peak (the module docstring says how each part is found).

    Attributes:
        params, grads, optimizer: model states allocated at the peak (ZeRO-sharded where the
            stage says; FSDP's unsharded 16-bit gradients in flight count as grads).
        activations: activations allocated at the peak (:attr:`activation_parts` is the
            analytic breakdown).
        gathered: FSDP's gathered units, or autocast's 16-bit weight copies.
        comm_buffers: collective buffers (all-gather, reduce-scatter, DDP's buckets).
        working: transients at the peak (a layer's working set, the loss's vocabulary-sized
            tensors, the optimizer's temporaries).
        allocator: what the caching allocator reserves beyond the peak allocated bytes.
        device: what the process holds outside the allocator (:data:`DEVICE_BYTES` and
            :data:`NCCL_COMMUNICATOR_BYTES` per communicator).
        activation_parts: the activations by where they sit (analytic).
        params_held: the GPU's parameters (elements), before ZeRO sharding.
        pp_rank: the pipeline rank this GPU belongs to.
        stages: its stages.
        states_held: ``(parameters, gradients, optimizer state)`` bytes the GPU holds when
            each is whole (ZeRO's sharding, :func:`distlab.zero.memory_model.zero_memory`, in
            the layout's precision): what the states take over a step, where the parts above
            are what is allocated at the peak.
        peak_phase: the phase of the step the allocated peak falls in (``"step 1 backward"``).
        expandable_segments: the allocator modelled with expandable segments.
        gpu_memory_bytes: the GPU's memory when a hardware was given, else ``None``.
    """

    params: int
    grads: int
    optimizer: int
    activations: int
    gathered: int
    comm_buffers: int
    working: int
    allocator: int
    device: int
    activation_parts: ActivationBytes
    params_held: int
    pp_rank: int
    stages: tuple[int, ...]
    states_held: tuple[int, int, int] = (0, 0, 0)
    peak_phase: str = ""
    expandable_segments: bool = False
    gpu_memory_bytes: int | None = None

    @property
    def states(self) -> int:
        """``params + grads + optimizer``, bytes."""
        return self.params + self.grads + self.optimizer

    @property
    def allocated(self) -> int:
        """The peak allocated bytes (what ``torch.cuda.max_memory_allocated`` reports)."""
        return sum(getattr(self, p) for p in ALLOCATED_PARTS)

    @property
    def reserved(self) -> int:
        """The peak reserved bytes (``torch.cuda.max_memory_reserved``)."""
        return self.allocated + self.allocator

    @property
    def total(self) -> int:
        """Every part: the reserved bytes and what the process holds outside the allocator."""
        return self.reserved + self.device

    def parts(self) -> dict[str, int]:
        """``{part: bytes}`` in :data:`PARTS` order."""
        return {name: getattr(self, name) for name in PARTS}

    def _memory(self, hw: Hardware | GpuKind | str | None) -> int:
        if hw is None:
            if self.gpu_memory_bytes is None:
                raise ValueError("hw: give the hardware (a Hardware, GpuKind or GPU name); "
                                 "memory_per_gpu was called without one")
            return self.gpu_memory_bytes
        if isinstance(hw, Hardware):
            return hw.gpu.memory_bytes
        return gpu_kind(hw).memory_bytes

    def headroom_bytes(self, hw: Hardware | GpuKind | str | None = None) -> int:
        """The GPU's memory minus :attr:`total` (negative: short by that much), bytes; ``hw``
        defaults to the hardware :func:`memory_per_gpu` was given."""
        return self._memory(hw) - self.total

    def fits(self, hw: Hardware | GpuKind | str | None = None) -> bool:
        """Whether :attr:`total` fits in the GPU's memory (see :meth:`headroom_bytes`)."""
        return self.headroom_bytes(hw) >= 0


def _holdings(schedule: str, pp: int, microbatches: int, stages_per_rank: int
              ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """:func:`_plan_holdings` on :func:`steady_microbatches` (the same holdings, a shorter
    plan)."""
    return _plan_holdings(schedule, pp, steady_microbatches(schedule, pp, microbatches),
                          stages_per_rank)


@lru_cache(maxsize=512)
def _plan_holdings(schedule: str, pp: int, microbatches: int, stages_per_rank: int
                   ) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per pipeline rank, the vectors of microbatches held per stage of the rank (its stages in
    order) at a grid step, the step's forwards counted before its releases; only those that
    can hold the peak (:func:`_undominated`)."""
    plan = build_plan(schedule, pp, microbatches, stages_per_rank)
    after = in_flight(plan)
    out = []
    for rank in range(plan.ranks):
        stages = plan.stages_of(rank)
        seen: set[tuple[int, ...]] = set()
        prev = dict.fromkeys(stages, 0)
        for t, step in enumerate(plan.grid[rank]):
            held = dict(prev)
            for a in step:
                if a.kind is Kind.FORWARD:
                    held[a.stage] = held.get(a.stage, 0) + 1
            seen.add(tuple(held.get(s, 0) for s in stages))
            prev = after[rank][t]
        out.append(_undominated(seen) or (tuple(0 for _ in stages),))
    return tuple(out)


def _undominated(vectors: set[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """The vectors no other one bounds from above in every entry (only they can be a peak
    for non-negative weights), sorted."""
    keep: list[tuple[int, ...]] = []
    for v in sorted(vectors, key=lambda x: (-sum(x), x)):
        if not any(all(a >= b for a, b in zip(k, v, strict=True)) for k in keep):
            keep.append(v)
    return tuple(sorted(keep))


def _peak(stage_nbytes: list[int], holdings: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The holding vector with the most bytes (the first such, in sorted order)."""
    return max(holdings, key=lambda held: sum(n * b for n, b in zip(held, stage_nbytes,
                                                                     strict=True)))


def communicators(layout: Layout) -> int:
    """The NCCL communicators of more than one rank a GPU of ``layout`` belongs to: its
    data-parallel (and context-parallel) group, its tensor-parallel group, its pipeline
    group."""
    return sum(1 for n in (layout.dp * layout.cp, layout.tp, layout.pp) if n > 1)


def _activation_bytes(spec: ModelSpec, layout: Layout, opt: Any, r: int,
                      stages: tuple[int, ...], holdings: Any) -> ActivationBytes:
    per_layer = layer_nbytes(spec, layout, opt)
    recomputed = layer_nbytes(spec, layout.with_(recompute=NONE), opt)
    emb, out, logits = edge_nbytes(spec, layout, opt)
    logits_grad = (spec.seq_len // layout.cp) * layout.micro_batch \
        * loss_vocab(spec, layout, opt) * LOSS_BYTES
    split = layers_per_stage(spec.layers, layout.stages)
    last = layout.stages - 1
    moe = [stage_moe_layers(spec, layout, s) if spec.moe else 0 for s in stages]
    moe_kept = sum(moe_kept_tensors(spec, layout, opt)) \
        if spec.moe else 0
    stage_nbytes = [split[s] * per_layer + (emb if s == 0 else 0)
                    + (out + logits if s == last else 0) + k * moe_kept
                    for s, k in zip(stages, moe, strict=True)]
    held = (_peak(stage_nbytes, holdings[r]) if holdings is not None
            else tuple(1 for _ in stages))
    working = max(recomputed if layout.recompute_policy.again is Again.LAYER else 0,
                  logits_grad if last in stages else 0)
    return ActivationBytes(
        layers=sum(n * (split[s] * per_layer + k * moe_kept)
                   for n, s, k in zip(held, stages, moe, strict=True)),
        embedding=sum(n * emb for n, s in zip(held, stages, strict=True) if s == 0),
        output=sum(n * out for n, s in zip(held, stages, strict=True) if s == last),
        logits=sum(n * logits for n, s in zip(held, stages, strict=True) if s == last),
        per_layer=per_layer, stage_layers=tuple(split[s] for s in stages), in_flight=held,
        working=working)


def memory_per_rank(model: ModelSpec | str | dict[str, Any], layout: Layout,
                    hw: Hardware | None = None, *, attention: str = "flash",
                    dropout: bool = False, dtype_bytes: int | None = None, mask_bytes: int = 1,
                    fused_swiglu: bool = False, sp_saves_gathered: bool = False,
                    moe_weighting: str = "output", float8_linear: str = "transformer_engine",
                    vocab_parallel_loss: bool = True,
                    bucket_mb: float = DEFAULT_BUCKET_MB, prefetch: int = 1,
                    optimizer: str = "fused", expandable_segments: bool = False,
                    device_bytes: int | None = None) -> tuple[MemoryEstimate, ...]:
    """One :class:`MemoryEstimate` per pipeline rank (every GPU of a pipeline rank holds the
    same bytes); arguments as :func:`memory_per_gpu`."""
    return _estimates(model, layout, hw, None, attention=attention, dropout=dropout,
                      dtype_bytes=dtype_bytes, mask_bytes=mask_bytes,
                      fused_swiglu=fused_swiglu, sp_saves_gathered=sp_saves_gathered,
                      moe_weighting=moe_weighting, float8_linear=float8_linear,
                      vocab_parallel_loss=vocab_parallel_loss,
                      bucket_mb=bucket_mb, prefetch=prefetch, optimizer=optimizer,
                      expandable_segments=expandable_segments, device_bytes=device_bytes)


def memory_lower_bound(model: ModelSpec | str | dict[str, Any], layout: Layout, *,
                       attention: str = "flash", dropout: bool = False,
                       dtype_bytes: int | None = None, mask_bytes: int = 1,
                       fused_swiglu: bool = False, sp_saves_gathered: bool = False,
                       moe_weighting: str = "output",
                       float8_linear: str = "transformer_engine",
                       vocab_parallel_loss: bool = True,
                       device_bytes: int | None = None) -> int:
    """Bytes the most loaded GPU of ``layout`` holds at least (:attr:`MemoryEstimate.total`
    is never less), without replaying the step: the model states present when a step's loss
    is computed (parameters, the optimizer's state, Megatron-LM's gradient buffer and fp32
    copy, DDP's buckets) and the activations every microbatch in flight keeps at that moment
    (one microbatch without a pipeline, the schedule's peak with one), the loss's fp32
    log-probabilities, and what the process holds outside the allocator. Cheap: for ruling
    layouts out before :func:`memory_per_gpu` replays the ones that may fit."""
    spec = model_spec(model)
    opt = activation_options(layout, attention, dropout, dtype_bytes, mask_bytes, fused_swiglu,
                             sp_saves_gathered, moe_weighting, float8_linear,
                             vocab_parallel_loss)
    check_split(spec, layout, opt.attention)
    check_experts(spec, layout)
    device = (DEVICE_BYTES + communicators(layout) * NCCL_COMMUNICATOR_BYTES
              if device_bytes is None else device_bytes)
    holdings = (_holdings(layout.schedule, layout.pp, layout.microbatches,
                          layout.stages_per_rank) if layout.pp > 1 else None)
    z, n = layout.zero, layout.dp * layout.cp
    p_b, g_b, o_b = PRECISIONS[layout.precision]
    kind = step_style(layout)
    best = 0
    for r in range(layout.pp):
        stages = rank_stages(layout, r)
        rp = stage_params(spec, layout, stages, r)
        total, shard = rp.total, rp.zero_shard(layout)
        act = _activation_bytes(spec, layout, opt, r, stages, holdings)
        params = (shard if z == 3 else total) * p_b
        moments = (shard if z >= 1 else total) * o_b
        grads = 0
        if kind == "megatron":
            grads = (shard if z >= 2 else total) * g_b
        elif kind == "ddp" and n > 1:
            grads = total * g_b                                   # DDP's bucket buffers
        gathered = 2 * total if kind == "fsdp" and layout.pp > 1 else 0
        loss = 0
        if layout.stages - 1 in stages:
            tokens = (spec.seq_len // layout.cp) * layout.micro_batch
            loss = tokens * loss_vocab(spec, layout, opt) * LOSS_BYTES
        kept = act.layers + act.embedding + act.output
        best = max(best, params + moments + grads + gathered + kept + loss)
    return best + device


def _candidates(spec: ModelSpec, layout: Layout, opt: Any, holdings: Any) -> tuple[int, ...]:
    """The pipeline ranks that can be the most loaded: the first (the embedding, the most
    microbatches in flight under 1F1B), the last (the loss's tensors) and the one whose
    activations and parameters are the most bytes."""
    if layout.pp == 1:
        return (0,)
    def rough(r: int) -> int:
        stages = rank_stages(layout, r)
        act = _activation_bytes(spec, layout, opt, r, stages, holdings).total
        return act + 16 * stage_params(spec, layout, stages, r).total // (layout.dp * layout.cp)
    heaviest = max(range(layout.pp), key=rough)
    return tuple(sorted({0, layout.pp - 1, heaviest}))


def _estimates(model: Any, layout: Layout, hw: Hardware | None, ranks: str | None, *,
               attention: str, dropout: bool, dtype_bytes: int | None, mask_bytes: int,
               fused_swiglu: bool, sp_saves_gathered: bool, moe_weighting: str,
               float8_linear: str, vocab_parallel_loss: bool, bucket_mb: float, prefetch: int,
               optimizer: str, expandable_segments: bool, device_bytes: int | None
               ) -> tuple[MemoryEstimate, ...]:
    """Every pipeline rank's estimate (``ranks=None``) or only :func:`_candidates`'
    (``"candidates"``)."""
    spec = model_spec(model)
    layout = check_instance("layout", layout, Layout)
    if hw is not None:
        check_instance("hw", hw, Hardware)
        check_layout_fits(layout, hw)
    opt = activation_options(layout, attention, dropout, dtype_bytes, mask_bytes, fused_swiglu,
                             sp_saves_gathered, moe_weighting, float8_linear,
                             vocab_parallel_loss)
    bucket = check_float("bucket_mb", bucket_mb, minimum=0.0)
    prefetch = check_int("prefetch", prefetch, minimum=0)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    expandable = check_bool("expandable_segments", expandable_segments)
    device = (DEVICE_BYTES + communicators(layout) * NCCL_COMMUNICATOR_BYTES
              if device_bytes is None else check_int("device_bytes", device_bytes, minimum=0))
    check_split(spec, layout, opt.attention)
    check_experts(spec, layout)
    step_opt = StepOptions(opt, optimizer, bucket, prefetch)
    holdings = (_holdings(layout.schedule, layout.pp, layout.microbatches,
                          layout.stages_per_rank) if layout.pp > 1 else None)
    memory = None if hw is None else hw.gpu.memory_bytes
    estimates = []
    which = range(layout.pp) if ranks is None else _candidates(spec, layout, opt, holdings)
    for r in which:
        stages = rank_stages(layout, r)
        rp = stage_params(spec, layout, stages, r)
        program = step_program(spec, layout, r, step_opt)
        peak = run_program(program, expandable_segments=expandable)
        if memory is not None and peak.reserved + device > memory >= peak.allocated + device:
            # near the GPU's memory torch's allocator releases what it caches and retries:
            # the step may still run, holding less in reserve than with memory to spare (not
            # where the tensors alone are more than the memory: that replay could only fail)
            try:
                peak = run_program(program, expandable_segments=expandable,
                                   capacity=max(memory - device, 0))
            except OutOfMemory:
                pass
        act = _activation_bytes(spec, layout, opt, r, stages, holdings)
        z = zero_memory(rp.total - rp.expert, layout.dp * layout.cp, layout.zero, "fp32")
        ze = zero_memory(rp.expert, layout.expert_dp, layout.zero, "fp32")
        p_b, g_b, o_b = PRECISIONS[layout.precision]
        held = ((z.params + ze.params) // 4 * p_b, (z.grads + ze.grads) // 4 * g_b,
                (z.optimizer + ze.optimizer) // 8 * o_b)
        estimates.append(MemoryEstimate(
            **peak.parts, allocator=peak.reserved - peak.allocated, device=device,
            activation_parts=act, params_held=rp.total, pp_rank=r, stages=stages,
            states_held=held,
            peak_phase=peak.phase, expandable_segments=expandable, gpu_memory_bytes=memory))
    return tuple(estimates)


def memory_per_gpu(model: ModelSpec | str | dict[str, Any], layout: Layout,
                   hw: Hardware | None = None, *, attention: str = "flash",
                   dropout: bool = False, dtype_bytes: int | None = None, mask_bytes: int = 1,
                   fused_swiglu: bool = False, sp_saves_gathered: bool = False,
                   moe_weighting: str = "output", float8_linear: str = "transformer_engine",
                   vocab_parallel_loss: bool = True,
                   bucket_mb: float = DEFAULT_BUCKET_MB, prefetch: int = 1,
                   optimizer: str = "fused", expandable_segments: bool = False,
                   device_bytes: int | None = None) -> MemoryEstimate:
    """Bytes per GPU of the most loaded GPU of ``layout`` (the pipeline rank with the largest
    total; the first of equals; under a pipeline, of the ranks that can be the most loaded: the
    first, the last and the one with the most activation and parameter bytes).

    Args:
        model: a :class:`~distlab.transformer.ModelSpec`, a preset name or a dict of fields.
        layout: the :class:`~distlab.plan.layout.Layout`.
        hw: the hardware (its GPU count must be the layout's); kept for
            :meth:`MemoryEstimate.fits` and :meth:`MemoryEstimate.headroom_bytes`.
        attention: ``"flash"`` or ``"eager"`` (:data:`ATTENTION`).
        dropout: the model trains with dropout (masks kept).
        dtype_bytes: bytes per activation element; ``None``: 4 for ``precision="fp32"``, else 2.
        mask_bytes: bytes per dropout-mask element (1: a bool).
        fused_swiglu: a gated MLP's SiLU recomputed in backward (Megatron-LM's fusion).
        sp_saves_gathered: with sequence parallelism, column-parallel linears keep their
            all-gathered input (torch) instead of gathering it again (Megatron-LM).
        moe_weighting: where a routed expert's output is weighted by its router probability
            (:data:`~distlab.plan.activations.MOE_WEIGHTINGS`): ``"output"`` (distlab's MoE
            layer) or ``"input"`` (torchtitan's default, ``score_before_experts=True``) keep one
            more ``rows * hidden`` tensor per MoE layer than ``"activation"`` (Megatron-Core's
            fused weighted SwiGLU).
        float8_linear: whose float8 linears a float8 layout runs
            (:data:`~distlab.plan.activations.FLOAT8_LINEARS`): Transformer Engine's keep an
            8-bit copy of their input, torchao's the 16-bit input unless tensor parallelism
            casts it to float8 before the gather.
        vocab_parallel_loss: the loss runs on each tensor-parallel rank's slice of the
            vocabulary (Megatron-LM's, torchtitan's ``loss_parallel``); ``False``: the logits
            are gathered first and every rank holds all ``v`` columns of them and of their
            gradient (a Hugging Face model under tensor parallelism;
            :func:`~distlab.plan.activations.loss_vocab`).
        bucket_mb: MiB of the data-parallel gradient bucket in flight (ZeRO 2).
        prefetch: FSDP units gathered ahead in backward.
        optimizer: AdamW's ``"fused"`` or ``"foreach"`` implementation.
        expandable_segments: the allocator runs with ``expandable_segments:True``.
        device_bytes: what the process holds outside the allocator (``None``:
            :data:`DEVICE_BYTES` plus :data:`NCCL_COMMUNICATOR_BYTES` per communicator; 0 for
            a host).

    Raises:
        ValueError, TypeError: a bad argument, named; a layout that cannot split the model
            (``layout.tp``, ``layout.cp``, stages), or a pipeline combination torch refuses.
    """
    estimates = _estimates(model, layout, hw, "candidates", attention=attention,
                           dropout=dropout, dtype_bytes=dtype_bytes, mask_bytes=mask_bytes,
                           fused_swiglu=fused_swiglu, sp_saves_gathered=sp_saves_gathered,
                           moe_weighting=moe_weighting, float8_linear=float8_linear,
                           vocab_parallel_loss=vocab_parallel_loss,
                           bucket_mb=bucket_mb, prefetch=prefetch, optimizer=optimizer,
                           expandable_segments=expandable_segments, device_bytes=device_bytes)
    return max(estimates, key=lambda e: e.total)
