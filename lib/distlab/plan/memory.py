"""Bytes per GPU of a layout: model states, activations, gathered units, buffers, overhead.

:func:`memory_per_gpu` gives the most loaded GPU of a :class:`~distlab.plan.layout.Layout`
(:func:`memory_per_rank`: every pipeline rank) as a :class:`MemoryEstimate`. All counts are
bytes on one GPU unless a name says elements.

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
rows). Key/value heads fewer than ``tp`` are repeated, one head per GPU.

ZeRO shards over the ``dp * cp`` ranks that hold the same layers (Megatron-LM's distributed
optimizer and torchtitan's FSDP mesh both shard over data x context parallel): what each stage
shards is :func:`distlab.zero.memory_model.zero_memory`'s (stage 1 the optimizer state, 2 and the
gradients, 3 and the parameters, ``ceil(P / N)`` elements each), bytes per element from
:data:`~distlab.plan.layout.PRECISIONS` of the layout's precision.

Activations
-----------
Per layer, the tensors kept from forward for backward, counted one by one
(:func:`layer_activation_terms`) as Korthikanti et al. 2022 count them ("Reducing Activation
Recomputation in Large Transformer Models", section 4, as
:mod:`distlab.tensor_parallel.memory`), generalised:

- grouped-query attention: K and V are ``kv_heads * head_dim`` wide where the attention kernel
  reads them so (``attention="flash"``); eager attention repeats them per query head first,
  so the products keep them ``hidden`` wide (torch's math SDPA, Hugging Face's ``repeat_kv``);
- gated MLPs (SwiGLU, ``down(silu(gate(x)) * up(x))``): the gate's output (SiLU's input), the up
  projection's output and SiLU's output (the product keeps both factors) and the product (the
  down projection's input), four ``s b f`` tensors where the two-matrix MLP keeps two;
  ``fused_swiglu=True``: three (Megatron-LM's fused ``bias_swiglu`` keeps its input and
  recomputes SiLU);
- ``attention="flash"`` (FlashAttention, Dao et al. 2022, and torch's fused SDPA kernels): no
  ``a s^2 b`` tensor; the kernel keeps Q, K, V, its output (the output projection's input, one
  tensor) and the softmax statistics, one fp32 log-sum-exp per query row and head (``4 a s b``
  bytes). ``"eager"``: the paper's softmax output, and with dropout its mask and output;
- dropout masks only with ``dropout=True`` (the paper's GPT has dropout; Llama-style training
  runs none), ``mask_bytes`` each element (1, a bool, as CUDA's fused dropout keeps; torch's CPU
  dropout keeps its mask in the activation dtype); flash attention's own dropout keeps a seed,
  no mask;
- tensor parallelism divides what lies between the column- and the row-parallel linear;
  sequence parallelism the rest, except, with ``sp_saves_gathered=True``, the inputs of the
  column-parallel linears (QKV, the MLP's first linears, the output layer): torch's
  ``SequenceParallel``/``ColwiseParallel`` (and distlab's) keep the all-gathered input whole,
  where Megatron-LM keeps the sequence shard and gathers again in backward (the paper's
  ``34 / t``, the default);
- selective recompute drops the ``a s^2 b`` tensors, full recompute keeps each layer's input
  only (divided by ``t`` with sequence parallelism), as the paper's Table 2; ``"op"``
  (torchtitan's per-op selective checkpointing, its ``_save_list`` policy) keeps the layer's
  input, the outputs of the odd-numbered matrix products in forward order
  (:func:`~distlab.plan.model.per_op_saved_linears`: Q, V, the gate and the down projection of
  a SwiGLU layer; a row-parallel product's output whole on each GPU; a linear with a bias runs
  as ``addmm``, which the policy neither counts nor keeps), the fused attention
  kernel's output and log-sum-exp, and with sequence parallelism each reduce-scatter's output;
  eager attention's products are not in the policy's list, so nothing of it is kept; context
  parallelism divides the sequence by ``cp`` (ring attention keeps the rank's own chunk of Q,
  K and V; no ``a s^2 b`` tensor, so eager attention is refused with ``cp > 1``).

For ``ffn_hidden = 4 h``, a two-matrix MLP, ``kv_heads = heads``, eager attention, dropout, 2-byte
activations and 1-byte masks this is exactly :func:`distlab.tensor_parallel.memory.
layer_activation_bytes` (Table 2). Left out, as in the paper: the norms' fp32 statistics
(``4`` or ``8`` bytes per token), the biases' inputs and what backward allocates while it runs
(activation gradients, the layer recomputed under full recompute).

The first stage adds the token ids the embedding lookup keeps (int64) and, with dropout, the
embedding dropout's mask; the last stage the final norm's input, the output layer's input and
the logits: ``s b v / tp`` fp32 for the loss (what cross entropy keeps: its softmax or
log-softmax) and, with 16-bit activations, the 16-bit logits the output layer produced.

Each stage's bytes per microbatch are multiplied by the microbatches it holds at the rank's
peak, from the pipeline plan of the layout's schedule
(:func:`distlab.pipeline_parallel.cost.in_flight`: a microbatch is held from its forward to the
backward that releases it, the forwards of a step counted before its releases; the peak is the
largest bytes-weighted sum, as :func:`distlab.pipeline_parallel.cost.activation_bytes`). 1F1B's
rank ``r`` holds ``p - r`` microbatches of its stage, GPipe's ``m``; the last stage of 1F1B holds
one, so its logits count once; GPipe keeps every microbatch's loss graph, so ``m`` times.
Without pipeline parallelism a rank holds one microbatch (gradient accumulation runs them one
at a time).

The rest
--------
- ``gathered``: ZeRO-3 / FSDP units held whole: the unit computing and the ``prefetch`` units
  gathered ahead, the largest such window of consecutive units of the rank in forward order,
  2 bytes per element (4 with ``precision="fp32"``). Units are torchtitan's: the embedding, each
  layer, the final norm with the output layer. ``"fsdp-mixed"`` below ZeRO-3 holds a 16-bit copy
  of every parameter of the rank (FSDP2 without resharding after forward; autocast's cast
  cache). ZeRO-3 under a pipeline (``pp > 1``) keeps the whole stage gathered through the step
  (torchtitan turns resharding after forward off there), and its unsharded 16-bit gradients
  accumulate until the last microbatch (torch's ``PipelineStage`` defers gradient sync), which
  ``comm_buffers`` holds.
- ``comm_buffers``: with ``dp * cp > 1`` at ZeRO 0-2 one gradient bucket of ``bucket_mb`` MiB
  (torch DDP's default 25) being reduced, at most the rank's gradients; at ZeRO-3 two units'
  whole gradients (the unit whose gradients are being computed and the one being
  reduce-scattered, as :func:`distlab.zero.memory_model.stage3_memory` counts them), bytes of
  the gradient state. With sequence parallelism and Megatron's regather, the all-gathered
  ``s b h`` input buffer (Megatron's global memory buffer); tensor parallelism's all-reduces run
  in place.
- ``overhead``: ``overhead_fraction`` of everything above (:data:`ALLOCATOR_OVERHEAD`, fitted
  on published runs' reported memory): what a run reports beyond the modelled bytes (the
  caching allocator's fragmentation and reserve, the CUDA context, library workspaces), not
  modelled one by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from distlab._checks import check_bool, check_choice, check_float, check_instance, check_int
from distlab.pipeline_parallel.actions import Kind
from distlab.pipeline_parallel.cost import in_flight
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.plan.layout import (
    PRECISIONS,
    GpuKind,
    Hardware,
    Layout,
    check_layout_fits,
    gpu_kind,
)
from distlab.plan.model import ModelSpec, model_spec, per_op_saved_linears
from distlab.plan.partition import (
    RankParams,
    layer_params_per_gpu,
    layers_per_stage,
    rank_params,
    rank_stages,
    stage_params,
)
from distlab.tensor_parallel.memory import ATTENTION as ATTENTION_BLOCK
from distlab.tensor_parallel.memory import LAYER_NORM, MLP, ActivationTerm
from distlab.zero.memory_model import zero_memory

__all__ = ["ALLOCATOR_OVERHEAD", "ATTENTION", "DEFAULT_BUCKET_MB", "ActivationBytes",
           "PARTS", "LayerTerm", "MemoryEstimate", "RankParams", "layer_activation_nbytes",
           "layer_activation_terms", "memory_per_gpu", "memory_per_rank", "rank_params"]

ATTENTION = ("flash", "eager")
"""Attention kernels: ``"flash"`` (fused, no ``a s^2 b`` tensor kept) or ``"eager"`` (the
softmax matrix kept, Korthikanti et al. 2022's count)."""

ALLOCATOR_OVERHEAD = 0.26
"""What a run's reported memory holds beyond the bytes modelled, as a fraction of them
(``overhead = ALLOCATOR_OVERHEAD * (states + activations + gathered + buffers)``): the caching
allocator's fragmentation and reserve, the CUDA context, NCCL's and the libraries' workspaces,
the backward's activation gradients. Fitted: the median of ``measured / modelled - 1`` over the
calibration split's runs that publish memory (torchtitan's peak reserved bytes, 20 runs;
``python -m distlab.judge plan`` reports it against the held-out runs). ``memory_per_gpu(...,
overhead_fraction=0)`` gives the modelled bytes alone."""

DEFAULT_BUCKET_MB = 25.0
"""MiB of one data-parallel gradient bucket (torch DDP's ``bucket_cap_mb`` default)."""

INDEX_BYTES = 8
"""Bytes of one token id the embedding lookup keeps (int64)."""

LOSS_BYTES = 4
"""Bytes per logit of the loss's copy (cross entropy in fp32)."""


@dataclass(frozen=True)
class LayerTerm(ActivationTerm):
    """One tensor a layer keeps for backward (:class:`~distlab.tensor_parallel.memory.
    ActivationTerm`), plus ``column_input``: the input of a column-parallel linear, which
    sequence parallelism keeps sharded only where the linear gathers it again in backward
    (Megatron-LM), and whole where it keeps the all-gathered tensor (torch)."""

    column_input: bool = False


def layer_activation_terms(model: ModelSpec | str | dict[str, Any], micro_batch: int = 1, *,
                           cp: int = 1, attention: str = "flash", dropout: bool = False,
                           dtype_bytes: int = 2, mask_bytes: int = 1,
                           fused_swiglu: bool = False) -> tuple[LayerTerm, ...]:
    """The tensors one layer of ``model`` keeps for backward for one microbatch of
    ``micro_batch`` sequences, on one context-parallel rank (``seq_len / cp`` tokens), before
    tensor or sequence parallelism divides them (the module docstring's list).

    ``elements`` are elements of the whole tensor and ``itemsize`` bytes per element:
    ``dtype_bytes`` for activations, ``mask_bytes`` for dropout masks, 4 for flash attention's
    fp32 softmax statistics.
    """
    spec = model_spec(model)
    b = check_int("micro_batch", micro_batch, minimum=1)
    cp = check_int("cp", cp, minimum=1)
    check_choice("attention", attention, ATTENTION)
    dropout = check_bool("dropout", dropout)
    d = check_int("dtype_bytes", dtype_bytes, minimum=1)
    mask = check_int("mask_bytes", mask_bytes, minimum=1)
    fused = check_bool("fused_swiglu", fused_swiglu)
    s = _local_seq(spec, cp, attention)
    h, f, a = spec.hidden, spec.ffn, spec.heads
    sbh, sbf = s * b * h, s * b * f
    eager = attention == "eager"
    # eager attention repeats each key/value head for its query heads before the products
    sbk = sbh if eager else s * b * spec.kv_width
    att, ln = ATTENTION_BLOCK, LAYER_NORM
    terms = [
        # the residual stream entering the layer: the norm's backward needs its input
        LayerTerm("attention norm input (the layer's input)", ln, sbh, d, False),
        # the norm's output, read by the Q, K and V linears for their weight gradients
        LayerTerm("QKV linear input", att, sbh, d, False, column_input=True),
        # Q for the gradient of K (Q K^T), or for the fused kernel's backward
        LayerTerm("Q", att, sbh, d, True),
        # K for the gradient of Q; kv_heads * head_dim wide in a kernel that reads it so
        LayerTerm("K", att, sbk, d, True),
    ]
    if eager:
        sq = a * s * s * b
        # the softmax's backward needs its output; without dropout the product with V reads
        # the same tensor
        terms.append(LayerTerm("softmax output", att, sq, d, True, quadratic=True))
        if dropout:
            terms += [
                # which scores the dropout kept
                LayerTerm("softmax dropout mask", att, sq, mask, True, quadratic=True),
                # the dropout's output, read by the product with V for the gradient of V
                LayerTerm("softmax dropout output", att, sq, d, True, quadratic=True),
            ]
    else:
        # the fused kernel's backward recomputes the scores from Q and K and needs each
        # row's log-sum-exp, fp32, one per query token and head
        terms.append(LayerTerm("softmax statistics (fp32 log-sum-exp)", att, a * s * b,
                               LOSS_BYTES, True))
    terms += [
        # V for the gradient of the softmax (eager) or the kernel's backward
        LayerTerm("V", att, sbk, d, True),
        # the attention's output: the output projection's input (the fused kernel's backward
        # reads the same tensor)
        LayerTerm("output projection input (attention output)", att, sbh, d, True),
    ]
    if dropout:
        terms.append(LayerTerm("attention dropout mask", att, sbh, mask, False))
    terms += [
        # the residual stream after attention: the second norm's input
        LayerTerm("MLP norm input", ln, sbh, d, False),
        # the second norm's output, read by the first MLP linear(s) for their weight gradients
        LayerTerm("first linear input", MLP, sbh, d, False, column_input=True),
    ]
    if spec.gated_ffn:
        terms += [
            # the gate projection's output, SiLU's input
            LayerTerm("gate output (SiLU input)", MLP, sbf, d, True),
            # the up projection's output: the product's factor, read for the gate's gradient
            LayerTerm("up output", MLP, sbf, d, True),
        ]
        if not fused:
            # SiLU's output: the product's other factor, read for the up projection's gradient
            terms.append(LayerTerm("SiLU output", MLP, sbf, d, True))
        # the product: the down projection's input
        terms.append(LayerTerm("down projection input (the product)", MLP, sbf, d, True))
    else:
        terms += [
            # the first linear's output, the activation's (GeLU's) input
            LayerTerm("activation input", MLP, sbf, d, True),
            # the activation's output, the second linear's input
            LayerTerm("second linear input (activation output)", MLP, sbf, d, True),
        ]
    if dropout:
        terms.append(LayerTerm("MLP dropout mask", MLP, sbh, mask, False))
    return tuple(terms)


def _local_seq(spec: ModelSpec, cp: int, attention: str) -> int:
    if spec.seq_len % cp:
        raise ValueError(f"cp={cp} must divide seq_len={spec.seq_len} (context parallelism "
                         "splits the sequence)")
    if cp > 1 and attention == "eager":
        raise ValueError(f"attention='eager' with cp={cp}: context parallelism runs ring "
                         "(flash) attention; use attention='flash'")
    return spec.seq_len // cp


def _shard_terms(terms: tuple[LayerTerm, ...], tp: int, sp: bool, recompute: str,
                 sp_saves_gathered: bool, input_nbytes: int) -> int:
    """Bytes one GPU keeps of ``terms`` (Korthikanti et al.'s division, generalised)."""
    if recompute == "full":
        return input_nbytes // (tp if sp else 1)
    total = 0
    for t in terms:
        if recompute == "selective" and t.quadratic:
            continue
        whole = t.column_input and sp_saves_gathered
        total += t.nbytes // tp if (t.tensor_parallel or (sp and not whole)) else t.nbytes
    return total


@dataclass(frozen=True)
class _Options:
    """The activation model's choices, checked once."""

    attention: str
    dropout: bool
    dtype_bytes: int
    mask_bytes: int
    fused_swiglu: bool
    sp_saves_gathered: bool


def _options(layout: Layout, attention: Any, dropout: Any, dtype_bytes: Any, mask_bytes: Any,
             fused_swiglu: Any, sp_saves_gathered: Any) -> _Options:
    d = (4 if layout.precision == "fp32" else 2) if dtype_bytes is None else check_int(
        "dtype_bytes", dtype_bytes, minimum=1)
    return _Options(check_choice("attention", attention, ATTENTION),
                    check_bool("dropout", dropout), d,
                    check_int("mask_bytes", mask_bytes, minimum=1),
                    check_bool("fused_swiglu", fused_swiglu),
                    check_bool("sp_saves_gathered", sp_saves_gathered))


def _check_split(spec: ModelSpec, layout: Layout, attention: str) -> None:
    """``ValueError`` naming the layout's field where tensor or context parallelism cannot
    split the model."""
    tp, cp = layout.tp, layout.cp
    for name, value in (("heads", spec.heads), ("ffn_hidden", spec.ffn)):
        if value % tp:
            raise ValueError(f"layout.tp={tp} must divide {name}={value} (tensor parallelism "
                             "splits it)")
    if spec.kv % tp and tp % spec.kv:
        raise ValueError(f"layout.tp={tp} must divide kv_heads={spec.kv} or be a multiple of "
                         "it (each GPU holds whole key/value heads)")
    if spec.seq_len % cp:
        raise ValueError(f"layout.cp={cp} must divide seq_len={spec.seq_len}")
    _local_seq(spec, cp, attention)
    if layout.sequence_parallel and (spec.seq_len // cp) % tp:
        raise ValueError(f"layout.tp={tp} must divide seq_len / cp = {spec.seq_len // cp} "
                         "with sequence parallelism (each GPU keeps whole tokens)")
    if layout.stages > spec.layers:
        raise ValueError(f"layout.pp * stages_per_rank = {layout.stages} stages for "
                         f"{spec.layers} layers: a stage would hold no layer")


def layer_activation_nbytes(model: ModelSpec | str | dict[str, Any], layout: Layout, *,
                            attention: str = "flash", dropout: bool = False,
                            dtype_bytes: int | None = None, mask_bytes: int = 1,
                            fused_swiglu: bool = False,
                            sp_saves_gathered: bool = False) -> int:
    """Bytes one GPU keeps for one layer and one microbatch of ``layout`` (its
    ``micro_batch``, ``tp``, ``sequence_parallel``, ``cp`` and ``recompute``); the keywords as
    :func:`memory_per_gpu`'s."""
    spec = model_spec(model)
    layout = check_instance("layout", layout, Layout)
    opt = _options(layout, attention, dropout, dtype_bytes, mask_bytes, fused_swiglu,
                   sp_saves_gathered)
    _check_split(spec, layout, opt.attention)
    return _layer_nbytes(spec, layout, opt)


def _layer_nbytes(spec: ModelSpec, layout: Layout, opt: _Options) -> int:
    if layout.recompute == "op":
        return _op_checkpoint_nbytes(spec, layout, opt)
    terms = layer_activation_terms(spec, layout.micro_batch, cp=layout.cp,
                                   attention=opt.attention, dropout=opt.dropout,
                                   dtype_bytes=opt.dtype_bytes, mask_bytes=opt.mask_bytes,
                                   fused_swiglu=opt.fused_swiglu)
    if spec.kv < layout.tp and opt.attention == "flash":
        # fewer key/value heads than GPUs: each GPU keeps one (repeated), not kv / tp
        rep = layout.tp // spec.kv
        terms = tuple(LayerTerm(t.name, t.block, t.elements * rep, t.itemsize, True)
                      if t.name in ("K", "V") else t for t in terms)
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    return _shard_terms(terms, layout.tp, layout.sequence_parallel, layout.recompute,
                        opt.sp_saves_gathered, tokens * spec.hidden * opt.dtype_bytes)


def _op_checkpoint_nbytes(spec: ModelSpec, layout: Layout, opt: _Options) -> int:
    """Bytes one GPU keeps for one layer and microbatch under torchtitan's per-op selective
    checkpointing (``recompute="op"``, the module docstring)."""
    tp, d = layout.tp, opt.dtype_bytes
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    sbh = tokens * spec.hidden * d
    # the checkpoint's input: the residual stream entering the layer (sequence-sharded with SP)
    total = sbh // (tp if layout.sequence_parallel else 1)
    linears = per_op_saved_linears(spec)
    for lin, saved in linears:
        if not saved:
            continue  # every second matrix product is recomputed (and every biased one)
        if not lin.column:
            # a row-parallel product's output on one GPU is whole (partial sums before the
            # all-reduce or reduce-scatter)
            total += tokens * lin.out_features * d
        elif lin.name in ("k", "v") and spec.kv < tp:
            total += tokens * spec.head_dim * d  # one (repeated) key/value head per GPU
        else:
            total += tokens * lin.out_features * d // tp
    if tp > 1 and layout.sequence_parallel:
        # the reduce-scatter after each row-parallel product is saved too
        total += sum(sbh // tp for lin, _ in linears if not lin.column)
    if opt.attention == "flash":
        # the fused kernel's output and its fp32 log-sum-exp per query token and head
        total += sbh // tp + tokens * spec.heads * LOSS_BYTES // tp
    return total


def _edge_nbytes(spec: ModelSpec, layout: Layout, opt: _Options) -> tuple[int, int, int]:
    """Per microbatch on one GPU: the first stage's extra bytes (embedding), the last stage's
    (final norm and output layer inputs) and its logits."""
    tp, sp = layout.tp, layout.sequence_parallel
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    sbh = tokens * spec.hidden
    seq_split = tp if sp else 1
    # the token ids the lookup keeps (whole on every GPU); the embedding dropout's mask
    embedding = tokens * INDEX_BYTES
    if opt.dropout:
        embedding += sbh * opt.mask_bytes // seq_split
    # the final norm's input; the output layer's input (a column-parallel linear's)
    out_in = sbh * opt.dtype_bytes // (1 if opt.sp_saves_gathered else seq_split)
    output = sbh * opt.dtype_bytes // seq_split + out_in
    # the loss's fp32 logits over this GPU's vocabulary slice, and the 16-bit logits beside
    vocab = -(-spec.vocab // tp)
    logits = tokens * vocab * (LOSS_BYTES + (opt.dtype_bytes if opt.dtype_bytes != LOSS_BYTES
                                             else 0))
    return embedding, output, logits


def _unit_params(spec: ModelSpec, layout: Layout, stages: tuple[int, ...]) -> list[int]:
    """Elements on one GPU of each ZeRO-3 unit of the rank, in forward order (torchtitan's
    units: the embedding, each layer, the final norm with the output layer)."""
    tp = layout.tp
    split = layers_per_stage(spec.layers, layout.stages)
    layer = sum(layer_params_per_gpu(spec, tp))
    vocab_rows = -(-spec.vocab // tp) * spec.hidden
    units: list[int] = []
    for s in stages:
        if s == 0:
            units.append(vocab_rows + (spec.positions or 0) * spec.hidden)
        units += [layer] * split[s]
        if s == layout.stages - 1:
            tied_here = spec.tied_embeddings and 0 in stages
            units.append(spec.norm_params + (0 if tied_here else vocab_rows))
    return units


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


PARTS = ("params", "grads", "optimizer", "activations", "gathered", "comm_buffers", "overhead")
"""The parts of a :class:`MemoryEstimate`, in order."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one GPU holds at its peak (the module docstring says what each part counts).

    Attributes:
        params, grads, optimizer: model states, bytes (ZeRO-sharded where the stage says).
        activations: activation bytes at the peak (:attr:`activation_parts` breaks it down).
        gathered: ZeRO-3 units held whole (or FSDP's 16-bit copies), bytes.
        comm_buffers: gradient buckets and the sequence-parallel gather buffer, bytes.
        overhead: the allocator's fragmentation and reserve, bytes.
        activation_parts: the activations by where they sit.
        params_held: the GPU's parameters (elements), before ZeRO sharding.
        pp_rank: the pipeline rank this GPU belongs to.
        stages: its stages.
        gpu_memory_bytes: the GPU's memory when a hardware was given, else ``None``.
    """

    params: int
    grads: int
    optimizer: int
    activations: int
    gathered: int
    comm_buffers: int
    overhead: int
    activation_parts: ActivationBytes
    params_held: int
    pp_rank: int
    stages: tuple[int, ...]
    gpu_memory_bytes: int | None = None

    @property
    def states(self) -> int:
        """``params + grads + optimizer``, bytes."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        """Every part, bytes."""
        return sum(self.parts().values())

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


STEADY_ROUNDS = 4
"""Microbatches past ``STEADY_ROUNDS * pp`` change no rank's holdings (what it holds at its
peak) in the schedules that run in rounds of ``pp``: their steady state repeats. Checked
against the whole plan for every schedule torch accepts with pp 2-16 and up to 10 pp
microbatches (``tests/plan/test_plan_memory.py``)."""


def steady_microbatches(schedule: str, pp: int, microbatches: int) -> int:
    """The microbatches :func:`_holdings` builds the plan for: ``microbatches`` for GPipe and
    LoopedBFS (every forward before the backwards: holdings grow with ``m``) and for an
    interleaved schedule whose rounds are not ``pp`` long; else at most ``STEADY_ROUNDS * pp``."""
    if schedule in ("GPipe", "LoopedBFS") or (schedule.startswith("Interleaved")
                                               and microbatches % pp):
        return microbatches
    return min(microbatches, STEADY_ROUNDS * pp)


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


def memory_per_rank(model: ModelSpec | str | dict[str, Any], layout: Layout,
                    hw: Hardware | None = None, *, attention: str = "flash",
                    dropout: bool = False, dtype_bytes: int | None = None, mask_bytes: int = 1,
                    fused_swiglu: bool = False, sp_saves_gathered: bool = False,
                    bucket_mb: float = DEFAULT_BUCKET_MB, prefetch: int = 1,
                    overhead_fraction: float = ALLOCATOR_OVERHEAD
                    ) -> tuple[MemoryEstimate, ...]:
    """One :class:`MemoryEstimate` per pipeline rank (every GPU of a pipeline rank holds the
    same bytes); arguments as :func:`memory_per_gpu`."""
    spec = model_spec(model)
    layout = check_instance("layout", layout, Layout)
    if hw is not None:
        check_instance("hw", hw, Hardware)
        check_layout_fits(layout, hw)
    opt = _options(layout, attention, dropout, dtype_bytes, mask_bytes, fused_swiglu,
                   sp_saves_gathered)
    bucket = check_float("bucket_mb", bucket_mb, minimum=0.0)
    prefetch = check_int("prefetch", prefetch, minimum=0)
    overhead_fraction = check_float("overhead_fraction", overhead_fraction, minimum=0.0)
    _check_split(spec, layout, opt.attention)

    per_layer = _layer_nbytes(spec, layout, opt)
    recomputed = _layer_nbytes(spec, layout.with_(recompute="none"), opt)
    emb, out, logits = _edge_nbytes(spec, layout, opt)
    logits_grad = (spec.seq_len // layout.cp) * layout.micro_batch * -(-spec.vocab // layout.tp) \
        * LOSS_BYTES
    split = layers_per_stage(spec.layers, layout.stages)
    last = layout.stages - 1
    holdings = (_holdings(layout.schedule, layout.pp, layout.microbatches,
                          layout.stages_per_rank) if layout.pp > 1 else None)
    p_b, g_b, o_b = PRECISIONS[layout.precision]
    shard_group = layout.dp * layout.cp
    gather_b = 4 if layout.precision == "fp32" else 2
    memory = None if hw is None else hw.gpu.memory_bytes
    estimates = []
    for r in range(layout.pp):
        rp = stage_params(spec, layout, rank_stages(layout, r), r)
        stages = rp.stages
        stage_nbytes = [split[s] * per_layer + (emb if s == 0 else 0)
                        + (out + logits if s == last else 0) for s in stages]
        held = (_peak(stage_nbytes, holdings[r]) if holdings is not None
                else tuple(1 for _ in stages))
        working = max(recomputed if layout.recompute == "full" else 0,
                      logits_grad if last in stages else 0)
        act = ActivationBytes(
            layers=sum(n * split[s] * per_layer for n, s in zip(held, stages, strict=True)),
            embedding=sum(n * emb for n, s in zip(held, stages, strict=True) if s == 0),
            output=sum(n * out for n, s in zip(held, stages, strict=True) if s == last),
            logits=sum(n * logits for n, s in zip(held, stages, strict=True) if s == last),
            per_layer=per_layer, stage_layers=tuple(split[s] for s in stages), in_flight=held,
            working=working)
        # elements of each state after ZeRO's sharding, as zero_memory shards them
        z = zero_memory(rp.total, shard_group, layout.zero, "fp32")
        params, grads, optimizer = z.params // 4 * p_b, z.grads // 4 * g_b, z.optimizer // 8 * o_b
        units = _unit_params(spec, layout, stages)
        gathered = comm = 0
        if layout.zero == 3 and layout.pp > 1:
            # FSDP under a pipeline schedule (torchtitan; torch's PipelineStage turns gradient
            # sync off until the last microbatch): parameters stay gathered through the step
            # and the unsharded 16-bit gradients accumulate until the last backward
            gathered = gather_b * rp.total
            comm = gather_b * rp.total
        elif layout.zero == 3:
            window = prefetch + 1
            gathered = gather_b * max(sum(units[k:k + window]) for k in range(len(units)))
            if shard_group > 1:
                comm = g_b * max(sum(units[k:k + 2]) for k in range(len(units)))
        else:
            if layout.precision == "fsdp-mixed":
                gathered = 2 * rp.total
            if shard_group > 1:
                comm = min(int(bucket * 2**20), g_b * rp.total)
        if layout.sequence_parallel and not opt.sp_saves_gathered:
            comm += (spec.seq_len // layout.cp) * layout.micro_batch * spec.hidden \
                * opt.dtype_bytes
        rest = params + grads + optimizer + act.total + gathered + comm
        estimates.append(MemoryEstimate(
            params=params, grads=grads, optimizer=optimizer, activations=act.total,
            gathered=gathered, comm_buffers=comm, overhead=round(overhead_fraction * rest),
            activation_parts=act, params_held=rp.total, pp_rank=r, stages=stages,
            gpu_memory_bytes=memory))
    return tuple(estimates)


def memory_per_gpu(model: ModelSpec | str | dict[str, Any], layout: Layout,
                   hw: Hardware | None = None, *, attention: str = "flash",
                   dropout: bool = False, dtype_bytes: int | None = None, mask_bytes: int = 1,
                   fused_swiglu: bool = False, sp_saves_gathered: bool = False,
                   bucket_mb: float = DEFAULT_BUCKET_MB, prefetch: int = 1,
                   overhead_fraction: float = ALLOCATOR_OVERHEAD) -> MemoryEstimate:
    """Bytes per GPU of the most loaded GPU of ``layout`` (the pipeline rank with the largest
    total; the first of equals).

    Args:
        model: a :class:`~distlab.plan.model.ModelSpec`, a preset name or a dict of fields.
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
        bucket_mb: MiB of the data-parallel gradient bucket in flight (ZeRO 0-2).
        prefetch: ZeRO-3 units gathered ahead of the one computing.
        overhead_fraction: the allocator's overhead as a fraction of the rest
            (:data:`ALLOCATOR_OVERHEAD`).

    Raises:
        ValueError, TypeError: a bad argument, named; a layout that cannot split the model
            (``layout.tp``, ``layout.cp``, stages), or a pipeline combination torch refuses.
    """
    estimates = memory_per_rank(model, layout, hw, attention=attention, dropout=dropout,
                                dtype_bytes=dtype_bytes, mask_bytes=mask_bytes,
                                fused_swiglu=fused_swiglu, sp_saves_gathered=sp_saves_gathered,
                                bucket_mb=bucket_mb, prefetch=prefetch,
                                overhead_fraction=overhead_fraction)
    return max(estimates, key=lambda e: e.total)
