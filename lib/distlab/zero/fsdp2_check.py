"""ZeRO stage 3 beside torch FSDP2 on the same units: the parameters after the same Adam steps.

torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) runs on CPU ranks with gloo, so the
reference is exact: call ``fully_shard`` on every unit, then on the root (on a CPU device mesh
named explicitly: left to itself, ``fully_shard`` builds its mesh on the machine's accelerator,
which moves the module to a GPU the gloo comparison does not use), train with
``torch.optim.Adam``; train :class:`~distlab.zero.optimizer.ZeroDataParallel` with the same
units from the same weights on the same batches; compare ``full_tensor()`` with
:meth:`~distlab.zero.optimizer.ZeroDataParallel.full_state_dict`. Adam is elementwise, so FSDP2's
layout (every parameter sharded on dim 0) and distlab's (one flat buffer per unit) do the same
arithmetic; only the order of the gradient sums can differ (on two ranks there is one order).

    from distlab import launch
    from distlab.zero.fsdp2_check import fsdp2_comparison_rank
    rows = launch.run(fsdp2_comparison_rank, 3)   # {variant: {"equal", "max_abs", "names"}}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

from distlab.nets import mlp
from distlab.zero.optimizer import ZeroDataParallel

__all__ = ["VARIANTS", "cpu_mesh", "fsdp2_comparison_rank", "shard_like_fsdp2", "state_diff",
           "train_fsdp2", "train_zero"]

#: What :func:`fsdp2_comparison_rank` trains beside FSDP2: name -> (stage, options).
VARIANTS: dict[str, tuple[int, dict[str, Any]]] = {
    "stage3": (3, {}), "stage3 prefetch 0": (3, {"prefetch": 0}),
    "stage3 builtin prefetch 2": (3, {"prefetch": 2, "algorithm": "builtin"}),
    "stage0": (0, {}), "stage1": (1, {}), "stage2": (2, {})}


def cpu_mesh() -> DeviceMesh:
    """A one-dimensional CPU mesh over the default group's ranks: what ``fully_shard`` builds by
    itself on a machine without an accelerator, and what the comparison needs on one with."""
    return init_device_mesh("cpu", (dist.get_world_size(),))


def shard_like_fsdp2(model: torch.nn.Module,
                     units: Sequence[torch.nn.Module] | None = None) -> torch.nn.Module:
    """``fully_shard`` on each unit (``None``: every submodule with trainable parameters of its
    own, the units :func:`distlab.zero.stage3.find_units` picks by default), then on ``model``,
    all on :func:`cpu_mesh`; returns ``model``."""
    mesh = cpu_mesh()
    chosen = list(units) if units is not None else [
        m for m in model.modules()
        if m is not model and any(p.requires_grad for p in m.parameters(recurse=False))]
    for m in chosen:
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def train_fsdp2(model: torch.nn.Module, units: Sequence[torch.nn.Module] | None,
                batches: Sequence[torch.Tensor], lr: float) -> dict[str, torch.Tensor]:
    """:func:`shard_like_fsdp2`, then Adam on ``mean(model(x) ** 2)`` per batch; the full
    parameters after."""
    shard_like_fsdp2(model, units)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for x in batches:
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return {n: p.full_tensor().detach().clone()  # type: ignore[operator]
            for n, p in model.named_parameters()}


def train_zero(model: torch.nn.Module, stage: int, batches: Sequence[torch.Tensor], lr: float,
               units: Sequence[torch.nn.Module] | None = None, **options: Any
               ) -> dict[str, torch.Tensor]:
    """The same training with ``ZeroDataParallel(model, stage, ...)`` (``units`` at stage 3);
    its :meth:`~distlab.zero.optimizer.ZeroDataParallel.full_state_dict` after."""
    z = ZeroDataParallel(model, stage, lr=lr, units=units if stage == 3 else None, **options)
    for x in batches:
        z(x).pow(2).mean().backward()
        z.step()
    out = z.full_state_dict()
    z.close()
    return out


def state_diff(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, Any]:
    """``names``: the same names in the same order; ``equal``: bitwise; ``max_abs``."""
    return {"names": list(ours) == list(ref),
            "equal": all(torch.equal(ours[k], ref[k]) for k in ref),
            "max_abs": max(float((ours[k] - ref[k]).abs().max()) for k in ref)}


def fsdp2_comparison_rank(rank: int, world_size: int, layers: int = 3, width: int = 32,
                          steps: int = 3, lr: float = 1e-2,
                          model_fn: Callable[[], torch.nn.Module] | None = None,
                          units_fn: Callable[[torch.nn.Module], list[torch.nn.Module]] | None
                          = None, variants: Sequence[str] | None = None
                          ) -> dict[str, dict[str, Any]]:
    """Rank function: FSDP2 and each of ``variants`` (default all of :data:`VARIANTS`: stage 3
    with prefetch 1, prefetch 0, builtin collectives with prefetch 2; stages 0, 1, 2) trained
    from the same weights on this rank's batches; ``{variant: state_diff(variant, fsdp2)}``.
    ``model_fn`` builds the model (default ``mlp(layers, width)``), ``units_fn`` picks its
    units (default: every module with parameters of its own)."""
    torch.set_num_threads(1)
    build = model_fn or (lambda: mlp(layers, width, 0))
    g = torch.Generator().manual_seed(11 + rank)
    batches = [torch.randn(6, width, generator=g) for _ in range(steps)]

    def units(m: torch.nn.Module) -> list[torch.nn.Module] | None:
        return units_fn(m) if units_fn is not None else None

    m = build()
    ref = train_fsdp2(m, units(m), batches, lr)
    out: dict[str, dict[str, Any]] = {}
    for name in variants if variants is not None else VARIANTS:
        stage, options = VARIANTS[name]
        m = build()
        out[name] = state_diff(train_zero(m, stage, batches, lr, units(m),
                                          bucket_cap_mb=0.002, **options), ref)
    return out
