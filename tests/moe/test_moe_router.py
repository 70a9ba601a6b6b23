"""The token-choice router and the balance loss against plain-Python references, on random
logits (hypothesis): the top-k choices and their order, the combine weights (normalised or
not), the capacity and which assignments each drop policy keeps, the tokens per expert, and
the balance loss of Switch / DeepSeekMoE (batch) and DeepSeek-V3 (per sequence) from its
formula in float64. Floats from two computations compare within ``rtol=1e-5, atol=1e-6``
(the router computes in float32); counts and indices are integers and compare exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.moe import (
    TokenChoiceRouter,
    balance_terms,
    capacity_mask,
    expert_capacity,
    load_balance_loss,
    route,
)

RTOL, ATOL = 1e-5, 1e-6


@st.composite
def routing_inputs(draw):
    experts = draw(st.integers(1, 9))
    top_k = draw(st.integers(1, experts))
    tokens = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**31 - 1))
    logits = torch.randn(tokens, experts, generator=torch.Generator().manual_seed(seed)) * 3
    return logits, top_k


def _scores(logits: torch.Tensor, score_func: str) -> np.ndarray:
    x = logits.to(torch.float64).numpy()
    if score_func == "softmax":
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return 1.0 / (1.0 + np.exp(-x))


def _reference_kept(indices: np.ndarray, scores: np.ndarray, experts: int, capacity: int,
                    policy: str) -> np.ndarray:
    """Plain loops: walk the assignments in priority order, keep while the expert has room."""
    tokens, k = indices.shape
    pairs = [(t, j) for t in range(tokens) for j in range(k)]
    if policy == "score":
        pairs.sort(key=lambda p: -scores[p])    # stable: ties keep token order
    room = [capacity] * experts
    kept = np.zeros(indices.shape, dtype=bool)
    for t, j in pairs:
        e = indices[t, j]
        if room[e] > 0:
            room[e] -= 1
            kept[t, j] = True
    return kept


def _reference_loss(probs: np.ndarray, indices: np.ndarray, experts: int) -> float:
    tokens, k = indices.shape
    f = np.zeros(experts)
    for t in range(tokens):
        for j in range(k):
            f[indices[t, j]] += 1.0 / (k * tokens)
    p = probs.mean(axis=0)
    return experts * float(sum(f[i] * p[i] for i in range(experts)))


@settings(max_examples=60, deadline=None)
@given(routing_inputs(), st.sampled_from(["softmax", "sigmoid"]), st.booleans())
def test_top_k_choices_and_weights(inputs, score_func, normalize):
    logits, k = inputs
    r = route(logits, k, score_func=score_func, normalize=normalize)
    scores = _scores(logits, score_func)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(scores, r.indices.numpy(), axis=1)
    # the k best, best first (compared by score, so ties in the logits cannot flip it)
    np.testing.assert_allclose(chosen, np.take_along_axis(scores, order, axis=1),
                               rtol=RTOL, atol=ATOL)
    assert (np.diff(chosen, axis=1) <= ATOL).all()
    assert all(len(set(row)) == k for row in r.indices.tolist())
    expected = chosen / chosen.sum(axis=1, keepdims=True) if normalize else chosen
    np.testing.assert_allclose(r.weights.detach().numpy(), expected, rtol=RTOL, atol=ATOL)
    if normalize:
        np.testing.assert_allclose(r.weights.sum(1).detach().numpy(), 1.0, rtol=RTOL)
    np.testing.assert_allclose(r.probs.sum(1).detach().numpy(), 1.0, rtol=RTOL)
    assert r.kept.all() and r.capacity is None and r.dropped == 0
    counts = np.bincount(r.indices.reshape(-1).numpy(), minlength=logits.shape[1])
    assert r.tokens_per_expert.tolist() == counts.tolist()


@settings(max_examples=80, deadline=None)
@given(routing_inputs(), st.floats(0.1, 3.0), st.sampled_from(["position", "score"]))
def test_capacity_keeps_what_the_policy_says(inputs, factor, policy):
    logits, k = inputs
    tokens, experts = logits.shape
    r = route(logits, k, capacity_factor=factor, drop_policy=policy)
    assert r.capacity == math.ceil(factor * tokens * k / experts)
    scores = np.take_along_axis(_scores(logits, "softmax"), r.indices.numpy(), axis=1)
    kept = _reference_kept(r.indices.numpy(), scores, experts, r.capacity, policy)
    assert r.kept.numpy().tolist() == kept.tolist()
    chosen = np.bincount(r.indices.reshape(-1).numpy(), minlength=experts)
    assert r.tokens_per_expert.tolist() == np.minimum(chosen, r.capacity).tolist()
    assert r.dropped == int(chosen.sum() - np.minimum(chosen, r.capacity).sum())


@settings(max_examples=60, deadline=None)
@given(routing_inputs(), st.sampled_from(["softmax", "sigmoid"]))
def test_balance_loss_equals_its_formula(inputs, score_func):
    logits, k = inputs
    r = route(logits, k, score_func=score_func, aux_loss_coeff=0.01)
    scores = _scores(logits, score_func)
    probs = scores / scores.sum(axis=1, keepdims=True)   # the softmax, or DeepSeek-V3's s'
    expected = _reference_loss(probs, r.indices.numpy(), logits.shape[1])
    assert float(r.aux_loss) == pytest.approx(0.01 * expected, rel=RTOL, abs=ATOL)
    f, p = balance_terms(r.probs, r.indices)
    assert float(f.sum()) == pytest.approx(1.0, rel=RTOL)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), routing_inputs())
def test_sequence_wise_loss_is_the_mean_over_sequences(seqs, length, inputs):
    _, k = inputs
    experts = inputs[0].shape[1]
    logits = torch.randn(seqs * length, experts, generator=torch.Generator().manual_seed(seqs))
    r = route(logits, k)
    got = load_balance_loss(r.probs, r.indices, sequence_length=length)
    parts = [_reference_loss(r.probs[s * length:(s + 1) * length].double().numpy(),
                             r.indices[s * length:(s + 1) * length].numpy(), experts)
             for s in range(seqs)]
    assert float(got) == pytest.approx(sum(parts) / seqs, rel=RTOL, abs=ATOL)


def test_balance_loss_bounds_and_gradient():
    experts, tokens = 4, 8
    uniform = torch.full((tokens, experts), 1.0 / experts, requires_grad=True)
    idx = torch.arange(tokens).remainder(experts).reshape(-1, 1)
    loss = load_balance_loss(uniform, idx)
    assert float(loss.detach()) == pytest.approx(1.0, rel=RTOL)
    # the gradient reaches the probabilities only: dL/dp[t, i] = E * f_i / T
    (grad,) = torch.autograd.grad(loss, uniform)
    f = torch.bincount(idx.reshape(-1), minlength=experts) / tokens
    torch.testing.assert_close(grad, (experts * f / tokens).expand(tokens, -1), rtol=RTOL,
                               atol=ATOL)
    collapsed = torch.zeros(tokens, experts)
    collapsed[:, 2] = 1.0
    one = torch.full((tokens, 1), 2)
    assert float(load_balance_loss(collapsed, one)) == pytest.approx(experts, rel=RTOL)


def test_capacity_mask_and_capacity_by_hand():
    idx = torch.tensor([[0, 1], [0, 2], [0, 1], [1, 0]])
    scores = torch.tensor([[0.5, 0.2], [0.6, 0.1], [0.9, 0.05], [0.3, 0.25]])
    assert capacity_mask(idx, scores, 3, 2, "position").tolist() == [
        [True, True], [True, True], [False, True], [False, False]]
    # expert 0 scores 0.5, 0.6, 0.9, 0.25 (tokens 0-3): tokens 2 and 1 stay; expert 1 scores
    # 0.2, 0.05, 0.3 (tokens 0, 2, 3): tokens 3 and 0 stay; expert 2 has one
    assert capacity_mask(idx, scores, 3, 2, "score").tolist() == [
        [False, True], [True, True], [True, False], [True, False]]
    assert expert_capacity(10, 4, 2, 1.0) == 5
    assert expert_capacity(10, 4, 1, 1.25) == 4
    assert expert_capacity(0, 4, 1, 1.0) == 0


def test_router_module_and_its_bad_input():
    torch.manual_seed(0)
    router = TokenChoiceRouter(6, 4, 2, score_func="sigmoid", normalize=True,
                               capacity_factor=1.0, aux_loss_coeff=0.01,
                               aux_loss_scope="sequence")
    x = torch.randn(2, 5, 6)
    r = router(x)
    assert r.indices.shape == (10, 2) and r.capacity == 5
    expected = route(router.gate(x.reshape(-1, 6)), 2, score_func="sigmoid", normalize=True,
                     capacity_factor=1.0, aux_loss_coeff=0.01, sequence_length=5)
    torch.testing.assert_close(r.aux_loss, expected.aux_loss, rtol=RTOL, atol=ATOL)
    assert "capacity_factor=1" in repr(router)
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 4\], got 5"):
        TokenChoiceRouter(6, 4, 5)
    with pytest.raises(ValueError, match="score_func must be one of 'softmax', 'sigmoid'"):
        TokenChoiceRouter(6, 4, score_func="relu")
    with pytest.raises(ValueError, match="capacity_factor must be"):
        TokenChoiceRouter(6, 4, capacity_factor=0.0)
    with pytest.raises(ValueError, match="drop_policy must be one of"):
        TokenChoiceRouter(6, 4, drop_policy="random")
    with pytest.raises(TypeError, match="normalize must be a bool"):
        TokenChoiceRouter(6, 4, normalize=1)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 6\)"):
        router(torch.randn(3, 5))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        router(torch.ones(3, 6, dtype=torch.int64))
    with pytest.raises(ValueError, match="aux_loss_scope='sequence' needs x of shape"):
        router(torch.randn(10, 6))
    with pytest.raises(ValueError, match="sequence_length must divide the number of tokens 10"):
        load_balance_loss(r.probs, r.indices, sequence_length=3)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 4\)"):
        load_balance_loss(r.probs, r.indices + 3)
    with pytest.raises(ValueError, match="same tokens"):
        load_balance_loss(r.probs, r.indices[:3])
    with pytest.raises(TypeError, match="logits must be a floating-point"):
        route(torch.ones(3, 4, dtype=torch.int64), 1)
