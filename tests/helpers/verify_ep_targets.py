"""Rank function used only by tests/plan/test_plan_verify_ep.py (importable by spawned ranks).

:func:`ep_step_vs_one_process` builds a verify layout's model as ``--verify`` does
(:func:`distlab.plan.verify.rank._build`), gives it the weights of one seeded whole decoder
(each rank its experts' slice, each FSDP shard its part), runs one verify step (the layout's
microbatches of this data-parallel rank's data, the gradient reduction, one AdamW step) in fp32,
and runs the same step on the whole decoder in the rank itself: every data-parallel rank's
batch, the mean of their losses, one backward, one AdamW step. It returns the largest
difference of the loss, of every gradient before the step and of every parameter after it
(each rank compares what it holds: its experts, its shard, its pipeline stages' layers, named
as in the whole decoder; the loss on every rank that computes one, under a pipeline the
last stage's).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from distlab.plan.layout import Layout
from distlab.plan.partition import layers_per_stage
from distlab.plan.verify import rank as vr
from distlab.plan.verify.decoder import build_decoder
from distlab.transformer import ModelSpec


class _NoMeter:
    def phase(self, name: str) -> Any:
        return nullcontext()


def _name(name: str) -> str:
    return name.removeprefix("module.")


def _mine(full: torch.Tensor, p: torch.Tensor, name: str, ep: int, ep_rank: int
          ) -> torch.Tensor:
    """The part of the whole model's tensor ``full`` that this rank's ``p`` holds."""
    if ".moe.experts.w" in name and ep > 1:
        local = full.shape[0] // ep
        full = full[ep_rank * local:(ep_rank + 1) * local]
    if hasattr(p, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(full, p.device_mesh, p.placements,
                                 src_data_rank=None).to_local()
    return full


def _held(built: vr._Built, spec: ModelSpec, layout: Layout) -> dict[str, torch.Tensor]:
    """This rank's parameters by their name in the whole decoder (a stage's ``layers.{k}`` is
    the decoder's ``layers.{first + k}``)."""
    split = layers_per_stage(spec.layers, layout.stages)
    out = {}
    for s, mod in zip(built.stage_ids, built.modules, strict=True):
        first = sum(split[:s]) if layout.pp > 1 else 0
        for name, p in mod.named_parameters():
            n = _name(name)
            if n.startswith("layers."):
                k, rest = n.removeprefix("layers.").split(".", 1)
                n = f"layers.{first + int(k)}.{rest.removeprefix('block.')}"  # recompute's
            out[n] = p
    return out


def ep_step_vs_one_process(rank: int, world_size: int, spec: ModelSpec,
                           layout: Layout) -> dict[str, float]:
    case = vr.VerifyCase(spec, layout, steps=1, dtype="fp32", optimizer="foreach")
    cpu = torch.device("cpu")
    built = vr._build(case, rank, cpu)
    held = _held(built, spec, layout)
    ref = build_decoder(spec, device="cpu", seed=1)      # another seed than the build's
    whole = dict(ref.named_parameters())
    ep_rank = built.ep_rank
    with torch.no_grad():
        for n, p in held.items():
            local = p.to_local() if hasattr(p, "to_local") else p
            local.copy_(_mine(whole[n], p, n, layout.ep, ep_rank))
    opt = vr._optimizer(case, list(held.values()), built.zero1, [], built)
    grads: dict[str, torch.Tensor] = {}
    step = opt.step

    def record_then_step(*a: Any, **kw: Any) -> Any:
        for n, p in held.items():
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            grads[n] = g.detach().clone()
        return step(*a, **kw)

    opt.step = record_then_step
    loss = vr._train_step(case, built, opt, cpu, _NoMeter(), 0, vr._Clock(cpu))

    # the same step on the whole model: every data-parallel rank's batch, the mean loss
    ref_opt = vr._optimizer(case, list(ref.parameters()), False, [])
    m, rows = layout.microbatches, layout.micro_batch * layout.microbatches
    losses = []
    for d in range(layout.dp):
        ids, target = vr._batch(case, cpu, rows, 0, d)
        total = sum(vr._loss(ref(ids[i * layout.micro_batch:(i + 1) * layout.micro_batch]),
                             target[i * layout.micro_batch:(i + 1) * layout.micro_batch]) / m
                    for i in range(m))
        losses.append(total)
    (sum(losses) / layout.dp).backward()
    out = {} if loss is None else {"loss": abs(loss - float(losses[built.dp_rank].detach()))}
    ref_grads = {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
    ref_opt.step()
    for n, p in held.items():
        mine = _mine(ref_grads[n], p, n, layout.ep, ep_rank)
        out[f"grad {n}"] = _rel(grads[n], mine)
        local = p.to_local() if hasattr(p, "to_local") else p
        out[f"param {n}"] = _rel(local.detach(), _mine(whole[n].detach(), p, n, layout.ep,
                                                       ep_rank))
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest ``|a - b|`` over ``1e-6 + |b|``'s scale: 0 for equal tensors."""
    if a.numel() == 0:
        return 0.0
    return float(((a - b).abs() / (1e-6 + b.abs().max())).max())


__all__ = ["ep_step_vs_one_process"]
