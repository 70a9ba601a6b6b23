"""Token-choice top-k routing: each token picks its ``k`` highest-scoring experts.

:class:`TokenChoiceRouter` scores every expert for every token with one bias-free linear layer
(``gate``: ``dim -> E``), in float32: ``softmax`` over the experts (Switch, GShard, Mixtral,
Qwen3-MoE) or an independent ``sigmoid`` per expert (DeepSeek-V3). It keeps the ``k`` best
(``torch.topk``, best first); their combine weights are the chosen scores, or those scores
divided by their sum over the ``k`` choices (``normalize=True``: Mixtral, Qwen3-MoE,
DeepSeek-V3's sigmoid router).

With a ``capacity_factor`` each expert accepts at most ``C = ceil(capacity_factor * T * k /
E)`` of the ``T * k`` assignments of a batch of ``T`` tokens (:func:`expert_capacity`; Switch's
expert capacity, eq. 3, times ``k`` as Megatron-Core's ``get_capacity`` computes it); the rest
are dropped (:func:`capacity_mask`): ``"position"`` keeps an expert's earliest assignments in
token order (Switch, GShard), ``"score"`` its highest-scoring ones (Megatron-Core's ``probs``
policy). A dropped assignment contributes nothing to its token's output (the residual stream
carries the token on); weights are not renormalised after dropping. Without a capacity
factor routing is dropless: every assignment is kept.

The auxiliary load-balancing loss (:func:`~distlab.moe.balance.load_balance_loss`, its formula
and sources there) is computed on the choices before dropping, scaled by ``aux_loss_coeff``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from distlab._checks import check_choice, check_float, check_int
from distlab.moe.balance import load_balance_loss

__all__ = ["AUX_LOSS_SCOPES", "DROP_POLICIES", "Routing", "SCORE_FUNCS", "TokenChoiceRouter",
           "capacity_mask", "expert_capacity", "route"]

SCORE_FUNCS = ("softmax", "sigmoid")
"""How a router turns its logits into scores."""
DROP_POLICIES = ("position", "score")
"""Which assignments an over-full expert keeps: the earliest tokens, or the best scores."""
AUX_LOSS_SCOPES = ("batch", "sequence")
"""Over which tokens the balance loss is computed: the whole batch, or each sequence."""


@dataclass(frozen=True)
class Routing:
    """What a router decided for ``T`` tokens, ``E`` experts and ``k`` choices per token.

    Attributes:
        probs: ``(T, E)`` float32 probability of every expert per token (the softmax, or the
            sigmoid scores normalised to sum to 1 per token); what the balance loss reads.
        indices: ``(T, k)`` int64 experts chosen per token, best score first.
        weights: ``(T, k)`` float32 combine weight of each choice (differentiable).
        kept: ``(T, k)`` bool, False where an assignment was dropped for capacity.
        tokens_per_expert: ``(E,)`` int64 kept assignments per expert.
        capacity: assignments each expert accepts (None: dropless).
        aux_loss: float32 scalar, ``aux_loss_coeff`` times the balance loss (0 when the
            coefficient is 0).
    """

    probs: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor
    kept: torch.Tensor
    tokens_per_expert: torch.Tensor
    capacity: int | None
    aux_loss: torch.Tensor

    @property
    def dropped(self) -> int:
        """Assignments dropped for capacity."""
        return int((~self.kept).sum())


def expert_capacity(num_tokens: int, num_experts: int, top_k: int,
                    capacity_factor: float) -> int:
    """``ceil(capacity_factor * num_tokens * top_k / num_experts)``: the assignments one expert
    accepts from a batch of ``num_tokens`` tokens (``capacity_factor = 1``: exactly the
    balanced share).

    Raises:
        TypeError, ValueError: a count that is not an int >= 0 (experts, top_k >= 1), a factor
            that is not a finite number > 0.
    """
    tokens = check_int("num_tokens", num_tokens, minimum=0)
    experts = check_int("num_experts", num_experts, minimum=1)
    k = check_int("top_k", top_k, minimum=1, maximum=experts)
    factor = check_float("capacity_factor", capacity_factor, minimum=0.0,
                         exclusive_minimum=True)
    return math.ceil(factor * tokens * k / experts)


def _rank_within_expert(experts: torch.Tensor, num_experts: int) -> torch.Tensor:
    """For a 1-D sequence of expert ids, how many earlier entries chose the same expert."""
    one_hot = F.one_hot(experts, num_experts)
    return (one_hot.cumsum(dim=0) * one_hot).sum(dim=1) - 1


def capacity_mask(indices: torch.Tensor, scores: torch.Tensor, num_experts: int, capacity: int,
                  policy: str = "position") -> torch.Tensor:
    """``(T, k)`` bool: which assignments fit their expert's ``capacity``.

    Args:
        indices: ``(T, k)`` chosen experts.
        scores: ``(T, k)`` the router's scores of those choices (read by ``"score"`` only).
        num_experts: ``E``; ``indices`` lie in ``[0, E)``.
        capacity: assignments each expert accepts, >= 0.
        policy: ``"position"``: an expert keeps its first ``capacity`` assignments in token
            order (token ``t``'s choices before token ``t + 1``'s); ``"score"``: its
            ``capacity`` highest scores (ties: token order).
    """
    if indices.shape != scores.shape or indices.dim() != 2:
        raise ValueError(f"indices and scores must both be (tokens, top_k), got "
                         f"{tuple(indices.shape)} and {tuple(scores.shape)}")
    experts = check_int("num_experts", num_experts, minimum=1)
    cap = check_int("capacity", capacity, minimum=0)
    check_choice("policy", policy, DROP_POLICIES)
    flat = indices.reshape(-1)
    if policy == "position":
        rank = _rank_within_expert(flat, experts)
    else:
        order = torch.argsort(scores.reshape(-1).detach(), descending=True, stable=True)
        rank = torch.empty_like(flat)
        rank[order] = _rank_within_expert(flat[order], experts)
    return (rank < cap).reshape(indices.shape)


def route(logits: torch.Tensor, top_k: int, *, score_func: str = "softmax",
          normalize: bool = False, capacity_factor: float | None = None,
          drop_policy: str = "position", aux_loss_coeff: float = 0.0,
          sequence_length: int | None = None) -> Routing:
    """Route ``T`` tokens from their ``(T, E)`` gate logits (what :class:`TokenChoiceRouter`
    runs after its linear layer; the module docstring says what each option does).
    ``sequence_length``: the balance loss per run of that many tokens, averaged (DeepSeek-V3's
    sequence-wise loss), or None for one group."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 \
            or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point (tokens, experts) tensor, got "
                        f"{type(logits).__name__} {tuple(getattr(logits, 'shape', ()))}")
    tokens, experts = logits.shape
    k = check_int("top_k", top_k, minimum=1, maximum=experts)
    check_choice("score_func", score_func, SCORE_FUNCS)
    check_choice("drop_policy", drop_policy, DROP_POLICIES)
    coeff = check_float("aux_loss_coeff", aux_loss_coeff, minimum=0.0)
    x = logits.to(torch.float32)
    scores = torch.softmax(x, dim=-1) if score_func == "softmax" else torch.sigmoid(x)
    top, indices = torch.topk(scores, k, dim=-1)
    weights = top / top.sum(dim=-1, keepdim=True) if normalize else top
    if capacity_factor is None:
        capacity = None
        kept = torch.ones_like(indices, dtype=torch.bool)
    else:
        capacity = expert_capacity(tokens, experts, k, capacity_factor)
        kept = capacity_mask(indices, top, experts, capacity, drop_policy)
    counts = torch.bincount(indices[kept], minlength=experts)
    probs = scores if score_func == "softmax" else scores / scores.sum(dim=-1, keepdim=True)
    if coeff > 0 and tokens:
        aux = coeff * load_balance_loss(probs, indices, sequence_length=sequence_length)
    else:
        aux = torch.zeros((), dtype=torch.float32, device=logits.device)
    return Routing(probs, indices, weights, kept, counts, capacity, aux)


class TokenChoiceRouter(nn.Module):
    """Top-k token-choice router (module docstring).

    Args:
        dim: token width (the gate's input features).
        num_experts: ``E``.
        top_k: experts per token, ``1 <= top_k <= E``.
        score_func: ``"softmax"`` or ``"sigmoid"``.
        normalize: divide the chosen scores by their sum over the ``k`` choices.
        capacity_factor: None (dropless) or a number > 0 (:func:`expert_capacity`).
        drop_policy: ``"position"`` or ``"score"`` (:func:`capacity_mask`).
        aux_loss_coeff: the balance loss's coefficient ``alpha`` (Switch: 1e-2), >= 0.
        aux_loss_scope: ``"batch"`` (one group of all tokens) or ``"sequence"`` (DeepSeek-V3:
            per sequence, averaged; needs ``(batch, seq, dim)`` inputs).

    ``forward(x)`` takes ``(..., dim)`` tokens and returns a :class:`Routing` over the
    flattened tokens. Raises ``TypeError``/``ValueError`` naming the argument for bad options
    or a bad input.
    """

    def __init__(self, dim: int, num_experts: int, top_k: int = 1, *,
                 score_func: str = "softmax", normalize: bool = False,
                 capacity_factor: float | None = None, drop_policy: str = "position",
                 aux_loss_coeff: float = 0.0, aux_loss_scope: str = "batch") -> None:
        super().__init__()
        self.dim = check_int("dim", dim, minimum=1)
        self.num_experts = check_int("num_experts", num_experts, minimum=1)
        self.top_k = check_int("top_k", top_k, minimum=1, maximum=self.num_experts)
        self.score_func = check_choice("score_func", score_func, SCORE_FUNCS)
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize must be a bool, got {type(normalize).__name__}")
        self.normalize = normalize
        self.capacity_factor = (None if capacity_factor is None else check_float(
            "capacity_factor", capacity_factor, minimum=0.0, exclusive_minimum=True))
        self.drop_policy = check_choice("drop_policy", drop_policy, DROP_POLICIES)
        self.aux_loss_coeff = check_float("aux_loss_coeff", aux_loss_coeff, minimum=0.0)
        self.aux_loss_scope = check_choice("aux_loss_scope", aux_loss_scope, AUX_LOSS_SCOPES)
        self.gate = nn.Linear(self.dim, self.num_experts, bias=False)

    def forward(self, x: torch.Tensor) -> Routing:  # noqa: D102
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor of tokens, got "
                            f"{type(x).__name__} {getattr(x, 'dtype', '')}")
        if x.dim() < 1 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (..., {self.dim}) (dim={self.dim}), got "
                             f"{tuple(x.shape)}")
        length = None
        if self.aux_loss_scope == "sequence":
            if x.dim() != 3:
                raise ValueError(f"aux_loss_scope='sequence' needs x of shape (batch, seq, "
                                 f"{self.dim}), got {tuple(x.shape)}")
            length = x.shape[1]
        return route(self.gate(x.reshape(-1, self.dim)), self.top_k,
                     score_func=self.score_func, normalize=self.normalize,
                     capacity_factor=self.capacity_factor, drop_policy=self.drop_policy,
                     aux_loss_coeff=self.aux_loss_coeff, sequence_length=length)

    def extra_repr(self) -> str:  # noqa: D102
        cap = ("dropless" if self.capacity_factor is None
               else f"capacity_factor={self.capacity_factor:g}, drop_policy={self.drop_policy}")
        return (f"dim={self.dim}, num_experts={self.num_experts}, top_k={self.top_k}, "
                f"score_func={self.score_func}, normalize={self.normalize}, {cap}, "
                f"aux_loss_coeff={self.aux_loss_coeff:g} ({self.aux_loss_scope})")
