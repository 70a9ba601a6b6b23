"""Activation recompute applied to a real decoder, as torchtitan applies it.

:func:`apply_recompute` wraps each block of a :class:`~distlab.plan.verify.decoder.Decoder` in
``torch.utils.checkpoint`` (non-reentrant, no RNG state kept: the blocks run no dropout):

- ``"full"``: the whole block again from its input in backward;
- ``"op"``: torchtitan's per-op selective checkpointing (``_save_list`` in its
  ``parallelize_llama.py``): keep the outputs of :func:`per_op_save_list`'s ops except every
  second ``aten.mm`` (counted per forward and per recompute), recompute everything else;
- ``"none"``: nothing changes. Megatron-LM's ``"selective"`` (the attention's ``s^2`` part) keeps
  nothing a fused attention kernel would not already drop: the model runs as ``"none"``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from distlab._checks import check_choice
from distlab.recompute import RECOMPUTES, recompute_policy

__all__ = ["RUNS_AS", "apply_recompute", "per_op_context", "per_op_save_list"]

RUNS_AS = {name: rc.runs_as for name, rc in RECOMPUTES.items()}
"""What each of the planner's recompute modes runs as on a decoder with a fused attention
kernel (:attr:`distlab.recompute.Recompute.runs_as`)."""


CHECKPOINTED = tuple(dict.fromkeys(rc.runs_as for rc in RECOMPUTES.values() if rc.checkpointed))
"""The modes a block runs under ``torch.utils.checkpoint`` as (``"op"``, ``"full"``)."""


def per_op_save_list() -> frozenset[Any]:
    """The ops whose outputs torchtitan's per-op selective checkpointing keeps (``aten.mm``, the
    fused SDPA kernels, the functional reduce-scatter), with the CPU flash kernel's own op, which
    the CUDA list does not name, so that the policy runs on a host as it does on a GPU."""
    aten = torch.ops.aten
    names = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
    ops = {aten.mm.default}
    ops |= {getattr(aten, n).default for n in names if hasattr(aten, n)}
    functional = getattr(torch.ops, "_c10d_functional", None)
    if functional is not None and hasattr(functional, "reduce_scatter_tensor"):
        ops.add(functional.reduce_scatter_tensor.default)
    return frozenset(ops)


def per_op_context() -> Any:
    """A ``context_fn`` for :func:`torch.utils.checkpoint.checkpoint` running torchtitan's
    per-op policy (the module docstring)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save, mm = per_op_save_list(), torch.ops.aten.mm.default
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == mm:
            counts[mode] += 1
        keep = func in save and not (func == mm and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Checkpointed(nn.Module):
    """``block`` run under ``torch.utils.checkpoint`` (``mode`` one of :data:`CHECKPOINTED`); the
    block stays reachable as ``.block`` (its parameters' names gain a ``block.`` prefix)."""

    def __init__(self, block: nn.Module, mode: str) -> None:
        super().__init__()
        self.block = block
        self.mode = check_choice("mode", mode, CHECKPOINTED)

    def forward(self, *args: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        if recompute_policy(self.mode).keeps_per_op:
            return checkpoint(self.block, *args, use_reentrant=False, preserve_rng_state=False,
                              context_fn=per_op_context)
        return checkpoint(self.block, *args, use_reentrant=False, preserve_rng_state=False)


def apply_recompute(model: nn.Module, mode: str) -> str:
    """Wrap every block of ``model.layers`` for ``mode`` (one of the planner's recompute modes,
    run as :data:`RUNS_AS` says); returns what ran."""
    runs = RUNS_AS[check_choice("recompute", mode, tuple(RUNS_AS))]
    if runs == "none":
        return runs
    layers = model.layers
    for i, block in enumerate(list(layers)):
        layers[i] = Checkpointed(block, runs)
    return runs
