"""Stage 3's pure parts: the peak-bytes model (shards + units in flight), the per-unit
communication read off the plans, the simulated step behind the prefetch crossover, the unit
layout, and which parameters each unit owns."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives.model.presets import get_preset, preset_names
from distlab.zero.comm_volume import comm_volume, unit_comm_calls
from distlab.zero.memory_model import largest_model_that_fits, stage3_memory, zero_memory
from distlab.zero.partition import plan_unit
from distlab.zero.prefetch_model import UnitTimes, crossover, simulate_step, unit_times
from distlab.zero.stage3 import find_units


def test_stage3_memory_by_hand():
    # units of 10, 7, 3 parameters on 4 ranks: padded 12, 8, 4; shards 3 + 2 + 1 = 6 elements
    m = stage3_memory([10, 7, 3], 4, "fp32", prefetch=1)
    assert (m.states.params, m.states.grads, m.states.optimizer) == (24, 24, 48)
    assert m.forward == 4 * (12 + 8)                     # units 0 and 1 gathered
    # backward, reverse order 4, 8, 12: at unit 1 (8): params 8 + 12, grads 8 + 4
    assert m.backward == 4 * (8 + 12) + 4 * (8 + 4)
    assert m.total == 96 + m.backward
    off = stage3_memory([10, 7, 3], 4, "mixed", prefetch=0)
    # prefetch 0: the largest is unit 0 (12): its params and grads, and unit 1's grads (8)
    # and its bf16 reduce-scatter output (a shard: 8 / 4); the shards are fp32 as in FSDP2
    assert off.forward == 2 * 12 and off.backward == 2 * 12 + 2 * (12 + 8) + 2 * 8 // 4
    assert (off.states.params, off.states.grads, off.states.optimizer) == (24, 24, 48)
    # prefetch 1: the unit issued ahead adds its bf16 all-gather input (a shard)
    on = stage3_memory([10, 7, 3], 4, "mixed", prefetch=1)
    assert on.forward == 2 * (12 + 8) + 2 * 8 // 4


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=8), st.integers(1, 16),
       st.sampled_from(["fp32", "mixed"]))
@settings(max_examples=150, deadline=None)
def test_stage3_memory_properties(units, world, precision):
    ms = [stage3_memory(units, world, precision, prefetch=p) for p in range(4)]
    assert all(a.in_flight <= b.in_flight for a, b in zip(ms, ms[1:], strict=False))
    # the shards are the paper's stage 3 plus at most N - 1 padding elements per unit
    paper = zero_memory(sum(units), world, 3, precision)
    assert paper.total <= ms[0].states.total + 16 * world
    assert ms[0].states.total <= paper.total + 16 * len(units)
    # everything gathered at once never exceeds the model's whole buffers
    p_b = 4 if precision == "fp32" else 2
    whole = p_b * sum(world * -(-n // world) for n in units)
    # (mixed: plus the bf16 all-gather inputs, a shard of each)
    assert ms[-1].forward <= whole + (whole // world if precision == "mixed" else 0)


def test_largest_model_with_units_in_flight():
    gib = 2**30
    shards_only = largest_model_that_fits(80 * gib, 8, 3)
    with_units = largest_model_that_fits(80 * gib, 8, 3, units=32, prefetch=1)
    assert with_units < shards_only
    cut = [with_units // 32 + (1 if i < with_units % 32 else 0) for i in range(32)]
    assert stage3_memory(cut, 8, "mixed", 1).total <= 80 * gib
    more = with_units + 32
    cut = [more // 32 + (1 if i < more % 32 else 0) for i in range(32)]
    assert stage3_memory(cut, 8, "mixed", 1).total > 80 * gib
    with pytest.raises(ValueError, match="stage 3"):
        largest_model_that_fits(80 * gib, 8, 2, units=4)


def test_unit_comm_is_three_halves_of_ddp():
    units = [1000, 2000, 3000]          # each a multiple of 4
    calls = unit_comm_calls(units, 4, "fp32")
    assert [c.collective for c in calls] == ["all_gather"] * 4 + [
        "reduce_scatter", "all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    assert calls[0].what == "all-gather unit 0 (forward)"
    assert calls[-1].what == "reduce-scatter unit 0"
    total = sum(c.bytes_sent for c in calls)
    assert total == comm_volume(6000, 4, 3, "fp32")
    assert 2 * total == 3 * comm_volume(6000, 4, 0, "fp32")


def test_plan_unit_layout():
    b = plan_unit([5, 0, 3], 3)
    assert b.offsets == (0, 5, 5) and b.numel == 8 and b.padded == 9 and b.shard == 3
    with pytest.raises(ValueError):
        plan_unit([-1], 2)


unit_st = st.builds(UnitTimes, *[st.floats(0, 1) for _ in range(4)])


@given(st.lists(unit_st, min_size=1, max_size=6), st.floats(0, 1))
@settings(max_examples=200, deadline=None)
def test_simulated_step_accounts_for_every_second(units, adam):
    runs = [simulate_step(units, p, adam) for p in range(3)]
    comm = sum(2 * u.all_gather + u.reduce_scatter for u in units)
    work = sum(u.forward + u.backward for u in units) + adam
    for m in runs:
        assert m.comm_s == pytest.approx(comm)
        assert m.compute_s == pytest.approx(work)
        assert m.step_s == pytest.approx(m.compute_s + m.exposed_s)
        assert m.step_s >= max(work, comm) - 1e-9
        comm_spans = sorted((s for s in m.spans if s.lane == "comm"), key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(comm_spans, comm_spans[1:],
                                                             strict=False)), "one queue"
    # without prefetch every collective is exposed; prefetch never makes a step slower
    assert runs[0].exposed_s == pytest.approx(comm)
    assert runs[1].step_s <= runs[0].step_s + 1e-9
    assert runs[2].step_s <= runs[1].step_s + 1e-9


def test_crossover_is_where_prefetch_hides_the_gathers():
    u = UnitTimes(0.0, 0.0, 1.0, 0.5)
    f = crossover(u, 6, prefetch=1)
    assert 0.5 < f < 1.1
    hidden = simulate_step([UnitTimes(1.2 * f, 2.4 * f, 1.0, 0.5)] * 6, 1)
    exposed = simulate_step([UnitTimes(0.5 * f, 1.0 * f, 1.0, 0.5)] * 6, 1)
    floor = 2 * 1.0 + 0.5        # first gather of each phase, last reduce-scatter
    assert hidden.exposed_s == pytest.approx(floor)
    assert exposed.exposed_s > floor + 1.0
    assert crossover(u, 6, prefetch=0) == float("inf")


def test_unit_times_price_every_preset():
    for name in preset_names():
        ts = unit_times([1000, 4000], 8, get_preset(name), forward_s=[1e-3, 2e-3])
        assert ts[0].backward == 2e-3 and ts[1].forward == 2e-3
        assert 0 < ts[0].all_gather < ts[1].all_gather
    assert unit_times([10], 1, get_preset("loopback"), forward_s=[1.0])[0].all_gather == 0
    with pytest.raises(ValueError, match="differ in length"):
        unit_times([10, 20], 2, get_preset("loopback"), forward_s=[1.0])


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)


def test_find_units_default_and_nested():
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), _Block())
    m[0].weight.requires_grad_(False)
    default = find_units(m)
    assert [name for name, _, _ in default] == ["0", "2.a", "2.b"]
    assert len(default[0][2]) == 1, "frozen parameters are not sharded"
    nested = find_units(m, [m[2]])
    assert [name for name, _, _ in nested] == ["", "2"]
    assert len(nested[1][2]) == 4 and len(nested[0][2]) == 1
