"""Uneven inputs with ZeroDataParallel: under torch's Join, stages 0-2 end where torch DDP + Adam
under Join ends (bitwise on 2 ranks, 1e-6 on 3); without Join, an error instead of a hang."""

from __future__ import annotations

import pytest
from torch.distributed.algorithms.join import Joinable

from distlab import launch
from distlab.zero import ZeroDataParallel
from helpers.join_targets import uneven_without_join, zero_join_compare_many
from helpers.leaks import no_leaks

CASES = [(counts, {"stage": s, **extra}) for s in (0, 1, 2)
         for counts, extra in (([2, 5], {}), ([0, 3], {"divide_initial": False}),
                               ([2, 5], {"algorithm": None, "cap": 0.001}))]
THREE = [([2, 5, 3], {"stage": s}) for s in (0, 1, 2)] + [([3, 3, 3], {"stage": 1})]


@pytest.mark.parametrize("world, cases", [(2, CASES), (3, THREE)])
def test_join_ends_where_torch_ddp_with_adam_under_join_ends(world, cases):
    """Joined ranks add zeros, so each receives the others' reduced gradient and steps its
    shard (or copy) with it: the model every rank ends with is the one torch's DDP + Adam
    reaches under Join (built-in collectives or distlab's plans, any bucket size)."""
    with no_leaks():
        out = launch.run(zero_join_compare_many, world, args=(cases,), timeout=400)
    for i, (counts, cfg) in enumerate(cases):
        rows = [per_rank[i] for per_rank in out]
        for rank, r in enumerate(rows):
            if world == 2:
                assert r["vs_adam"]["equal"], (counts, cfg, rank, r["vs_adam"])
            else:
                assert r["vs_adam"]["max_diff"] <= 1e-6, (counts, cfg, rank, r["vs_adam"])
            assert r["shadowed"] == max(counts) - counts[rank]
            # torch's ZeroRedundancyOptimizer under Join steps a joined rank's shard with that
            # rank's own last gradient (its join hook calls step(); DDP's shadow allreduce drops
            # its result), so it leaves DDP + Adam as soon as inputs are uneven
            if len(set(counts)) > 1:
                assert r["torch_pair"]["max_diff"] > 1e-3, (counts, cfg)
            else:
                assert r["torch_pair"]["max_diff"] <= 1e-6, (counts, cfg)
        assert len({r["checksum"] for r in rows}) == 1


@pytest.mark.parametrize("which", ["zero1", "zero2-plan"])
def test_without_join_zero_errors_within_the_bounded_wait(which):
    with no_leaks():
        out = launch.run(uneven_without_join, 3, args=([2, 5, 5], which, 3.0), timeout=120)
    assert out[0]["where"] == "barrier" and out[0]["error"] is not None
    for r in out[1:]:
        assert r["error"] == "UnevenInputsError", r
        assert "reduce-scatter of bucket 0" in r["message"] and r["seconds"] < 30, r


def test_zero_data_parallel_is_joinable():
    assert issubclass(ZeroDataParallel, Joinable)
