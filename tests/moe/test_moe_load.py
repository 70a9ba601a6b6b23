"""Tokens per expert and per rank, and what an imbalance costs: against sums by hand on random
counts (hypothesis). Ratios are float; they compare within ``rel=1e-12`` (float64 of small
integers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.moe import expert_load, imbalance, route, swiglu_flops

REL = 1e-12


@st.composite
def loads(draw):
    ranks = draw(st.sampled_from([1, 2, 4, 8]))
    per_rank = draw(st.integers(1, 4))
    counts = draw(st.lists(st.integers(0, 50), min_size=ranks * per_rank,
                           max_size=ranks * per_rank))
    return counts, ranks


@settings(max_examples=100, deadline=None)
@given(loads())
def test_load_by_hand(args):
    counts, ranks = args
    load = expert_load(counts, ranks, dim=8, hidden=16)
    per = len(counts) // ranks
    by_rank = [sum(counts[r * per:(r + 1) * per]) for r in range(ranks)]
    assert load.tokens_per_rank == tuple(by_rank)
    assert load.tokens == sum(counts) and load.num_experts == len(counts)
    assert load.slowest_rank == by_rank.index(max(by_rank))
    mean = sum(by_rank) / ranks
    if mean:
        assert load.rank_imbalance == pytest.approx(max(by_rank) / mean, rel=REL)
        assert load.idle_fraction == pytest.approx(1 - mean / max(by_rank), rel=REL, abs=REL)
        # the slowest rank's FLOPs over the mean rank's are its tokens over the mean
        flops = load.rank_flops
        assert max(flops) / (sum(flops) / ranks) == pytest.approx(load.rank_imbalance, rel=REL)
    else:
        assert load.rank_imbalance == 1.0 and load.idle_fraction == 0.0
    assert load.rank_flops == tuple(t * swiglu_flops(8, 16) for t in by_rank)
    assert 1.0 <= load.rank_imbalance <= load.expert_imbalance + REL


def test_load_from_a_routing_and_per_source_counts():
    logits = torch.randn(12, 4, generator=torch.Generator().manual_seed(0))
    r = route(logits, 2, capacity_factor=1.0)
    load = expert_load(r, 2)
    assert load.tokens_per_expert == tuple(r.tokens_per_expert.tolist())
    assert load.flops_per_token is None and load.rank_flops is None
    two = expert_load(np.array([[1, 2, 3, 4], [4, 3, 2, 1]]), 2)
    assert two.tokens_per_expert == (5, 5, 5, 5) and two.rank_imbalance == 1.0
    skewed = expert_load([6, 0, 1, 1], 2)
    assert skewed.tokens_per_rank == (6, 2) and skewed.rank_imbalance == pytest.approx(1.5)
    assert skewed.idle_fraction == pytest.approx(1 / 3)
    assert skewed.expert_imbalance == pytest.approx(3.0)
    assert imbalance([0, 0]) == 1.0


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="ep_size must divide the 4 experts, got 3"):
        expert_load([1, 2, 3, 4], 3)
    with pytest.raises(TypeError, match="tokens_per_expert must hold integer counts"):
        expert_load([1.5, 2.0], 1)
    with pytest.raises(TypeError, match="tokens_per_expert must hold integer counts"):
        expert_load(torch.tensor([1.0, 2.0]), 1)
    with pytest.raises(ValueError, match="tokens_per_expert must be >= 0"):
        expert_load([1, -2], 1)
    with pytest.raises(ValueError, match="tokens_per_expert must be"):
        expert_load([], 1)
    with pytest.raises(ValueError, match="dim and hidden must be given together"):
        expert_load([1, 2], 1, dim=8)
    with pytest.raises(ValueError, match="ep_size must be an int"):
        expert_load([1, 2], 0)
    with pytest.raises(ValueError, match="values must hold at least one number"):
        imbalance([])


def test_random_routing_is_a_seeded_fresh_router():
    from distlab.moe import random_routing

    a = random_routing(16, 2, 512, dim=8, seed=3)
    b = random_routing(16, 2, 512, dim=8, seed=3)
    c = random_routing(16, 2, 512, dim=8, seed=4)
    assert torch.equal(a.indices, b.indices) and not torch.equal(a.indices, c.indices)
    assert a.indices.shape == (512, 2) and int(a.tokens_per_expert.sum()) == 1024
    assert a.dropped == 0 and not a.probs.requires_grad
    # each token's two choices are distinct experts, its two highest scores
    assert bool((a.indices[:, 0] != a.indices[:, 1]).all())
    top = a.probs.topk(2, dim=1).indices
    assert torch.equal(top.sort(dim=1).values, a.indices.sort(dim=1).values)
    load = expert_load(a, 4)
    assert load.tokens == 1024 and load.rank_imbalance >= 1.0


@pytest.mark.parametrize("kwargs,needle", [({"num_experts": 0}, "num_experts"),
                                           ({"top_k": 5}, "top_k"), ({"tokens": 0}, "tokens"),
                                           ({"score_func": "relu"}, "score_func")])
def test_random_routing_bad_input_names_the_argument(kwargs, needle):
    from distlab.moe import random_routing

    args = {"num_experts": 4, "top_k": 1, "tokens": 8} | kwargs
    with pytest.raises(ValueError, match=needle):
        random_routing(**args)
