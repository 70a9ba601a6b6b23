"""Rank functions used only by tests/tensor_parallel/test_tensor_parallel_transformer.py.

The model is torch's small test ``Transformer`` (``torch.testing._internal.distributed.
_tensor.common_dtensor``; its import needs ``expecttest``): token and position embeddings,
``n_layers`` blocks of LayerNorm -> attention (``wq``/``wk``/``wv``/``wo``, reshaped by
``n_heads``) and LayerNorm -> feed-forward (``w1``, GELU, ``w2``), a final LayerNorm and an
output head whose weight is tied to the token embedding.

Each check builds it seeded three times on every rank: unsplit (the one-process reference),
split by distlab's ``parallelize_module`` with :func:`distlab_plan` and split by torch's own
``Transformer.parallelize`` (the plan torch's TP tests use, attention on local tensors), then
runs one forward, backward and SGD step on each and returns the comparisons' error ratios and
collective counts. A ratio is :func:`helpers.float_tolerance.error_ratio` (at most 1 passes): the
split model sums the unsplit one's terms in another order (a partial matmul per rank, then an
all-reduce), so the two agree to the rounding of :data:`REDUCTION`-term sums :data:`DEPTH` deep.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import distlab.tensor_parallel as tp
from distlab.ddp import DDP
from helpers.float_tolerance import error_ratio

LR = 0.1
BATCH, SEQ = 2, 8
N_LAYERS, DIM, VOCAB = 2, 16, 32
REDUCTION = 4 * DIM
"""The longest sum behind a compared value: the feed-forward's hidden width (``w2`` forward,
``w1``'s input gradient backward). The vocabulary (the head's input gradient, the loss's
log-sum-exp), the tokens a weight gradient adds (``2 * BATCH * SEQ`` at most, in the DDP case)
and the ranks an all-reduce adds are shorter."""
DEPTH = 2 * (9 * N_LAYERS + 3)
"""Reductions in series: per block the attention norm, ``wq``/``wk``/``wv``, the scores, their
softmax, scores times values, ``wo``, the feed-forward norm, ``w1`` and ``w2`` (9); then the last
norm, the head and the loss's log-sum-exp (3); backward runs the chain again (x 2)."""
HEADS = {"layers.*.attention": "n_heads"}


def model_args(**overrides: Any) -> Any:
    """The small ModelArgs of these tests (dropout 0 so every run computes the same thing)."""
    from torch.testing._internal.distributed._tensor.common_dtensor import ModelArgs

    base = {"dim": DIM, "n_heads": 4, "n_layers": N_LAYERS, "vocab_size": VOCAB, "max_seq_len": SEQ,
            "dropout_p": 0.0}
    base.update(overrides)
    return ModelArgs(**base)


def build(**overrides: Any) -> nn.Module:
    """torch's Transformer, seeded, its LayerNorms away from ones/zeros (so a missing or a
    doubled reduction of their gradients shows)."""
    from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

    torch.manual_seed(3)
    model = Transformer(model_args(**overrides))
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model


def distlab_plan(sequence_parallel: bool) -> dict[str, tp.ParallelStyle]:
    """The plan of torch's ``Transformer.parallelize`` in distlab's styles, as one dict."""
    s1 = tp.Shard(1)
    if sequence_parallel:
        plan: dict[str, tp.ParallelStyle] = {
            "tok_embeddings": tp.RowwiseParallel(input_layouts=tp.Replicate(),
                                                 output_layouts=s1),
            "pos_embeddings": tp.RowwiseParallel(input_layouts=tp.Replicate(),
                                                 output_layouts=tp.Shard(0)),
            "norm": tp.SequenceParallel(),
            "layers.*.attention": tp.PrepareModuleInput(input_layouts=s1,
                                                        desired_input_layouts=tp.Replicate()),
            "layers.*.attention_norm": tp.SequenceParallel(),
            "layers.*.ffn_norm": tp.SequenceParallel(),
        }
    else:
        plan = {name: tp.RowwiseParallel(input_layouts=tp.Replicate())
                for name in ("tok_embeddings", "pos_embeddings")}
    for w in ("wq", "wk", "wv"):
        plan[f"layers.*.attention.{w}"] = tp.ColwiseParallel()
    out_sp = {"output_layouts": s1} if sequence_parallel else {}
    in_sp = {"input_layouts": s1} if sequence_parallel else {}
    plan["layers.*.attention.wo"] = tp.RowwiseParallel(**out_sp)
    plan["layers.*.feed_forward.w1"] = tp.ColwiseParallel(**in_sp)
    plan["layers.*.feed_forward.w2"] = tp.RowwiseParallel(**out_sp)
    plan["output"] = tp.ColwiseParallel(output_layouts=tp.Replicate(), **in_sp)
    return plan


def parallelize_distlab(model: nn.Module, group: Any, sequence_parallel: bool) -> nn.Module:
    """distlab's split of the Transformer: one plan, heads per rank, the tie made again."""
    tp.parallelize_module(model, group, distlab_plan(sequence_parallel), head_counts=HEADS)
    model.output.weight = model.tok_embeddings.weight
    return model


def _comm_name(op: Any) -> str:
    text = str(op)
    for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        if name in text:
            return name
    return text


def _counts(mode: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for op, n in mode.get_comm_counts().items():
        out[_comm_name(op)] = out.get(_comm_name(op), 0) + n
    return out


def _full(t: Any) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _chunk_like(full: torch.Tensor, local: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    """This rank's chunk of ``full`` along the one dim where ``local`` is smaller."""
    if full.shape == local.shape:
        return full
    dim = next(d for d in range(full.dim()) if full.shape[d] != local.shape[d])
    return full.chunk(size, dim)[rank]


def _data(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 32, (batch, SEQ), generator=g)
    return ids, torch.randint(0, 32, (batch, SEQ), generator=g)


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def _step(model: nn.Module, ids: torch.Tensor, target: torch.Tensor,
          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    out = model(ids)
    _loss(out, target).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return out.detach(), grads


def compare_case(sequence_parallel: bool, rank: int, world: int) -> dict[str, Any]:
    """One step of the Transformer three ways; the error ratios (``checks``) and the collective
    counts."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.testing._internal.distributed._tensor.common_dtensor import Transformer

    ref = build()
    ours, theirs = copy.deepcopy(ref), copy.deepcopy(ref)
    ids, target = _data(BATCH)
    ref_out, ref_grads = _step(ref, ids, target)

    parallelize_distlab(ours, None, sequence_parallel)
    heads = [layer.attention.n_heads for layer in ours.layers]
    out, grads = _step(ours, ids, target)
    counts = dict(ours.tp_comm.counts)

    mesh = init_device_mesh("cpu", (world,))
    # torch's styles hook modules whose inputs (token ids) need no gradient; it says so per call
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    Transformer.parallelize(theirs, mesh, sequence_parallel, local_output_for_attn=True)
    with CommDebugMode() as mode:
        t_out = theirs(ids)
        _loss(t_out, target).backward()
    with CommDebugMode() as step_mode:  # torch reduces partial gradients in the step
        torch.optim.SGD(theirs.parameters(), lr=LR).step()
    t_grads = {n: _full(p.grad) for n, p in theirs.named_parameters()}

    def close(a: torch.Tensor, b: torch.Tensor) -> float:
        return error_ratio(a, b, reduction_length=REDUCTION, depth=DEPTH)

    checks = {"out vs ref": close(out, ref_out), "out vs torch": close(out, _full(t_out))}
    mine = dict(ours.named_parameters())
    torch_params = dict(theirs.named_parameters())
    assert set(mine) == set(dict(ref.named_parameters())) == set(torch_params)
    for n, p in ref.named_parameters():
        local = mine[n].detach()
        checks[f"grad {n} vs ref"] = close(grads[n], _chunk_like(ref_grads[n], grads[n], rank,
                                                                 world))
        checks[f"grad {n} vs torch"] = close(grads[n], _chunk_like(t_grads[n], grads[n], rank,
                                                                   world))
        checks[f"step {n} vs ref"] = close(local, _chunk_like(p.detach(), local, rank, world))
        checks[f"step {n} vs torch"] = close(local, _chunk_like(
            _full(torch_params[n]).detach(), local, rank, world))
    return {"checks": checks, "ours": counts, "torch": _counts(mode),
            "torch_step": _counts(step_mode), "heads": heads,
            "tied": ours.output.weight is ours.tok_embeddings.weight}


def heads_not_divisible(rank: int, world: int) -> str:
    """The ValueError of a head count the group size does not divide (dims that divide), then
    one all-reduce to show every rank is still in step."""
    n_heads = world + 1
    model = build(dim=2 * world * n_heads, n_heads=n_heads)
    before = {n: p.shape for n, p in model.named_parameters()}
    try:
        parallelize_distlab(model, None, False)
    except ValueError as e:
        text = str(e)
    else:
        text = "no error"
    unchanged = before == {n: p.shape for n, p in model.named_parameters()} and all(
        layer.attention.n_heads == n_heads for layer in model.layers)
    t = torch.ones(1)
    dist.all_reduce(t)
    return f"{text} | unchanged={unchanged} | in_step={t.item()}"


def tp_by_dp(rank: int, world: int) -> dict[str, float]:
    """(dp=2, tp=2): the sequence-parallel Transformer split over ``tp``, distlab's DDP over
    ``dp`` on the split module, each replica its half of the batch; gradients and weights after
    one step equal a one-process step on the whole batch (error ratios)."""
    mesh = tp.init_mesh((2, world // 2), ("dp", "tp"))
    ids, target = _data(2 * BATCH)
    ref = build()
    model = copy.deepcopy(ref)
    ref_out, ref_grads = _step(ref, ids, target)
    parallelize_distlab(model, mesh.get_group("tp"), True)
    ddp = DDP(model, process_group=mesh.get_group("dp"))
    mine = slice(mesh.get_local_rank("dp") * BATCH, (mesh.get_local_rank("dp") + 1) * BATCH)
    out, grads = _step(ddp, ids[mine], target[mine])
    t_rank, t_size = mesh.get_local_rank("tp"), mesh.size("tp")
    def close(a: torch.Tensor, b: torch.Tensor) -> float:
        return error_ratio(a, b, reduction_length=REDUCTION, depth=DEPTH)

    checks = {"out vs ref": close(out, ref_out[mine])}
    params = dict(ddp.named_parameters())
    for n, p in ref.named_parameters():
        g = grads[f"module.{n}"]
        local = params[f"module.{n}"].detach()
        checks[f"grad {n}"] = close(g, _chunk_like(ref_grads[n], g, t_rank, t_size))
        checks[f"step {n}"] = close(local, _chunk_like(p.detach(), local, t_rank, t_size))
    return checks


def transformer_checks(rank: int, world: int, two_d: bool) -> dict[str, Any]:
    """Every check of the test file on one launch of ``world`` ranks."""
    out: dict[str, Any] = {"tp": compare_case(False, rank, world),
                           "sp": compare_case(True, rank, world),
                           "heads": heads_not_divisible(rank, world),
                           "prepare": prepare_input_variants(rank, world)}
    if two_d:
        out["tp_by_dp"] = tp_by_dp(rank, world)
    return out


class Fan(nn.Module):
    """Three column-split consumers of one input (an attention's wq, wk, wv) and a row split."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(9)
        self.q, self.k, self.v = (nn.Linear(8, 8) for _ in range(3))
        self.o = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(self.q(x) * self.k(x) + self.v(x))


def prepare_input_variants(rank: int, world: int) -> dict[str, Any]:
    """PrepareModuleInput's four ways into a :class:`Fan`: the largest error ratio of the input's
    gradient and the parameters' against the unsplit run's (sums of at most 8 terms, 4 deep:
    q, k, v then o forward, the same backward); the collectives each way runs; a marked input
    fed to a row split refused."""
    g = torch.Generator().manual_seed(12)
    x_full = torch.randn(2, 2 * world, 8, generator=g)
    ref = Fan()
    x_ref = x_full.clone().requires_grad_(True)
    (ref(x_ref) ** 2).sum().backward()
    out: dict[str, Any] = {}
    for src, local in ((tp.Replicate(), False), (tp.Replicate(), True), (tp.Shard(1), False),
                       (tp.Shard(1), True)):
        model = tp.parallelize_module(Fan(), None, {  # "": the module itself
            "": tp.PrepareModuleInput(input_layouts=src, desired_input_layouts=tp.Replicate(),
                                      use_local_output=local),
            "q": tp.ColwiseParallel(), "k": tp.ColwiseParallel(), "v": tp.ColwiseParallel(),
            "o": tp.RowwiseParallel()})
        x = (x_full.chunk(world, 1)[rank] if isinstance(src, tp.Shard) else x_full).clone()
        x.requires_grad_(True)
        (model(x) ** 2).sum().backward()
        want_x = x_ref.grad.chunk(world, 1)[rank] if isinstance(src, tp.Shard) else x_ref.grad
        ratio = error_ratio(x.grad, want_x, reduction_length=8, depth=4)
        for n, p in ref.named_parameters():
            mine = dict(model.named_parameters())[n].grad
            ratio = max(ratio, error_ratio(mine, _chunk_like(p.grad, mine, rank, world),
                                           reduction_length=8, depth=4))
        out[f"{'shard' if isinstance(src, tp.Shard) else 'replicate'} local={local}"] = (
            ratio, dict(model.tp_comm.counts))
    model = tp.parallelize_module(nn.Sequential(nn.Linear(8, 8)), None, {
        "": tp.PrepareModuleInput(input_layouts=tp.Shard(1), desired_input_layouts=tp.Replicate()),
        "0": tp.RowwiseParallel(input_layouts=tp.Replicate())})
    try:
        model(x_full.chunk(world, 1)[rank])
    except RuntimeError as e:
        out["refused"] = str(e)
    return out
