"""distlab.ddp against a real torch DDP on gloo, 2 ranks: buckets and trained parameters."""

from __future__ import annotations

import pytest

from distlab import launch
from distlab.ddp.torch_checks import no_sync_rank, torch_buckets_rank
from helpers.ddp_targets import train_compare_worker
from helpers.leaks import no_leaks


@pytest.mark.parametrize("cap", [None, 0.25, 1.0])
def test_buckets_match_torch_ddp(cap):
    with no_leaks():
        out = launch.run(torch_buckets_rank, 2, args=(5, 256, cap), timeout=180)
    for r in out:
        torch_seen, ours = r["torch"], r["ours"]
        assert len(torch_seen) == 3
        assert len(torch_seen[0]) == 1  # iteration 0: one bucket, named_parameters() order
        assert ours == torch_seen  # every iteration, including the rebuild
        assert r["predicted"] == torch_seen[1] == torch_seen[2]
    # 257 KiB per layer: 0.25 MiB closes a bucket per layer; None (1 MiB first bucket, then
    # 25 MiB) and 1 MiB close the first bucket after four layers, in ready order (bias first).
    sizes = {None: [8, 2], 0.25: [2] * 5, 1.0: [8, 2]}[cap]
    assert [len(b) for b in out[0]["torch"][1]] == sizes
    assert out[0]["torch"][1][0][:2] == ["8.bias", "8.weight"]


@pytest.mark.parametrize("overlap,naive,algorithm", [
    (True, False, "builtin"), (False, False, "builtin"), (True, True, "builtin"),
    (True, False, "ring")])
def test_training_identical_to_torch_ddp(overlap, naive, algorithm):
    """Ranks start from different weights; step 2 accumulates under no_sync. Parameters must be
    bitwise equal to torch DDP's (world size 2: the 1/2 pre-scaling is exact)."""
    with no_leaks():
        out = launch.run(train_compare_worker, 2,
                         args=(3, 64, 0.01, overlap, naive, algorithm), timeout=180)
    for r in out:
        assert r["equal"], r["max_diff"]
        per_step = [b - a for a, b in zip([0] + r["counts"], r["counts"], strict=False)]
        assert per_step[2] == 0  # the no_sync step communicates nothing
        assert min(per_step[:2] + per_step[3:]) >= 1


def test_no_sync_accumulation_communicates_once():
    with no_leaks():
        out = launch.run(no_sync_rank, 2, args=(2, 32, 3), timeout=120)
    for r in out:
        assert r["allreduces_during_no_sync"] == 0
        assert r["allreduces_total"] == r["reference_allreduces"] == 1
        assert r["same_grads"]
