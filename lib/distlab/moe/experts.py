"""SwiGLU experts: one dense feed-forward (:class:`SwiGLU`) and ``E`` stacked ones
(:class:`GroupedExperts`).

A SwiGLU feed-forward (Shazeer 2020, arXiv:2002.05202) maps a token ``x`` of width ``dim``
through ``hidden`` features and back: ``w2 @ (silu(w1 @ x) * (w3 @ x))``, three bias-free
matrices, ``6 * dim * hidden`` floating-point operations per token forward
(:func:`swiglu_flops`).

:class:`GroupedExperts` holds ``E`` of them stacked, ``w1``/``w3`` ``(E, hidden, dim)`` and
``w2`` ``(E, dim, hidden)`` (the layout torchtitan's ``GroupedExperts`` uses, so expert
parallelism shards dimension 0). Its input is the routed tokens grouped by expert: the first
``counts[0]`` rows go to expert 0, the next ``counts[1]`` to expert 1, ... Two paths compute
the same thing:

- :func:`swiglu_loop` (the reference): one slice and three matmuls per expert;
- :func:`swiglu_grouped`: three calls of torch's grouped matmul
  (``torch.nn.functional.grouped_mm``, torch 2.13's public name of ``torch._grouped_mm``, with
  the groups' end offsets), where :func:`grouped_mm_problem` finds none: torch has it, every
  row is a multiple of 16 bytes (its kernels' alignment), there is at least one row, and the
  dtype is float32, bfloat16 or float16 on the CPU (run and tested here) or bfloat16 on a
  CUDA device of compute capability 8.0 or more (what torch 2.13 documents).

``GroupedExperts(..., grouped_mm=None)`` takes the grouped path where it can and says which
path ran in ``last_path``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from distlab._checks import check_float, check_int

__all__ = ["GroupedExperts", "SwiGLU", "grouped_mm_problem", "grouped_mm_reason", "swiglu_flops",
           "swiglu_grouped", "swiglu_loop"]

_GROUPED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_ALIGN_BYTES = 16


def swiglu_flops(dim: int, hidden: int, tokens: int = 1) -> int:
    """Forward floating-point operations of one SwiGLU feed-forward on ``tokens`` tokens:
    three matmuls of ``2 * dim * hidden`` each per token (backward is twice that)."""
    return 6 * check_int("dim", dim, minimum=1) * check_int("hidden", hidden, minimum=1) \
        * check_int("tokens", tokens, minimum=0)


class SwiGLU(nn.Module):
    """A dense SwiGLU feed-forward ``w2(silu(w1(x)) * w3(x))`` (``nn.Linear`` layers without
    bias, named as torchtitan names them, so tensor parallelism splits ``w1``/``w3`` by
    columns and ``w2`` by rows); the shared experts of an MoE block, or a dense layer."""

    def __init__(self, dim: int, hidden: int, *, init_std: float = 0.02) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, minimum=1)
        self.hidden = check_int("hidden", hidden, minimum=1)
        self.init_std = check_float("init_std", init_std, minimum=0.0)
        self.w1 = nn.Linear(self.dim, self.hidden, bias=False)
        self.w2 = nn.Linear(self.hidden, self.dim, bias=False)
        self.w3 = nn.Linear(self.dim, self.hidden, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated normal weights, standard deviation ``init_std`` (cut at 2 std)."""
        for lin in (self.w1, self.w2, self.w3):
            nn.init.trunc_normal_(lin.weight, std=self.init_std, a=-2 * self.init_std,
                                  b=2 * self.init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def _check_group_input(w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor, x: torch.Tensor,
                       counts: torch.Tensor) -> list[int]:
    experts, hidden, dim = w1.shape
    if w3.shape != w1.shape or w2.shape != (experts, dim, hidden):
        raise ValueError(f"w1, w3 must be (E, hidden, dim) and w2 (E, dim, hidden), got "
                         f"{tuple(w1.shape)}, {tuple(w3.shape)} and {tuple(w2.shape)}")
    if x.dim() != 2 or x.shape[1] != dim:
        raise ValueError(f"x must be (tokens, {dim}), got {tuple(x.shape)}")
    if counts.dim() != 1 or counts.shape[0] != experts or counts.is_floating_point():
        raise ValueError(f"counts must be {experts} integer token counts (one per expert), got "
                         f"{counts.dtype} {tuple(counts.shape)}")
    sizes = [int(c) for c in counts.tolist()]
    if min(sizes, default=0) < 0 or sum(sizes) != x.shape[0]:
        raise ValueError(f"counts must be >= 0 and sum to the {x.shape[0]} rows of x, got "
                         f"{sizes}")
    return sizes


def swiglu_loop(w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor, x: torch.Tensor,
                counts: torch.Tensor) -> torch.Tensor:
    """Each expert's SwiGLU on its rows of ``x`` (grouped by expert, ``counts`` rows each),
    one expert at a time: the reference path. Returns ``(tokens, dim)``."""
    sizes = _check_group_input(w1, w2, w3, x, counts)
    outs = []
    for e, part in enumerate(torch.split(x, sizes, dim=0)):
        h = F.silu(part @ w1[e].transpose(0, 1)) * (part @ w3[e].transpose(0, 1))
        outs.append(h @ w2[e].transpose(0, 1))
    return torch.cat(outs, dim=0) if outs else x.new_zeros(x.shape)


def _grouped_mm() -> Any:
    """torch's grouped matmul: the public ``F.grouped_mm`` (torch 2.13), else
    ``torch._grouped_mm``, else None."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def grouped_mm_problem(x: torch.Tensor, w1: torch.Tensor) -> str | None:
    """Why :func:`swiglu_grouped` cannot run on these tensors, or None when it can
    (:func:`grouped_mm_reason` on their dtype, device and shapes)."""
    capability = (torch.cuda.get_device_capability(x.device) if x.device.type == "cuda"
                  else None)
    if w1.dtype != x.dtype:
        return f"torch._grouped_mm takes one dtype, got {x.dtype} and {w1.dtype}"
    return grouped_mm_reason(x.dtype, x.device.type, capability, dim=w1.shape[2],
                             hidden=w1.shape[1], rows=x.shape[0],
                             available=_grouped_mm() is not None)


def grouped_mm_reason(dtype: torch.dtype, device_type: str,
                      capability: tuple[int, int] | None, *, dim: int, hidden: int, rows: int,
                      available: bool = True) -> str | None:
    """Why torch's grouped matmul cannot run SwiGLU experts of ``dim`` x ``hidden`` on
    ``rows`` rows of ``dtype`` on a ``device_type`` device (``capability``: a CUDA device's
    compute capability, None elsewhere), or None when it can. Pure: the rules of the module
    docstring."""
    if not available:
        return f"torch {torch.__version__} has no grouped matmul (torch._grouped_mm)"
    if dtype not in _GROUPED_DTYPES:
        return f"torch._grouped_mm takes float32, bfloat16 or float16, got {dtype}"
    size = torch.empty((), dtype=dtype).element_size()
    if (dim * size) % _ALIGN_BYTES or (hidden * size) % _ALIGN_BYTES:
        return (f"torch._grouped_mm needs rows of a multiple of {_ALIGN_BYTES} bytes; dim={dim} "
                f"and hidden={hidden} {dtype} rows are {dim * size} and {hidden * size}")
    if rows == 0:
        return "no rows to compute (torch._grouped_mm's backward refuses an empty input)"
    if device_type == "cuda":
        if dtype != torch.bfloat16:
            return f"torch._grouped_mm on CUDA takes bfloat16 (torch 2.13), got {dtype}"
        if capability is None or tuple(capability) < (8, 0):
            return "torch._grouped_mm on CUDA needs compute capability 8.0 or more"
        return None
    if device_type != "cpu":
        return f"torch._grouped_mm is not known to run on {device_type}"
    return None


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the gradient contiguous: ``torch._grouped_mm``'s backward
    refuses the stride-0 gradient a ``sum()`` hands it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


def swiglu_grouped(w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor, x: torch.Tensor,
                   counts: torch.Tensor) -> torch.Tensor:
    """The same as :func:`swiglu_loop` in three grouped-matmul calls (one per matrix,
    every expert at once, groups ended at the running sum of ``counts``). Raises
    ``ValueError`` with :func:`grouped_mm_problem`'s reason where it cannot run."""
    _check_group_input(w1, w2, w3, x, counts)
    problem = grouped_mm_problem(x, w1)
    if problem:
        raise ValueError(problem)
    offsets = torch.cumsum(counts.to(device=x.device), dim=0).to(torch.int32)
    grouped = _grouped_mm()

    def mm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _ContiguousGrad.apply(grouped(a, w.transpose(-2, -1), offs=offsets))

    return mm(F.silu(mm(x, w1)) * mm(x, w3), w2)


class GroupedExperts(nn.Module):
    """``num_experts`` SwiGLU experts with stacked weights (module docstring).

    Args:
        dim: token width.
        hidden: each expert's feed-forward width.
        num_experts: ``E``.
        grouped_mm: True (always :func:`swiglu_grouped`; ``ValueError`` where it cannot run),
            False (always the loop) or None (grouped where :func:`grouped_mm_problem` finds no
            problem, else the loop).
        init_std: standard deviation of the truncated-normal initial weights.

    ``forward(x, counts)``: ``x`` ``(tokens, dim)`` grouped by expert, ``counts`` ``(E,)``
    integer rows per expert; returns ``(tokens, dim)``. ``last_path`` says which path the last
    call took (``"grouped_mm"`` or ``"loop"``), ``last_reason`` why not grouped (or None).
    """

    def __init__(self, dim: int, hidden: int, num_experts: int, *,
                 grouped_mm: bool | None = None, init_std: float = 0.02) -> None:
        super().__init__()
        self.dim = check_int("dim", dim, minimum=1)
        self.hidden = check_int("hidden", hidden, minimum=1)
        self.num_experts = check_int("num_experts", num_experts, minimum=1)
        if grouped_mm is not None and not isinstance(grouped_mm, bool):
            raise TypeError(f"grouped_mm must be True, False or None, got {grouped_mm!r}")
        self.grouped_mm = grouped_mm
        self.init_std = check_float("init_std", init_std, minimum=0.0)
        self.w1 = nn.Parameter(torch.empty(self.num_experts, self.hidden, self.dim))
        self.w2 = nn.Parameter(torch.empty(self.num_experts, self.dim, self.hidden))
        self.w3 = nn.Parameter(torch.empty(self.num_experts, self.hidden, self.dim))
        self.last_path: str | None = None
        self.last_reason: str | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated normal weights, standard deviation ``init_std`` (cut at 2 std)."""
        for w in (self.w1, self.w2, self.w3):
            nn.init.trunc_normal_(w, std=self.init_std, a=-2 * self.init_std,
                                  b=2 * self.init_std)

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:  # noqa: D102
        w1, w2, w3 = self.w1, self.w2, self.w3
        reason = "grouped_mm=False" if self.grouped_mm is False else grouped_mm_problem(x, w1)
        if reason is None:
            self.last_path, self.last_reason = "grouped_mm", None
            return swiglu_grouped(w1, w2, w3, x, counts)
        if self.grouped_mm:
            raise ValueError(f"grouped_mm=True but {reason}")
        self.last_path, self.last_reason = "loop", reason
        return swiglu_loop(w1, w2, w3, x, counts)

    def extra_repr(self) -> str:  # noqa: D102
        return (f"dim={self.dim}, hidden={self.hidden}, num_experts={self.num_experts}, "
                f"grouped_mm={self.grouped_mm}")
