"""The one registry: every name any part of distlab uses comes from its entries."""

from __future__ import annotations

import pytest

from distlab.bench.allreduce import NAMES as ALLREDUCE_BENCH_NAMES
from distlab.bench.collective import ALL_NAMES as COLLECTIVE_BENCH_NAMES
from distlab.collectives.algorithms.registry import (
    ALGORITHMS,
    BACKEND_ALGORITHMS,
    BUILTIN,
    DEFAULT_ALGORITHM,
    ENTRIES,
    PLANS,
    TAGS,
    build,
    build_plan,
    entries,
    entry,
    is_builtin,
    names,
)
from distlab.collectives.plan.semantics import layout
from distlab.judge.refit import JUDGEABLE, TARGET_ALGORITHMS
from distlab.profile.collectives_part import QUICK_ALGORITHMS
from distlab.vocabulary import COLLECTIVES


def test_every_collective_has_a_builtin_entry_and_exactly_one_default_plan() -> None:
    for c in COLLECTIVES:
        (b,) = [e for e in entries(c) if e.is_builtin]
        assert b.name == BUILTIN and b.builder is None and b.options == ()
        (d,) = entries(c, tag="default")
        assert "plan" in d.tags and DEFAULT_ALGORITHM[c] == d.name
    assert {t for e in ENTRIES for t in e.tags} == set(TAGS)


def test_every_builder_builds_its_entrys_collective_with_its_options() -> None:
    for e in ENTRIES:
        if e.is_builtin:
            continue
        p = 4
        count = layout(e.collective, p, 8 * p).count
        s = e.builder(p, count)
        assert (s.collective, s.algorithm) == (e.collective, e.name)
        assert s.world_size == p


def test_the_derived_views_are_the_entries() -> None:
    assert list(ALGORITHMS) == list(names("all_reduce"))
    assert list(BACKEND_ALGORITHMS) == ["gloo_ring"] == list(names("all_reduce", "backend"))
    assert {c: list(v) for c, v in PLANS.items()} == {c: list(names(c)) for c in COLLECTIVES}
    assert names("all_reduce", "plan", "builtin")[-1] == BUILTIN
    assert ALLREDUCE_BENCH_NAMES == [*ALGORITHMS, BUILTIN]
    assert set(COLLECTIVE_BENCH_NAMES) == {e.name for e in ENTRIES if "plan" in e.tags
                                           or e.is_builtin}
    assert set(JUDGEABLE) == {*ALGORITHMS, BUILTIN}
    assert set(TARGET_ALGORITHMS) <= set(JUDGEABLE) and set(QUICK_ALGORITHMS) <= set(JUDGEABLE)


def test_lookups_and_their_errors() -> None:
    assert entry("broadcast", "binomial").options == ("root",)
    assert is_builtin("barrier", BUILTIN) and not is_builtin("all_reduce", "ring")
    with pytest.raises(ValueError, match=r"algorithm for gather must be one of \['binomial'"):
        entry("gather", "ring")
    with pytest.raises(ValueError, match="collective"):
        entries("all_reduction")
    with pytest.raises(ValueError, match="tag must be one of"):
        entries("all_reduce", tag="fast")
    with pytest.raises(ValueError, match="must be one of"):
        build(BUILTIN, 2, 4)  # the builtin has no plan
    with pytest.raises(ValueError, match="must be one of"):
        build_plan("all_gather", BUILTIN, 2, 4)
    assert build("gloo_ring", 2, 4).algorithm == "gloo_ring"
    with pytest.raises(TypeError, match=r"takes options \['pieces'\], got unknown \['x'\]"):
        build("ring", 2, 4, x=1)
