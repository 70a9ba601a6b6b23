"""Schedules: structure, step counts, MPICH folding, option and argument validation."""

from __future__ import annotations

import math

import pytest

from distlab.collectives import ALGORITHMS, Schedule, Step, Transfer, block_bounds, build
from distlab.collectives.algorithms.allreduce.hierarchical import default_group_size
from distlab.collectives.algorithms.fold import Fold

ALL = sorted(ALGORITHMS)


def lg(p: int) -> int:
    return (p - 1).bit_length()  # ceil(log2 p)


@pytest.mark.parametrize("count,parts", [(0, 3), (2, 5), (10, 3), (12, 4), (7, 1)])
def test_block_bounds_cover_and_balance(count: int, parts: int) -> None:
    b = block_bounds(count, parts)
    assert len(b) == parts and b[0][0] == 0 and b[-1][1] == count
    assert all(b[i][1] == b[i + 1][0] for i in range(parts - 1))
    sizes = [hi - lo for lo, hi in b]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16])
@pytest.mark.parametrize("n", [0, 1, 3, 17, 64])
def test_every_schedule_is_well_formed(name: str, p: int, n: int) -> None:
    s = build(name, p, n)
    assert isinstance(s, Schedule) and s.world_size == p and s.count == n
    for step in s.steps:
        assert step.transfers, "builders drop empty steps"
        for t in step.transfers:
            assert 0 <= t.src < p and 0 <= t.dst < p and t.src != t.dst
            assert 0 <= t.start < t.stop <= n
    if p == 1 or n == 0:
        assert s.steps == ()


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8, 13, 16])
def test_step_counts_match_the_textbook(p: int) -> None:
    n = 64 * p
    pof2 = 1 << (p.bit_length() - 1)
    extra = 0 if pof2 == p else 2
    assert len(build("naive", p, n).steps) == 2
    assert len(build("tree", p, n).steps) == 2 * lg(p)
    assert len(build("ring", p, n).steps) == 2 * (p - 1)
    assert len(build("recursive_doubling", p, n).steps) == int(math.log2(pof2)) + extra
    assert len(build("rabenseifner", p, n).steps) == 2 * int(math.log2(pof2)) + extra


def test_ring_sends_each_chunk_to_the_right_neighbour() -> None:
    s = build("ring", 4, 8)
    for step in s.steps:
        assert sorted((t.src, t.dst) for t in step.transfers) == [(0, 1), (1, 2), (2, 3), (3, 0)]
        assert all(t.count == 2 for t in step.transfers)
    assert [t.kind for t in s.steps[0].transfers] == ["reduce"] * 4
    assert [t.kind for t in s.steps[-1].transfers] == ["copy"] * 4


def test_mpich_fold_for_six_ranks() -> None:
    f = Fold(6)
    assert (f.pof2, f.rem) == (4, 2)
    assert [f.real(i) for i in range(4)] == [1, 3, 4, 5]
    s = build("recursive_doubling", 6, 10)
    assert [(t.src, t.dst, t.kind) for t in s.steps[0].transfers] == [(0, 1, "reduce"),
                                                                      (2, 3, "reduce")]
    assert [(t.src, t.dst, t.kind) for t in s.steps[-1].transfers] == [(1, 0, "copy"),
                                                                       (3, 2, "copy")]
    middle = {r for st in s.steps[1:-1] for t in st.transfers for r in (t.src, t.dst)}
    assert middle == {1, 3, 4, 5}, "folded-out ranks sit out the butterfly"


def test_rabenseifner_moves_halving_amounts() -> None:
    s = build("rabenseifner", 8, 64)
    sizes = [step.transfers[0].count for step in s.steps]
    assert sizes == [32, 16, 8, 8, 16, 32]


def test_segmented_ring_pipelines_slices() -> None:
    p, seg = 3, 2
    s = build("segmented_ring", p, 3 * p * seg, segment_size=seg)  # three slices
    assert len(s.steps) == 2 * (p - 1) + 3 - 1
    assert max(len(st.sends(0)) for st in s.steps) == 3
    assert max(t.count for st in s.steps for t in st.transfers) <= seg
    assert s.options == {"segment_size": seg, "pieces": 1}


def test_hierarchical_groups() -> None:
    s = build("hierarchical", 8, 64, group_size=4)
    assert s.options == {"group_size": 4, "pieces": 1}
    first = s.steps[0]
    assert all(t.src // 4 == t.dst // 4 for t in first.transfers), "phase 1 stays in the group"
    assert default_group_size(8) == 2 and default_group_size(7) == 1 and default_group_size(9) == 3
    def transfers(s: Schedule) -> list:
        return [st.transfers for st in s.steps]
    assert transfers(build("hierarchical", 4, 16, group_size=4)) == transfers(build("ring", 4, 16))


def test_unknown_algorithm_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="ring") as err:
        build("butterfly", 4, 10)
    assert "butterfly" in str(err.value) and "rabenseifner" in str(err.value)
    with pytest.raises(TypeError, match="algorithm must be a str"):
        build(3, 4, 10)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs,exc,text", [
    ({"segment_size": 0}, ValueError, r"segment_size \(elements\) must be an int >= 1, got 0"),
    ({"segment_size": 2.5}, TypeError, r"segment_size \(elements\) must be an int"),
])
def test_bad_segment_size(kwargs: dict, exc: type, text: str) -> None:
    with pytest.raises(exc, match=text):
        build("segmented_ring", 4, 100, **kwargs)


def test_group_size_must_divide_world_size() -> None:
    with pytest.raises(ValueError, match=r"group_size must divide world_size=6 "
                                         r"\(one of \[1, 2, 3, 6\]\), got 4"):
        build("hierarchical", 6, 100, group_size=4)
    with pytest.raises(ValueError, match="got 0"):
        build("hierarchical", 6, 100, group_size=0)


def test_unknown_option_names_the_valid_ones() -> None:
    with pytest.raises(TypeError,
                       match=r"'tree' takes options \[\], got unknown \['segment_size'\]"):
        build("tree", 4, 100, segment_size=8)
    with pytest.raises(TypeError, match=r"'ring' takes options \['pieces'\], got unknown"):
        build("ring", 4, 100, segment_size=8)
    assert build("ring", 4, 100, segment_size=None).steps == build("ring", 4, 100).steps


@pytest.mark.parametrize("p,n,exc", [(0, 4, ValueError), (-1, 4, ValueError), (2.0, 4, TypeError),
                                      (True, 4, TypeError), (2, -1, ValueError),
                                      (2, 1.5, TypeError)])
def test_bad_world_size_or_count(p: object, n: object, exc: type) -> None:
    with pytest.raises(exc, match="world_size|count"):
        build("ring", p, n)  # type: ignore[arg-type]


def test_schedule_rejects_malformed_transfers() -> None:
    with pytest.raises(ValueError, match="sends to itself"):
        Schedule("x", 2, 4, (Step((Transfer(1, 1, 0, 4, "reduce"),)),))
    with pytest.raises(ValueError, match="outside"):
        Schedule("x", 2, 4, (Step((Transfer(0, 1, 0, 5, "reduce"),)),))
    with pytest.raises(ValueError, match="rank outside"):
        Schedule("x", 2, 4, (Step((Transfer(0, 2, 0, 4, "copy"),)),))
    with pytest.raises(ValueError, match="single writer"):
        Schedule("x", 3, 4, (Step((Transfer(0, 2, 0, 4, "copy"), Transfer(1, 2, 2, 4, "reduce"))),))
