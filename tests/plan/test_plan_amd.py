"""The planner on AMD GPUs: collectives priced by RCCL's model through the one interface, the
layouts it cannot price named, and the compute rate stated as assumed."""

from __future__ import annotations

import math

import pytest

from distlab.collective_library import NotPriced
from distlab.plan.__main__ import main
from distlab.plan.collectives import collective_seconds, p2p_seconds
from distlab.plan.layout import GroupSpan, hardware
from distlab.plan.planner import plan
from distlab.rccl.execution import rccl_allreduce_times
from distlab.rccl.library import RCCL
from distlab.transformer import model_spec

REL = 1e-12
"""The planner's seconds against RCCL's own: the same arithmetic."""


@pytest.mark.parametrize(("gpu", "box", "arch"), [("mi300x", "mi300x_8", "gfx942"),
                                                  ("mi325x", "mi325x_8", "gfx942"),
                                                  ("mi355x", "mi355x_8", "gfx950")])
def test_collectives_are_rccls(gpu: str, box: str, arch: str) -> None:
    """An allreduce over whole nodes is RCCL's time; an all-gather or reduce-scatter, which
    RCCL's model does not hold, half of it; a group of part of a node is not priced."""
    hw = hardware(gpu, 32)
    assert hw.network is not None and hw.gpu.library == "rccl"
    nbytes = 1 << 26
    for span in (GroupSpan(8, 8, 1), GroupSpan(32, 8, 4)):
        own, _ = rccl_allreduce_times(span.nodes, [nbytes], arch=arch)
        assert own[0].seconds is not None
        whole = collective_seconds("all_reduce", nbytes, span, hw)
        assert math.isclose(whole, own[0].seconds, rel_tol=REL)
        half = collective_seconds("all_gather", nbytes, span, hw)
        assert math.isclose(half, own[0].seconds / 2, rel_tol=REL)
    with pytest.raises(NotPriced, match="a group of 4 GPUs on 1 node"):
        collective_seconds("all_reduce", nbytes, GroupSpan(4, 4, 1), hw)
    link = RCCL.link_gbps(box) * 1e9
    assert math.isclose(p2p_seconds(nbytes, cross_node=False, hw=hw) - 10e-6, nbytes / link,
                        rel_tol=1e-9)


def test_the_planner_ranks_mi300x_layouts_and_counts_what_it_cannot_price() -> None:
    model = model_spec("llama3-70b")
    result = plan(model, hardware("mi300x", 64), 64, top=3)
    assert result.ranked and all(p.fits for p in result.ranked)
    assert result.not_priced
    assert all("whole 8-GPU nodes only" in why and n > 0 for why, n in result.not_priced)
    assert sum(n for _, n in result.not_priced) < result.tried


def test_nvidia_plans_leave_nothing_unpriced() -> None:
    result = plan(model_spec("llama3-8b"), hardware("h100", 8), 16, top=1)
    assert result.not_priced == ()


def test_the_command_says_rccl_prices_it_and_the_rate_is_assumed(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-70b", "--gpu", "mi300x", "--gpus", "64", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "on 64x MI300X (8 nodes over cx7)" in out
    assert "# collectives priced by RCCL's model (distlab.rccl, release 2.26.6)" in out
    assert "# compute rate ASSUMED: 0.60 of MI300X's data-sheet peak (1307 TFLOP/s" in out
    assert "# not priced: " in out and "whole 8-GPU nodes only" in out
    assert main(["llama3-8b", "--gpus", "8", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "ASSUMED" not in out and "RCCL" not in out and "not priced" not in out
