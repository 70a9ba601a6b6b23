"""The activations one layer keeps from its forward for its backward, tensor by tensor, and the
working sets a layer and the loss hold while they run.

Per layer, the tensors kept from forward for backward, counted one by one
(:func:`layer_activation_terms`) as Korthikanti et al. 2022 count them ("Reducing Activation
Recomputation in Large Transformer Models", section 4, as
:mod:`distlab.tensor_parallel.memory`), generalised:

- grouped-query attention: K and V are ``kv_heads * head_dim`` wide where the attention kernel
  reads them so (``attention="flash"``); eager attention repeats them per query head first,
  so the products keep them as wide as Q, ``heads * head_dim`` (``hidden`` unless the model's
  ``head_dim`` says otherwise; torch's math SDPA, Hugging Face's ``repeat_kv``); Q and the
  attention's output (the output projection's input) are that wide too;
- gated MLPs (SwiGLU, ``down(silu(gate(x)) * up(x))``): the gate's output (SiLU's input), the up
  projection's output and SiLU's output (the product keeps both factors) and the product (the
  down projection's input), four ``s b f`` tensors where the two-matrix MLP keeps two;
  ``fused_swiglu=True``: three (Megatron-LM's fused ``bias_swiglu`` keeps its input and
  recomputes SiLU);
- float8 products (``Layout.compute_dtype="fp8"``, :func:`linear_input_bytes`): the inputs
  only a linear keeps for its weight gradient (QKV's, the first and the last MLP linear's) in
  :data:`FP8_SAVED_BYTES`, and the output projection's own 8-bit copy of the attention output
  beside the kernel's 16-bit one (Transformer Engine's fp8 linears keep their quantized input;
  torchao's keep the 16-bit input unless tensor parallelism casts it to float8 before the
  gather, ``float8_linear="torchao"``, :data:`FLOAT8_LINEARS`);
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
  (:func:`~distlab.transformer.per_op_saved_linears`: Q, V, the gate and the down projection of
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

Working sets (:func:`forward_transient_nbytes`, :func:`backward_working_nbytes`): what a layer
holds beyond what it keeps while its forward or backward runs, at its largest; the norms' fp32
statistics (:func:`norm_stats_nbytes`), which the paper leaves out, are kept too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distlab._checks import check_bool, check_choice, check_instance, check_int
from distlab.plan.layout import Layout
from distlab.recompute import Recompute, recompute_policy
from distlab.tensor_parallel.memory import ATTENTION as ATTENTION_BLOCK
from distlab.tensor_parallel.memory import LAYER_NORM, MLP, ActivationTerm
from distlab.transformer import ModelSpec, model_spec, per_op_saved_linears

__all__ = ["ATTENTION", "ActivationOptions", "FP8_SAVED_BYTES", "INDEX_BYTES", "LOSS_BYTES",
           "FLOAT8_LINEARS", "LayerTerm", "MOE_WEIGHTINGS", "linear_input_bytes",
           "activation_options", "backward_working_nbytes", "backward_working_tensors",
           "check_split", "edge_nbytes", "forward_transient_nbytes", "forward_transient_tensors",
           "kept_tensors", "layer_activation_nbytes", "layer_activation_terms",
           "layer_kept_tensors", "layer_nbytes", "local_seq", "mlp_inner_terms",
           "norm_stats_nbytes", "op_checkpoint_nbytes", "op_checkpoint_tensors", "shard_terms"]

MOE_WEIGHTINGS = ("output", "input", "activation")
"""Where a routed expert's result is weighted by its router probability, which sets what an MoE
layer keeps (:func:`distlab.plan.experts.moe_kept_tensors`): ``"output"`` (distlab's MoE
layer, torchtitan's ``score_before_experts=False``) keeps the experts' output for the
probability's gradient; ``"input"`` (``score_before_experts=True``) the unweighted input beside
the weighted one the first linear keeps; ``"activation"`` (Megatron-Core's ``TEGroupedMLP``
with ``bias_activation_fusion``: ``weighted_bias_swiglu_impl`` multiplies inside the fused
SwiGLU, which keeps its input and the probabilities) neither."""

FP8_SAVED_BYTES = 1
"""Bytes per element of the input a linear keeps for its weight gradient when the products run
in float8 (``Layout.compute_dtype="fp8"``) in Transformer Engine: its fp8 linears (and its
grouped linear) quantize their input for the forward product and keep that 8-bit copy, not the
16-bit tensor; what other kernels keep (the norms' and the attention kernel's inputs and outputs,
the SwiGLU's input) stays 16-bit."""

FLOAT8_LINEARS = ("transformer_engine", "torchao")
"""Whose float8 linears a float8 layout runs, which sets what they keep for the weight gradient
(:func:`linear_input_bytes`): ``"transformer_engine"`` the 8-bit copy of the input
(:data:`FP8_SAVED_BYTES`); ``"torchao"`` (``torchao.float8.Float8Linear`` with its tensorwise
recipe, as torchtitan applies it) whatever tensor reaches the linear: its autograd function
``matmul_with_hp_or_float8_args`` saves its input as given. Without tensor parallelism that is
the 16-bit activation (cast again in backward); with it, torchao's ``Float8ColwiseParallel``
and ``Float8RowwiseParallel`` cast the input to float8 before the all-gather (torchtitan turns
float8 tensor parallelism on with the tensorwise recipe), so the linear keeps 8 bits, as
Transformer Engine's do. Eager; a compiler may keep otherwise."""

ATTENTION = ("flash", "eager")
"""Attention kernels: ``"flash"`` (fused, no ``a s^2 b`` tensor kept) or ``"eager"`` (the
softmax matrix kept, Korthikanti et al. 2022's count)."""

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
                           fused_swiglu: bool = False,
                           linear_bytes: int | None = None) -> tuple[LayerTerm, ...]:
    """The tensors one layer of ``model`` keeps for backward for one microbatch of
    ``micro_batch`` sequences, on one context-parallel rank (``seq_len / cp`` tokens), before
    tensor or sequence parallelism divides them (the module docstring's list).

    ``elements`` are elements of the whole tensor and ``itemsize`` bytes per element:
    ``dtype_bytes`` for activations, ``mask_bytes`` for dropout masks, 4 for flash attention's
    fp32 softmax statistics; ``linear_bytes`` (``None``: ``dtype_bytes``) for the inputs only a
    linear keeps for its weight gradient (:data:`FP8_SAVED_BYTES` under float8: then the
    attention's output, which the kernel keeps in ``dtype_bytes``, is kept a second time, in 8
    bits, by the output projection).
    """
    spec = model_spec(model)
    b = check_int("micro_batch", micro_batch, minimum=1)
    cp = check_int("cp", cp, minimum=1)
    check_choice("attention", attention, ATTENTION)
    dropout = check_bool("dropout", dropout)
    d = check_int("dtype_bytes", dtype_bytes, minimum=1)
    mask = check_int("mask_bytes", mask_bytes, minimum=1)
    fused = check_bool("fused_swiglu", fused_swiglu)
    lin = d if linear_bytes is None else check_int("linear_bytes", linear_bytes, minimum=1)
    s = local_seq(spec, cp, attention)
    h, f, a = spec.hidden, spec.ffn, spec.heads
    sbh, sbf = s * b * h, s * b * f
    # Q and the attention's output are heads * head_dim wide (hidden unless head_dim differs)
    sbq = s * b * spec.q_width
    eager = attention == "eager"
    # eager attention repeats each key/value head for its query heads before the products
    sbk = sbq if eager else s * b * spec.kv_width
    att, ln = ATTENTION_BLOCK, LAYER_NORM
    terms = [
        # the residual stream entering the layer: the norm's backward needs its input
        LayerTerm("attention norm input (the layer's input)", ln, sbh, d, False),
        # the norm's output, read by the Q, K and V linears for their weight gradients
        LayerTerm("QKV linear input", att, sbh, lin, False, column_input=True),
        # Q for the gradient of K (Q K^T), or for the fused kernel's backward
        LayerTerm("Q", att, sbq, d, True),
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
        LayerTerm("output projection input (attention output)", att, sbq, d, True),
    ]
    if lin != d:
        # the output projection's own low-precision copy of its input, for its weight gradient
        terms.append(LayerTerm("output projection input (its low-precision copy)", att, sbq,
                               lin, True))
    if dropout:
        terms.append(LayerTerm("attention dropout mask", att, sbh, mask, False))
    terms += [
        # the residual stream after attention: the second norm's input
        LayerTerm("MLP norm input", ln, sbh, d, False),
        # the second norm's output, read by the first MLP linear(s) for their weight gradients
        LayerTerm("first linear input", MLP, sbh, lin, False, column_input=True),
    ]
    terms += mlp_inner_terms(sbf, gated=spec.gated_ffn, dtype_bytes=d, linear_bytes=lin,
                             fused_swiglu=fused)
    if dropout:
        terms.append(LayerTerm("MLP dropout mask", MLP, sbh, mask, False))
    return tuple(terms)


def mlp_inner_terms(elements: int, *, gated: bool, dtype_bytes: int, linear_bytes: int,
                    fused_swiglu: bool = False) -> list[LayerTerm]:
    """The tensors an MLP keeps for backward between its first and its last linear, each of
    ``elements`` elements (tokens times the MLP's width; tensor parallelism splits them): a gated
    MLP (SwiGLU) its gate and up outputs (``dtype_bytes``), SiLU's output unless the SwiGLU is
    fused, and the product, the last linear's input (``linear_bytes``); a two-matrix one the
    activation's input and output. The dense layer's MLP (:func:`layer_activation_terms`) and
    the experts' (:func:`distlab.plan.experts.moe_kept_tensors`) are counted by this one rule."""
    d, lin = dtype_bytes, linear_bytes
    if not gated:
        return [
            # the first linear's output, the activation's (GeLU's) input
            LayerTerm("activation input", MLP, elements, d, True),
            # the activation's output, the second linear's input
            LayerTerm("second linear input (activation output)", MLP, elements, lin, True),
        ]
    terms = [
        # the gate projection's output, SiLU's input
        LayerTerm("gate output (SiLU input)", MLP, elements, d, True),
        # the up projection's output: the product's factor, read for the gate's gradient
        LayerTerm("up output", MLP, elements, d, True),
    ]
    if not fused_swiglu:
        # SiLU's output: the product's other factor, read for the up projection's gradient
        terms.append(LayerTerm("SiLU output", MLP, elements, d, True))
    # the product: the down projection's input
    terms.append(LayerTerm("down projection input (the product)", MLP, elements, lin, True))
    return terms


def local_seq(spec: ModelSpec, cp: int, attention: str) -> int:
    if spec.seq_len % cp:
        raise ValueError(f"cp={cp} must divide seq_len={spec.seq_len} (context parallelism "
                         "splits the sequence)")
    if cp > 1 and attention == "eager":
        raise ValueError(f"attention='eager' with cp={cp}: context parallelism runs ring "
                         "(flash) attention; use attention='flash'")
    return spec.seq_len // cp


def shard_terms(terms: tuple[LayerTerm, ...], tp: int, sp: bool, recompute: Recompute | str,
                sp_saves_gathered: bool, input_nbytes: int) -> int:
    """Bytes one GPU keeps of ``terms`` (Korthikanti et al.'s division, generalised): the sum
    of :func:`kept_tensors`."""
    return sum(kept_tensors(terms, tp, sp, recompute, sp_saves_gathered, input_nbytes))


def kept_tensors(terms: tuple[LayerTerm, ...], tp: int, sp: bool, recompute: Recompute | str,
                 sp_saves_gathered: bool, input_nbytes: int) -> tuple[int, ...]:
    """Bytes one GPU keeps of each of ``terms`` in order, as the ``recompute`` policy
    (:mod:`distlab.recompute`) keeps them: only the layer's input, ``input_nbytes``, under
    full recompute; the quadratic terms dropped under selective."""
    rc = recompute_policy(recompute)
    if rc.keeps_input_only:
        return (input_nbytes // (tp if sp else 1),)
    out = []
    for t in terms:
        if t.quadratic and not rc.keeps_quadratic:
            continue
        whole = t.column_input and sp_saves_gathered
        out.append(t.nbytes // tp if (t.tensor_parallel or (sp and not whole)) else t.nbytes)
    return tuple(out)


@dataclass(frozen=True)
class ActivationOptions:
    """The activation model's choices, checked once (:func:`activation_options`)."""

    attention: str
    dropout: bool
    dtype_bytes: int
    mask_bytes: int
    fused_swiglu: bool
    sp_saves_gathered: bool
    moe_weighting: str = "output"
    float8_linear: str = "transformer_engine"
    vocab_parallel_loss: bool = True


def activation_options(layout: Layout, attention: Any, dropout: Any, dtype_bytes: Any,
                       mask_bytes: Any, fused_swiglu: Any, sp_saves_gathered: Any,
                       moe_weighting: Any = "output",
                       float8_linear: Any = "transformer_engine",
                       vocab_parallel_loss: Any = True) -> ActivationOptions:
    """The activation model's choices for ``layout``, each checked (``dtype_bytes`` ``None``:
    4 for ``precision="fp32"``, else 2; ``moe_weighting`` one of :data:`MOE_WEIGHTINGS`,
    ``float8_linear`` one of :data:`FLOAT8_LINEARS`; ``vocab_parallel_loss``:
    :func:`loss_vocab`)."""
    d = (4 if layout.precision == "fp32" else 2) if dtype_bytes is None else check_int(
        "dtype_bytes", dtype_bytes, minimum=1)
    return ActivationOptions(check_choice("attention", attention, ATTENTION),
                    check_bool("dropout", dropout), d,
                    check_int("mask_bytes", mask_bytes, minimum=1),
                    check_bool("fused_swiglu", fused_swiglu),
                    check_bool("sp_saves_gathered", sp_saves_gathered),
                    check_choice("moe_weighting", moe_weighting, MOE_WEIGHTINGS),
                    check_choice("float8_linear", float8_linear, FLOAT8_LINEARS),
                    check_bool("vocab_parallel_loss", vocab_parallel_loss))


def loss_vocab(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> int:
    """The vocabulary columns of the logits one GPU holds for the loss: ``ceil(v / tp)`` under
    a vocabulary-parallel loss (``opt.vocab_parallel_loss``: Megatron-LM's
    ``vocab_parallel_cross_entropy``, torchtitan's ``loss_parallel``, distlab's), all ``v``
    where the output layer's logits are gathered onto every tensor-parallel rank first (a
    Hugging Face model under its ``tp_plan``, whose ``lm_head`` is ``colwise_rep``; torchtitan
    with ``disable_loss_parallel``). The gather's time is not priced."""
    return -(-spec.vocab // layout.tp) if opt.vocab_parallel_loss else spec.vocab


def linear_input_bytes(layout: Layout, opt: ActivationOptions) -> int:
    """Bytes per element of the input a linear keeps for its weight gradient:
    :data:`FP8_SAVED_BYTES` where ``layout``'s products run in float8 and the input reaches the
    linear in 8 bits (Transformer Engine's linears; torchao's under tensor parallelism,
    ``opt.float8_linear``, :data:`FLOAT8_LINEARS`), else the activations' ``opt.dtype_bytes``."""
    eight_bit = layout.compute_dtype == "fp8" and (opt.float8_linear == "transformer_engine"
                                                   or layout.tp > 1)
    return FP8_SAVED_BYTES if eight_bit else opt.dtype_bytes


def check_split(spec: ModelSpec, layout: Layout, attention: str) -> None:
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
    local_seq(spec, cp, attention)
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
    opt = activation_options(layout, attention, dropout, dtype_bytes, mask_bytes, fused_swiglu,
                   sp_saves_gathered)
    check_split(spec, layout, opt.attention)
    return layer_nbytes(spec, layout, opt)


def layer_nbytes(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> int:
    """Bytes one GPU keeps for one layer and microbatch: the sum of
    :func:`layer_kept_tensors`."""
    return sum(layer_kept_tensors(spec, layout, opt))


def layer_kept_tensors(spec: ModelSpec, layout: Layout, opt: ActivationOptions
                       ) -> tuple[int, ...]:
    """Bytes of each tensor one GPU keeps for one layer and microbatch, in forward order (the
    module docstring's list, the layout's recompute policy applied)."""
    if layout.recompute_policy.keeps_per_op:
        return op_checkpoint_tensors(spec, layout, opt)
    terms = layer_activation_terms(spec, layout.micro_batch, cp=layout.cp,
                                   attention=opt.attention, dropout=opt.dropout,
                                   dtype_bytes=opt.dtype_bytes, mask_bytes=opt.mask_bytes,
                                   fused_swiglu=opt.fused_swiglu,
                                   linear_bytes=linear_input_bytes(layout, opt))
    if spec.kv < layout.tp and opt.attention == "flash":
        # fewer key/value heads than GPUs: each GPU keeps one (repeated), not kv / tp
        rep = layout.tp // spec.kv
        terms = tuple(LayerTerm(t.name, t.block, t.elements * rep, t.itemsize, True)
                      if t.name in ("K", "V") else t for t in terms)
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    return kept_tensors(terms, layout.tp, layout.sequence_parallel, layout.recompute_policy,
                        opt.sp_saves_gathered, tokens * spec.hidden * opt.dtype_bytes)


def op_checkpoint_nbytes(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> int:
    """Bytes one GPU keeps for one layer and microbatch under torchtitan's per-op selective
    checkpointing (``recompute="op"``, the module docstring): the sum of
    :func:`op_checkpoint_tensors`."""
    return sum(op_checkpoint_tensors(spec, layout, opt))


def op_checkpoint_tensors(spec: ModelSpec, layout: Layout, opt: ActivationOptions
                          ) -> tuple[int, ...]:
    """Bytes of each tensor one GPU keeps for one layer and microbatch under torchtitan's
    per-op selective checkpointing, in forward order."""
    tp, d = layout.tp, opt.dtype_bytes
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    sbh = tokens * spec.hidden * d
    # the checkpoint's input: the residual stream entering the layer (sequence-sharded with SP)
    out = [sbh // (tp if layout.sequence_parallel else 1)]
    linears = per_op_saved_linears(spec)
    for lin, saved in linears:
        if lin.name == "output projection" and opt.attention == "flash":
            # the fused kernel's output (query-width) and its fp32 log-sum-exp per query
            # token and head
            out += [tokens * spec.q_width * d // tp, tokens * spec.heads * LOSS_BYTES // tp]
        if not saved:
            continue  # every second matrix product is recomputed (and every biased one)
        if not lin.column:
            # a row-parallel product's output on one GPU is whole (partial sums before the
            # all-reduce or reduce-scatter)
            out.append(tokens * lin.out_features * d)
        elif lin.name in ("k", "v") and spec.kv < tp:
            out.append(tokens * spec.head_width * d)  # one (repeated) key/value head per GPU
        else:
            out.append(tokens * lin.out_features * d // tp)
    if tp > 1 and layout.sequence_parallel:
        # the reduce-scatter after each row-parallel product is saved too
        out += [sbh // tp for lin, _ in linears if not lin.column]
    return tuple(out)


def edge_nbytes(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> tuple[int, int, int]:
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
    # the loss's fp32 logits over this GPU's vocabulary slice (or all of it, gathered), and
    # the 16-bit logits beside
    vocab = loss_vocab(spec, layout, opt)
    logits = tokens * vocab * (LOSS_BYTES + (opt.dtype_bytes if opt.dtype_bytes != LOSS_BYTES
                                             else 0))
    return embedding, output, logits


def norm_stats_nbytes(spec: ModelSpec, layout: Layout) -> int:
    """Bytes of the fp32 statistics one layer's two norms keep per microbatch on one GPU: the
    reciprocal standard deviation per token (RMSNorm), and the mean too (layer norm); sequence
    parallelism splits the tokens. Nothing where the layer runs under a checkpoint (full or per-op
    recompute: the norms run again)."""
    if layout.recompute_policy.checkpointed:
        return 0
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    per_token = 4 if spec.norm == "rmsnorm" else 8
    return 2 * tokens * per_token // (layout.tp if layout.sequence_parallel else 1)


def _widths(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> tuple[int, int, int]:
    """``(s b h, s b h / tp, s b f / tp)`` bytes of one microbatch on one GPU."""
    tokens = (spec.seq_len // layout.cp) * layout.micro_batch
    d, tp = opt.dtype_bytes, layout.tp
    return tokens * spec.hidden * d, tokens * spec.hidden * d // tp, tokens * spec.ffn * d // tp


def forward_transient_tensors(spec: ModelSpec, layout: Layout, opt: ActivationOptions
                              ) -> tuple[int, ...]:
    """The tensors one layer's forward holds at once beyond what it keeps, at their largest, one
    microbatch on one GPU, bytes: under full or per-op recompute the MLP's intermediate results
    are not kept, and a gated MLP holds three ``s b f`` tensors at its product (SiLU's output,
    the up projection and the product; two for a two-matrix MLP); otherwise two ``s b h`` norm
    temporaries. Sequence parallelism's all-gathered input (when not kept) adds one ``s b h``."""
    sbh, sbh_tp, sbf_tp = _widths(spec, layout, opt)
    if layout.recompute_policy.checkpointed:
        out = [sbf_tp] * (3 if spec.gated_ffn else 2)
    else:
        out = [sbh // (layout.tp if layout.sequence_parallel else 1)] * 2
    if layout.sequence_parallel and not opt.sp_saves_gathered:
        out.append(sbh)
    return tuple(out)


def forward_transient_nbytes(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> int:
    """The sum of :func:`forward_transient_tensors`."""
    return sum(forward_transient_tensors(spec, layout, opt))


def backward_working_tensors(spec: ModelSpec, layout: Layout, opt: ActivationOptions
                             ) -> tuple[int, ...]:
    """The tensors one layer's backward holds at once beyond its kept (or recomputed)
    activations, at their largest, one microbatch on one GPU, bytes: a gated MLP's gradients
    (the product's, then SiLU's output's and the up projection's: three ``s b f``, with the
    incoming and outgoing ``s b h``; two ``s b f`` for a two-matrix MLP), or the attention's
    (FlashAttention's Q, K, V and output gradients and its fp32 accumulator of Q's gradient),
    whichever holds more; with sequence parallelism, the input gathered again where it was not
    kept."""
    sbh, _, sbf_tp = _widths(spec, layout, opt)
    # the attention's query-width tensors (Q's gradient and its fp32 accumulator) on one GPU
    sbq_tp = (spec.seq_len // layout.cp) * layout.micro_batch * spec.q_width * opt.dtype_bytes \
        // layout.tp
    kv_tp = sbq_tp * spec.kv // spec.heads if spec.kv % layout.tp == 0 else sbq_tp // spec.kv
    mlp = (sbh,) + (sbf_tp,) * (3 if spec.gated_ffn else 2) + (sbh,)
    attention = (sbh, sbq_tp, kv_tp, kv_tp, sbq_tp * 4 // opt.dtype_bytes)
    out = mlp if sum(mlp) >= sum(attention) else attention
    if layout.sequence_parallel and not opt.sp_saves_gathered:
        out += (sbh,)   # Megatron-LM gathers the column-parallel input again for its weights
    return out


def backward_working_nbytes(spec: ModelSpec, layout: Layout, opt: ActivationOptions) -> int:
    """The sum of :func:`backward_working_tensors`."""
    return sum(backward_working_tensors(spec, layout, opt))
