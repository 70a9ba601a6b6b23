"""model.compare: predicted times of every plan over sizes and world sizes, winners and
crossovers."""

from __future__ import annotations

import pytest

from distlab.collectives import build_plan, cost, get_preset
from distlab.collectives.model.compare import collective_times, crossovers, scale_times, winners
from distlab.collectives.plan.semantics import count_for_bytes


def test_collective_times_price_every_plan_at_the_calls_count() -> None:
    preset = get_preset("pcie4_x16")
    sizes = [1 << 10, 1 << 20]
    times = collective_times(preset, "all_gather", 4, sizes, itemsize=4)
    assert list(times) == ["ring", "recursive_doubling", "bruck"]
    n = count_for_bytes("all_gather", 1 << 20, 4, 4)
    assert times["bruck"][1] == pytest.approx(cost(build_plan("all_gather", "bruck", 4, n),
                                                   preset.alpha, preset.beta, preset.gamma, 4,
                                                   duplex=preset.duplex))
    rooted = collective_times(preset, "reduce", 3, sizes, algorithms=["binomial"], root=5)
    assert rooted["binomial"][0] == pytest.approx(cost(
        build_plan("reduce", "binomial", 3, 256, root=2), preset.alpha, preset.beta,
        preset.gamma, 4, duplex=preset.duplex))
    assert winners(times)[0] in times and isinstance(crossovers(sizes, times), list)


def test_scale_times_rank_the_trees_and_the_ring() -> None:
    times = scale_times(get_preset("nvlink4_h100"), 1 << 26, [2, 64])
    assert times["double_binary_tree, pipelined"][1] < times["ring"][1] \
        < times["double_binary_tree"][1] < times["tree"][1]
    assert times["ring"][0] == pytest.approx(times["double_binary_tree"][0])  # 2 ranks: alike
