"""The auxiliary load-balancing loss of token-choice routing, as Switch, GShard and DeepSeek
define it.

For ``T`` tokens, ``E`` experts and ``K`` choices per token, with ``count_i`` the number of
(token, choice) pairs the router assigned to expert ``i`` and ``p_{t,i}`` the router
probability of expert ``i`` for token ``t``::

    f_i = count_i / (K * T)            fraction of the assignments that went to expert i
    P_i = (1 / T) * sum_t p_{t,i}       mean router probability of expert i
    L   = E * sum_i f_i * P_i           1.0 when routing is uniform (f_i = P_i = 1 / E)

Sources:

- Switch Transformer (Fedus, Zoph, Shazeer 2021, arXiv:2101.03961, eq. 4-6): ``K = 1``,
  ``loss = alpha * N * sum_i f_i * P_i``; ``f_i`` counts the router's top-1 choice (before any
  token is dropped for capacity), ``P_i`` the softmax probability; differentiable through
  ``P_i`` only.
- GShard (Lepikhin et al. 2020, arXiv:2006.16668, Algorithm 1): the same sum of fraction of
  tokens times mean gate per expert, per group of tokens, scaled by ``1 / E`` instead of ``E``
  (a constant the coefficient absorbs).
- DeepSeekMoE (Dai et al. 2024, arXiv:2401.06066, eq. 12-14, the expert-level balance loss):
  ``K > 1``, ``f_i = E / (K * T) * sum_t 1(token t chose i)``, ``L = alpha * sum_i f_i * P_i``,
  equal to the formula above.
- DeepSeek-V3 (arXiv:2412.19437, eq. 17-20, the complementary sequence-wise balance loss): the
  same loss computed over the ``T`` tokens of each sequence and with sigmoid scores normalised
  to sum to 1 over all experts (``p_{t,i} = s_{t,i} / sum_j s_{t,j}``); here averaged over the
  sequences of a batch (``sequence_length=``).

Routers pass their probabilities (softmax scores, or sigmoid scores normalised per token) and
their choices; the coefficient ``alpha`` is the router's.
"""

from __future__ import annotations

import torch

from distlab._checks import check_int

__all__ = ["balance_terms", "load_balance_loss"]


def _check(probs: torch.Tensor, indices: torch.Tensor) -> tuple[int, int, int]:
    if not isinstance(probs, torch.Tensor) or not isinstance(indices, torch.Tensor):
        raise TypeError(f"probs and indices must be tensors, got {type(probs).__name__} and "
                        f"{type(indices).__name__}")
    if probs.dim() != 2 or indices.dim() != 2 or probs.shape[0] != indices.shape[0]:
        raise ValueError(f"probs must be (tokens, experts) and indices (tokens, top_k) with the "
                         f"same tokens, got {tuple(probs.shape)} and {tuple(indices.shape)}")
    if not probs.is_floating_point() or indices.is_floating_point():
        raise TypeError(f"probs must be floating point and indices integer, got {probs.dtype} "
                        f"and {indices.dtype}")
    tokens, experts = probs.shape
    top_k = indices.shape[1]
    if top_k < 1 or top_k > experts:
        raise ValueError(f"indices must choose 1 to {experts} experts per token, got top_k "
                         f"{top_k}")
    if tokens and (int(indices.min()) < 0 or int(indices.max()) >= experts):
        raise ValueError(f"indices must lie in [0, {experts}), got values from "
                         f"{int(indices.min())} to {int(indices.max())}")
    return tokens, experts, top_k


def balance_terms(probs: torch.Tensor, indices: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(f, P)`` of the module docstring for one group of tokens: ``f[i]`` the fraction of the
    ``K * T`` assignments that chose expert ``i`` (no gradient), ``P[i]`` the mean probability
    of expert ``i`` (differentiable). Both float32 vectors of length ``E``."""
    tokens, experts, top_k = _check(probs, indices)
    if tokens == 0:
        raise ValueError("probs must hold at least one token, got 0")
    counts = torch.bincount(indices.reshape(-1), minlength=experts).to(torch.float32)
    return counts / (top_k * tokens), probs.to(torch.float32).mean(dim=0)


def load_balance_loss(probs: torch.Tensor, indices: torch.Tensor, *,
                      sequence_length: int | None = None) -> torch.Tensor:
    """The load-balancing loss ``E * sum_i f_i * P_i`` (module docstring), a float32 scalar:
    1.0 at perfect balance, ``E`` when ``K = 1`` and every token chooses one expert with
    probability 1. Multiply it by the coefficient (Switch: ``alpha = 1e-2``).

    Args:
        probs: ``(T, E)`` router probabilities of every expert per token.
        indices: ``(T, K)`` experts chosen per token (the router's choices before capacity
            dropping).
        sequence_length: None for one group of all ``T`` tokens (Switch, GShard, DeepSeekMoE);
            an int ``S`` that divides ``T`` for DeepSeek-V3's sequence-wise loss: the loss of
            each run of ``S`` consecutive tokens, averaged over the ``T / S`` sequences.

    Raises:
        TypeError: probs or indices not tensors of the right kind.
        ValueError: mismatched shapes, indices outside ``[0, E)``, no token, or a
            ``sequence_length`` that does not divide ``T``.
    """
    tokens, experts, top_k = _check(probs, indices)
    if sequence_length is None:
        f, p = balance_terms(probs, indices)
        return experts * (f * p).sum()
    length = check_int("sequence_length", sequence_length, minimum=1)
    if tokens == 0 or tokens % length:
        raise ValueError(f"sequence_length must divide the number of tokens {tokens} (and "
                         f"there must be at least one), got {length}")
    seqs = tokens // length
    p = probs.to(torch.float32).reshape(seqs, length, experts).mean(dim=1)
    one_hot = torch.zeros(seqs, length * top_k, experts, dtype=torch.float32,
                          device=probs.device)
    one_hot.scatter_(2, indices.reshape(seqs, length * top_k, 1), 1.0)
    f = one_hot.sum(dim=1) / (top_k * length)
    return experts * (f * p).sum(dim=1).mean()
