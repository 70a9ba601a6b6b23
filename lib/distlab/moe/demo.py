"""One MoE block run expert-parallel on real gloo ranks, checked against one process.

    from distlab.moe.demo import run_expert_parallel
    run = run_expert_parallel(ranks=2, num_experts=8, top_k=2)
    print("\\n".join(run.summary_lines()))

The model is ``Linear(dim, dim)`` then an :class:`~distlab.moe.block.MoE` block (softmax
top-``k`` routing, dropless, one shared expert, the balance loss with coefficient 0.01), built
from one seed on every rank. Each rank routes its own batch (seeded by its rank), its experts
are split by :class:`~distlab.moe.expert_parallel.ExpertParallel` (distlab's
``parallelize_module`` on the default group: rank ``r`` keeps experts ``r * E / W ..``), the
tokens travel to their experts and back by ``all_to_all_single`` (the counts, the dispatch,
the combine, and both again in backward), the loss (squared error to a seeded target plus the
balance loss) runs backward and :func:`~distlab.moe.expert_parallel.reduce_gradients` makes
the gradients those of the mean loss over the ranks. The parent builds the same model whole,
runs it on every rank's batch in turn, averages the losses and runs one backward: what the
ranks computed, put together (each rank's output, the experts' gradients concatenated over
the ranks), is compared with that, relative to each tensor's largest element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distlab import launch
from distlab._checks import check_int
from distlab.moe.block import MoE, MoEConfig
from distlab.moe.expert_parallel import ExpertParallel, reduce_gradients

__all__ = ["EPRun", "MoEModel", "ep_rank", "run_expert_parallel"]

SEED = 0
TOLERANCE = 1e-5
"""Relative agreement :meth:`EPRun.agrees` asks of outputs and gradients (float32 sums taken
in another order on the ranks than in one process differ by a few units of 1e-7)."""


class MoEModel(nn.Module):
    """``proj = Linear(dim, dim)`` then ``moe`` (:class:`~distlab.moe.block.MoE`), seeded: the
    projection makes the tokens' gradient through dispatch and combine reach a parameter."""

    def __init__(self, config: MoEConfig, seed: int = SEED) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.proj = nn.Linear(config.dim, config.dim)
        self.moe = MoE(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(self.proj(x))


def _config(dim: int, hidden: int, num_experts: int, top_k: int) -> MoEConfig:
    return MoEConfig(dim=dim, hidden=hidden, num_experts=num_experts, top_k=top_k,
                     num_shared_experts=1, aux_loss_coeff=0.01, init_std=0.5)


def _batch(source: int, batch: int, seq_len: int, dim: int, seed: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1000 + source)
    return (torch.randn(batch, seq_len, dim, generator=g),
            torch.randn(batch, seq_len, dim, generator=g))


def _loss(model: MoEModel, x: torch.Tensor, target: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(x)
    return out, ((out - target) ** 2).mean() + model.moe.aux_loss


def ep_rank(rank: int, world_size: int, dim: int, hidden: int, num_experts: int, top_k: int,
            batch: int, seq_len: int, seed: int) -> dict[str, Any]:
    """Rank function of :func:`run_expert_parallel`: this rank's output, its gradients after
    :func:`reduce_gradients`, the all-to-alls counted per phase, the rows it sent to and
    received from each rank, and the tokens its routing gave each global expert."""
    from distlab.tensor_parallel import parallelize_module

    torch.set_num_threads(1)
    model = MoEModel(_config(dim, hidden, num_experts, top_k), seed)
    parallelize_module(model, None, {"moe.experts": ExpertParallel()})
    x, target = _batch(rank, batch, seq_len, dim, seed)
    out, loss = _loss(model, x, target)
    loss.backward()
    reduce_gradients(model, None)
    experts = model.moe.experts
    state = experts.last_dispatch
    dist.barrier()
    return {"out": out.detach(), "grads": {n: p.grad.clone() for n, p in model.named_parameters()},
            "a2a": dict(experts.ep_comm.counts), "sent": list(state.input_splits),
            "received": list(state.output_splits), "local_experts": experts.num_experts,
            "tokens_per_expert": model.moe.last_routing.tokens_per_expert.tolist()}


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got - want|`` over ``max |want|``."""
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / (scale if scale > 0 else 1.0)


@dataclass(frozen=True)
class EPRun:
    """What :func:`run_expert_parallel` ran and found.

    Attributes:
        ranks, dim, hidden, num_experts, top_k, batch, seq_len: the run's sizes (each rank's
            batch is ``(batch, seq_len, dim)``).
        local_experts: experts each rank holds.
        a2a: per rank, the all-to-alls run per phase.
        sent, received: per rank, the token rows sent to / received from each rank.
        tokens_per_expert: per rank, the (token, choice) assignments its router gave each
            global expert.
        max_out_error: the largest ``|ranks - one process|`` output element, relative to the
            largest ``|one process|`` element.
        max_grad_error: the same over every parameter's gradient (each tensor relative to its
            own largest element), the largest.
        grad_errors: that error per parameter name.
    """

    ranks: int
    dim: int
    hidden: int
    num_experts: int
    top_k: int
    batch: int
    seq_len: int
    local_experts: int
    a2a: tuple[dict[str, int], ...]
    sent: tuple[tuple[int, ...], ...]
    received: tuple[tuple[int, ...], ...]
    tokens_per_expert: tuple[tuple[int, ...], ...]
    max_out_error: float
    max_grad_error: float
    grad_errors: dict[str, float]

    def agrees(self, tolerance: float = TOLERANCE) -> bool:
        """Outputs and every gradient within ``tolerance`` (relative) of one process."""
        return self.max_out_error <= tolerance and self.max_grad_error <= tolerance

    def summary_lines(self) -> list[str]:
        """The sizes, the rows each rank sent and received, and the agreement."""
        lines = [f"MoE block dim={self.dim}, hidden={self.hidden}, {self.num_experts} experts "
                 f"top-{self.top_k} + 1 shared, on {self.ranks} gloo ranks "
                 f"({self.local_experts} experts each), {self.batch}x{self.seq_len} tokens "
                 "per rank"]
        for r in range(self.ranks):
            lines.append(f"rank {r}: sent rows {list(self.sent[r])}, received "
                         f"{list(self.received[r])}; all-to-alls {sum(self.a2a[r].values())}")
        lines.append(f"vs one process: output within {self.max_out_error:.1e}, gradients "
                     f"within {self.max_grad_error:.1e} (relative)")
        return lines


def run_expert_parallel(ranks: int = 2, *, dim: int = 16, hidden: int = 32,
                        num_experts: int = 8, top_k: int = 2, batch: int = 2,
                        seq_len: int = 16, seed: int = SEED, timeout: float = 120.0) -> EPRun:
    """Run the block expert-parallel on ``ranks`` gloo ranks and compare it with one process
    (module docstring).

    Args:
        ranks: expert-parallel ranks (processes), >= 1, dividing ``num_experts``.
        dim, hidden: token width and each expert's feed-forward width.
        num_experts, top_k: routed experts and experts per token (``1 <= top_k <= E``).
        batch, seq_len: each rank's batch ``(batch, seq_len, dim)``.
        seed: the model's and the batches' seed.
        timeout: seconds for the whole launch.

    Raises:
        ValueError: a size out of range, or ``ranks`` not dividing ``num_experts``.
    """
    ranks = check_int("ranks", ranks, minimum=1)
    dim = check_int("dim", dim, minimum=1)
    hidden = check_int("hidden", hidden, minimum=1)
    num_experts = check_int("num_experts", num_experts, minimum=1)
    top_k = check_int("top_k", top_k, minimum=1, maximum=num_experts)
    batch = check_int("batch", batch, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=1)
    if num_experts % ranks:
        raise ValueError(f"ranks={ranks} must divide num_experts={num_experts}")
    res = launch.run(ep_rank, ranks, args=(dim, hidden, num_experts, top_k, batch, seq_len,
                                           seed), timeout=timeout)
    model = MoEModel(_config(dim, hidden, num_experts, top_k), seed)
    outs, losses = [], []
    for source in range(ranks):
        out, loss = _loss(model, *_batch(source, batch, seq_len, dim, seed))
        outs.append(out.detach())
        losses.append(loss)
    torch.stack(losses).mean().backward()
    out_err = max(_relative_error(r["out"], o) for r, o in zip(res, outs, strict=True))
    grad_errors = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        parts = [r["grads"][name] for r in res]
        if name.startswith("moe.experts."):     # each rank holds its slice of the experts
            grad_errors[name] = _relative_error(torch.cat(parts), p.grad)
        else:                                   # replicated: every rank's copy
            grad_errors[name] = max(_relative_error(g, p.grad) for g in parts)
    return EPRun(ranks, dim, hidden, num_experts, top_k, batch, seq_len,
                 res[0]["local_experts"], tuple(r["a2a"] for r in res),
                 tuple(tuple(r["sent"]) for r in res), tuple(tuple(r["received"]) for r in res),
                 tuple(tuple(r["tokens_per_expert"]) for r in res), out_err,
                 max(grad_errors.values()), grad_errors)
