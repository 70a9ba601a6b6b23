"""A mixture-of-experts block: router, routed experts and shared experts.

For each token ``x_t`` (width ``dim``)::

    y_t = shared(x_t) + sum over kept choices j of  weight_{t,j} * expert_{i_{t,j}}(x_t)

(``score_before_experts=True`` scales the expert's input instead of its output, as
torchtitan's default does; the papers' formula above scales the output.) The block:

1. routes every token (:class:`~distlab.moe.router.TokenChoiceRouter`);
2. lists the kept (token, choice) assignments grouped by expert (a stable sort: within an
   expert, in token order) and gathers their tokens: ``routed_input`` ``(A, dim)`` and
   ``tokens_per_expert`` ``(E,)``;
3. runs ``experts(routed_input, tokens_per_expert)`` (:class:`~distlab.moe.experts.
   GroupedExperts`; expert parallelism replaces exactly this call, see
   :mod:`distlab.moe.expert_parallel`);
4. adds each weighted output to its token's row, on top of the shared experts' output (a
   :class:`~distlab.moe.experts.SwiGLU` of width ``hidden * num_shared_experts``, DeepSeekMoE's
   always-on experts) or of zeros.

``aux_loss`` holds the last forward's auxiliary loss (a differentiable scalar to add to the
training loss), ``last_routing`` its :class:`~distlab.moe.router.Routing`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from distlab._checks import check_float, check_int
from distlab.moe.experts import GroupedExperts, SwiGLU
from distlab.moe.router import Routing, TokenChoiceRouter

__all__ = ["MoE", "MoEConfig", "sort_by_expert"]


@dataclass(frozen=True)
class MoEConfig:
    """The shape and routing of one MoE block.

    Attributes:
        dim: token width.
        hidden: each routed expert's feed-forward width.
        num_experts: routed experts ``E``.
        top_k: experts per token.
        score_func: ``"softmax"`` or ``"sigmoid"``.
        normalize: chosen scores divided by their sum over the ``top_k`` choices.
        capacity_factor: None (dropless) or > 0 (the router's capacity).
        drop_policy: ``"position"`` or ``"score"``.
        num_shared_experts: shared experts (their width adds up: one SwiGLU of
            ``hidden * num_shared_experts``); 0 for none.
        score_before_experts: scale the expert's input by the weight instead of its output.
        aux_loss_coeff: the balance loss's coefficient.
        aux_loss_scope: ``"batch"`` or ``"sequence"``.
        grouped_mm: the routed experts' path (:class:`GroupedExperts`).
        init_std: standard deviation of every initial weight.
    """

    dim: int
    hidden: int
    num_experts: int
    top_k: int = 1
    score_func: str = "softmax"
    normalize: bool = False
    capacity_factor: float | None = None
    drop_policy: str = "position"
    num_shared_experts: int = 0
    score_before_experts: bool = False
    aux_loss_coeff: float = 0.0
    aux_loss_scope: str = "batch"
    grouped_mm: bool | None = None
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_int("num_shared_experts", self.num_shared_experts, minimum=0)
        check_float("init_std", self.init_std, minimum=0.0)
        if not isinstance(self.score_before_experts, bool):
            raise TypeError(f"score_before_experts must be a bool, got "
                            f"{self.score_before_experts!r}")


def sort_by_expert(routing: Routing) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept assignments grouped by expert: ``(assignment, token)``, both ``(A,)`` int64;
    ``assignment`` indexes the flattened ``(T * k)`` choices (``t * k + j``), ``token`` is
    ``assignment // k``. Within an expert, assignments stay in token order; the groups'
    sizes are ``routing.tokens_per_expert``."""
    top_k = routing.indices.shape[1]
    kept = routing.kept.reshape(-1).nonzero().squeeze(1)
    order = torch.argsort(routing.indices.reshape(-1)[kept], stable=True)
    assignment = kept[order]
    return assignment, torch.div(assignment, top_k, rounding_mode="floor")


class MoE(nn.Module):
    """A mixture-of-experts block (module docstring) built from a :class:`MoEConfig`.

    ``forward(x)``: ``x`` ``(..., dim)`` floating point; returns the same shape and dtype.
    Submodules: ``router`` (:class:`TokenChoiceRouter`), ``experts``
    (:class:`GroupedExperts`), ``shared_experts`` (:class:`SwiGLU` or None).
    """

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        if not isinstance(config, MoEConfig):
            raise TypeError(f"config must be an MoEConfig, got {type(config).__name__}")
        self.config = config
        self.router = TokenChoiceRouter(
            config.dim, config.num_experts, config.top_k, score_func=config.score_func,
            normalize=config.normalize, capacity_factor=config.capacity_factor,
            drop_policy=config.drop_policy, aux_loss_coeff=config.aux_loss_coeff,
            aux_loss_scope=config.aux_loss_scope)
        nn.init.trunc_normal_(self.router.gate.weight, std=config.init_std,
                              a=-2 * config.init_std, b=2 * config.init_std)
        self.experts = GroupedExperts(config.dim, config.hidden, config.num_experts,
                                      grouped_mm=config.grouped_mm, init_std=config.init_std)
        self.shared_experts = (SwiGLU(config.dim, config.hidden * config.num_shared_experts,
                                      init_std=config.init_std)
                               if config.num_shared_experts else None)
        self.aux_loss: torch.Tensor | None = None
        self.last_routing: Routing | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        routing = self.router(x)
        dim = self.config.dim
        flat = x.reshape(-1, dim)
        assignment, token = sort_by_expert(routing)
        weight = routing.weights.reshape(-1)[assignment].unsqueeze(1)
        routed = flat.index_select(0, token)
        if self.config.score_before_experts:
            routed = (routed.to(torch.float32) * weight).to(x.dtype)
        out = self.experts(routed, routing.tokens_per_expert)
        if not self.config.score_before_experts:
            out = (out.to(torch.float32) * weight).to(x.dtype)
        base = self.shared_experts(x) if self.shared_experts is not None \
            else torch.zeros_like(x)
        self.aux_loss, self.last_routing = routing.aux_loss, routing
        # accumulate into x's shape directly: the result is a new tensor, not a view (under
        # autocast the shared experts' output is the autocast dtype, not x's)
        return base.index_put(torch.unravel_index(token, x.shape[:-1]), out.to(base.dtype),
                              accumulate=True)
