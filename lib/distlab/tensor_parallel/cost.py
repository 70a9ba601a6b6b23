"""The collectives of one tensor-parallel transformer layer and what they cost (pure).

Megatron-LM's tensor parallelism (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion
Parameter Language Models Using Model Parallelism", section 3) splits the attention block and
the MLP of a layer over ``t`` ranks: a column-parallel first linear (QKV, the MLP's first
linear) and a row-parallel second one (the attention's output projection, the MLP's second
linear). Two conjugate operators join them to the replicated rest of the layer, named as
Korthikanti et al. 2022 (figure 4) name them, so that each name means one operator (Shoeybi et
al. call ``f_bar`` ``g``):

- ``f`` before each block: the identity in forward, an all-reduce of the input gradient in
  backward;
- ``f_bar`` after each block: an all-reduce of the partial outputs in forward, the identity in
  backward.

So a layer runs 2 all-reduces in forward (attention output, MLP output) and 2 in backward (the
gradients of the attention and MLP inputs), each of the activation ``s * b * h`` elements.

With sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models", section 4.2.2, figure 5) the replicated parts (layer norms,
dropouts) run on ``s / t`` of the sequence each, and ``f`` and ``f_bar`` become ``g`` (all-gather of
the sequence-sharded input before the column-parallel linear in forward, reduce-scatter of its
gradient in backward) and ``g_bar`` (reduce-scatter after the row-parallel linear in forward,
all-gather of the gradient in backward). A ring all-reduce *is* a reduce-scatter followed by an
all-gather, so the per-rank volume is the same: each all-reduce becomes an all-gather +
reduce-scatter pair. ``regather_inputs=True`` adds what Megatron-LM's
``LinearWithGradAccumulationAndAsyncCommunication.backward`` (``megatron/core/tensor_parallel/
layers.py``) also does: the column-parallel linear keeps only its sequence-sharded input, so
backward all-gathers it again to compute the weight gradient (overlapped there with the input
gradient's matmul). That is what the sequence-parallel activation memory of
:mod:`distlab.tensor_parallel.memory` (Table 2's ``34 / t``) assumes: the gathered input is
not stored.

Sizes: every :class:`TPCollective` carries ``nbytes``, the *whole* tensor of the call, ``s * b
* h * dtype_bytes``: the all-reduced buffer; for all-gather the gathered output (each rank
contributes ``nbytes / t``); for reduce-scatter the input each rank reduces (each rank keeps
``nbytes / t``). This is nccl-tests' size, and how distlab's collective models take sizes
(:mod:`distlab.collectives.plan.semantics`: the whole gathered buffer of ``p`` blocks;
:func:`distlab.nccl.family.nccl_collective`: NCCL's ``nBytes``).
:attr:`TPCollective.bytes_per_rank` is what a rank sends in a bandwidth-optimal (ring)
algorithm: ``nbytes`` times nccl-tests' bus bandwidth factor
(:func:`distlab.vocabulary.busbw_factor`).

Prices (:func:`price_layer`), seconds per call, nothing overlapped with compute:

- ``box=None`` (or a link preset): gloo on this machine, the shipped ``loopback`` calibration
  (:func:`distlab.collectives.model.presets.loopback_preset`: alpha, beta, gamma, duplex fitted
  by :func:`distlab.collectives.calibrate`), each collective priced as distlab's default plan of
  it (ring all-reduce, ring all-gather, ring reduce-scatter:
  :data:`~distlab.collectives.algorithms.registry.DEFAULT_ALGORITHM`) with
  :func:`distlab.collectives.model.cost.cost`, as :func:`distlab.zero.comm_volume.comm_seconds`
  prices ZeRO's. gloo's own all-reduce has a schedule of its own
  (:func:`distlab.collectives.model.predict.predict_builtin`), but its all-gather and
  reduce-scatter have none, so one model prices all three and the two layouts compare on it.
- a GPU box (a name of :data:`~distlab.nccl.boxes.GPU_BOXES` or a
  :class:`~distlab.nccl.boxes.GpuBox`), one node: NCCL's measured-time model
  (the time of the execution NCCL chooses, NCCL 2.28.9): the all-reduce by
  :func:`~distlab.nccl.execution.nccl_execution`, all-gather and
  reduce-scatter by :func:`~distlab.nccl.family.nccl_collective`.
- a GPU box across ``nodes`` nodes (``tp / nodes`` GPUs on each, joined by ``network``, a key of
  :data:`~distlab.nccl.multinode.NETWORKS`): the all-reduce by NCCL's
  multi-node model (``nccl_execution(..., nodes=, network=)``). distlab has no multi-node
  all-gather or reduce-scatter model, so each is priced as half that all-reduce of the same
  ``nbytes`` (a ring all-reduce is one of each, moving half its bytes each); the row's
  ``model`` says so.

Why tensor parallelism stays inside a node: its collectives are on the critical path of every
layer, forward and backward, and inside a node they run on NVLink; across nodes they cross the
network. On an 8x H100 SXM box, GPT-3 175B's layer (``s=2048, b=1, h=12288``, 48 MiB per call)
at ``t=8`` without sequence parallelism costs about 1.1 ms of all-reduces inside the box (NCCL
picks NVLS, the NVSwitch reducing) and about 1.5 ms as 2 nodes of 4 GPUs over 8-rail NDR
InfiniBand (NCCL's model: a ring), about 5x over AWS EFA v1 (``efa400``) and 20x over 100 Gb/s
TCP. With sequence parallelism the box runs ring all-gathers and reduce-scatters (about 1.5 ms;
NVLS loses there), and the 8-rail NDR price across 2 nodes, from the half-all-reduce stand-in,
is about the same: the in-box advantage the model shows over the best network is NVLS's. The
tests pin these orderings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distlab._checks import check_bool, check_choice, check_instance, check_int
from distlab.collectives.algorithms.registry import DEFAULT_ALGORITHM, build_plan
from distlab.collectives.model.cost import cost
from distlab.collectives.model.presets import PRESETS, LinkPreset, get_preset, loopback_preset
from distlab.nccl.boxes import GPU_BOXES, GpuBox, gpu_box
from distlab.nccl.execution import HARNESSES, nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.nccl.multinode import NETWORKS
from distlab.transformer import ModelSpec
from distlab.vocabulary import busbw_factor, collective_name

__all__ = ["BACKWARD", "FORWARD", "PASSES", "LayerLike", "LayerPrice", "PricedCollective",
           "TPCollective", "TransformerShape", "check_tp", "layer_collectives", "layer_input",
           "price_layer"]

FORWARD = "forward"
BACKWARD = "backward"
PASSES = (FORWARD, BACKWARD)
"""The two passes a collective runs in."""

ALL_REDUCE = collective_name("all_reduce")
ALL_GATHER = collective_name("all_gather")
REDUCE_SCATTER = collective_name("reduce_scatter")


@dataclass(frozen=True, init=False)
class TransformerShape:
    """A layer as Korthikanti et al. 2022 write it, ``(h, a, s, b)``: a thin constructor of a
    :class:`~distlab.transformer.ModelSpec` (:attr:`model`, distlab's one description of a
    transformer) and the micro-batch and bytes per element a layer's collectives and
    activations are sized by.

    Kept so that code naming a layer by its symbols runs unchanged; new code passes a
    ``ModelSpec`` to this module's functions and to :mod:`distlab.tensor_parallel.memory`, with
    ``micro_batch=`` and ``dtype_bytes=``. Those functions take either.

    Args:
        hidden: ``h``, the hidden size (elements).
        heads: ``a``, attention heads (``hidden`` a multiple of it).
        seq_len: ``s``, tokens per sequence.
        micro_batch: ``b``, sequences per micro-batch.
        ffn_hidden: the MLP's inner size (elements); ``None``: ``4 * hidden``, the papers'.
        vocab: ``v``, the vocabulary (for the embedding and output layer; no per-layer
            formula reads it); ``None``: not given.
        dtype_bytes: bytes per activation element (2: fp16 or bf16, the papers').

    :attr:`model` is one layer of the papers' GPT (a two-matrix MLP, layer norms and biases,
    as many key/value heads as heads) whose vocabulary is ``vocab``, or 1 where not given.
    """

    model: ModelSpec
    micro_batch: int
    dtype_bytes: int
    vocab: int | None

    def __init__(self, hidden: int, heads: int, seq_len: int, micro_batch: int,
                 ffn_hidden: int | None = None, vocab: int | None = None,
                 dtype_bytes: int = 2) -> None:
        check_int("micro_batch", micro_batch, minimum=1)
        check_int("dtype_bytes", dtype_bytes, minimum=1)
        if vocab is not None:
            check_int("vocab", vocab, minimum=1)
        model = ModelSpec("layer", 1, hidden, heads, vocab or 1, seq_len, ffn_hidden=ffn_hidden,
                          attention_bias=True, mlp_bias=True, norm="layernorm")
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "micro_batch", micro_batch)
        object.__setattr__(self, "dtype_bytes", dtype_bytes)
        object.__setattr__(self, "vocab", vocab)

    @classmethod
    def of(cls, model: ModelSpec, micro_batch: int = 1, dtype_bytes: int = 2
           ) -> TransformerShape:
        """``model``'s layer at ``micro_batch`` sequences of ``dtype_bytes``-byte elements."""
        model = check_instance("model", model, ModelSpec)
        out = cls.__new__(cls)
        object.__setattr__(out, "model", model)
        object.__setattr__(out, "micro_batch", check_int("micro_batch", micro_batch, minimum=1))
        object.__setattr__(out, "dtype_bytes", check_int("dtype_bytes", dtype_bytes, minimum=1))
        object.__setattr__(out, "vocab", model.vocab)
        return out

    @property
    def hidden(self) -> int:
        """``h``, the hidden size (elements)."""
        return self.model.hidden

    @property
    def heads(self) -> int:
        """``a``, attention heads."""
        return self.model.heads

    @property
    def seq_len(self) -> int:
        """``s``, tokens per sequence."""
        return self.model.seq_len

    @property
    def ffn_hidden(self) -> int:
        """The MLP's inner size, elements (resolved: ``4 * hidden`` where not given)."""
        return self.model.ffn

    @property
    def ffn(self) -> int:
        """The MLP's inner size, elements (``ffn_hidden``, resolved)."""
        return self.model.ffn

    @property
    def activation_elements(self) -> int:
        """``s * b * h``: elements of the layer's input, output and every tensor-parallel call."""
        return self.seq_len * self.micro_batch * self.hidden

    @property
    def activation_nbytes(self) -> int:
        """``s * b * h * dtype_bytes``: bytes of one such tensor."""
        return self.activation_elements * self.dtype_bytes


LayerLike = ModelSpec | TransformerShape
"""What this module and :mod:`distlab.tensor_parallel.memory` take as a layer: a
:class:`~distlab.transformer.ModelSpec` (with ``micro_batch=`` and ``dtype_bytes=``), or a
:class:`TransformerShape`, which carries both."""


def layer_input(model: LayerLike, micro_batch: int | None = None,
                dtype_bytes: int | None = None) -> TransformerShape:
    """``model`` resolved once, at a public function: a :class:`TransformerShape` of a
    ``ModelSpec`` at ``micro_batch`` (default 1) sequences of ``dtype_bytes`` (default 2) bytes
    an element, or a ``TransformerShape`` itself (``micro_batch`` and ``dtype_bytes`` then
    left ``None``: it carries them). ``TypeError`` for anything else."""
    if isinstance(model, TransformerShape):
        if micro_batch is not None or dtype_bytes is not None:
            raise ValueError("micro_batch and dtype_bytes come with a TransformerShape; give "
                             "them with a ModelSpec")
        return model
    if not isinstance(model, ModelSpec):
        raise TypeError(f"model must be a ModelSpec (or a TransformerShape), got "
                        f"{type(model).__name__}")
    return TransformerShape.of(model, 1 if micro_batch is None else micro_batch,
                               2 if dtype_bytes is None else dtype_bytes)


def check_tp(model: LayerLike, tp: int, sequence_parallel: bool = False) -> int:
    """``tp`` as an int, checked against ``model`` (a :class:`~distlab.transformer.ModelSpec`
    or a :class:`TransformerShape`): >= 1, dividing ``heads`` (whole heads per rank),
    ``hidden`` and ``ffn_hidden`` (whole columns and rows of the split linears) and, with
    sequence parallelism, ``seq_len`` (whole sequence shards, as Megatron-LM requires)."""
    spec = model.model if isinstance(model, TransformerShape) else model
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"model must be a ModelSpec (or a TransformerShape), got "
                        f"{type(model).__name__}")
    tp = check_int("tp", tp, minimum=1)
    sp = check_bool("sequence_parallel", sequence_parallel)
    need = [("heads", spec.heads), ("hidden", spec.hidden), ("ffn_hidden", spec.ffn)]
    if sp:
        need.append(("seq_len", spec.seq_len))
    for name, value in need:
        if value % tp:
            raise ValueError(f"tp={tp} must divide {name}={value}"
                             + (" (sequence parallelism shards the sequence)"
                                if name == "seq_len" else ""))
    return tp


@dataclass(frozen=True)
class TPCollective:
    """One collective of a tensor-parallel layer.

    Attributes:
        collective: its name (:data:`distlab.vocabulary.COLLECTIVES`, torch's spelling).
        phase: ``"forward"`` or ``"backward"`` (:data:`PASSES`).
        where: where in the layer, in words.
        operator: the conjugate operator it belongs to (Korthikanti et al.'s names): without
            sequence parallelism ``"f"`` (before a block) or ``"f_bar"`` (after it), with it
            ``"g"`` (before: the all-gather side) or ``"g_bar"`` (after: the reduce-scatter
            side), or ``"regather"`` (a column-parallel input gathered again in backward for
            its weight gradient).
        nbytes: the whole tensor of the call, bytes (see the module docstring: the all-reduced
            buffer, the gathered output, the reduce-scatter's input).
        world_size: ranks in the call (the tensor-parallel degree).
    """

    collective: str
    phase: str
    where: str
    operator: str
    nbytes: int
    world_size: int

    @property
    def bytes_per_rank(self) -> float:
        """Bytes one rank sends in a bandwidth-optimal (ring) algorithm: ``nbytes`` times
        nccl-tests' bus bandwidth factor (:func:`distlab.vocabulary.busbw_factor`; the
        all-reduce's is twice the all-gather's and the reduce-scatter's)."""
        return self.nbytes * (busbw_factor(self.collective, self.world_size) or 0.0)


def _no_sp(nbytes: int, tp: int) -> tuple[TPCollective, ...]:
    def call(phase: str, where: str, op: str) -> TPCollective:
        return TPCollective(ALL_REDUCE, phase, where, op, nbytes, tp)

    return (
        call(FORWARD, "attention output (after the row-parallel output projection)", "f_bar"),
        call(FORWARD, "MLP output (after the row-parallel second linear)", "f_bar"),
        call(BACKWARD, "MLP input (gradient of the column-parallel first linear's input)", "f"),
        call(BACKWARD, "attention input (gradient of the column-parallel QKV input)", "f"),
    )


def _sp(nbytes: int, tp: int, regather: bool) -> tuple[TPCollective, ...]:
    def call(collective: str, phase: str, where: str, op: str) -> TPCollective:
        return TPCollective(collective, phase, where, op, nbytes, tp)

    out = [
        call(ALL_GATHER, FORWARD, "attention input (sequence-sharded layer-norm output, "
             "gathered before QKV)", "g"),
        call(REDUCE_SCATTER, FORWARD, "attention output (after the row-parallel output "
             "projection, into sequence shards)", "g_bar"),
        call(ALL_GATHER, FORWARD, "MLP input (sequence-sharded layer-norm output, gathered "
             "before the first linear)", "g"),
        call(REDUCE_SCATTER, FORWARD, "MLP output (after the row-parallel second linear, "
             "into sequence shards)", "g_bar"),
        call(ALL_GATHER, BACKWARD, "MLP output (its sequence-sharded gradient gathered)",
             "g_bar"),
    ]
    if regather:
        out.append(call(ALL_GATHER, BACKWARD, "MLP input (gathered again for the first "
                        "linear's weight gradient)", "regather"))
    out += [
        call(REDUCE_SCATTER, BACKWARD, "MLP input (gradient of the first linear's input, into "
             "sequence shards)", "g"),
        call(ALL_GATHER, BACKWARD, "attention output (its sequence-sharded gradient "
             "gathered)", "g_bar"),
    ]
    if regather:
        out.append(call(ALL_GATHER, BACKWARD, "attention input (gathered again for QKV's "
                        "weight gradient)", "regather"))
    out.append(call(REDUCE_SCATTER, BACKWARD, "attention input (gradient of QKV's input, into "
                    "sequence shards)", "g"))
    return tuple(out)


def layer_collectives(model: LayerLike, tp: int, sequence_parallel: bool = False, *,
                      micro_batch: int | None = None, dtype_bytes: int | None = None,
                      regather_inputs: bool = False) -> tuple[TPCollective, ...]:
    """The collectives of one transformer layer on ``tp`` ranks, forward then backward, in the
    order they run (see the module docstring).

    ``model``: a :class:`~distlab.transformer.ModelSpec` at ``micro_batch`` sequences (default
    1) of ``dtype_bytes``-byte activations (default 2), or a :class:`TransformerShape`
    (:func:`layer_input`). Without sequence parallelism: 4 all-reduces of the layer's
    activation, ``s * b * h * dtype_bytes`` bytes (2 forward, 2 backward). With it: 4
    all-gathers and 4 reduce-scatters of the same ``nbytes``, the same bytes per rank in all;
    ``regather_inputs`` adds Megatron-LM's 2 backward all-gathers of the column-parallel
    inputs. ``tp == 1``: none. ``tp`` is checked by :func:`check_tp`.
    """
    shape = layer_input(model, micro_batch, dtype_bytes)
    tp = check_tp(shape, tp, sequence_parallel)
    regather = check_bool("regather_inputs", regather_inputs)
    if tp == 1:
        return ()
    if sequence_parallel:
        return _sp(shape.activation_nbytes, tp, regather)
    return _no_sp(shape.activation_nbytes, tp)


@dataclass(frozen=True)
class PricedCollective:
    """A :class:`TPCollective` and its predicted ``seconds``; ``model`` names what priced it."""

    call: TPCollective
    seconds: float
    model: str


@dataclass(frozen=True)
class LayerPrice:
    """The collectives of one layer, priced (:func:`price_layer`).

    ``where`` names the machine: ``"gloo: <link preset>"`` or ``"<box key> x <nodes> node(s)
    [over <network>]"``; ``shape`` the layer priced (:func:`layer_input`: its
    :class:`~distlab.transformer.ModelSpec`, micro-batch and bytes per element)."""

    shape: TransformerShape
    tp: int
    sequence_parallel: bool
    where: str
    calls: tuple[PricedCollective, ...]

    @property
    def seconds(self) -> float:
        """Seconds of every collective of the layer, forward and backward, one after another."""
        return sum(c.seconds for c in self.calls)

    def pass_seconds(self, phase: str) -> float:
        """Seconds of the collectives of one pass (``"forward"`` or ``"backward"``)."""
        check_choice("phase", phase, PASSES)
        return sum(c.seconds for c in self.calls if c.call.phase == phase)

    @property
    def bytes_per_rank(self) -> float:
        """Bytes one rank sends over the layer (:attr:`TPCollective.bytes_per_rank`)."""
        return sum(c.call.bytes_per_rank for c in self.calls)


def _gloo_pricer(preset: LinkPreset, itemsize: int) -> Any:
    label = f"distlab's default plan priced with link preset {preset.name!r}"

    def price(c: TPCollective) -> tuple[float, str]:
        algorithm = DEFAULT_ALGORITHM[c.collective]
        plan = build_plan(c.collective, algorithm, c.world_size, c.nbytes // itemsize)
        return (cost(plan, preset.alpha, preset.beta, preset.gamma, itemsize,
                     duplex=preset.duplex), f"{algorithm} {label}")
    return price


def _nccl_pricer(box: GpuBox, nodes: int, network: str | None, harness: str) -> Any:
    def price(c: TPCollective) -> tuple[float, str]:
        if nodes == 1:
            if c.collective == ALL_REDUCE:
                e = nccl_execution(box, c.world_size, [c.nbytes], harness=harness)[0]
                return e.seconds, f"NCCL allreduce execution model, one node ({e.algorithm})"
            r = nccl_collective(box, c.world_size, [c.nbytes], c.collective, harness=harness)[0]
            return r.seconds, f"NCCL {c.collective} execution model, one node ({r.algorithm})"
        e = nccl_execution(box, c.world_size, [c.nbytes], harness=harness, nodes=nodes,
                           network=network)[0]
        if c.collective == ALL_REDUCE:
            return e.seconds, f"NCCL allreduce multi-node model ({e.algorithm})"
        return e.seconds / 2, (f"half NCCL's multi-node allreduce of the same nbytes "
                               f"({e.algorithm}): no multi-node {c.collective} model")
    return price


def price_layer(model: LayerLike, tp: int, sequence_parallel: bool = False, *,
                micro_batch: int | None = None, dtype_bytes: int | None = None,
                box: str | GpuBox | LinkPreset | None = None, nodes: int = 1,
                network: str | None = None, harness: str = "torch",
                regather_inputs: bool = False) -> LayerPrice:
    """Seconds of each collective of one layer (:func:`layer_collectives`) and their sum.

    Args:
        model, tp, sequence_parallel, micro_batch, dtype_bytes, regather_inputs: as
            :func:`layer_collectives`.
        box: ``None``: gloo on the machine of the shipped ``loopback`` calibration; a
            :class:`~distlab.collectives.model.presets.LinkPreset` or a name of
            :data:`~distlab.collectives.model.presets.PRESETS`: distlab's plans on that link;
            a GPU box (a name of :data:`~distlab.nccl.boxes.GPU_BOXES` or a
            ``GpuBox``): NCCL's model (see the module docstring for which prices what).
        nodes: nodes the ``tp`` ranks span (a GPU box only): ``tp / nodes`` GPUs on each,
            at most the box's GPUs.
        network: with ``nodes > 1``, a key of
            :data:`~distlab.nccl.multinode.NETWORKS`; ``None`` otherwise.
        harness: on a GPU box, how calls are issued (a key of
            :data:`~distlab.nccl.execution.HARNESSES`; ``"torch"``: one
            process per GPU, back to back).
    """
    shape = layer_input(model, micro_batch, dtype_bytes)
    calls = layer_collectives(shape, tp, sequence_parallel, regather_inputs=regather_inputs)
    nodes = check_int("nodes", nodes, minimum=1)
    if isinstance(box, GpuBox) or (isinstance(box, str) and box in GPU_BOXES):
        b = gpu_box(box)
        check_choice("harness", harness, HARNESSES)
        if nodes > 1:
            if network is None:
                raise ValueError(f"nodes={nodes} needs a network, one of {', '.join(NETWORKS)}")
            check_choice("network", network, NETWORKS)
        elif network is not None:
            raise ValueError(f"network={network!r} is for nodes > 1; got nodes=1")
        if tp % nodes or tp // nodes > b.gpus:
            raise ValueError(f"tp={tp} must be nodes={nodes} times at most {b.gpus} GPUs of "
                             f"{b.key} (the same GPUs on every node)")
        price = _nccl_pricer(b, nodes, network, harness)
        where = f"{b.key} x {nodes} node{'s' if nodes > 1 else ''}" + (
            f" over {network}" if network else "")
    else:
        if nodes != 1 or network is not None:
            raise ValueError(f"nodes={nodes}, network={network!r}: several nodes are priced on "
                             f"a GPU box only ({', '.join(GPU_BOXES)}); box={box!r}")
        if box is None:
            preset = loopback_preset()
            if preset is None:
                raise ValueError("box=None needs the shipped loopback calibration, which is "
                                 "missing from this install")
        elif isinstance(box, LinkPreset):
            preset = box
        elif isinstance(box, str) and (box in PRESETS or box == "loopback"):
            preset = get_preset(box)
        else:
            raise ValueError(f"box must be None (gloo loopback), a link preset "
                             f"({', '.join(PRESETS)}, 'loopback') or a GPU box "
                             f"({', '.join(GPU_BOXES)}); got {box!r}")
        price = _gloo_pricer(preset, shape.dtype_bytes)
        where = f"gloo: {preset.name}" if box is None else f"link: {preset.name}"
    priced = []
    for c in calls:
        seconds, model = price(c)
        priced.append(PricedCollective(c, seconds, model))
    return LayerPrice(shape, tp, bool(sequence_parallel), where, tuple(priced))
