"""The planner's enumeration and ranking."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.plan.calibration import RESERVED_ERROR_P90
from distlab.plan.layout import hardware, parse_layout
from distlab.plan.model import PRESETS, ModelSpec
from distlab.plan.planner import (
    MIN_CP_TOKENS,
    TIE,
    enumerate_layouts,
    fitting_count,
    plan,
    price,
    rank,
    rank_key,
    tight_margin_bytes,
)

GIB = 2**30


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
    assert len(result.ranked) == 5 and result.fitting > 5 and result.tried > result.fitting
    steps = [p.step.step_s for p in result.ranked]
    # a layout never ranks ahead of one more than TIE faster
    assert all(a <= b * (1 + TIE) for a, b in zip(steps, steps[1:], strict=False))
    assert [rank_key(p) for p in result.ranked] == sorted(rank_key(p) for p in result.ranked)
    assert all(p.fits and p.memory.total <= hw.gpu.memory_bytes for p in result.ranked)
    assert all(not p.fits for p in result.rejected)
    again = price(model, result.best.layout, hw)
    assert again.step.step_s == pytest.approx(result.best.step.step_s, rel=1e-12)
    assert not result.advice


def test_one_ranking_whatever_top() -> None:
    """``top`` cuts one ranking: every shorter list is the start of the longer one (Llama 3
    70B on 64 GPUs, where the closed-form price of the pipelines, re-priced for the shown ones
    only, used to put another layout second at --top 3 than at --top 10), each layout priced
    as :func:`price` prices it alone."""
    spec, hw = PRESETS["llama3-70b"], hardware("h100", 64)
    lists = {top: plan(spec, hw, 512, top=top).ranked for top in (1, 3, 10)}
    labels = {top: [p.layout.label for p in ranked] for top, ranked in lists.items()}
    assert labels[1] == labels[10][:1] and labels[3] == labels[10][:3]
    assert any(p.layout.pp > 1 for p in lists[10])
    for p in lists[10]:
        alone = price(spec, p.layout, hw)
        assert alone.step.step_s == pytest.approx(p.step.step_s, rel=1e-12)


def test_the_first_layouts_are_those_of_every_layout_priced_in_full() -> None:
    """The pruned ranking (pipelines simulated only while they can still rank among the
    first) equals every layout that fits priced in full and sorted by :func:`rank_key`."""
    spec, hw = PRESETS["llama2-7b"], hardware("h100", 16)
    choices = {"micro_batches": (1,), "zero_stages": (0, 1)}
    every = [price(spec, lay, hw) for lay in enumerate_layouts(spec, hw, 64, **choices)]
    full = rank(p for p in every if p.fits)
    assert any(p.layout.pp > 1 for p in full[:8])
    ranked = plan(spec, hw, 64, top=8, **choices).ranked
    assert [p.layout.label for p in ranked] == [p.layout.label for p in full[:8]]


def test_the_scaling_table_and_the_command_agree_at_128_gpus() -> None:
    """The layout the notebook's scaling series (top=1) puts first is the command's first."""
    from distlab.viz.plan import best_by_gpus

    spec = PRESETS["llama3-70b"]
    (first,) = best_by_gpus(spec, (128,), 512).best
    assert first is not None
    assert first.layout == plan(spec, hardware("h100", 128), 512, top=10).ranked[0].layout


def test_a_model_that_fits_nowhere_gets_advice_that_fits() -> None:
    """The advice names a GPU count at which a layout fits, with the same global batch, and
    pricing that count again finds it fits; the count is no fewer GPUs than the memory asks."""
    spec = PRESETS["llama3-405b"]
    result = plan(spec, hardware("h100", 8), 8, top=3)
    assert result.best is None and result.rejected and result.fitting == 0
    assert "nothing fits" in result.advice[0]
    assert result.rejected[0].memory.total == min(p.memory.total for p in result.rejected)
    assert len(result.rejected) == 3
    m = re.search(r"on (\d+) GPUs it fits, priced: (.+?) needs ([\d.]+) GiB per GPU with the same "
                  r"global batch of 8", result.advice[1])
    assert m, result.advice[1]
    gpus, label = int(m.group(1)), m.group(2)
    at = hardware("h100", gpus)
    assert plan(spec, at, 8, top=1).best is not None
    (layout,) = [lay for lay in enumerate_layouts(spec, at, 8) if lay.label == label]
    priced = price(spec, layout, at)
    assert priced.fits and round(priced.memory.total / 2**30, 1) == float(m.group(3))
    need = result.rejected[0].memory.total / hardware("h100", 8).gpu.memory_bytes
    assert gpus >= need * 8


def test_fitting_count_finds_a_count_that_fits() -> None:
    spec, hw = PRESETS["llama3-405b"], hardware("h100", 8)
    found = fitting_count(spec, hw, 8, start=96)
    assert found is not None and found.fits
    assert found.step.hardware.gpus % 8 == 0 and found.step.hardware.gpus >= 96
    assert plan(spec, hardware("h100", 96), 8, top=1).best is None   # 96 does not hold it
    tiny = ModelSpec("tiny", 1, 64, 1, 100, 64)
    assert fitting_count(tiny, hardware("h100", 16, network="ib_ndr400x8"), 3, start=16) is None


def test_bad_batch_and_choices() -> None:
    with pytest.raises(ValueError, match="precision"):
        list(enumerate_layouts(PRESETS["llama3-8b"], hardware("h100", 8), 8, precision="x"))
    odd = list(enumerate_layouts(PRESETS["llama3-8b"], hardware("h100", 8), 3))
    assert odd and all(lay.dp == 1 for lay in odd)  # 3 sequences split over no replicas
    tiny = ModelSpec("tiny", 1, 64, 1, 100, 64)  # one layer, one head: only dp can split it
    result = plan(tiny, hardware("h100", 16, network="ib_ndr400x8"), 3)
    assert not result.ranked and "give a batch" in result.advice[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1.2), st.integers(1, 80 * 2**30), st.booleans()),
                min_size=1, max_size=30))
def test_rank_key_orders_by_step_with_memory_as_a_bounded_tie_break(rows) -> None:
    from types import SimpleNamespace

    gpu = SimpleNamespace(memory_bytes=80 * 2**30)
    prices = [SimpleNamespace(step=SimpleNamespace(step_s=s, hardware=SimpleNamespace(gpu=gpu)),
                              memory=SimpleNamespace(total=m), tight=tight,
                              layout=SimpleNamespace(label=f"layout{i}"))
              for i, (s, m, tight) in enumerate(rows)]
    ranked = rank(prices)
    assert sorted(map(id, ranked)) == sorted(map(id, prices))
    roomy = [s for s, _, tight in rows if not tight]
    fastest = min(roomy or [s for s, _, _ in rows])
    assert ranked[0].step.step_s <= fastest * (1 + TIE)
    tights = [p.tight for p in ranked]
    assert tights == sorted(tights), "every tight layout ranks after every roomy one"
    for i, a in enumerate(ranked):
        for b in ranked[i + 1:]:
            if a.tight != b.tight:
                continue
            # of two alike, a layout ahead is never more than TIE slower than one behind it
            assert a.step.step_s <= b.step.step_s * (1 + TIE) + 1e-12
            if abs(a.step.step_s / b.step.step_s - 1) < 1e-12:
                assert a.memory.total <= b.memory.total, "equal steps rank by memory"
    # any subset ranks in the order of the whole
    subset = prices[::2]
    assert rank(subset) == [p for p in ranked if any(p is q for q in subset)]


def test_a_layout_within_the_memory_models_error_is_tight_and_ranks_after_the_roomy_ones() -> None:
    """Llama 3 70B on 64 H100s: ``dp16 tp2 cp2 fsdp`` is the fastest that fits, with 0.1 GiB to
    spare, less than the memory model's held-out p90 error of the GPU's memory (2.2 GiB): it is
    tight, and ranks after every layout that fits with more to spare, however fast."""
    spec, hw = PRESETS["llama3-70b"], hardware("h100", 64)
    assert tight_margin_bytes(hw) == int(RESERVED_ERROR_P90 / 100 * hw.gpu.memory_bytes)
    assert round(tight_margin_bytes(hw) / GIB, 1) == 2.2
    fast = price(spec, parse_layout("dp=16,tp=2,cp=2,fsdp", global_batch=256), hw)
    roomy = price(spec, parse_layout("dp=8,tp=4,cp=2,fsdp", global_batch=256), hw)
    assert fast.fits and fast.tight and round(fast.headroom_bytes / GIB, 1) == 0.1
    assert roomy.fits and not roomy.tight and fast.step.step_s < roomy.step.step_s
    assert rank([fast, roomy]) == [roomy, fast]
    result = plan(spec, hw, 256, top=8)
    assert result.best is not None and result.best.layout == roomy.layout
    assert not any(p.tight for p in result.ranked)
    does_not_fit = price(spec, parse_layout("dp=64", global_batch=256), hw)
    assert not does_not_fit.fits and not does_not_fit.tight


def test_the_count_that_fits_is_the_same_whatever_top() -> None:
    """``fitting`` is the count within the memory's lower bound: a longer ``top`` replays
    more layouts and used to take those it ruled out off the count (464 at top 8, 463 at the
    command's top 10 for Llama 3 70B on 64 H100s)."""
    spec, hw = PRESETS["llama3-70b"], hardware("h100", 64)
    counts = {top: plan(spec, hw, 256, top=top).fitting for top in (3, 8, 10, 20)}
    assert len(set(counts.values())) == 1, counts


def test_progress_is_told_every_layout_then_every_full_price() -> None:
    spec, hw = PRESETS["llama3-8b"], hardware("h100", 8)
    calls: list[tuple[int, int, int]] = []
    result = plan(spec, hw, 32, top=3, progress=lambda *a: calls.append(a))
    bounded = [c for c in calls if c[2] == 0]
    priced = [c for c in calls if c[2] > 0]
    assert [c[0] for c in bounded] == list(range(1, result.tried + 1))
    assert {c[1] for c in calls} == {result.tried}
    assert priced and [c[2] for c in priced] == list(range(1, len(priced) + 1))
    assert all(c[0] == result.tried for c in priced)
    assert plan(spec, hw, 32, top=3).ranked == result.ranked   # the hook changes nothing


def test_the_advice_names_a_layout_that_fits_with_room_where_one_does() -> None:
    """Llama 3 70B, nothing fits on 8 H100s: at 16 the first layout found to fit,
    ``dp8 tp2 fsdp full-ac``, has 0.5 GiB to spare (tight); the advice names one with room."""
    spec, hw = PRESETS["llama3-70b"], hardware("h100", 8)
    found = fitting_count(spec, hw, 64, start=16)
    assert found is not None and found.step.hardware.gpus == 16
    assert found.fits and not found.tight
    assert "tight" not in plan(spec, hw, 64).advice[1]
