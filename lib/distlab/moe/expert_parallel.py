"""Expert parallelism as a parallel style, in the shape of torchtitan's ``ExpertParallel``.

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module   # torch's, or distlab's
    from distlab.moe import ExpertParallel

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "ep"))
    parallelize_module(model, mesh["ep"], {"layers.*.moe.experts": ExpertParallel()})

:class:`ExpertParallel` applies to a :class:`~distlab.moe.experts.GroupedExperts` of ``E``
experts over an expert-parallel group of ``W`` ranks (``W`` divides ``E``): rank ``r`` keeps
experts ``r * E / W`` to ``(r + 1) * E / W - 1`` (dimension 0 of ``w1``, ``w2``, ``w3``, as
plain local parameters, no DTensor), and its forward, still called with every routed token of
this rank grouped by global expert, dispatches them to their experts' ranks, computes the
local experts and combines the outputs back (:mod:`distlab.moe.dispatch`). The
:class:`~distlab.moe.block.MoE` block around it is unchanged: router and shared experts stay
whole on every rank, and each rank routes its own tokens (expert-parallel ranks are
data-parallel ranks, as in torchtitan, where ``ep`` borrows from data parallelism). So an
expert's capacity and the balance loss are those of each rank's own batch, as GShard computes
them per group of tokens: one process gives the same numbers when it routes each rank's batch
separately.

It works with both ``parallelize_module``\\ s:

- torch's (``torch.distributed.tensor.parallel.parallelize_module``) with a one-dimensional
  torch ``DeviceMesh`` (``mesh["ep"]`` of a named mesh) calls ``_apply``; with torch's
  ``src_data_rank=0`` (its default) the full weights are broadcast from group rank 0 before
  each rank keeps its slice, so ranks built with different seeds still hold one model
  (``src_data_rank=None``: each rank slices its own);
- distlab's (:func:`distlab.tensor_parallel.parallelize_module`) with a process group or a
  one-dimensional distlab ``DeviceMesh`` calls :meth:`check` then :meth:`apply`, which slices
  each rank's own weights, as distlab's tensor-parallel styles do.

Gradients: a rank's local experts receive, through the all-to-alls' backward, the gradient of
every source rank's loss; replicated parameters (router, shared experts) only their own
rank's. :func:`reduce_gradients` turns both into the gradient of the mean loss over the group
(what one process computes on all ranks' tokens): replicated gradients averaged by all-reduce,
expert gradients divided by ``W``. With FSDP2 instead, shard the experts over the
data-parallel ranks that hold the same experts and call ``set_gradient_divide_factor`` with
the number of ranks whose losses are averaged (torchtitan does the same).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor.parallel.style import ParallelStyle as TorchParallelStyle

from distlab.moe.dispatch import EPComm, combine, dispatch
from distlab.moe.experts import GroupedExperts
from distlab.tensor_parallel.comm import TPComm
from distlab.tensor_parallel.mesh import DeviceMesh as DistlabMesh
from distlab.tensor_parallel.style import ParallelStyle
from distlab.timeline import Timeline

__all__ = ["ExpertParallel", "ep_group", "expert_parameters", "reduce_gradients"]

_WEIGHTS = ("w1", "w2", "w3")


def ep_group(device_mesh: Any) -> dist.ProcessGroup | None:
    """The process group of an expert-parallel mesh: a one-dimensional torch ``DeviceMesh``
    (``mesh["ep"]``), a one-dimensional distlab ``DeviceMesh``, a ``ProcessGroup`` or None
    (the default group).

    Raises:
        ValueError: a mesh of more than one dimension (the message says to slice it).
        TypeError: anything else.
    """
    if device_mesh is None or isinstance(device_mesh, dist.ProcessGroup):
        return device_mesh
    if isinstance(device_mesh, DistlabMesh):
        if device_mesh.ndim != 1:
            raise ValueError(f"device_mesh must be one-dimensional for expert parallelism "
                             f"(pass mesh.get_group('ep')), got shape {device_mesh.shape}")
        return device_mesh.get_group(0)
    from torch.distributed.device_mesh import DeviceMesh as TorchMesh

    if isinstance(device_mesh, TorchMesh):
        if device_mesh.ndim != 1:
            raise ValueError(f"device_mesh must be one-dimensional for expert parallelism "
                             f"(pass mesh['ep']), got dimensions {device_mesh.mesh_dim_names} "
                             f"of shape {tuple(device_mesh.shape)}")
        return device_mesh.get_group()
    raise TypeError(f"device_mesh must be a torch or distlab DeviceMesh, a ProcessGroup or "
                    f"None, got {type(device_mesh).__name__}")


class ExpertParallel(ParallelStyle, TorchParallelStyle):
    """Shard a :class:`GroupedExperts` over an expert-parallel group (module docstring).

    ``timeline``: record every all-to-all on lane ``"rank{r}/ep"`` (None: the
    ``parallelize_module`` call's timeline, if distlab's was given one). After it applies, the
    module has ``ep_comm`` (an :class:`~distlab.moe.dispatch.EPComm` whose ``counts`` tally
    the all-to-alls), ``num_experts`` (local), ``global_num_experts`` and ``last_dispatch``
    (the bookkeeping of the last forward: splits, tokens per local expert).
    """

    modules = (GroupedExperts,)

    def __init__(self, *, timeline: Timeline | None = None) -> None:
        if timeline is not None and not isinstance(timeline, Timeline):
            raise TypeError(f"timeline must be a Timeline or None, got "
                            f"{type(timeline).__name__}")
        self.timeline = timeline

    def check(self, name: str, module: nn.Module, tp_size: int) -> None:
        """Raise ``ValueError`` naming the plan entry unless ``module`` is an unsharded
        :class:`GroupedExperts` whose experts divide evenly over ``tp_size`` ranks (the
        expert-parallel size; the name follows distlab's ``parallelize_module``)."""
        problem = _problem(module, tp_size)
        if problem:
            raise ValueError(f"parallelize_plan[{name!r}]: {problem}")

    def apply(self, module: nn.Module, comm: TPComm) -> nn.Module:
        """distlab's ``parallelize_module`` entry: shard over ``comm``'s group, each rank
        slicing its own weights."""
        return _shard(module, EPComm(comm.group, timeline=self.timeline or comm.timeline),
                      src_data_rank=None)

    def _apply(self, module: nn.Module, device_mesh: Any) -> nn.Module:
        """torch's ``parallelize_module`` entry (``src_data_rank`` set by it)."""
        group = ep_group(device_mesh)
        problem = _problem(module, dist.get_world_size(group))
        if problem:
            raise ValueError(f"ExpertParallel: {problem}")
        return _shard(module, EPComm(group, timeline=self.timeline),
                      src_data_rank=self.src_data_rank)

    def __repr__(self) -> str:
        return "ExpertParallel()"


def _problem(module: nn.Module, ep_size: int) -> str | None:
    """Why :class:`ExpertParallel` cannot shard ``module`` over ``ep_size`` ranks, or None."""
    if not isinstance(module, GroupedExperts):
        return (f"ExpertParallel applies to distlab.moe.GroupedExperts, got "
                f"{type(module).__name__}")
    if hasattr(module, "ep_comm"):
        return f"the experts are already sharded over {module.ep_comm}"
    if module.num_experts % ep_size:
        return (f"num_experts = {module.num_experts} is not divisible by the expert-parallel "
                f"size {ep_size}")
    return None


def _shard(module: GroupedExperts, comm: EPComm, *, src_data_rank: int | None) -> nn.Module:
    experts = module.num_experts
    local = experts // comm.size
    first = comm.rank * local
    for name in _WEIGHTS:
        old = getattr(module, name)
        full = old.detach()
        if src_data_rank is not None and comm.size > 1:
            full = full.clone()
            dist.broadcast(full, group_src=src_data_rank, group=comm.group)
        part = full[first:first + local].clone().contiguous()
        module.register_parameter(name, nn.Parameter(part, requires_grad=old.requires_grad))
    module.num_experts = local
    module.global_num_experts = experts
    module.ep_comm = comm
    module.last_dispatch = None
    compute = module.forward

    def forward(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        if counts.dim() != 1 or counts.numel() != experts:
            raise ValueError(f"counts must hold one count per global expert ({experts}), got "
                             f"shape {tuple(counts.shape)}")
        routed, state = dispatch(x, counts, comm)
        module.last_dispatch = state
        return combine(compute(routed, state.tokens_per_local_expert), state, comm)

    module.forward = forward
    return module


def expert_parameters(module: nn.Module) -> dict[int, EPComm]:
    """``id(parameter) -> EPComm`` of every expert parameter sharded by
    :class:`ExpertParallel` inside ``module``."""
    out: dict[int, EPComm] = {}
    for sub in module.modules():
        comm = getattr(sub, "ep_comm", None)
        if isinstance(comm, EPComm):
            for name in _WEIGHTS:
                out[id(getattr(sub, name))] = comm
    return out


def reduce_gradients(module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Make ``module``'s gradients those of the mean of the per-rank losses over ``group``,
    in place, where every rank of ``group`` fed its own tokens and ``group`` is the
    expert-parallel group of every expert module inside (``None``: the experts' group, or the
    default group if there is none). Replicated parameters: all-reduced and divided by the
    group size; expert parameters: divided by the group size (their gradients already sum
    every rank's tokens). Parameters without a gradient are left alone.

    Raises:
        ValueError: expert modules sharded over another group than ``group``.
    """
    experts = expert_parameters(module)
    groups = {id(c.group): c.group for c in experts.values()}
    if group is None and len(groups) == 1:
        group = next(iter(groups.values()))
    if any(g is not group for g in groups.values()):
        raise ValueError("group must be the expert-parallel group of every expert module in "
                         "module (reduce_gradients averages over the ranks that feed the "
                         "experts)")
    size = dist.get_world_size(group)
    for p in module.parameters():
        if p.grad is None:
            continue
        if id(p) not in experts and size > 1:
            dist.all_reduce(p.grad, group=group)
        p.grad.div_(size)
