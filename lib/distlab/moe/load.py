"""Tokens per expert and per expert-parallel rank, and what an imbalance costs (pure).

With ``E`` experts over ``W`` expert-parallel ranks (rank ``r`` holds the ``E / W`` experts
``r * E / W ..``), a rank computes every token routed to its experts. Expert FLOPs are linear
in tokens (:func:`~distlab.moe.experts.swiglu_flops`: ``6 * dim * hidden`` per token
forward, three times that forward and backward), so the slowest rank's expert FLOPs relative
to the mean rank's equal its tokens relative to the mean: the **imbalance factor** ``max /
mean``. Ranks wait for the slowest at the combine all-to-all, so the step's expert time is
``max / mean`` times a balanced step's and ``1 - mean / max`` of the ranks' expert time is
spent waiting (``idle_fraction``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distlab._checks import check_int
from distlab.moe.experts import swiglu_flops
from distlab.moe.router import Routing, TokenChoiceRouter

__all__ = ["ExpertLoad", "expert_load", "imbalance", "random_routing"]


def imbalance(values: Sequence[float] | np.ndarray) -> float:
    """``max / mean`` of non-negative ``values`` (1.0 when all are 0: nothing to balance)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("values must hold at least one number, got none")
    mean = float(arr.mean())
    return 1.0 if mean == 0 else float(arr.max()) / mean


@dataclass(frozen=True)
class ExpertLoad:
    """The load of one MoE layer's experts over ``ep_size`` ranks.

    Attributes:
        tokens_per_expert: routed (token, choice) assignments per expert.
        ep_size: expert-parallel ranks.
        tokens_per_rank: assignments each rank's experts compute.
        expert_imbalance: ``max / mean`` over experts.
        rank_imbalance: ``max / mean`` over ranks: the slowest rank's expert FLOPs relative to
            the mean rank's.
        slowest_rank: the rank with the most tokens (the lowest such rank on a tie).
        idle_fraction: ``1 - mean / max`` over ranks: the share of the ranks' expert time
            spent waiting for the slowest.
        flops_per_token: forward FLOPs of one expert on one token (None without a shape).
        rank_flops: forward expert FLOPs per rank (None without a shape).
    """

    tokens_per_expert: tuple[int, ...]
    ep_size: int
    tokens_per_rank: tuple[int, ...]
    expert_imbalance: float
    rank_imbalance: float
    slowest_rank: int
    idle_fraction: float
    flops_per_token: int | None
    rank_flops: tuple[int, ...] | None

    @property
    def num_experts(self) -> int:
        """Experts ``E``."""
        return len(self.tokens_per_expert)

    @property
    def tokens(self) -> int:
        """All routed assignments."""
        return sum(self.tokens_per_expert)


def _counts(tokens_per_expert: Any) -> np.ndarray:
    if isinstance(tokens_per_expert, Routing):
        tokens_per_expert = tokens_per_expert.tokens_per_expert
    if isinstance(tokens_per_expert, torch.Tensor):
        if tokens_per_expert.is_floating_point():
            raise TypeError(f"tokens_per_expert must hold integer counts, got "
                            f"{tokens_per_expert.dtype}")
        tokens_per_expert = tokens_per_expert.detach().cpu().numpy()
    try:
        arr = np.asarray(tokens_per_expert)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tokens_per_expert must be a Routing or counts per expert, got "
                        f"{type(tokens_per_expert).__name__}") from exc
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise TypeError(f"tokens_per_expert must hold integer counts, got {arr.dtype}")
    if arr.ndim == 2:          # one row per source rank: the layer's total per expert
        arr = arr.sum(axis=0)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"tokens_per_expert must be (experts,) or (source ranks, experts) "
                         f"counts, got shape {arr.shape}")
    if (arr < 0).any():
        raise ValueError(f"tokens_per_expert must be >= 0, got {arr.tolist()}")
    return arr.astype(np.int64)


def expert_load(tokens_per_expert: Any, ep_size: int = 1, *, dim: int | None = None,
                hidden: int | None = None) -> ExpertLoad:
    """The load (:class:`ExpertLoad`) of ``E`` experts over ``ep_size`` ranks.

    Args:
        tokens_per_expert: a :class:`~distlab.moe.router.Routing` (its kept assignments), or
            integer counts ``(E,)``, or ``(source ranks, E)`` (summed over the sources: every
            rank's routing of one layer).
        ep_size: expert-parallel ranks; must divide ``E``.
        dim, hidden: the experts' token width and feed-forward width, both or neither; with
            them the load carries FLOPs.

    Raises:
        TypeError: counts that are not integers, ``dim``/``hidden`` not ints.
        ValueError: negative counts, a bad shape, ``ep_size`` that does not divide ``E``, only
            one of ``dim`` and ``hidden``.
    """
    counts = _counts(tokens_per_expert)
    experts = counts.size
    ranks = check_int("ep_size", ep_size, minimum=1)
    if experts % ranks:
        raise ValueError(f"ep_size must divide the {experts} experts, got {ranks}")
    if (dim is None) != (hidden is None):
        raise ValueError(f"dim and hidden must be given together, got dim={dim!r}, "
                         f"hidden={hidden!r}")
    per_rank = counts.reshape(ranks, -1).sum(axis=1)
    peak = int(per_rank.max())
    mean = float(per_rank.mean())
    per_token = None if dim is None else swiglu_flops(dim, hidden)  # type: ignore[arg-type]
    return ExpertLoad(
        tokens_per_expert=tuple(int(c) for c in counts),
        ep_size=ranks,
        tokens_per_rank=tuple(int(c) for c in per_rank),
        expert_imbalance=imbalance(counts),
        rank_imbalance=imbalance(per_rank),
        slowest_rank=int(np.argmax(per_rank)),
        idle_fraction=0.0 if peak == 0 else 1.0 - mean / peak,
        flops_per_token=per_token,
        rank_flops=None if per_token is None else tuple(int(c) * per_token for c in per_rank),
    )


def random_routing(num_experts: int, top_k: int = 1, tokens: int = 4096, *, dim: int = 64,
                   score_func: str = "softmax", seed: int = 0) -> Routing:
    """How a freshly initialised router (:class:`~distlab.moe.router.TokenChoiceRouter`, torch's
    default ``Linear`` init, dropless) routes ``tokens`` random tokens (standard normal, width
    ``dim``): the load an MoE layer starts training with, before the balance loss has acted.
    The router's weights and the tokens are drawn from ``seed`` (torch's global generator is left
    as it was); no gradient is kept.

    Raises:
        ValueError: a count out of range (``1 <= top_k <= num_experts``), a bad ``score_func``.
    """
    experts = check_int("num_experts", num_experts, minimum=1)
    k = check_int("top_k", top_k, minimum=1, maximum=experts)
    n = check_int("tokens", tokens, minimum=1)
    width = check_int("dim", dim, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    with torch.random.fork_rng(devices=[]):   # the caller's global generator is left as it was
        torch.manual_seed(seed)
        router = TokenChoiceRouter(width, experts, k, score_func=score_func)
    x = torch.randn(n, width, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        return router(x)
