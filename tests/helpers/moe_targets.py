"""Rank functions used only by tests/moe (importable by spawned ranks).

Each case builds one seeded model (a Linear, then an MoE block) on every rank twice: whole (the
one-process reference) and expert-parallel. Every rank makes every rank's batch (seeded by the
source rank), so the reference runs in the rank itself: the whole model on each source rank's
batch in turn (the router's capacity and balance loss are per batch, as on the expert-parallel
ranks), the mean of the losses, one backward, one SGD step. The expert-parallel model runs this
rank's batch, backward, :func:`distlab.moe.reduce_gradients` (or FSDP2's reduce-scatter), the
same step. What comes back is the largest difference per tensor and its
:func:`helpers.float_tolerance.error_ratio` (at most 1 passes): the reference sums the same
products in another order, so the two agree to the rounding of :data:`REDUCTION`-term sums
:data:`DEPTH` deep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distlab.moe import ExpertParallel, MoE, MoEConfig, reduce_gradients
from helpers.float_tolerance import error_ratio, float_tolerance

LR = 0.1
BATCH, SEQ = 2, 6
REDUCTION = 4 * BATCH * SEQ
"""The longest sum: the tokens of 4 source ranks' batches a weight gradient adds (an expert's
at most as many); the experts' hidden width is 16, ``dim`` 8."""
DEPTH = 10
"""Reductions in series: the projection, the gate, the score function, an expert's two
matmuls forward; the same backward."""


@dataclass(frozen=True)
class Case:
    """One expert-parallel run: the block's config and which ``parallelize_module`` applies."""

    config: MoEConfig
    api: str = "torch"          # "torch": torch's parallelize_module on a DeviceMesh
                                # "distlab": distlab's on the process group


def _cfg(**kw: Any) -> MoEConfig:
    base = dict(dim=8, hidden=16, num_experts=4, top_k=1, init_std=0.5)
    base.update(kw)
    return MoEConfig(**base)


CASES: dict[str, Case] = {
    "e4_top1_dropless": Case(_cfg()),
    "e4_top2_capacity_shared": Case(_cfg(top_k=2, normalize=True, capacity_factor=1.0,
                                         num_shared_experts=1, aux_loss_coeff=0.01),
                                    api="distlab"),
    "e8_top2_sigmoid_seqaux": Case(_cfg(num_experts=8, top_k=2, score_func="sigmoid",
                                        normalize=True, num_shared_experts=1,
                                        aux_loss_coeff=0.01, aux_loss_scope="sequence",
                                        score_before_experts=True)),
    "e8_top1_capacity_score_loop": Case(_cfg(num_experts=8, capacity_factor=1.25,
                                             drop_policy="score", grouped_mm=False,
                                             aux_loss_coeff=0.01), api="distlab"),
}


class MoEModel(nn.Module):
    """``Linear(dim, dim)`` then an :class:`MoE` block, seeded: the input projection makes the
    tokens' own gradient (through dispatch and combine) reach a parameter."""

    def __init__(self, config: MoEConfig, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.proj = nn.Linear(config.dim, config.dim)
        self.moe = MoE(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(self.proj(x))


def batch(source: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source rank ``source``'s input and target, ``(BATCH, SEQ, dim)`` each."""
    g = torch.Generator().manual_seed(1000 + source)
    return torch.randn(BATCH, SEQ, dim, generator=g), torch.randn(BATCH, SEQ, dim, generator=g)


def loss_of(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor,
                                                                                torch.Tensor]:
    out = model(x)
    return out, ((out - target) ** 2).mean() + model.moe.aux_loss


def reference(config: MoEConfig, sources: int) -> dict[str, Any]:
    """The whole model in one process over every source rank's batch: outputs per source,
    gradients of the mean loss, weights after one SGD step."""
    model = MoEModel(config)
    outs, losses = [], []
    for s in range(sources):
        out, loss = loss_of(model, *batch(s, config.dim))
        outs.append(out.detach())
        losses.append(loss)
    torch.stack(losses).mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"outs": outs, "grads": grads, "weights": weights}


def _slice(name: str, full: torch.Tensor, local: torch.Tensor, ep_rank: int) -> torch.Tensor:
    if name.startswith("moe.experts."):
        n = local.shape[0]
        return full[ep_rank * n:(ep_rank + 1) * n]
    return full


def _diff(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """Largest |a - b|, its :func:`error_ratio`, and whether that is at most 1."""
    a, b = a.detach(), b.detach()
    if a.shape != b.shape:
        return {"max_abs": float("inf"), "ratio": float("inf"), "ok": False,
                "why": f"{a.shape} != {b.shape}"}
    ratio = error_ratio(a, b, reduction_length=REDUCTION, depth=DEPTH)
    return {"max_abs": float((a.double() - b.double()).abs().max()) if a.numel() else 0.0,
            "ratio": ratio, "ok": ratio <= 1}


def _compare(model: nn.Module, ref: dict[str, Any], out: torch.Tensor, source: int,
             ep_rank: int, grads: dict[str, torch.Tensor]) -> dict[str, Any]:
    checks = {"out": _diff(out, ref["outs"][source])}
    for n, p in model.named_parameters():
        checks[f"grad {n}"] = _diff(grads[n], _slice(n, ref["grads"][n], grads[n], ep_rank))
        checks[f"weight {n}"] = _diff(p, _slice(n, ref["weights"][n], p, ep_rank))
    return checks


def _apply_ep(model: MoEModel, case: Case, world: int) -> dist.ProcessGroup | None:
    if case.api == "torch":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
        parallelize_module(model, mesh["ep"], {"moe.experts": ExpertParallel()})
        return mesh.get_group("ep")
    from distlab.tensor_parallel import parallelize_module

    parallelize_module(model, None, {"moe.experts": ExpertParallel()})
    return None


def _sensitivity(model: MoEModel, x: torch.Tensor, out: torch.Tensor) -> float | None:
    """How far the output moves when this rank's experts are taken in reverse order, in units
    of the tolerance at the output's magnitude (None with one local expert): the equality
    checks must be able to see a misplaced expert."""
    experts = model.moe.experts
    if experts.num_experts < 2:
        return None
    saved = [getattr(experts, n).detach().clone() for n in ("w1", "w2", "w3")]
    with torch.no_grad():
        for n in ("w1", "w2", "w3"):
            getattr(experts, n).copy_(getattr(experts, n).flip(0))
        moved = float((model(x) - out).abs().max())
        for n, w in zip(("w1", "w2", "w3"), saved, strict=True):
            getattr(experts, n).copy_(w)
    return moved / float_tolerance(out.dtype, REDUCTION, float(out.abs().max()), DEPTH)


def ep_vs_one_process(rank: int, world: int, names: list[str]) -> dict[str, Any]:
    """Every case of ``names`` on this rank: expert parallel over all ranks beside the
    reference."""
    results: dict[str, Any] = {}
    for name in names:
        case = CASES[name]
        ref = reference(case.config, world)
        model = MoEModel(case.config)
        group = _apply_ep(model, case, world)
        x, target = batch(rank, case.config.dim)
        out, loss = loss_of(model, x, target)
        loss.backward()
        reduce_gradients(model, group)
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        torch.optim.SGD(model.parameters(), lr=LR).step()
        experts = model.moe.experts
        results[name] = {
            "checks": _compare(model, ref, out.detach(), rank, rank, grads),
            "a2a": dict(experts.ep_comm.counts),
            "local_experts": experts.num_experts,
            "path": experts.last_path,
            "dropped": model.moe.last_routing.dropped,
            "sensitivity": _sensitivity(model, x, model(x).detach()),
        }
    return results


def fsdp_ep(rank: int, world: int) -> dict[str, Any]:
    """Expert parallelism composed with torch's FSDP2 on 4 ranks: experts over ``ep`` (2) and
    fully sharded over ``efsdp`` (2, the ranks that hold the same experts; gradient divided by
    all 4 ranks), everything else fully sharded over all 4 ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import parallelize_module

    config = replace(CASES["e4_top2_capacity_shared"].config)
    ref = reference(config, world)
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("efsdp", "ep"))
    dp = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    model = MoEModel(config)
    parallelize_module(model, mesh["ep"], {"moe.experts": ExpertParallel()})
    ep_rank = mesh.get_local_rank("ep")
    fully_shard(model.moe.experts, mesh=mesh["efsdp"])
    model.moe.experts.set_gradient_divide_factor(float(world))
    model.moe.experts.set_force_sum_reduction_for_comms(True)   # gloo has no PREMUL_SUM
    fully_shard(model, mesh=dp)
    x, target = batch(rank, config.dim)
    out, loss = loss_of(model, x, target)
    loss.backward()

    def whole(t: Any) -> torch.Tensor:
        return t.full_tensor() if isinstance(t, DTensor) else t

    grads = {n: whole(p.grad) for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    checks = {"out": _diff(out, ref["outs"][rank])}
    for n, p in model.named_parameters():
        checks[f"grad {n}"] = _diff(grads[n], _slice(n, ref["grads"][n], grads[n], ep_rank))
        full = whole(p.detach())
        checks[f"weight {n}"] = _diff(full, _slice(n, ref["weights"][n], full, ep_rank))
    sharded = {n: type(p).__name__ for n, p in model.named_parameters()}
    return {"checks": checks, "sharded": sharded, "ep_rank": ep_rank,
            "a2a": dict(model.moe.experts.ep_comm.counts)}


def tp_ep(rank: int, world: int) -> dict[str, Any]:
    """Expert parallelism composed with distlab's tensor parallelism on 4 ranks, mesh
    ``("ep", "tp") = (2, 2)``: the shared experts split over ``tp`` (``w1``/``w3`` by
    columns, ``w2`` by rows), the routed experts over ``ep``; the two ranks of a tp group hold
    the same tokens (the batch of their ep index)."""
    from distlab.tensor_parallel import ColwiseParallel, RowwiseParallel, init_mesh
    from distlab.tensor_parallel import parallelize_module as tp_parallelize

    config = CASES["e4_top2_capacity_shared"].config
    mesh = init_mesh((2, 2), ("ep", "tp"))
    ep_rank, tp_rank = mesh.get_local_rank("ep"), mesh.get_local_rank("tp")
    ref = reference(config, 2)
    model = MoEModel(config)
    tp_parallelize(model.moe.shared_experts, mesh.get_group("tp"),
                   {"w1": ColwiseParallel(), "w3": ColwiseParallel(), "w2": RowwiseParallel()})
    tp_parallelize(model.moe, mesh.get_group("ep"), {"experts": ExpertParallel()})
    x, target = batch(ep_rank, config.dim)
    out, loss = loss_of(model, x, target)
    loss.backward()
    reduce_gradients(model, mesh.get_group("ep"))
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR).step()
    checks = {"out": _diff(out, ref["outs"][ep_rank])}
    for n, p in model.named_parameters():
        full_g, full_w = ref["grads"][n], ref["weights"][n]
        if n.startswith("moe.shared_experts."):
            dim = 1 if n.endswith("w2.weight") else 0
            full_g, full_w = full_g.chunk(2, dim)[tp_rank], full_w.chunk(2, dim)[tp_rank]
        checks[f"grad {n}"] = _diff(grads[n], _slice(n, full_g, grads[n], ep_rank))
        checks[f"weight {n}"] = _diff(p, _slice(n, full_w, p, ep_rank))
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    return {"checks": checks, "shapes": shapes, "tp_counts": dict(
        model.moe.shared_experts.tp_comm.counts), "a2a": dict(model.moe.experts.ep_comm.counts)}


def bad_ep_plans(rank: int, world: int) -> dict[str, str]:
    """Every misuse raises on every rank before any collective; the last call then works."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module as torch_parallelize

    from distlab.tensor_parallel import parallelize_module

    out: dict[str, str] = {}

    def attempt(key: str, fn: Any) -> None:
        try:
            fn()
            out[key] = "no error"
        except (TypeError, ValueError) as exc:
            out[key] = f"{type(exc).__name__}: {exc}"

    mesh2d = init_device_mesh("cpu", (1, world), mesh_dim_names=("dp", "ep"))
    attempt("not_divisible", lambda: parallelize_module(
        MoEModel(_cfg(num_experts=3)), None, {"moe.experts": ExpertParallel()}))
    attempt("wrong_module", lambda: parallelize_module(
        MoEModel(_cfg()), None, {"moe.router": ExpertParallel()}))
    attempt("two_dim_mesh", lambda: torch_parallelize(
        MoEModel(_cfg()), mesh2d, {"moe.experts": ExpertParallel()}))
    attempt("bad_mesh", lambda: torch_parallelize(MoEModel(_cfg()).moe.experts, "ep",
                                                  ExpertParallel()))
    model = MoEModel(_cfg())
    parallelize_module(model, None, {"moe.experts": ExpertParallel()})
    attempt("twice", lambda: parallelize_module(model, None, {"moe.experts": ExpertParallel()}))
    attempt("bad_counts", lambda: model.moe.experts(torch.zeros(3, 8),
                                                    torch.tensor([1, 1, 1])))
    t = torch.ones(1)
    dist.all_reduce(t)    # every rank is still in step
    out["in_step"] = str(float(t))
    return out



def _split_matrix(world: int, seed: int) -> torch.Tensor:
    """``M[s, d]``: rows rank ``s`` sends rank ``d`` (0 to 4, zeros included), the same on
    every rank."""
    return torch.randint(0, 5, (world, world), generator=torch.Generator().manual_seed(seed))


def all_to_all_vs_torch(rank: int, world: int) -> dict[str, Any]:
    """distlab's autograd all-to-all beside torch's ``all_to_all_single_autograd`` on the same
    uneven splits: the rows each rank receives and the gradient each rank gets back."""
    import torch.distributed._functional_collectives as fc

    from distlab.moe import EPComm, all_to_all

    out: dict[str, Any] = {}
    for seed in range(3):
        m = _split_matrix(world, seed)
        ins, outs = m[rank].tolist(), m[:, rank].tolist()
        g = torch.Generator().manual_seed(100 * seed + rank)
        x = torch.randn(sum(ins), 3, generator=g)
        upstream = torch.randn(sum(outs), 3, generator=g)
        comm = EPComm(None)
        a = x.clone().requires_grad_()
        ours = all_to_all(a, outs, ins, comm)
        (ours * upstream).sum().backward()
        b = x.clone().requires_grad_()
        theirs = fc.all_to_all_single_autograd(b, outs, ins, dist.group.WORLD)
        theirs = fc.wait_tensor(theirs)
        (theirs * upstream).sum().backward()
        # what each rank sent: rows of source s start at sum(m[s, :d]) of its input
        out[f"seed{seed}"] = {
            "rows": [ours.detach(), theirs.detach()],
            "grads": [a.grad, b.grad],
            "counts": dict(comm.counts),
            "shape": tuple(ours.shape),
            "expected_rows": sum(outs),
        }
    return out


def dispatch_rows(rank: int, world: int, local: int) -> dict[str, Any]:
    """Dispatch every source rank's rows (row value = source * 1000 + global expert * 10 +
    index, one column) and combine them back through identity experts."""
    from distlab.moe import EPComm, combine, dispatch

    experts = world * local
    comm = EPComm(None)

    def rows_of(source: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(source)
        counts = torch.randint(0, 4, (experts,), generator=g)
        vals = [source * 1000 + e * 10 + i for e in range(experts)
                for i in range(int(counts[e]))]
        return torch.tensor(vals, dtype=torch.float32).reshape(-1, 1), counts

    x, counts = rows_of(rank)
    x.requires_grad_()
    routed, state = dispatch(x, counts, comm)
    back = combine(routed * 2.0, state, comm)   # an "expert" that doubles
    back.sum().backward()
    expected = []
    for e in range(rank * local, (rank + 1) * local):
        for s in range(world):
            xs, cs = rows_of(s)
            start = int(cs[:e].sum())
            expected.extend(xs[start:start + int(cs[e])].reshape(-1).tolist())
    return {"routed": routed.detach().reshape(-1).tolist(), "expected": expected,
            "per_local_expert": state.tokens_per_local_expert.tolist(),
            "back": back.detach(), "x": x.detach(), "grad": x.grad,
            "counts": dict(comm.counts)}


def sources_and_timeline(rank: int, world: int) -> dict[str, Any]:
    """torch's ``parallelize_module`` with its default ``src_data_rank=0`` on experts built with
    a different seed per rank (each rank must keep its slice of rank 0's experts), with
    ``src_data_rank=None`` (its own slice), and distlab's with a timeline (the spans)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module as torch_parallelize

    from distlab.moe import GroupedExperts
    from distlab.tensor_parallel import parallelize_module
    from distlab.timeline import Timeline

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("ep",))
    out: dict[str, Any] = {}
    for key, src in (("src0", 0), ("src_none", None)):
        torch.manual_seed(rank)
        experts = GroupedExperts(8, 16, 2 * world)
        mine = experts.w2.detach().clone()
        torch_parallelize(experts, mesh, ExpertParallel(), src_data_rank=src)
        torch.manual_seed(0)
        rank0 = GroupedExperts(8, 16, 2 * world).w2.detach()
        out[key] = {"rank0": _diff(experts.w2, rank0[2 * rank:2 * rank + 2]),
                    "mine": _diff(experts.w2, mine[2 * rank:2 * rank + 2])}
    timeline = Timeline()
    model = MoEModel(_cfg())
    parallelize_module(model, None, {"moe.experts": ExpertParallel()}, timeline=timeline)
    x, target = batch(rank, 8)
    loss_of(model, x, target)[1].backward()
    out["spans"] = [(s.name, s.lane, s.args["phase"], s.args["nbytes"]) for s in timeline.spans]
    out["splits"] = model.moe.experts.last_dispatch.input_splits
    return out


def all_to_all_checks(rank: int, world: int, locals_: list[int]) -> dict[str, Any]:
    """:func:`all_to_all_vs_torch` and :func:`dispatch_rows` for each local expert count, in
    one launch."""
    return {"vs_torch": all_to_all_vs_torch(rank, world),
            "dispatch": {local: dispatch_rows(rank, world, local) for local in locals_}}


def misuse_and_sources(rank: int, world: int) -> dict[str, Any]:
    """:func:`bad_ep_plans` and :func:`sources_and_timeline`, in one launch."""
    return {"bad": bad_ep_plans(rank, world), "sources": sources_and_timeline(rank, world)}
