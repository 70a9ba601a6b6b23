"""Uneven inputs with distlab's DDP: torch's Join makes it train exactly as torch DDP under Join
does, and without Join a rank left alone in a collective errors within the bounded wait instead of
hanging (tests/zero/test_zero_join.py does the same for ZeroDataParallel)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.algorithms.join import Joinable

from distlab import launch
from distlab.ddp import DDP
from distlab.uneven import (
    DEFAULT_TIMEOUT_S,
    UnevenInputsError,
    check_timeout,
    run_bounded,
    uneven_error,
)
from helpers.join_targets import (
    ddp_join_compare_many,
    ddp_join_timeline,
    join_throws,
    uneven_without_join,
)
from helpers.leaks import no_leaks

# (batches per rank, flags): every DDP path a joined rank shadows, ranks joining at any point
# (rank 0 with no batch at all joins before the buckets are rebuilt), no_sync, both divisors
TWO_RANKS = [
    ([2, 5], {}),
    ([0, 3], {}),
    ([4, 1], {"overlap": False}),
    ([2, 5], {"divide_initial": False}),
    ([2, 5], {"naive": True}),
    ([2, 5], {"view": True}),
    ([2, 5], {"hook": "allreduce"}),
    ([3, 1], {"hook": "fp16"}),
    ([2, 5], {"algorithm": "ring"}),
    ([2, 5], {"no_sync_at": 1}),
    ([1, 4], {"adam": True}),
    ([2, 5], {"cap": 25}),
    ([3, 3], {}),
]
THREE_RANKS = [
    ([2, 5, 3], {}),
    ([2, 5, 3], {"divide_initial": False}),
    ([0, 4, 1], {"view": True}),
    ([4, 4, 1], {"hook": "allreduce"}),
]


@pytest.mark.parametrize("world, cases", [(2, TWO_RANKS), (3, THREE_RANKS)])
def test_join_trains_bitwise_as_torch_ddp_under_join(world, cases):
    """Same weights, batches and flags: the parameters every rank ends with are torch's, bit
    for bit (gloo sums zeros from joined ranks; the order of the sums is torch's)."""
    with no_leaks():
        out = launch.run(ddp_join_compare_many, world, args=(cases,), timeout=300)
    for i, (counts, cfg) in enumerate(cases):
        rows = [per_rank[i] for per_rank in out]
        for rank, r in enumerate(rows):
            assert r["equal"], (counts, cfg, rank, r["max_diff"])
            assert r["shadowed"] == max(counts) - counts[rank], (counts, cfg, rank)
            assert (r["shadow_count"] > 0) == (r["shadowed"] > 0), (counts, cfg, rank)
        last = max(r for r, c in enumerate(counts) if c == max(counts))
        assert {r["last_joiner"] for r in rows} == {last}, (counts, cfg)
        assert len({r["checksum"] for r in rows}) == 1  # one model on every rank
    if world == 2:  # the divisor matters: dividing by the ranks still training changes the sum
        by = {(tuple(c), tuple(sorted(f.items()))): out[0][i]["checksum"]
              for i, (c, f) in enumerate(cases)}
        assert by[((2, 5), ())] != by[((2, 5), (("divide_initial", False),))]


def test_shadow_collectives_are_on_the_joined_ranks_timeline():
    with no_leaks():
        short, long = launch.run(ddp_join_timeline, 2, args=([1, 3],), timeout=120)
    assert short["categories"].get("rank0/allreduce:shadow") == 2 * short["buckets"]
    assert short["categories"].get("rank0/backward:shadow") == 2
    assert not any(k.endswith(":shadow") for k in long["categories"])


@pytest.mark.parametrize("which", ["ddp", "zero"])
def test_throw_on_early_termination_raises_on_every_rank(which):
    with no_leaks():
        msgs = launch.run(join_throws, 2, args=([2, 5], which), timeout=120)
    assert msgs[0] == "Rank 0 exhausted all inputs."
    assert "exhausted inputs" in msgs[1] and "Throwing across all ranks" in msgs[1]


@pytest.mark.parametrize("world, counts", [(2, [2, 5]), (3, [2, 5, 5]), (3, [5, 2, 2])])
def test_without_join_every_rank_errors_within_the_bounded_wait(world, counts):
    """Short ranks wait in a barrier after their loop, long ranks in a bucket's allreduce: the
    long ranks raise UnevenInputsError after the bounded wait, naming the bucket, the cause and
    Join; once they end, the short ranks' barrier fails too. Nobody waits for the 120 s launch
    timeout. The bound is 10 s, not less: it must outlast any starvation of a rank during the
    steps all ranks take together (on CI's full cores a short rank's own allreduce once waited
    more than 3 s for a starved peer and failed in its loop instead of its barrier)."""
    with no_leaks():
        out = launch.run(uneven_without_join, world, args=(counts, "ddp", 10.0), timeout=120)
    for rank, r in enumerate(out):
        assert r["error"] is not None, r
        assert r["seconds"] < 100, r        # ended by the bounded wait, not the launch timeout
        if counts[rank] == max(counts):
            assert r["error"] == "UnevenInputsError" and r["where"] == "loop", r
            assert "allreduce of bucket 0" in r["message"] and "within 10 s" in r["message"]
            assert "uneven inputs" in r["message"] and "Join([model])" in r["message"]
        else:
            assert r["where"] == "barrier", r


def test_ddp_is_joinable_with_a_bounded_default():
    assert issubclass(DDP, Joinable)
    assert DEFAULT_TIMEOUT_S == 30.0
    assert check_timeout(None) is None and check_timeout(2) == 2.0
    for bad in (0, -1.0, "30", True, float("nan")):
        with pytest.raises((TypeError, ValueError), match="timeout"):
            check_timeout(bad)


def test_uneven_error_names_what_waited_the_cause_and_the_fix():
    err = uneven_error(3, "allreduce of bucket 2 (4 parameters, 1,024 bytes)", 30.0,
                       RuntimeError("Timed out waiting 30000ms for recv operation\nmore"))
    assert isinstance(err, UnevenInputsError) and err.rank == 3 and err.timeout_s == 30.0
    text = str(err)
    assert text.startswith("rank 3: the allreduce of bucket 2 (4 parameters, 1,024 bytes) did "
                           "not complete within 30 s: RuntimeError: Timed out waiting")
    assert "more" not in text  # one line of the backend's message
    assert "Join([model])" in text and "timeout=" in text
    assert "(process-group timeout)" in str(uneven_error(0, "x", None, RuntimeError("")))


def test_bad_timeout_is_refused_before_any_collective():
    with pytest.raises(ValueError, match="timeout"):
        DDP(torch.nn.Linear(2, 2), timeout=0)


def test_run_bounded_passes_results_and_turns_backend_errors_into_uneven_errors():
    assert run_bounded(0, "x", 30.0, lambda a, b: a + b, 2, 3) == 5

    def timed_out() -> None:
        raise RuntimeError("Timed out waiting 30000ms for recv operation to complete")

    with pytest.raises(UnevenInputsError, match="rank 2: the all-gather of bucket 1") as info:
        run_bounded(2, "all-gather of bucket 1", 30.0, timed_out)
    assert isinstance(info.value.__cause__, RuntimeError)
    already = UnevenInputsError(1, "y", 5.0, "z")

    def inner() -> None:
        raise already

    with pytest.raises(UnevenInputsError) as info2:
        run_bounded(0, "outer", 30.0, inner)
    assert info2.value is already  # not wrapped twice
    with pytest.raises(ValueError):  # not a backend failure: left alone
        run_bounded(0, "x", 30.0, lambda: int("nope"))
