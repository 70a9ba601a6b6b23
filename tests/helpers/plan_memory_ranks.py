"""Rank code for tests/plan/test_plan_memory_live.py beyond what the library holds.

The decoder, its tensor-parallel plan and the live count of one step are
:mod:`distlab.plan.live_memory`'s (:class:`~distlab.plan.live_memory.Net`,
:func:`~distlab.plan.live_memory.live_activation_memory`); here: the model states of one rank
of ``ZeroDataParallel`` at each stage, and the decoder cut into two pipeline stages.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.attention import sdpa_kernel

from distlab.plan.live_memory import BACKENDS, BATCH, Net, batch, build, step_loss
from distlab.plan.model import ModelSpec
from distlab.zero.measure import storage_bytes
from distlab.zero.optimizer import ZeroDataParallel


def zero_case(spec: ModelSpec, stage: int) -> dict[str, int]:
    """Model states of one rank of ``ZeroDataParallel`` at ``stage`` after one fp32 step (one
    bucket at stages 0-2; stage 3 with a unit per module, as its default)."""
    net = build(spec, 0.0)
    zdp = ZeroDataParallel(net, stage, bucket_cap_mb=1024.0)
    ids, target = batch(spec)
    step_loss(zdp(ids), target, None).backward()
    zdp.step()
    st = zdp.state_tensors()
    out = {"params": storage_bytes(st["params"]), "grads": storage_bytes(st["grads"]),
           "optimizer": storage_bytes([t for t in st["optimizer"] if t.dim() > 0])}
    if stage == 3:
        zdp.close()
    return out


def zero_rank(rank: int, world_size: int, spec: ModelSpec) -> dict[str, Any]:
    """Rank function: ZeRO 0-3 over the ranks (data parallel): ``{"zero<stage>": states}``."""
    torch.set_num_threads(1)
    return {f"zero{s}": zero_case(spec, s) for s in range(4)}


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
    run = cls(stage, microbatches, loss_fn=lambda out, t: step_loss(out, t, None),
              timeline=Timeline())
    with sdpa_kernel(BACKENDS[attention]):
        if rank == 0:
            run.step(ids)
        else:
            run.step(target=target)
    stats = run.last_step_stats
    assert stats is not None
    return {"peak": stats.peak_activation_nbytes, "in_flight": stats.peak_in_flight}
