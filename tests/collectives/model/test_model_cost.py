"""cost(): derived from the schedule; equals the closed forms where they are exact."""

from __future__ import annotations

import math

import pytest

from distlab.collectives import PRESETS, build, cost, step_costs
from distlab.collectives.model.presets import get_preset

A, B, C = 7e-6, 3e-10, 5e-11  # alpha s, beta s/B, gamma s/B
ITEM = 4


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32])
def test_power_of_two_closed_forms(p: int) -> None:
    n_elems = 1024 * p
    n = n_elems * ITEM  # bytes
    lgp = int(math.log2(p))
    ring = 2 * (p - 1) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * C
    rd = lgp * (A + n * B + n * C)
    rab = 2 * lgp * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * C
    tree = lgp * (2 * A + 2 * n * B + n * C)
    assert cost(build("ring", p, n_elems), A, B, C, ITEM) == pytest.approx(ring, rel=1e-12)
    assert cost(build("recursive_doubling", p, n_elems), A, B, C, ITEM) == \
        pytest.approx(rd, rel=1e-12)
    assert cost(build("rabenseifner", p, n_elems), A, B, C, ITEM) == pytest.approx(rab, rel=1e-12)
    assert cost(build("tree", p, n_elems), A, B, C, ITEM) == pytest.approx(tree, rel=1e-12)


@pytest.mark.parametrize("p", [3, 5, 6, 7])
def test_ring_closed_form_for_any_p(p: int) -> None:
    n_elems = 60 * p
    n = n_elems * ITEM
    ring = 2 * (p - 1) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * C
    assert cost(build("ring", p, n_elems), A, B, C, ITEM) == pytest.approx(ring, rel=1e-12)


@pytest.mark.parametrize("p", [3, 6])
def test_folding_adds_two_full_vector_steps(p: int) -> None:
    n_elems = 96
    n = n_elems * ITEM
    pof2 = 1 << (p.bit_length() - 1)
    rd = (A + n * B + n * C) + math.log2(pof2) * (A + n * B + n * C) + (A + n * B)
    assert cost(build("recursive_doubling", p, n_elems), A, B, C, ITEM) == pytest.approx(rd)


def test_naive_rank0_bottleneck_with_overlapped_reduction() -> None:
    p, n_elems = 4, 1000
    n = n_elems * ITEM
    # rank 0 receives p-1 messages; all but the last reduction hide behind arriving data
    step1 = (p - 1) * A + max((p - 1) * n * B, (p - 2) * n * C) + n * C
    step2 = (p - 1) * A + (p - 1) * n * B
    assert cost(build("naive", p, n_elems), A, B, C, ITEM) == pytest.approx(step1 + step2)
    slow_reduce = 1e-8  # reduction slower than the link: it is the bottleneck
    step1 = (p - 1) * A + (p - 2) * n * slow_reduce + n * slow_reduce
    assert cost(build("naive", p, n_elems), A, B, slow_reduce, ITEM) == pytest.approx(step1 + step2)


def test_half_duplex_counts_both_directions() -> None:
    p, n_elems = 4, 4000
    n = n_elems * ITEM
    half = 2 * (p - 1) * A + 2 * (p - 1) / p * n * 2 * B + (p - 1) / p * n * C
    assert cost(build("ring", p, n_elems), A, B, C, ITEM, duplex="half") == pytest.approx(half)


def test_step_costs_add_up_and_name_the_terms() -> None:
    s = build("rabenseifner", 8, 800)
    steps = step_costs(s, A, B, C, ITEM)
    assert len(steps) == len(s.steps)
    assert sum(c.seconds for c in steps) == pytest.approx(cost(s, A, B, C, ITEM))
    for c in steps:
        assert c.seconds == pytest.approx(c.latency_s + c.bandwidth_s + c.compute_s)
    assert steps[0].nbytes == 400 * ITEM and steps[0].reduced_bytes == 400 * ITEM
    assert steps[-1].reduced_bytes == 0


def test_empty_schedule_costs_nothing() -> None:
    assert cost(build("ring", 1, 100), A, B, C, ITEM) == 0.0
    assert cost(build("tree", 8, 0), A, B, C, ITEM) == 0.0


def test_bad_parameters() -> None:
    s = build("ring", 2, 10)
    with pytest.raises(ValueError, match=r"alpha \(seconds per message\) must be a finite number "
                                         r">= 0, got -1.0"):
        cost(s, -1.0, B, C, ITEM)
    with pytest.raises(TypeError, match=r"beta \(seconds per byte\) must be a finite number"):
        cost(s, A, "fast", C, ITEM)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="itemsize"):
        cost(s, A, B, C, 0)
    with pytest.raises(ValueError, match="duplex must be one of"):
        cost(s, A, B, C, ITEM, duplex="both")


def test_presets_name_their_sources() -> None:
    for key, preset in PRESETS.items():
        assert preset.source and preset.alpha > 0 and preset.beta > 0 and preset.gamma > 0
        assert get_preset(key) is preset
    assert PRESETS["nvlink4_h100"].bandwidth_gbps == pytest.approx(450)
    with pytest.raises(ValueError, match="preset must be one of"):
        get_preset("infiniband_xdr")


def test_shared_medium_counts_every_rank_in_the_step() -> None:
    p, n_elems = 4, 4000
    n = n_elems * ITEM
    # ring: every step p messages of n/p: 2n bytes (sent + received) on the shared medium
    ring = 2 * (p - 1) * (p * A + 2 * n * B) + (p - 1) / p * n * C
    assert cost(build("ring", p, n_elems), A, B, C, ITEM, duplex="shared") == pytest.approx(ring)
    # tree: rounds of 2, 1, 1, 2 messages; the two reduce rounds add n*C each
    tree = 2 * (2 * A + 4 * n * B) + 2 * (A + 2 * n * B) + 2 * n * C
    assert cost(build("tree", p, n_elems), A, B, C, ITEM, duplex="shared") == pytest.approx(tree)
