"""The pure ZeRO models: bytes per rank by stage (the paper's numbers, DeepSpeed's formulas) and
communication per step read off the collective plans."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives.model.presets import get_preset, preset_names
from distlab.zero import (
    comm_seconds,
    comm_volume,
    deepspeed_estimate,
    largest_model_that_fits,
    zero_comm_calls,
    zero_memory,
)
from distlab.zero.partition import plan_buckets

GB = 10**9


def test_the_papers_figure_1_numbers():
    """ZeRO paper fig. 1: 7.5B parameters, 64 GPUs, mixed precision: 120 GB for DDP, 31.4 GB
    (stage 1), 16.6 GB (stage 2), 1.9 GB (stage 3)."""
    got = [zero_memory(7_500_000_000, 64, s).total / GB for s in range(4)]
    assert got == pytest.approx([120.0, 31.40625, 16.640625, 1.875], rel=1e-6)


def test_fp32_bytes_per_parameter():
    m = zero_memory(1000, 1, 0, "fp32")
    assert (m.params, m.grads, m.optimizer) == (4000, 4000, 8000)
    m = zero_memory(1000, 4, 2, "fp32")
    assert (m.params, m.grads, m.optimizer) == (4000, 1000, 2000)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**12), st.integers(1, 4096), st.sampled_from(["fp32", "mixed"]))
def test_stages_never_hold_more_and_one_rank_holds_everything(p, n, prec):
    totals = [zero_memory(p, n, s, prec).total for s in range(4)]
    assert totals == sorted(totals, reverse=True)
    assert totals[0] == 16 * p  # 4+4+8 or 2+2+12: the paper's 16 bytes per parameter
    one = [zero_memory(p, 1, s, prec).total for s in range(4)]
    assert one == [16 * p] * 4
    # sharded states are ceil(P/N) elements: never below the even share, at most N-1 over
    assert 16 * p / n <= totals[3] <= 16 * (p / n + 1)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 64), st.integers(0, 3),
       st.sampled_from(["fp32", "mixed"]))
def test_largest_model_that_fits_is_tight(mem_kib, n, stage, prec):
    mem = mem_kib * 1024
    p = largest_model_that_fits(mem, n, stage, prec)
    assert zero_memory(p, n, stage, prec).total <= mem
    assert zero_memory(p + n, n, stage, prec).total > mem or p == 0


def test_deepspeed_estimators_beside_the_model():
    p, n = 10**9, 8
    model2 = zero_memory(p, n, 2).total
    assert deepspeed_estimate(p, n, 2) == 2 * p + 18 * p // n == model2 + 4 * p // n
    assert deepspeed_estimate(p, n, 2, release="2021") == 4 * p + 16 * p // n
    assert deepspeed_estimate(p, n, 3, largest_layer=10**7) == 4 * 10**7 + 18 * p // n


@pytest.mark.parametrize("bad,err,name", [
    ({"params": -1, "world_size": 2, "stage": 1}, ValueError, "params"),
    ({"params": 10, "world_size": 0, "stage": 1}, ValueError, "world_size"),
    ({"params": 10, "world_size": 2, "stage": 4}, ValueError,
     r"stage must be an int in \[0, 3\], got 4"),
    ({"params": 10, "world_size": 2, "stage": 1.0}, TypeError, "stage"),
    ({"params": 10, "world_size": 2, "stage": 1, "precision": "fp8"}, ValueError,
     "precision.*'fp8'"),
])
def test_bad_arguments_are_named(bad, err, name):
    with pytest.raises(err, match=name):
        zero_memory(**bad)


def test_bad_deepspeed_stage():
    with pytest.raises(ValueError, match="stage"):
        deepspeed_estimate(10, 2, 1)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10**7), st.integers(2, 16), st.sampled_from(["fp32", "mixed"]))
def test_comm_volume_ring_closed_forms(p, n, prec):
    """Ring plans: all-reduce sends 2(N-1)/N of the buffer, reduce-scatter and all-gather
    (N-1)/N each: stages 1 and 2 move what DDP moves (up to padding), stage 3 1.5 times."""
    item = 4 if prec == "fp32" else 2
    padded = n * -(-p // n)
    ddp, s1, s2, s3 = (comm_volume(p, n, s, prec) for s in range(4))
    assert s1 == s2 == 2 * (n - 1) * (padded // n) * item
    assert abs(ddp - s1) <= 2 * (n - 1) * item * 2  # the all-reduce's chunks are unpadded
    assert s3 == 3 * (n - 1) * (padded // n) * item


def test_comm_calls_per_stage_and_one_rank_sends_nothing():
    names = [[c.collective for c in zero_comm_calls(1000, 4, s)] for s in range(4)]
    assert names == [["all_reduce"], ["reduce_scatter", "all_gather"],
                     ["reduce_scatter", "all_gather"], ["all_gather", "all_gather",
                                                        "reduce_scatter"]]
    assert all(comm_volume(1000, 1, s) == 0 for s in range(4))


@pytest.mark.parametrize("name", preset_names())
def test_costed_on_every_preset(name):
    pr = get_preset(name)
    secs = [comm_seconds(10**8, 8, s, pr) for s in range(4)]
    assert all(x > 0 for x in secs)
    assert secs[1] == secs[2] and secs[3] > secs[1]
    # bandwidth-bound at 100M parameters: stage 3 costs about 1.5x stage 1
    # (reductions, priced by gamma, happen in the reduce-scatter only: a little under 1.5)
    assert 1.3 < secs[3] / secs[1] <= 1.5 + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=30), st.integers(1, 20000),
       st.integers(1, 8))
def test_buckets_cover_every_parameter_once_with_equal_shards(numels, cap, n):
    bs = plan_buckets(numels, 4, cap, n)
    seen = [i for b in bs for i in b.indices]
    assert sorted(seen) == list(range(len(numels)))
    assert seen == sorted(seen, reverse=True)  # backward order
    for b in bs:
        assert b.numel == sum(numels[i] for i in b.indices)
        assert b.padded % n == 0 and b.numel <= b.padded < b.numel + n
        assert b.numel * 4 <= cap or len(b.indices) == 1
        assert [b.shard_range(r) for r in range(n)] == [(r * b.shard, (r + 1) * b.shard)
                                                          for r in range(n)]


def test_byte_unit_fits_the_values() -> None:
    from distlab.zero.memory_model import byte_unit

    assert byte_unit([1.1 * 2**20, 4.2 * 2**20]) == ("MiB", 2**20)    # the measured MLP
    assert byte_unit([0.11 * 2**30, 112 * 2**30]) == ("GiB", 2**30)   # 7.5 B params, N 1..1024
    assert byte_unit([100 * 2**10]) == ("KiB", 2**10)
    assert byte_unit([500]) == ("B", 1) and byte_unit([0, -1]) == ("B", 1)
    assert byte_unit([3 * 2**40]) == ("TiB", 2**40)
