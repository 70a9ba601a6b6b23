"""libtorch sampler semantics and bad input (no compiler needed; see also the golden test)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.samplers import DistributedRandomSampler, DistributedSequentialSampler
from distlab.samplers.libstdcxx import apply_swaps, shuffle_targets
from distlab.samplers.mt19937 import MT19937, seed_state, temper, twist


def test_mt19937_standard_check_value() -> None:
    # [rand.predef]: the 10000th consecutive invocation of a default-constructed mt19937
    assert int(MT19937().next_raw(10_000)[-1]) == 4123659995
    assert int(MT19937(engine="reference").next_raw(10_000)[-1]) == 4123659995


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**64 - 1), st.lists(st.integers(0, 1500), min_size=1, max_size=4))
def test_mt19937_engines_agree_across_chunked_reads(seed: int, chunks: list[int]) -> None:
    a, b = MT19937(seed), MT19937(seed, engine="reference")
    for c in chunks:
        assert np.array_equal(a.next_raw(c), b.next_raw(c))


def test_mt19937_seed_is_taken_mod_2_32_and_twist_shape() -> None:
    assert np.array_equal(seed_state(2**32 + 3), seed_state(3))
    state = twist(seed_state(1))
    assert state.dtype == np.uint32 and state.shape == (624,)
    assert temper(state).dtype == np.uint32


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 2**32 - 1))
def test_blocked_swaps_equal_the_plain_loop(n: int, seed: int) -> None:
    z = shuffle_targets(n, MT19937(seed))
    assert (z[1:] <= np.arange(1, n)).all() and (z >= 0).all()
    fast = np.arange(n, dtype=np.int64)
    apply_swaps(fast, z)
    slow = list(range(n))
    for i in range(1, n):
        j = int(z[i])
        slow[i], slow[j] = slow[j], slow[i]
    assert fast.tolist() == slow


def test_set_epoch_takes_effect_at_reset_only() -> None:
    s = DistributedRandomSampler(50, 2, 1)
    before = s.indices().tolist()
    s.set_epoch(3)
    assert s.indices().tolist() == before and s.epoch() == 3
    s.reset()
    assert s.indices().tolist() != before


def test_contiguous_blocks_and_duplicates_before_shuffle() -> None:
    s = DistributedSequentialSampler(10, 4, 3)
    assert s.next(100) == [9, 0, 1]  # block [9, 12) taken modulo 10
    assert s.next(1) is None
    assert [DistributedSequentialSampler(10, 4, r).indices().tolist() for r in range(4)] == \
        [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 0, 1]]
    everything = sorted(i for r in range(4)
                        for i in DistributedRandomSampler(10, 4, r).indices().tolist())
    assert everything == sorted(list(range(10)) + [0, 1])


def test_padding_longer_than_dataset_reads_past_the_end_like_libtorch() -> None:
    # size 2 on 5 ranks: slots 2, 3, 4 become 0, 1, 2 -- index 2 does not exist
    every = sorted(i for r in range(5) for i in DistributedRandomSampler(2, 5, r).indices())
    assert every == [0, 0, 1, 1, 2]


def test_iteration_and_len_do_not_move_next() -> None:
    s = DistributedRandomSampler(9, 2, 0)
    assert len(s) == 5 and list(s) == s.indices().tolist()
    assert s.index() == 0
    first = s.next(2)
    assert s.index() == 2 and first == list(s)[:2]
    assert s.state_dict() == {"sample_index_": 2, "epoch_": 0}


@pytest.mark.parametrize("cls", [DistributedRandomSampler, DistributedSequentialSampler])
@pytest.mark.parametrize("args, exc, words", [
    ((10, 0, 0), ValueError, ["num_replicas", ">= 1"]),
    ((10, 2, 2), ValueError, ["rank", "[0, 1]", "2"]),
    ((-1, 2, 0), ValueError, ["size", "-1"]),
    ((2**32, 2, 0), ValueError, ["size", "4294967295"]),
    ((10.0, 2, 0), TypeError, ["size", "float"]),
    ((10, 2, 0, "yes"), TypeError, ["allow_duplicates"]),
])
def test_bad_arguments(cls: type, args: tuple, exc: type, words: list[str]) -> None:
    with pytest.raises(exc) as info:
        cls(*args)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize("cls", [DistributedRandomSampler, DistributedSequentialSampler])
def test_bad_batch_size_epoch_and_state(cls: type) -> None:
    s = cls(10, 2, 0)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1, got 0"):
        s.next(0)
    with pytest.raises(TypeError, match="batch_size"):
        s.next(1.5)
    with pytest.raises(ValueError, match="epoch"):
        s.set_epoch(-1)
    with pytest.raises(ValueError, match="new_size"):
        s.reset(-3)
    with pytest.raises(ValueError, match="sample_index_"):
        s.load_state_dict({"sample_index_": 99, "epoch_": 0})
    with pytest.raises(ValueError, match="state"):
        s.load_state_dict({})
