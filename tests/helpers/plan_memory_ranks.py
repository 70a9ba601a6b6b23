"""A small decoder transformer whose shape is a ModelSpec, and what it holds, counted live.

Used only by tests/plan/test_plan_memory_live.py. :class:`Net` is built from a
:class:`~distlab.plan.model.ModelSpec` (torch's test ``Transformer`` names, so
``spec_from_module`` reads it back): token embedding, blocks of norm -> attention (``wq``,
``wk``, ``wv``, ``wo``; grouped-query heads; torch's SDPA, causal) -> dropout and norm -> MLP
(``w1``, GeLU, ``w2``; gated: ``w2(silu(w1) * w3)``) -> dropout, final norm, output layer. Its
norms are ``nn.LayerNorm`` (torch's CPU ``nn.RMSNorm`` is composite and keeps its normalized
input as well, which a fused RMSNorm does not).

Activations are counted from the tensors autograd saves (distlab's
:class:`~distlab.pipeline_parallel.runtime.measure.ActivationMeter`: every saved tensor's byte
range in its storage, each byte once, parameters left out), between the forward with the loss
and the backward. Model states are counted from the live tensors: the parameters' storages,
the gradients', and the optimizer's state tensors (Adam's step counters, 0-d, left out).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

import distlab.tensor_parallel as tp
from distlab.pipeline_parallel.runtime.measure import ActivationMeter
from distlab.plan.model import ModelSpec
from distlab.tensor_parallel.loss import loss_parallel_cross_entropy
from distlab.zero.measure import storage_bytes
from distlab.zero.optimizer import ZeroDataParallel

BACKENDS = {"eager": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}
"""The SDPA kernel each attention of the planner runs on CPU: torch's math path keeps the
softmax (and with dropout its mask and output); the CPU flash kernel keeps the log-sum-exp."""

BATCH = 2


class Attention(nn.Module):
    """Causal self-attention with ``kv_heads`` key/value heads; head counts follow the weights
    (a tensor-parallel split leaves each rank its heads)."""

    def __init__(self, spec: ModelSpec, dropout: float) -> None:
        super().__init__()
        h, kv = spec.hidden, spec.kv_width
        self.n_heads, self.head_dim, self.dropout_p = spec.heads, spec.head_dim, dropout
        self.wq = nn.Linear(h, h, bias=spec.attention_bias)
        self.wk = nn.Linear(h, kv, bias=spec.attention_bias)
        self.wv = nn.Linear(h, kv, bias=spec.attention_bias)
        self.wo = nn.Linear(h, h, bias=spec.attention_bias)
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
    """The decoder of ``spec`` (layer norms: ``spec.norm`` must be ``"layernorm"``)."""

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
    """:class:`Net` of ``spec``, seeded (every rank builds the same one)."""
    torch.manual_seed(seed)
    return Net(spec, dropout)


def batch(spec: ModelSpec, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and targets, ``(BATCH, seq_len)`` each."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, spec.vocab, (BATCH, spec.seq_len), generator=g),
            torch.randint(0, spec.vocab, (BATCH, spec.seq_len), generator=g))


def _loss(logits: torch.Tensor, target: torch.Tensor, comm: Any) -> torch.Tensor:
    if comm is None:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return loss_parallel_cross_entropy(logits, target, comm)


def saved_and_step(net: nn.Module, spec: ModelSpec, attention: str, comm: Any = None
                   ) -> dict[str, int]:
    """One training step of ``net``: the activation bytes saved between the forward (loss
    included) and the backward, then the model states after an Adam step (bytes)."""
    ids, target = batch(spec)
    params = list(net.parameters())
    meter = ActivationMeter(exclude=params)
    with sdpa_kernel(BACKENDS[attention]), meter.saving(0, 0):
        loss = _loss(net(ids), target, comm)
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


def tp_plan(spec: ModelSpec, sequence_parallel: bool) -> dict[str, tp.ParallelStyle]:
    """Megatron's split in distlab's (torch's) styles: vocabulary-parallel embedding and
    output layer (logits stay split for the vocabulary-parallel loss), Q/K/V and the first MLP
    linears column-parallel, the output projection and second linear row-parallel; with
    sequence parallelism the norms and dropouts on the rank's sequence chunk, each block's input
    gathered once (``PrepareModuleInput``)."""
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
    """One rank of a tensor-parallel step of ``spec`` over the default group."""
    net = build(spec, dropout)
    tp.parallelize_module(net, None, tp_plan(spec, sequence_parallel))
    if spec.tied_embeddings:
        net.output.weight = net.tok_embeddings.weight
    return saved_and_step(net, spec, attention, net.tp_comm)


def zero_case(spec: ModelSpec, stage: int) -> dict[str, int]:
    """Model states of one rank of ``ZeroDataParallel`` at ``stage`` after one fp32 step (one
    bucket at stages 0-2; stage 3 with a unit per module, as its default)."""
    net = build(spec, 0.0)
    zdp = ZeroDataParallel(net, stage, bucket_cap_mb=1024.0)
    ids, target = batch(spec)
    _loss(zdp(ids), target, None).backward()
    zdp.step()
    st = zdp.state_tensors()
    out = {"params": storage_bytes(st["params"]), "grads": storage_bytes(st["grads"]),
           "optimizer": storage_bytes([t for t in st["optimizer"] if t.dim() > 0])}
    if stage == 3:
        zdp.close()
    return out


def parallel_rank(rank: int, world_size: int, specs: dict[str, ModelSpec],
                  tp_cases: list[tuple[str, str, float, bool]],
                  zero_spec: str) -> dict[str, Any]:
    """Rank function: ZeRO 0-3 over the ranks (data parallel, ``zero_spec``), then every
    ``(spec name, attention, dropout, sequence_parallel)`` of ``tp_cases`` split over them."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {f"zero{s}": zero_case(specs[zero_spec], s) for s in range(4)}
    for name, attention, dropout, sp in tp_cases:
        out[f"tp {name} {attention} dropout={dropout} sp={sp}"] = tp_case(
            specs[name], attention, dropout, sp)
    return out


class _FirstStage(nn.Module):
    """Embedding and the first ``k`` blocks of a :class:`Net` (its modules, shared)."""

    def __init__(self, net: Net, k: int) -> None:
        super().__init__()
        self.tok_embeddings, self.dropout = net.tok_embeddings, net.dropout
        self.layers = nn.ModuleList(net.layers[:k])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.tok_embeddings(ids))
        for layer in self.layers:
            h = layer(h)
        return h


class _LastStage(nn.Module):
    """The blocks from ``k`` on, the final norm and the output layer of a :class:`Net`."""

    def __init__(self, net: Net, k: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(net.layers[k:])
        self.norm, self.output = net.norm, net.output

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h)).float()


def pipeline_rank(rank: int, world_size: int, spec: ModelSpec, schedule: str,
                  microbatches: int, attention: str) -> dict[str, Any]:
    """Rank function: ``spec`` cut into ``world_size == 2`` stages (half the blocks each; the
    embedding on the first, the final norm, output layer and loss on the last) and trained one
    traced step of ``microbatches`` microbatches of :data:`BATCH` sequences under distlab's
    ``Schedule<schedule>``; the step's peak activation bytes (live saved tensors) and how many
    microbatches were in flight at once."""
    from distlab.pipeline_parallel.runtime import PipelineStage
    from distlab.pipeline_parallel.runtime import schedules as sched
    from distlab.timeline import Timeline

    if world_size != 2:
        raise ValueError("pipeline_rank cuts the model into 2 stages: run it on 2 ranks")
    torch.set_num_threads(1)
    net = build(spec, 0.0)
    k = spec.layers // 2
    module = _FirstStage(net, k) if rank == 0 else _LastStage(net, k)
    stage = PipelineStage(module, rank, 2, torch.device("cpu"))
    g = torch.Generator().manual_seed(3)
    n = BATCH * microbatches
    ids = torch.randint(0, spec.vocab, (n, spec.seq_len), generator=g)
    target = torch.randint(0, spec.vocab, (n, spec.seq_len), generator=g)
    cls = getattr(sched, f"Schedule{schedule}")
    run = cls(stage, microbatches, loss_fn=lambda out, t: _loss(out, t, None),
              timeline=Timeline())
    with sdpa_kernel(BACKENDS[attention]):
        if rank == 0:
            run.step(ids)
        else:
            run.step(target=target)
    stats = run.last_step_stats
    assert stats is not None
    return {"peak": stats.peak_activation_nbytes, "in_flight": stats.peak_in_flight}
