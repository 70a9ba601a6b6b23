"""PermutationSampler: a bijection, statistically a uniform shuffle, torch's layout and resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.samplers import DistributedSampler, FeistelPermutation, PermutationSampler


@pytest.mark.parametrize("n", [*range(0, 70), 127, 128, 129, 1000, 4095, 4097, 65_537])
def test_bijection_exhaustive_small_n(n: int) -> None:
    for seed, epoch in [(0, 0), (1, 0), (0, 5), (-3, 2**40)]:
        values = FeistelPermutation(n, seed, epoch)(np.arange(n))
        assert np.array_equal(np.sort(values), np.arange(n))


def test_differs_per_epoch_and_seed() -> None:
    n = 10_000
    orders = [FeistelPermutation(n, s, e)(np.arange(n)) for s, e in [(0, 0), (0, 1), (1, 0)]]
    for i in range(3):
        for j in range(i + 1, 3):
            assert np.mean(orders[i] == orders[j]) < 0.01  # unrelated: ~1/n agree


def test_positions_uniform_over_epochs_chi_square() -> None:
    """For each index, its position (bucketed) over 2000 epochs is uniform: chi-square test.

    Fixed seeds make it deterministic; the threshold is the 1e-6 tail of the chi-square law
    (normal approximation), so a fair shuffle passes and a biased one (e.g. identity, rotation)
    fails by orders of magnitude.
    """
    n, epochs, buckets = 64, 2000, 8
    counts = np.zeros((n, buckets))
    pos = np.arange(n)
    for e in range(epochs):
        order = FeistelPermutation(n, 7, e)(pos)
        counts[order, pos * buckets // n] += 1
    expected = epochs / buckets
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = n * (buckets - 1)
    assert abs(chi2 - dof) < 5 * np.sqrt(2 * dof), (chi2, dof)


def test_no_structure_between_neighbours() -> None:
    n = 1 << 20
    order = FeistelPermutation(n, 3, 0)(np.arange(n)).astype(np.float64)
    a, b = order[:-1], order[1:]
    corr = np.corrcoef(a, b)[0, 1]
    assert abs(corr) < 5 / np.sqrt(n)
    # successive differences look like those of independent uniforms: |a-b|/n has mean 1/3
    assert abs(np.mean(np.abs(a - b)) / n - 1 / 3) < 0.005
    # no index sits at its own position more often than chance (expected count 1)
    assert np.sum(order == np.arange(n)) < 10


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 300), w=st.integers(1, 12), seed=st.integers(-5, 5),
       epoch=st.integers(0, 3), drop_last=st.booleans(), shuffle=st.booleans())
def test_layout_padding_and_drop_match_distributed_sampler(n, w, seed, epoch, drop_last,
                                                           shuffle) -> None:
    ranks = []
    for r in range(w):
        p = PermutationSampler(n, w, r, shuffle=shuffle, seed=seed, drop_last=drop_last)
        t = DistributedSampler(n, w, r, shuffle=shuffle, seed=seed, drop_last=drop_last)
        p.set_epoch(epoch)
        assert (len(p), p.num_samples, p.total_size) == (len(t), t.num_samples, t.total_size)
        got = list(p)
        assert got == p.indices().tolist()
        if not shuffle:
            t.set_epoch(epoch)
            assert got == list(t)
        ranks.append(got)
    # reassemble the padded order: position j*w + r; it is perm(p % n) for every position
    total = len(ranks[0]) * w
    flat = [ranks[pos % w][pos // w] for pos in range(total)]
    if n:
        order = (FeistelPermutation(n, seed, epoch)(np.arange(n)).tolist() if shuffle
                 else list(range(n)))
        assert flat == [order[pos % n] for pos in range(total)]
        assert len(set(flat)) == min(n, total)


def test_resume_mid_epoch_and_finished_pass() -> None:
    s = PermutationSampler(300_000, 3, 2, seed=9)
    s.set_epoch(4)
    full = s.indices().tolist()
    it = iter(s)
    head = [next(it) for _ in range(70_000)]  # crosses a 64 Ki chunk (100_000 per rank)
    state = s.state_dict()
    fresh = PermutationSampler(300_000, 3, 2)
    fresh.load_state_dict(state)
    assert head + list(fresh) == full
    assert fresh.state_dict()["consumed"] == len(fresh)


def test_slices_and_bad_arguments() -> None:
    s = PermutationSampler(10**10, 8, 5, seed=1)
    assert s.indices(10, 20).tolist() == s.indices(0, 30)[10:20].tolist()
    with pytest.raises(ValueError, match="stop"):
        s.indices(5, 4)
    with pytest.raises(ValueError, match="length"):
        PermutationSampler((1 << 62) + 1, 1, 0)
    assert not isinstance(s, tud.DistributedSampler)  # not torch-identical: no drop-in claim


def test_large_n_stays_in_range_and_distinct() -> None:
    n = 10**10
    s = PermutationSampler(n, 8, 3, seed=2)
    x = s.indices(0, 200_000).numpy()
    assert x.min() >= 0 and x.max() < n and len(np.unique(x)) == len(x)
