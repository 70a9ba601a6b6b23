"""The planner's enumeration and ranking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.plan.layout import hardware
from distlab.plan.model import PRESETS, ModelSpec
from distlab.plan.planner import MIN_CP_TOKENS, TIE, enumerate_layouts, plan, price


def test_every_layout_uses_every_gpu_and_splits_the_model() -> None:
    model, hw = PRESETS["llama3-70b"], hardware("h100", 32)
    layouts = list(enumerate_layouts(model, hw, 64))
    assert len(layouts) > 100
    for lay in layouts:
        assert lay.gpus == 32 and lay.global_batch == 64
        assert lay.tp <= 8 and model.heads % lay.tp == 0
        assert lay.cp == 1 or model.seq_len // lay.cp >= MIN_CP_TOKENS
        assert lay.pp == 1 or lay.microbatches >= lay.pp
        assert lay.sequence_parallel == (lay.tp > 1)
    assert len({lay.label for lay in layouts}) == len(layouts)


def test_the_ranking_is_fastest_first_and_only_what_fits() -> None:
    model, hw = PRESETS["llama3-8b"], hardware("h100", 8)
    result = plan(model, hw, 32, top=5)
    assert result.best is not None and result.ranked[0] is result.best
    steps = [p.step.step_s for p in result.ranked[:5]]
    # within TIE of each other, the one with less memory first
    assert all(a <= b * (1 + 2 * TIE) for a, b in zip(steps, steps[1:], strict=False))
    assert all(p.fits and p.memory.total <= hw.gpu.memory_bytes for p in result.ranked)
    assert all(not p.fits for p in result.rejected)
    again = price(model, result.best.layout, hw)
    assert again.step.step_s == pytest.approx(result.best.step.step_s, rel=1e-12)
    assert not result.advice


def test_a_model_that_fits_nowhere_gets_advice() -> None:
    result = plan(PRESETS["llama3-405b"], hardware("h100", 8), 8, top=3)
    assert result.best is None and result.rejected
    assert "nothing fits" in result.advice[0]
    assert result.rejected[0].memory.total == min(p.memory.total for p in result.rejected)


def test_bad_batch_and_choices() -> None:
    with pytest.raises(ValueError, match="precision"):
        list(enumerate_layouts(PRESETS["llama3-8b"], hardware("h100", 8), 8, precision="x"))
    odd = list(enumerate_layouts(PRESETS["llama3-8b"], hardware("h100", 8), 3))
    assert odd and all(lay.dp == 1 for lay in odd)  # 3 sequences split over no replicas
    tiny = ModelSpec("tiny", 1, 64, 1, 100, 64)  # one layer, one head: only dp can split it
    result = plan(tiny, hardware("h100", 16, network="ib_ndr400x8"), 3)
    assert not result.ranked and "give a batch" in result.advice[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1.2), st.integers(1, 10**6)), min_size=1,
                max_size=30))
def test_tie_ranked_never_puts_a_layout_behind_a_slower_group(rows) -> None:
    from types import SimpleNamespace

    from distlab.plan.planner import TIE, tie_ranked

    prices = [SimpleNamespace(step=SimpleNamespace(step_s=s), memory=SimpleNamespace(total=m))
              for s, m in rows]
    ranked = tie_ranked(prices)
    assert sorted(map(id, ranked)) == sorted(map(id, prices))
    fastest = min(s for s, _ in rows)
    assert ranked[0].step.step_s <= fastest * (1 + TIE)
    for i, a in enumerate(ranked):
        for b in ranked[i + 1:]:
            # a layout ahead is never more than TIE slower than one behind it
            assert a.step.step_s <= b.step.step_s * (1 + TIE) + 1e-12
            if abs(a.step.step_s / b.step.step_s - 1) < 1e-9 and a.memory.total > b.memory.total:
                raise AssertionError("equal steps rank by memory")
