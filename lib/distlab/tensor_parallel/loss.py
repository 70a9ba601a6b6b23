"""Cross entropy of logits sharded on the vocabulary (last) dimension, as torch's
``loss_parallel`` computes it: nothing of size vocabulary crosses the wire.

Per row of logits, three all-reduces over the tensor-parallel group, each of one number per
row: the maximum logit (``MAX``), the sum of ``exp(logit - max)`` (``SUM``) and the target's
logit, which only the rank holding that vocabulary slice contributes (``SUM``). The loss is
``log(sum_exp) + max - target_logit``; the backward is local (``softmax - one_hot`` on this
rank's slice), no communication.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distlab.tensor_parallel.comm import TPComm

__all__ = ["loss_parallel_cross_entropy"]


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, comm: TPComm,
                ignore_index: int) -> torch.Tensor:
        vocab_local = logits.shape[-1]
        first = comm.rank * vocab_local
        flat = logits.reshape(-1, vocab_local).float()
        tgt = target.reshape(-1)
        top = comm.all_reduce(flat.max(dim=-1).values, op=dist.ReduceOp.MAX)
        shifted = flat - top.unsqueeze(-1)
        exp = shifted.exp()
        sum_exp = comm.all_reduce(exp.sum(dim=-1))
        inside = (tgt >= first) & (tgt < first + vocab_local)
        local_t = (tgt - first).masked_fill(~inside, 0)
        picked = shifted.gather(1, local_t.unsqueeze(1)).squeeze(1).masked_fill(~inside, 0.0)
        picked = comm.all_reduce(picked)
        keep = tgt != ignore_index
        count = keep.sum().clamp(min=1)
        losses = (sum_exp.log() - picked).masked_fill(~keep, 0.0)
        ctx.save_for_backward(exp, sum_exp, local_t, inside, keep)
        ctx.count, ctx.shape, ctx.dtype = count, logits.shape, logits.dtype
        return losses.sum() / count

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        exp, sum_exp, local_t, inside, keep = ctx.saved_tensors
        g = exp / sum_exp.unsqueeze(-1)
        rows = torch.arange(g.shape[0])
        g[rows[inside], local_t[inside]] -= 1.0
        g = g * (keep.unsqueeze(-1) * grad / ctx.count)
        return g.reshape(ctx.shape).to(ctx.dtype), None, None, None


def loss_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, comm: TPComm, *,
                                ignore_index: int = -100) -> torch.Tensor:
    """Mean cross entropy of ``logits`` whose last dimension is this rank's vocabulary slice.

    ``logits``: ``(..., vocab / p)``, rank ``r`` holding classes ``[r * vocab / p, (r + 1) *
    vocab / p)`` (a ``ColwiseParallel`` output). ``target``: class indices over the whole
    vocabulary, shape ``logits.shape[:-1]``; ``ignore_index`` entries are left out of the mean.
    Equals ``F.cross_entropy`` of the gathered logits; its gradient is this rank's slice.
    """
    if target.shape != logits.shape[:-1]:
        raise ValueError(f"target must have shape logits.shape[:-1] = "
                         f"{tuple(logits.shape[:-1])}, got {tuple(target.shape)}")
    return _VocabParallelCE.apply(logits, target, comm, ignore_index)
