"""Activation bytes one rank stores per transformer layer, with and without sequence parallelism.

From Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv:2205.05198), section 4: the bytes a layer keeps from forward for backward, counted
tensor by tensor (:func:`activation_terms`), then divided by what tensor and sequence
parallelism shard (:func:`layer_activation_bytes`). The paper's Table 2 closed forms
(:func:`table2_bytes`) are the sums of these terms for ``ffn_hidden = 4 h`` and 2-byte
activations; ``s`` sequence length, ``b`` micro-batch, ``h`` hidden, ``a`` heads, ``t`` the
tensor-parallel degree:

=================================================  ==========================================
no parallelism                                     ``s b h (34 + 5 a s / h)``
tensor parallel                                    ``s b h (10 + 24 / t + 5 a s / (h t))``
tensor + sequence parallel                         ``s b h / t (34 + 5 a s / h)``
tensor parallel + selective recomputation          ``s b h (10 + 24 / t)``
tensor + sequence parallel + selective recompute   ``s b h (34 / t)``
full recomputation                                 ``2 s b h`` (the layer's input only)
=================================================  ==========================================

Assumptions, as the paper's (section 4.1): activations in 16-bit floats (``dtype_bytes`` bytes
each, 2 in the paper), dropout masks 1 byte per element, the MLP's inner size ``4 h``
(``ffn_hidden`` generalises it here), one layer norm before each block, attention with
dropout on its softmax; no fused or flash attention (flash attention keeps no ``a s^2 b``
term, which is what selective recomputation models), and the small buffers (biases,
layer-norm statistics, the mean and variance) left out. The per-layer terms:

- attention, ``11 s b h + 5 a s^2 b``: the QKV linear's input ``2 s b h``; Q and K for
  ``Q K^T``, ``4 s b h``; the softmax output ``2 a s^2 b``; its dropout mask ``a s^2 b``; the
  dropout's output and V for the product with V, ``2 a s^2 b + 2 s b h``; the output
  projection's input ``2 s b h``; the block's dropout mask ``s b h``;
- MLP, ``19 s b h``: the first linear's input ``2 s b h``, the GeLU's input ``8 s b h``, the
  second linear's input ``8 s b h``, the dropout mask ``s b h``;
- layer norms: each one's input, ``2 s b h``, twice.

Tensor parallelism splits what lies between the column- and the row-parallel linear (Q, K,
V, the softmax and its dropout, the output projection's input, the GeLU's input and output:
``24 s b h + 5 a s^2 b``); the rest, ``10 s b h`` (layer norms, the linears' inputs, the
blocks' dropout masks) is replicated on every rank. Sequence parallelism splits that rest along
the sequence, so everything is divided by ``t``; the column-parallel linears then keep their
sequence-sharded input only and gather it again in backward
(:func:`distlab.tensor_parallel.cost.layer_collectives`, ``regather_inputs=True``).
Selective recomputation drops the ``5 a s^2 b`` terms (recomputed in backward); full
recomputation keeps only the layer's input (sequence-sharded with sequence parallelism: the
paper's table writes it without). Each is a :class:`distlab.recompute.Recompute` policy, asked
what it keeps; torchtitan's per-op policy keeps matrix products' outputs, which the paper's
terms do not list (:mod:`distlab.plan.activations` counts it).

A layer is a :class:`~distlab.transformer.ModelSpec` at ``micro_batch`` sequences of
``dtype_bytes``-byte activations, or a :class:`~distlab.tensor_parallel.cost.TransformerShape`
(:func:`~distlab.tensor_parallel.cost.layer_input`); the paper's terms describe its GPT layer, so
a gated MLP or grouped-query attention is refused (:mod:`distlab.plan.activations` generalises
the terms to both).
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab._checks import check_bool
from distlab.recompute import RECOMPUTES, Recompute, recompute_policy
from distlab.tensor_parallel.cost import LayerLike, TransformerShape, check_tp, layer_input

__all__ = ["ATTENTION", "LAYER_NORM", "MLP", "RECOMPUTE", "ActivationTerm", "activation_terms",
           "layer_activation_bytes", "table2_bytes"]

RECOMPUTE = tuple(name for name, rc in RECOMPUTES.items() if not rc.keeps_per_op)
"""Activation recomputation the paper's terms count (:data:`distlab.recompute.RECOMPUTES`
less the per-op policy): none, selective (the attention's ``a s^2 b`` terms), full (the whole
layer from its input)."""

ATTENTION, MLP, LAYER_NORM = "attention", "mlp", "layer_norm"
MASK_BYTES = 1
"""Bytes per element of a dropout mask (the paper's count)."""


@dataclass(frozen=True)
class ActivationTerm:
    """One tensor a layer keeps for backward.

    Attributes:
        name: what it is.
        block: ``"attention"``, ``"mlp"`` or ``"layer_norm"``.
        elements: its elements on one rank without any parallelism.
        itemsize: bytes per element (``dtype_bytes``, or 1 for a dropout mask).
        tensor_parallel: whether tensor parallelism splits it over the ``t`` ranks (it lies
            between a column- and a row-parallel linear); else sequence parallelism does.
        quadratic: an ``a s^2 b`` term, the ones selective recomputation recomputes.
    """

    name: str
    block: str
    elements: int
    itemsize: int
    tensor_parallel: bool
    quadratic: bool = False

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor (``elements * itemsize``)."""
        return self.elements * self.itemsize


def _paper_layer(model: LayerLike, micro_batch: int | None,
                 dtype_bytes: int | None) -> TransformerShape:
    shape = layer_input(model, micro_batch, dtype_bytes)
    spec = shape.model
    if spec.gated_ffn or spec.kv != spec.heads or spec.q_width != spec.hidden:
        raise ValueError(f"{spec.name}: the paper's terms are a GPT layer's (two-matrix MLP, as "
                         f"many key/value heads as heads, each hidden / heads wide); "
                         f"gated_ffn={spec.gated_ffn}, kv_heads={spec.kv}, heads={spec.heads}, "
                         f"head_dim={spec.head_width}: use "
                         "distlab.plan.activations.layer_activation_terms")
    return shape


def _paper_recompute(recompute: Recompute | str) -> Recompute:
    rc = recompute_policy(recompute)
    if rc.name not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(map(repr, RECOMPUTE))}, got "
                         f"{rc.name!r} (the paper's terms do not count it; "
                         "distlab.plan.activations does)")
    return rc


def activation_terms(model: LayerLike, *, micro_batch: int | None = None,
                     dtype_bytes: int | None = None) -> tuple[ActivationTerm, ...]:
    """The tensors one layer of ``model`` keeps for backward, unsharded (the module
    docstring's list, section 4.1 of the paper), with ``ffn_hidden`` for the MLP's ``4 h``;
    ``model`` as :func:`layer_activation_bytes` takes it."""
    shape = _paper_layer(model, micro_batch, dtype_bytes)
    sbh = shape.activation_elements
    sbf = shape.seq_len * shape.micro_batch * shape.ffn
    sq = shape.heads * shape.seq_len * shape.seq_len * shape.micro_batch
    d = shape.dtype_bytes
    return (
        ActivationTerm("attention layer norm input", LAYER_NORM, sbh, d, False),
        ActivationTerm("QKV linear input", ATTENTION, sbh, d, False),
        ActivationTerm("Q and K (for Q K^T)", ATTENTION, 2 * sbh, d, True),
        ActivationTerm("softmax output", ATTENTION, sq, d, True, quadratic=True),
        ActivationTerm("softmax dropout mask", ATTENTION, sq, MASK_BYTES, True, quadratic=True),
        ActivationTerm("softmax dropout output", ATTENTION, sq, d, True, quadratic=True),
        ActivationTerm("V", ATTENTION, sbh, d, True),
        ActivationTerm("output projection input", ATTENTION, sbh, d, True),
        ActivationTerm("attention dropout mask", ATTENTION, sbh, MASK_BYTES, False),
        ActivationTerm("MLP layer norm input", LAYER_NORM, sbh, d, False),
        ActivationTerm("first linear input", MLP, sbh, d, False),
        ActivationTerm("GeLU input", MLP, sbf, d, True),
        ActivationTerm("second linear input (GeLU output)", MLP, sbf, d, True),
        ActivationTerm("MLP dropout mask", MLP, sbh, MASK_BYTES, False),
    )


def layer_activation_bytes(model: LayerLike, tp: int = 1, *, sequence_parallel: bool = False,
                           recompute: Recompute | str = "none", micro_batch: int | None = None,
                           dtype_bytes: int | None = None) -> int:
    """Bytes of activations one rank keeps for one layer of ``model`` between its forward and
    its backward (:func:`activation_terms`, each divided by ``tp`` where tensor or sequence
    parallelism splits it).

    Args:
        model: the layer: a :class:`~distlab.transformer.ModelSpec` at ``micro_batch``
            sequences (default 1) of ``dtype_bytes``-byte activations (default 2), or a
            :class:`~distlab.tensor_parallel.cost.TransformerShape`.
        tp: tensor-parallel degree (checked by
            :func:`~distlab.tensor_parallel.cost.check_tp`: dividing heads, hidden,
            ffn_hidden and, with sequence parallelism, seq_len).
        sequence_parallel: whether the replicated parts are split along the sequence too.
        recompute: one of :data:`RECOMPUTE` (or its :class:`~distlab.recompute.Recompute`).
    """
    shape = _paper_layer(model, micro_batch, dtype_bytes)
    tp = check_tp(shape, tp, sequence_parallel)
    sp = check_bool("sequence_parallel", sequence_parallel)
    rc = _paper_recompute(recompute)
    if rc.keeps_input_only:
        return shape.activation_nbytes // (tp if sp else 1)
    total = 0
    for term in activation_terms(shape):
        if term.quadratic and not rc.keeps_quadratic:
            continue
        total += term.nbytes // tp if (term.tensor_parallel or sp) else term.nbytes
    return total


def table2_bytes(model: LayerLike, tp: int = 1, *, sequence_parallel: bool = False,
                 recompute: Recompute | str = "none", micro_batch: int | None = None,
                 dtype_bytes: int | None = None) -> float:
    """Korthikanti et al. 2022's Table 2, bytes per layer per rank (the module docstring's
    closed forms, ``tp = 1``: no parallelism); ``model`` as :func:`layer_activation_bytes`
    takes it. They hold for the paper's assumptions only, so the layer must have
    ``ffn_hidden == 4 * hidden`` and ``dtype_bytes == 2``; full recomputation is ``2 s b h``,
    divided by ``t`` with sequence parallelism (see the module docstring)."""
    shape = _paper_layer(model, micro_batch, dtype_bytes)
    tp = check_tp(shape, tp, sequence_parallel)
    sp = check_bool("sequence_parallel", sequence_parallel)
    rc = _paper_recompute(recompute)
    if shape.ffn != 4 * shape.hidden or shape.dtype_bytes != 2:
        raise ValueError(f"Table 2 assumes ffn_hidden = 4 * hidden and dtype_bytes = 2; got "
                         f"ffn_hidden={shape.ffn}, hidden={shape.hidden}, "
                         f"dtype_bytes={shape.dtype_bytes} (use layer_activation_bytes)")
    s, b, h, a, t = shape.seq_len, shape.micro_batch, shape.hidden, shape.heads, tp
    sbh = s * b * h
    quad = 5 * a * s / h if rc.keeps_quadratic else 0.0
    if rc.keeps_input_only:
        return 2 * sbh / (t if sp else 1)
    if sp:
        return sbh / t * (34 + quad)
    return sbh * (10 + 24 / t + quad / t)
