"""distlab's libtorch samplers against the real C++ samplers compiled from the installed torch.

Compiles one extension (``tests/helpers/libtorch_compiled.py``; cached under the temp folder). On a
machine with a C++ compiler a failing build fails these tests; only a machine without one skips
them.
"""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distlab.samplers import DistributedRandomSampler, DistributedSequentialSampler, assign
from distlab.samplers.libstdcxx import shuffle
from distlab.samplers.mt19937 import MT19937

pytestmark = pytest.mark.compiler

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def _compiler() -> str | None:
    from torch.utils.cpp_extension import get_cxx_compiler

    try:
        return shutil.which(get_cxx_compiler())
    except Exception:  # noqa: BLE001 - no usable compiler configured
        return None


@pytest.fixture(scope="module")
def ref() -> Any:
    if _compiler() is None:
        pytest.skip("no C++ compiler on this machine; the golden-file test covers libtorch")
    from helpers.libtorch_compiled import load_reference

    return load_reference()  # a build failure here is an error, never a skip


def drain(sampler: Any, batch_size: int) -> list[list[int]]:
    out = []
    while (batch := sampler.next(batch_size)) is not None:
        out.append(batch)
    return out


sizes = st.one_of(st.integers(0, 10), st.integers(0, 300), st.integers(0, 3000),
                  st.sampled_from([65_534, 65_535, 65_536, 65_537]))
params = st.fixed_dictionaries({
    "size": sizes,
    "world": st.integers(1, 16),
    "rank_frac": st.floats(0, 1, exclude_max=True),
    "dup": st.booleans(),
    "epochs": st.lists(st.one_of(st.integers(0, 20), st.integers(0, 2**64 - 1)), min_size=1,
                       max_size=3),
    "batch_size": st.integers(1, 64),
})


@SETTINGS
@given(params)
def test_random_sampler_bit_identical(ref: Any, p: dict) -> None:
    rank = int(p["rank_frac"] * p["world"])
    args = (p["size"], p["world"], rank, p["dup"])
    expected = ref.random_epochs(*args, p["epochs"], p["batch_size"])
    s = DistributedRandomSampler(*args)
    for epoch, exp in zip(p["epochs"], expected, strict=True):
        s.set_epoch(epoch)
        s.reset()
        assert drain(s, p["batch_size"]) == exp
        assert s.indices().tolist() == [i for b in exp for i in b]
    assert drain(DistributedRandomSampler(*args), p["batch_size"]) == \
        ref.random_initial(*args, p["batch_size"])


@SETTINGS
@given(params, st.integers(0, 8), st.lists(st.integers(0, 200), min_size=1, max_size=3))
def test_random_resume_and_reset(ref: Any, p: dict, taken: int, new_sizes: list[int]) -> None:
    rank = int(p["rank_frac"] * p["world"])
    args = (min(p["size"], 500), p["world"], rank, p["dup"])
    epoch, bs = p["epochs"][0], p["batch_size"] % 7 + 1
    index, saved_epoch, rest = ref.random_resume(*args, epoch, taken, bs)
    s = DistributedRandomSampler(*args)
    s.set_epoch(epoch)
    s.reset()
    for _ in range(taken):
        s.next(bs)
    fresh = DistributedRandomSampler(*args)
    fresh.load_state_dict(s.state_dict())
    assert (fresh.index(), fresh.epoch()) == (index, saved_epoch)
    assert drain(fresh, bs) == rest

    s = DistributedRandomSampler(*args)
    s.set_epoch(epoch)
    got = []
    for n in new_sizes:
        s.reset(n)
        got.append(drain(s, bs))
    assert got == ref.random_resets(*args, epoch, new_sizes, bs)


@SETTINGS
@given(params, st.integers(0, 300))
def test_sequential_sampler_bit_identical(ref: Any, p: dict, new_size: int) -> None:
    rank = int(p["rank_frac"] * p["world"])
    args = (p["size"], p["world"], rank, p["dup"])
    s = DistributedSequentialSampler(*args)
    got = drain(s, p["batch_size"])
    s.reset(new_size)
    got += [[]] + drain(s, p["batch_size"])
    assert got == ref.sequential_batches(*args, p["batch_size"], new_size)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**64 - 1), st.integers(0, 3000))
def test_mt19937_matches_std(ref: Any, seed: int, count: int) -> None:
    expected = np.array(ref.mt19937_raw(seed, count), dtype=np.uint32)
    assert np.array_equal(MT19937(seed).next_raw(count), expected)
    assert np.array_equal(MT19937(seed, engine="reference").next_raw(count), expected)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.integers(0, 100), st.integers(60_000, 70_000), st.integers(0, 400_000)),
       st.integers(0, 2**32 - 1))
def test_std_shuffle_matches_libstdcxx(ref: Any, n: int, seed: int) -> None:
    values = np.arange(n, dtype=np.int64)
    shuffle(values, MT19937(seed))
    assert values.tolist() == ref.shuffle_iota(n, seed)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 200), st.integers(1, 9), st.booleans(), st.integers(0, 30))
def test_libtorch_assignment_is_the_compiled_sampler(ref: Any, n: int, world: int, dup: bool,
                                                     epoch: int) -> None:
    a = assign(n, world, layout="libtorch", shuffle=True, epoch=epoch, drop_last=not dup)
    for rank in range(world):
        (batches,) = ref.random_epochs(n, world, rank, dup, [epoch], 1_000_000)
        assert a.per_rank[rank].tolist() == [i for b in batches for i in b]
