"""Rank functions of the tensor x pipeline parallel tests (importable by spawned ranks).

The model is a stack of :data:`BLOCKS` MLP blocks shaped like torch's test ``MLPModule``
(``net1``: Linear(WIDTH, HIDDEN), ReLU, ``net2``: Linear(HIDDEN, WIDTH)), seeded, built whole on
every rank. The ranks lie on a mesh ``("pp", "tp")`` = (2, 2) (or ``("pp", "dp", "tp")`` =
(2, 1, 2): the same layout with a data-parallel dimension of one): a pipeline stage holds
consecutive blocks, keeps their names (``"2.net1.weight"``, as in the whole model) and is split
over its ``"tp"`` group by distlab's ``parallelize_module`` (``net1`` column-wise, ``net2``
row-wise: replicated activations between blocks and between stages); ``PipelineStage`` gets the
``"pp"`` group. Gradients and weights are all-gathered back to full shape over the TP group and
compared with a one-process run of the same model on the same batch.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import distlab.pipeline_parallel.runtime as pp
import distlab.tensor_parallel as tp
from distlab.pipeline_parallel.schedules.registry import build_plan

WIDTH = 8
HIDDEN = 16
BLOCKS = 4
BATCH = 8
MICROBATCHES = 4
STEPS = 2
LR = 1e-2
PP, TP = 2, 2
SINGLE = ("GPipe", "1F1B")
MESHES = {"pp,tp": ((PP, TP), ("pp", "tp")), "pp,dp,tp": ((PP, 1, TP), ("pp", "dp", "tp"))}


class Block(nn.Module):
    """torch's test MLPModule in shape: Linear(width, hidden), ReLU, Linear(hidden, width)."""

    def __init__(self, width: int = WIDTH, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.net1 = nn.Linear(width, hidden)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def plan() -> dict[str, tp.ParallelStyle]:
    """Every block's ``net1`` column-wise, ``net2`` row-wise (output replicated)."""
    return {"*.net1": tp.ColwiseParallel(), "*.net2": tp.RowwiseParallel()}


def full_model(hidden: int = HIDDEN, seed: int = 0) -> nn.Sequential:
    """:data:`BLOCKS` blocks, seeded."""
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(WIDTH, hidden) for _ in range(BLOCKS)])


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error."""
    return torch.nn.functional.mse_loss(output, target)


def batches(steps: int = STEPS, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` seeded ``(x, y)`` pairs of :data:`BATCH` rows."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g))
            for _ in range(steps)]


def check_config(world: int, pp_size: int = PP, tp_size: int = TP,
                 hidden: int = HIDDEN) -> None:
    """What the tests check before starting any rank: the mesh holds the world, and the plan
    splits the model over ``tp_size`` ranks (``ValueError`` naming what does not fit)."""
    tp.check_mesh_shape((pp_size, tp_size), ("pp", "tp"), world)
    tp.check_plan(full_model(hidden), plan(), tp_size)


def reference(steps: int = STEPS) -> list[dict[str, Any]]:
    """One process, the whole model, the whole batch, Adam(lr=LR): per step each microbatch's
    loss (before the step), every gradient of the mean loss, every parameter after the step."""
    model = full_model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    out = []
    for x, y in batches(steps):
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            losses = [float(loss_fn(model(xm), ym)) for xm, ym in zip(
                x.tensor_split(MICROBATCHES), y.tensor_split(MICROBATCHES), strict=True)]
        loss_fn(model(x), y).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        out.append({"losses": losses, "grads": grads,
                    "params": {n: p.detach().clone() for n, p in model.named_parameters()}})
    return out


def _gather(local: torch.Tensor, full_shape: torch.Size, group: Any) -> torch.Tensor:
    """``local``, this rank's chunk of a tensor of ``full_shape``, all-gathered over ``group``
    along the one dim where it is smaller (a replicated tensor as it is)."""
    if local.shape == full_shape:
        return local.detach().clone()
    dim = next(d for d in range(local.dim()) if local.shape[d] != full_shape[d])
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, local.detach().contiguous(), group=group)
    return torch.cat(parts, dim)


def _stage_module(model: nn.Sequential, stage: int, num_stages: int) -> nn.Sequential:
    """Stage ``stage``'s blocks, under their names in the whole model."""
    per = BLOCKS // num_stages
    return nn.Sequential(OrderedDict((str(b), model[b])
                                     for b in range(stage * per, (stage + 1) * per)))


def run_schedule(mesh: tp.DeviceMesh, schedule: str) -> dict[str, Any]:
    """:data:`STEPS` steps of ``schedule`` then Adam on this rank's stages; per step the
    losses (last stage's ranks), and this rank's stages' gradients and parameters gathered to
    full shape; the TP collectives per stage; the ranks of the pipeline and TP groups."""
    tp_group, pp_group = mesh.get_group("tp"), mesh.get_group("pp")
    spr = 1 if schedule in SINGLE else 2
    num_stages = PP * spr
    ids = build_plan(schedule, PP, MICROBATCHES, spr).stages_of(mesh.get_local_rank("pp"))
    model = full_model()
    shapes = {n: p.shape for n, p in model.named_parameters()}
    mods = {s: tp.parallelize_module(_stage_module(model, s, num_stages), tp_group, plan())
            for s in ids}
    stages = [pp.PipelineStage(mods[s], s, num_stages, "cpu", group=pp_group) for s in ids]
    sched = getattr(pp, "Schedule" + schedule)(stages[0] if spr == 1 else stages, MICROBATCHES,
                                               loss_fn=loss_fn, timeout=60.0)
    params = [p for m in mods.values() for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=LR)
    first, last = 0 in ids, num_stages - 1 in ids
    steps = []
    for x, y in batches():
        opt.zero_grad(set_to_none=True)
        losses: list[Any] = []
        sched.step(*((x,) if first else ()),
                   **({"target": y, "losses": losses} if last else {}))
        named = {n: p for m in mods.values() for n, p in m.named_parameters()}
        grads = {n: _gather(p.grad, shapes[n], tp_group) for n, p in named.items()}
        opt.step()
        steps.append({"losses": [float(v) for v in losses] if last else None, "grads": grads,
                      "params": {n: _gather(p, shapes[n], tp_group) for n, p in named.items()}})
    return {"stages": list(ids), "steps": steps,
            "tp_counts": {s: dict(m.tp_comm.counts) for s, m in mods.items()},
            "pp_ranks": dist.get_process_group_ranks(pp_group),
            "tp_ranks": dist.get_process_group_ranks(tp_group)}


def wrong_groups(mesh: tp.DeviceMesh) -> dict[str, str]:
    """A TP-split stage given its own TP group, or the whole world, as its pipeline group:
    the ``ValueError`` of each (raised before any communication)."""
    out = {}
    for name, group in (("tp group", mesh.get_group("tp")), ("world", None)):
        stage = tp.parallelize_module(_stage_module(full_model(), 0, 2), mesh.get_group("tp"),
                                      plan())
        try:
            pp.PipelineStage(stage, 0, 2, "cpu", group=group)
        except ValueError as e:
            out[name] = str(e)
        else:
            out[name] = "no error"
    return out


def tp_times_pp(rank: int, world: int, runs: list[tuple[str, str]]) -> dict[str, Any]:
    """Every ``(schedule, mesh key of MESHES)`` of ``runs`` on this rank, then the wrong-group
    errors and one all-reduce (the ranks still in step)."""
    torch.set_num_threads(1)
    meshes = {key: tp.init_mesh(*MESHES[key]) for key in dict.fromkeys(m for _, m in runs)}
    out: dict[str, Any] = {f"{s} {m}": run_schedule(meshes[m], s) for s, m in runs}
    mesh = next(iter(meshes.values()))
    out["coordinate"] = mesh.coordinate
    out["wrong_groups"] = wrong_groups(mesh)
    t = torch.ones(1)
    dist.all_reduce(t)
    out["in_step"] = float(t.item())
    return out
