"""Activation memory per rank counted from live tensors, beside the memory model's.

A small decoder whose shape is a :class:`~distlab.transformer.ModelSpec` (:class:`Net`) trains
one fp32 step on CPU: without parallelism, and split over ranks by distlab's tensor parallelism
(:func:`decoder_tp_plan`, Megatron's split, with and without sequence parallelism). What each
rank keeps from forward for backward is counted from the tensors autograd saves, and set beside
what :func:`distlab.plan.memory.memory_per_gpu` says it stores (:func:`live_activation_memory`,
one :class:`LiveActivations` per case and rank). All sizes are bytes.

:class:`Net` uses torch's test ``Transformer`` names (so
:func:`~distlab.transformer.spec_from_module` reads it back): token embedding, blocks of
norm -> attention (``wq``, ``wk``, ``wv``, ``wo``; grouped-query heads; torch's SDPA, causal)
-> dropout and norm -> MLP (``w1``, GeLU, ``w2``; gated: ``w2(silu(w1) * w3)``) -> dropout,
final norm, output layer. Its norms are ``nn.LayerNorm`` (torch's CPU ``nn.RMSNorm`` is
composite and keeps its normalized input as well, which a fused RMSNorm does not).

Counting (:func:`saved_and_step`): activations are the bytes autograd saves between the forward
with the loss and the backward (distlab's
:class:`~distlab.pipeline_parallel.runtime.measure.ActivationMeter`: every saved tensor's byte
range in its storage, each byte once, parameters left out); model states are the live tensors
after one Adam step: the parameters' storages, the gradients', and the optimizer's state
tensors (Adam's 0-d step counters left out).

The model's settings for this CPU run (:data:`CPU_SETTINGS`): 4-byte activations and 4-byte
dropout masks (torch's CPU dropout keeps its mask in the activation dtype), nothing held outside
an allocator (``device_bytes=0``), and ``sp_saves_gathered=True``: distlab's (and torch's)
``ColwiseParallel`` keeps its all-gathered input. The model counts what is stored
(:func:`stored_activations`: its activations without backward's working set, which comes after
the count). The live count is above it by at most the small per-token tensors the model leaves
out (:func:`left_out_bytes`).

This module sits in ``plan`` (floor 2), not in ``tensor_parallel`` (floor 1), because it builds
its decoder from a ``plan.model.ModelSpec`` and compares with ``plan.memory``, which a lab may
not import (``tests/test_import_graph.py``'s ``FLOORS``). It imports torch, so
``distlab.plan`` does not import it: import it by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import distlab.tensor_parallel as tp
from distlab import launch
from distlab._checks import check_choice, check_float, check_int
from distlab.pipeline_parallel.runtime.measure import ActivationMeter
from distlab.plan.layout import Layout
from distlab.plan.memory import MemoryEstimate, memory_per_gpu
from distlab.plan.verify.recompute import per_op_context, per_op_save_list
from distlab.recompute import NONE, OP, recompute_policy
from distlab.tensor_parallel.loss import loss_parallel_cross_entropy
from distlab.transformer import ModelSpec
from distlab.vocabulary import error_pct
from distlab.zero.measure import storage_bytes

__all__ = ["BACKENDS", "BATCH", "CASES", "CPU_SETTINGS", "LiveActivations", "LiveCase", "Net",
           "batch", "build", "cpu_layout", "decoder_tp_plan", "layer_kept_bytes", "left_out_bytes",
           "live_activation_memory", "measure_rank", "per_op_context", "per_op_save_list",
           "saved_and_step", "step_loss",
           "stored_activations", "tp_case"]

BACKENDS = {"eager": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}
"""The SDPA kernel each attention of the planner runs on CPU: torch's math path keeps the
softmax (and with dropout its mask and output); the CPU flash kernel keeps the log-sum-exp."""

BATCH = 2
"""Sequences per step (the layout's micro and global batch)."""

CPU_SETTINGS: dict[str, Any] = {"dtype_bytes": 4, "mask_bytes": 4, "sp_saves_gathered": True,
                                "device_bytes": 0}
""":func:`~distlab.plan.memory.memory_per_gpu`'s keyword arguments for this fp32 CPU run."""


class Attention(nn.Module):
    """Causal self-attention with ``kv_heads`` key/value heads; head counts follow the weights
    (a tensor-parallel split leaves each rank its heads)."""

    def __init__(self, spec: ModelSpec, dropout: float) -> None:
        super().__init__()
        h, q, kv = spec.hidden, spec.q_width, spec.kv_width
        self.n_heads, self.head_dim, self.dropout_p = spec.heads, spec.head_width, dropout
        self.wq = nn.Linear(h, q, bias=spec.attention_bias)
        self.wk = nn.Linear(h, kv, bias=spec.attention_bias)
        self.wv = nn.Linear(h, kv, bias=spec.attention_bias)
        self.wo = nn.Linear(q, h, bias=spec.attention_bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, s, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x))
        o = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout_p * self.training,
                                           is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        return self.resid_dropout(self.wo(o.transpose(1, 2).reshape(b, s, -1)))


class FeedForward(nn.Module):
    """``w2(gelu(w1 x))``, or gated ``w2(silu(w1 x) * w3 x)``, then dropout."""

    def __init__(self, spec: ModelSpec, dropout: float) -> None:
        super().__init__()
        h, f = spec.hidden, spec.ffn
        self.w1 = nn.Linear(h, f, bias=spec.mlp_bias)
        self.w2 = nn.Linear(f, h, bias=spec.mlp_bias)
        if spec.gated_ffn:
            self.w3 = nn.Linear(h, f, bias=spec.mlp_bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "w3"):
            y = F.silu(self.w1(x)) * self.w3(x)
        else:
            y = F.gelu(self.w1(x))
        return self.resid_dropout(self.w2(y))


class Block(nn.Module):
    """Pre-norm attention and MLP with residuals."""

    def __init__(self, spec: ModelSpec, dropout: float) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(spec.hidden)
        self.attention = Attention(spec, dropout)
        self.ffn_norm = nn.LayerNorm(spec.hidden)
        self.feed_forward = FeedForward(spec, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Net(nn.Module):
    """The decoder of ``spec`` (layer norms: ``spec.norm`` must be ``"layernorm"``; no learned
    positions); fp32 logits ``(batch, seq_len, vocab)`` from token ids ``(batch, seq_len)``."""

    def __init__(self, spec: ModelSpec, dropout: float = 0.0) -> None:
        super().__init__()
        if spec.norm != "layernorm" or spec.positions is not None:
            raise ValueError("Net builds layer norms and no learned positions")
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(Block(spec, dropout) for _ in range(spec.layers))
        self.norm = nn.LayerNorm(spec.hidden)
        self.output = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.tok_embeddings(ids))
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


def build(spec: ModelSpec, dropout: float, seed: int = 0) -> Net:
    """:class:`Net` of ``spec`` with dropout probability ``dropout``, seeded (every rank builds
    the same one)."""
    torch.manual_seed(seed)
    return Net(spec, dropout)


def batch(spec: ModelSpec, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets, ``(BATCH, seq_len)`` each."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, spec.vocab, (BATCH, spec.seq_len), generator=g),
            torch.randint(0, spec.vocab, (BATCH, spec.seq_len), generator=g))


def step_loss(logits: torch.Tensor, target: torch.Tensor, comm: Any = None) -> torch.Tensor:
    """Cross-entropy of ``logits`` against ``target``: whole logits (``comm`` None), or logits
    split over the vocabulary by tensor parallelism (``comm``: the rank's ``TPComm``; distlab's
    vocabulary-parallel loss)."""
    if comm is None:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return loss_parallel_cross_entropy(logits, target, comm)


def saved_and_step(net: nn.Module, spec: ModelSpec, attention: str, comm: Any = None
                   ) -> dict[str, int]:
    """One training step of ``net`` on :func:`batch`: the activation bytes saved between the
    forward (loss included) and the backward, then the model states after an Adam step.

    Returns:
        ``{"activations", "params", "grads", "optimizer"}``, bytes on this rank.
    """
    check_choice("attention", attention, tuple(BACKENDS))
    ids, target = batch(spec)
    params = list(net.parameters())
    meter = ActivationMeter(exclude=params)
    with sdpa_kernel(BACKENDS[attention]), meter.saving(0, 0):
        loss = step_loss(net(ids), target, comm)
    saved = meter.live_nbytes()
    loss.backward()
    opt = torch.optim.Adam(params, lr=1e-3)
    opt.step()
    return {"activations": saved, **_states(params, opt)}


def _states(params: list[torch.Tensor], opt: torch.optim.Optimizer) -> dict[str, int]:
    moments = [t for st in opt.state.values() for t in st.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0]
    return {"params": storage_bytes(params),
            "grads": storage_bytes([p.grad for p in params if p.grad is not None]),
            "optimizer": storage_bytes(moments)}


def decoder_tp_plan(spec: ModelSpec, sequence_parallel: bool) -> dict[str, tp.ParallelStyle]:
    """Megatron's split of :class:`Net` in distlab's (torch's) styles: vocabulary-parallel
    embedding and output layer (logits stay split for the vocabulary-parallel loss), Q/K/V and
    the first MLP linears column-parallel, the output projection and second linear
    row-parallel; with sequence parallelism the norms and dropouts on the rank's sequence
    chunk, each block's input gathered once (``PrepareModuleInput``)."""
    s1, rep = tp.Shard(1), tp.Replicate()
    first = ["w1", "w3"] if spec.gated_ffn else ["w1"]
    plan: dict[str, tp.ParallelStyle] = {
        "tok_embeddings": tp.RowwiseParallel(input_layouts=rep,
                                             output_layouts=s1 if sequence_parallel else rep)}
    for w in ("wq", "wk", "wv"):
        plan[f"layers.*.attention.{w}"] = tp.ColwiseParallel()
    for w in first:
        plan[f"layers.*.feed_forward.{w}"] = tp.ColwiseParallel()
    out = {"output_layouts": s1} if sequence_parallel else {}
    plan["layers.*.attention.wo"] = tp.RowwiseParallel(**out)
    plan["layers.*.feed_forward.w2"] = tp.RowwiseParallel(**out)
    if sequence_parallel:
        for name in ("layers.*.attention_norm", "layers.*.ffn_norm", "norm"):
            plan[name] = tp.SequenceParallel()
        for name in ("layers.*.attention", "layers.*.feed_forward"):
            plan[name] = tp.PrepareModuleInput(input_layouts=s1, desired_input_layouts=rep)
        plan["output"] = tp.ColwiseParallel(input_layouts=s1)
    else:
        plan["output"] = tp.ColwiseParallel()
    return plan


def tp_case(spec: ModelSpec, attention: str, dropout: float, sequence_parallel: bool
            ) -> dict[str, int]:
    """One rank of a tensor-parallel step of ``spec`` over the default process group (every
    rank of it): :func:`saved_and_step`'s bytes for this rank."""
    net = build(spec, dropout)
    tp.parallelize_module(net, None, decoder_tp_plan(spec, sequence_parallel))
    if spec.tied_embeddings:
        net.output.weight = net.tok_embeddings.weight
    return saved_and_step(net, spec, attention, net.tp_comm)


def cpu_layout(**fields: Any) -> Layout:
    """The :class:`~distlab.plan.layout.Layout` of this run: :data:`BATCH` sequences per
    microbatch, fp32 states; ``global_batch`` defaults to ``BATCH * dp``."""
    fields.setdefault("global_batch", BATCH * fields.get("dp", 1))
    return Layout(micro_batch=BATCH, precision="fp32", **fields)


def stored_activations(est: MemoryEstimate) -> int:
    """What the model says is kept from forward for backward, bytes: its activations without
    backward's working set (the live count is taken at the end of forward; backward's working
    set comes later)."""
    return est.activation_parts.total - est.activation_parts.working


def left_out_bytes(spec: ModelSpec, microbatches: int = 1) -> int:
    """Bytes the model leaves out at most, per rank: per token of ``microbatches`` microbatches
    of :data:`BATCH` sequences, 8 per layer norm (fp32 mean and rstd) and 32 for the loss's and
    the embedding lookup's per-token tensors (target, row sums, masks)."""
    norms = 2 * spec.layers + 1
    return microbatches * BATCH * spec.seq_len * (8 * norms + 32)


class _OutputStorages(TorchDispatchMode):
    """Holds the storage of every tensor an op returns while it is active (one Python reference
    each, so a storage someone else still references has a use count above one)."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, Any] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                st = t.untyped_storage()
                self.storages[st.data_ptr()] = st
        return out


def layer_kept_bytes(spec: ModelSpec, recompute: str, *, attention: str = "flash",
                     seed: int = 0) -> int:
    """Bytes one layer of ``spec`` (:class:`Block`, fp32, :data:`BATCH` sequences) keeps from
    its forward for backward, counted from live storages: those its ops produced that are still
    referenced once the forward returned (its output and the parameters left out), plus its
    input, which the caller holds and the layer keeps (the first norm's input, or the
    checkpoint's). ``recompute``: ``"none"``, or ``"op"`` (the layer run under
    :func:`torch.utils.checkpoint.checkpoint` with :func:`per_op_context`, as torchtitan wraps
    each block). Uses torch's private ``_storage_Use_Count``."""
    check_choice("recompute", recompute, (NONE.name, OP.name))
    check_choice("attention", attention, tuple(BACKENDS))
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(seed)
    block = Block(spec, 0.0)
    x = torch.randn(BATCH, spec.seq_len, spec.hidden, requires_grad=True)
    track = _OutputStorages()
    with sdpa_kernel(BACKENDS[attention]), track:
        if recompute_policy(recompute).keeps_per_op:
            y = checkpoint(block, x, use_reentrant=False, context_fn=per_op_context,
                           preserve_rng_state=False)
        else:
            y = block(x)
    skip = {y.untyped_storage().data_ptr()} | {p.untyped_storage().data_ptr()
                                               for p in block.parameters()}
    kept = sum(st.nbytes() for ptr, st in track.storages.items()
               if ptr not in skip and torch._C._storage_Use_Count(st._cdata) > 1)
    y.sum().backward()   # the step completes: what was kept was what backward needed
    return kept + x.untyped_storage().nbytes()


@dataclass(frozen=True)
class LiveCase:
    """One way to split the step: ``tp`` ranks of tensor parallelism (1: none; the step then
    runs whole in each rank's process), with or without sequence parallelism."""

    name: str
    tp: int
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        check_int("tp", self.tp, minimum=2 if self.sequence_parallel else 1)


CASES = (LiveCase("no parallelism", 1), LiveCase("TP 2", 2),
         LiveCase("TP 2 + SP", 2, sequence_parallel=True))
"""The cases :func:`live_activation_memory` runs by default, on 2 ranks."""


@dataclass(frozen=True)
class LiveActivations:
    """One case on one rank: activations counted live beside the model's, bytes.

    Attributes:
        case: the case.
        rank: the rank that counted.
        measured: activation bytes autograd saved between forward (loss included) and
            backward, each byte once, parameters left out.
        model: :func:`stored_activations` of :attr:`estimate`.
        left_out: :func:`left_out_bytes`: how far above :attr:`model` :attr:`measured` may be.
        states: the rank's model states after one Adam step, ``{"params", "grads",
            "optimizer"}``.
        estimate: :func:`~distlab.plan.memory.memory_per_gpu` of the case's layout with
            :data:`CPU_SETTINGS`.
    """

    case: LiveCase
    rank: int
    measured: int
    model: int
    left_out: int
    states: dict[str, int]
    estimate: MemoryEstimate

    @property
    def memory_error_pct(self) -> float:
        """:func:`~distlab.vocabulary.error_pct` of :attr:`measured` against :attr:`model`:
        ``(measured - model) / model * 100`` (+: the step kept more than the model says)."""
        return error_pct(self.measured, self.model)

    @property
    def states_match(self) -> bool:
        """Whether the measured model states equal the model's, byte for byte."""
        return (self.states["params"], self.states["grads"], self.states["optimizer"]) == \
            self.estimate.states_held


def measure_rank(rank: int, world_size: int, spec: ModelSpec, attention: str, dropout: float,
                 cases: tuple[LiveCase, ...] = CASES) -> list[dict[str, int]]:
    """Rank function (:func:`distlab.launch.run`): every case of ``cases`` in order, one fp32
    step each of :func:`build` ``(spec, dropout)`` with ``attention`` (``"eager"`` or
    ``"flash"``); a case with ``tp > 1`` splits the step over all ``world_size`` ranks.

    Returns:
        :func:`saved_and_step`'s bytes per case on this rank.
    """
    torch.set_num_threads(1)
    out = []
    for case in cases:
        if case.tp == 1:
            out.append(saved_and_step(build(spec, dropout), spec, attention))
        elif case.tp == world_size:
            out.append(tp_case(spec, attention, dropout, case.sequence_parallel))
        else:
            raise ValueError(f"{case.name}: tp={case.tp} must be 1 or the {world_size} ranks")
    return out


def live_activation_memory(spec: ModelSpec, *, attention: str = "eager", dropout: float = 0.0,
                           cases: tuple[LiveCase, ...] = CASES, world_size: int = 2,
                           timeout: float = 120.0) -> list[LiveActivations]:
    """Run :func:`measure_rank` on ``world_size`` gloo ranks and set each case's count on each
    rank beside the model's.

    Args:
        spec: the decoder (layer norms, no learned positions; ``heads``, ``kv_heads`` and
            ``vocab`` divisible by the cases' ``tp``).
        attention: ``"eager"`` (torch's math SDPA) or ``"flash"`` (its CPU flash kernel).
        dropout: dropout probability, in [0, 1); > 0 keeps masks (the model's
            ``dropout=True``).
        cases: the splits to run (:data:`CASES`: none, TP over 2, TP + SP over 2).
        world_size: ranks launched; every case's ``tp`` must be 1 or this.
        timeout: seconds for the whole run (:func:`distlab.launch.run`).

    Returns:
        One :class:`LiveActivations` per case and rank, case by case, ranks in order.
    """
    check_choice("attention", attention, tuple(BACKENDS))
    dropout = check_float("dropout", dropout, minimum=0.0)
    if dropout >= 1.0:
        raise ValueError(f"dropout must be < 1, got {dropout!r}")
    for case in cases:
        if case.tp not in (1, world_size):
            raise ValueError(f"{case.name}: tp={case.tp} must be 1 or world_size={world_size}")
    ranks = launch.run(measure_rank, world_size, backend="gloo",
                       args=(spec, attention, dropout, tuple(cases)), timeout=timeout)
    rows = []
    for i, case in enumerate(cases):
        layout = cpu_layout(tp=case.tp, sequence_parallel=case.sequence_parallel)
        est = memory_per_gpu(spec, layout, attention=attention, dropout=dropout > 0,
                             **CPU_SETTINGS)
        for rank, out in enumerate(ranks):
            got = out[i]
            rows.append(LiveActivations(
                case, rank, got["activations"], stored_activations(est), left_out_bytes(spec),
                {k: got[k] for k in ("params", "grads", "optimizer")}, est))
    return rows
