"""ZeRO stages 0-2 accumulate gradients over microbatches as torch DDP's ``no_sync`` does: every
backward but a step's last under ``no_sync`` (autograd sums into the gradients, nothing is
reduced), then the last backward with sync on, or ``finish_gradient_sync`` after it, reduces the
sum once; Adam's parameters after two such steps equal DDP's (bitwise on two ranks, where a sum
of two has one order; within 1e-6 on three, where the reduce-scatter's order differs from gloo's
all-reduce)."""

from __future__ import annotations

import pytest

from distlab import launch
from helpers.leaks import no_leaks
from helpers.zero_accumulation_targets import ENDINGS, accumulation_rank

TOL = 1e-6


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_accumulated_microbatches_equal_torch_ddp_no_sync(world: int) -> None:
    with no_leaks():
        out = launch.run(accumulation_rank, world, timeout=240)
    expected = {f"stage {s} {e} {a}" for s in (0, 1, 2) for e in ENDINGS
                for a in ("plans", "builtin")}
    for r in out:
        assert set(r) == expected
        for name, d in r.items():
            if world == 2:
                assert d["equal"], (name, d)
            assert d["max_abs"] <= TOL, (name, d)
