"""Elastic resume: a state saved at world W continues the same epoch at world W' != W."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from distlab.samplers import DistributedEvalSampler, DistributedSampler, PermutationSampler

IMPLS = {"torch": DistributedSampler, "permutation": PermutationSampler}


def _run_elastic(cls, n, w_old, w_new, frac, seed, epoch, drop_last):
    """Old world reads k indices per rank in lockstep; rank 0's state resumes the new world."""
    old = [cls(n, w_old, r, seed=seed, drop_last=drop_last) for r in range(w_old)]
    for s in old:
        s.set_epoch(epoch)
    k = round(frac * len(old[0]))
    its = [iter(s) for s in old]
    read_old = [[next(it) for _ in range(k)] for it in its]
    state = old[0].state_dict()
    assert state["consumed"] == k
    new = [cls(n, w_new, r, seed=seed, drop_last=drop_last) for r in range(w_new)]
    for s in new:
        s.load_state_dict(state)
    read_new = [list(s) for s in new]
    assert all(len(x) == len(new[0]) for x in read_new)  # lockstep again: equal counts
    return read_old, read_new, new, k


@pytest.mark.parametrize("impl", sorted(IMPLS))
@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 200), w_old=st.integers(1, 9), w_new=st.integers(1, 9),
       frac=st.floats(0, 1), seed=st.integers(0, 5), epoch=st.integers(0, 3),
       drop_last=st.booleans())
def test_every_index_once_over_the_epoch(impl, n, w_old, w_new, frac, seed, epoch, drop_last):
    assume(w_old != w_new)
    cls = IMPLS[impl]
    read_old, read_new, new, k = _run_elastic(cls, n, w_old, w_new, frac, seed, epoch, drop_last)
    old_flat = [i for r in read_old for i in r]
    new_flat = [i for r in read_new for i in r]
    # the old world's positions [0, k W) in the padded order: indices beyond N repeat the start
    old_total = cls(n, w_old, 0, drop_last=drop_last).total_size
    finished = k == (old_total // w_old if w_old else 0)
    done = n if finished else min(k * w_old, n)
    m = n - done
    assert sum(map(len, read_new)) == len(new[0]) * w_new
    seen_old = set(old_flat)
    assert len(seen_old) == min(len(old_flat), n)  # old reads repeat only through padding
    assert not seen_old & set(new_flat)  # nothing read twice across the resize
    c = Counter(new_flat)
    if drop_last:
        assert all(v == 1 for v in c.values()) and len(c) == (m // w_new) * w_new
    else:
        # new padding repeats at most ceil(m / W') * W' - m positions from the remainder's start
        assert len(c) == m
        assert sum(v - 1 for v in c.values()) == len(new_flat) - m
        if not finished:
            assert seen_old | set(c) == set(range(n))  # nothing skipped
    # the reference order: the remainder is the epoch's order after position `done`
    ref = cls(n, 1, 0, seed=seed)
    ref.set_epoch(epoch)
    order = ref.indices().tolist()
    interleaved = [read_new[q % w_new][q // w_new] for q in range(len(new_flat))]
    if m:
        assert interleaved == [order[done + q % m] for q in range(len(new_flat))]


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_chained_resize_and_next_epoch_is_normal(impl):
    cls = IMPLS[impl]
    n, seed = 1000, 3
    a = [cls(n, 8, r, seed=seed) for r in range(8)]
    its = [iter(s) for s in a]
    got = [next(it) for _ in range(40) for it in its]
    b = [cls(n, 6, r, seed=seed) for r in range(6)]
    for s in b:
        s.load_state_dict(a[0].state_dict())
    its = [iter(s) for s in b]
    got += [next(it) for _ in range(50) for it in its]
    state = b[3].state_dict()
    assert state["base"] == 320 and state["consumed"] == 50
    c = [cls(n, 4, r, seed=seed) for r in range(4)]
    for s in c:
        s.load_state_dict(state)
    got += [i for s in c for i in s]
    assert sorted(got) == list(range(n))  # 1000 - 320 - 300 = 380 = 4 * 95: no padding
    for s in c:
        s.set_epoch(1)
    ref = [cls(n, 4, r, seed=seed) for r in range(4)]
    for s in ref:
        s.set_epoch(1)
    assert [list(s) for s in c] == [list(s) for s in ref]


def test_eval_sampler_elastic_exact():
    n = 101
    a = [DistributedEvalSampler(n, 5, r, shuffle=True) for r in range(5)]
    its = [iter(s) for s in a]
    got = [next(it) for _ in range(7) for it in its]
    b = [DistributedEvalSampler(n, 3, r, shuffle=True) for r in range(3)]
    for s in b:
        s.load_state_dict(a[0].state_dict())
    got += [i for s in b for i in s]
    assert sorted(got) == list(range(n))
