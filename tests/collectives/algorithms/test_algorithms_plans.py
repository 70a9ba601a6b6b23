"""Every MPI collective as a plan: what each rank holds before and after (semantics.py), checked
by the simulator for every world size 1..64 and odd sizes; costs equal to MPICH's closed forms
(Thakur, Rabenseifner and Gropp 2005); the double binary tree; packed steps and read-only
sources in the executor's rank plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives import cost, simulate
from distlab.collectives.algorithms.allreduce.double_binary_tree import btree_parents, tree_ranks
from distlab.collectives.algorithms.registry import (
    DEFAULT_ALGORITHM,
    PLANS,
    build_plan,
    plan_options,
)
from distlab.collectives.check.verify import check
from distlab.collectives.plan.schedule import Schedule, Step, Transfer, format_schedule
from distlab.collectives.plan.semantics import layout, layout_of
from distlab.collectives.runtime.rank_plan import rank_plan
from distlab.vocabulary import COLLECTIVES

EVERY = [(c, a) for c, algos in PLANS.items() for a in algos]
WHOLE = ("all_reduce", "broadcast", "reduce", "barrier")  # count is the vector, not p blocks


def _plan(c: str, a: str, p: int, m: int, root: int = 0, **extra: int) -> Schedule:
    opts = plan_options(c, a)
    kw = {k: v for k, v in {"root": root % p, **extra}.items() if k in opts}
    if a == "segmented_ring":
        kw["segment_size"] = 2
    return build_plan(c, a, p, m if c in WHOLE else m * p, **kw)


@pytest.mark.parametrize("collective,algorithm", EVERY)
def test_every_plan_leaves_exactly_its_collectives_result_for_1_to_64_ranks(
        collective: str, algorithm: str) -> None:
    for p in range(1, 65):
        s = _plan(collective, algorithm, p, 1, root=p // 2)
        assert s.collective == collective and s.world_size == p
        assert check(s) == [], (p, check(s))
    for p in (3, 5, 7, 13, 31, 33):  # odd blocks on odd world sizes, pieces where taken
        s = _plan(collective, algorithm, p, 3, root=p - 1, pieces=2)
        assert check(s) == [], (p, check(s))


@settings(max_examples=120, deadline=None)
@given(case=st.sampled_from(EVERY), p=st.integers(1, 24), m=st.integers(0, 5),
       root=st.integers(0, 23), pieces=st.integers(1, 4))
def test_plans_hold_for_any_size_root_and_pieces(case: tuple[str, str], p: int, m: int,
                                                 root: int, pieces: int) -> None:
    s = _plan(*case, p, m, root=root, pieces=pieces)
    assert check(s) == []


def _reference(c: str, xs: list[np.ndarray], p: int, root: int) -> list[np.ndarray | None]:
    """What each rank must get, by NumPy, from per-rank inputs ``xs``."""
    if c == "all_reduce":
        return [sum(xs)] * p
    if c == "broadcast":
        return [xs[root]] * p
    if c == "reduce":
        return [sum(xs) if r == root else None for r in range(p)]
    if c == "gather":
        return [np.concatenate(xs) if r == root else None for r in range(p)]
    if c == "scatter":
        return list(np.split(xs[root], p))
    if c == "all_gather":
        return [np.concatenate(xs)] * p
    if c == "reduce_scatter":
        return list(np.split(sum(xs), p))
    return [np.concatenate([np.split(xs[s], p)[d] for s in range(p)]) for d in range(p)]


@pytest.mark.parametrize("collective,algorithm", [e for e in EVERY if e[0] != "barrier"])
@pytest.mark.parametrize("p", [1, 2, 5, 8])
def test_simulated_through_the_layout_equals_numpy(collective: str, algorithm: str,
                                                   p: int) -> None:
    """Inputs placed where :meth:`CollectiveLayout.inputs` says, results read where
    :meth:`CollectiveLayout.outputs` says (what the runtime does with tensors) give the textbook
    result."""
    root, m = p - 1, 3
    s = _plan(collective, algorithm, p, m, root=root)
    lay = layout_of(s)
    rng = np.random.default_rng(p)
    per_rank = m if collective in ("broadcast", "reduce", "gather", "all_gather",
                                   "all_reduce") else m * p
    xs = [rng.integers(-50, 50, per_rank) for _ in range(p)]
    bufs = []
    for r in range(p):
        buf = np.full(lay.buffer, -999, dtype=np.int64)
        pos = 0
        for a, b in lay.inputs(r):
            buf[a:b] = xs[r][pos:pos + b - a]
            pos += b - a
        bufs.append(buf)
    outs = simulate(s, bufs, "sum")
    for r, want in enumerate(_reference(collective, xs, p, root)):
        spans = lay.outputs(r)
        if want is None:
            assert spans == []
            continue
        got = np.concatenate([outs[r][a:b] for a, b in spans])
        np.testing.assert_array_equal(got, want, err_msg=f"rank {r}")


def test_the_checker_catches_lost_and_duplicated_data() -> None:
    good = build_plan("reduce_scatter", "ring", 4, 8)
    assert check(good) == []
    lost = Schedule("ring", 4, 8, good.steps[:-1], good.options, "reduce_scatter")
    assert "expected [0, 1, 2, 3]" in check(lost)[0]
    doubled = Schedule("ring", 4, 8, good.steps + good.steps[-1:], good.options,
                       "reduce_scatter")
    assert "more than once" in check(doubled)[0]
    ag = build_plan("all_gather", "ring", 3, 3)
    stray = Step((Transfer(0, 1, 1, 2, "reduce"),), "a block reduced where it is copied")
    wrong = Schedule("ring", 3, 3, ag.steps + (stray,), ag.options, "all_gather")
    assert "rank 1 element 1 holds some rank's data more than once" in check(wrong)[0]
    bc = build_plan("broadcast", "binomial", 4, 2)
    early = Step((Transfer(3, 2, 0, 2, "copy"),), "rank 3 forwards before it has the data")
    garbled = Schedule("binomial", 4, 2, bc.steps + (early,), bc.options, "broadcast")
    assert check(garbled) == []  # by then rank 3 has it
    too_early = Schedule("binomial", 4, 2, bc.steps[:1] + (early,) + bc.steps[1:-1],
                         bc.options, "broadcast")
    assert "holds ranks [], expected [0]" in check(too_early)[0]


A, B, G = 5e-6, 1e-9, 3e-10


def _closed_form(c: str, a: str, p: int, n: float) -> float:
    """MPICH's costs (Thakur, Rabenseifner and Gropp 2005, IJHPCA 19(1), sec. 4), ``n`` bytes."""
    lg = math.ceil(math.log2(p))
    f = (p - 1) / p
    return {
        ("broadcast", "binomial"): lg * (A + n * B),
        ("broadcast", "scatter_allgather"): (lg + p - 1) * A + 2 * f * n * B,
        ("reduce", "binomial"): lg * (A + n * B + n * G),
        ("reduce", "rabenseifner"): 2 * lg * A + 2 * f * n * B + f * n * G,
        ("gather", "binomial"): lg * A + f * n * B,
        ("gather", "linear"): (p - 1) * A + f * n * B,
        ("scatter", "binomial"): lg * A + f * n * B,
        ("scatter", "linear"): (p - 1) * A + f * n * B,
        ("all_gather", "ring"): (p - 1) * A + f * n * B,
        ("all_gather", "recursive_doubling"): lg * A + f * n * B,
        ("all_gather", "bruck"): lg * A + f * n * B,
        ("reduce_scatter", "ring"): (p - 1) * A + f * n * (B + G),
        ("reduce_scatter", "pairwise"): (p - 1) * A + f * n * (B + G),
        ("reduce_scatter", "recursive_halving"): lg * A + f * n * (B + G),
        ("all_to_all", "pairwise"): (p - 1) * A + f * n * B,
        ("all_to_all", "bruck"): lg * A + n / 2 * lg * B,
        ("all_reduce", "ring"): 2 * (p - 1) * A + 2 * f * n * B + f * n * G,
        ("all_reduce", "recursive_doubling"): lg * (A + n * B + n * G),
        ("all_reduce", "rabenseifner"): 2 * lg * A + 2 * f * n * B + f * n * G,
    }[(c, a)]


ANY_P = {("all_gather", "ring"), ("all_gather", "bruck"), ("reduce_scatter", "ring"),
         ("reduce_scatter", "pairwise"), ("all_to_all", "pairwise"), ("gather", "linear"),
         ("scatter", "linear"), ("all_reduce", "ring")}


@pytest.mark.parametrize("collective,algorithm", sorted(
    {(c, a) for c, a in EVERY if (c, a) in {k for k in [
        ("broadcast", "binomial"), ("broadcast", "scatter_allgather"), ("reduce", "binomial"),
        ("reduce", "rabenseifner"), ("gather", "binomial"), ("gather", "linear"),
        ("scatter", "binomial"), ("scatter", "linear"), ("all_gather", "ring"),
        ("all_gather", "recursive_doubling"), ("all_gather", "bruck"),
        ("reduce_scatter", "ring"), ("reduce_scatter", "pairwise"),
        ("reduce_scatter", "recursive_halving"), ("all_to_all", "pairwise"),
        ("all_to_all", "bruck"), ("all_reduce", "ring"), ("all_reduce", "recursive_doubling"),
        ("all_reduce", "rabenseifner")]}}))
def test_cost_from_the_schedule_equals_mpichs_closed_form(collective: str,
                                                          algorithm: str) -> None:
    """Single-message steps (packed where MPICH packs), full-duplex links, every root."""
    sizes = [2, 4, 8, 16, 64] + ([3, 5, 6, 7, 12] if (collective, algorithm) in ANY_P else [])
    for p in sizes:
        m = 64  # elements per block, float32
        for root in {0, p // 2, p - 1}:
            s = _plan(collective, algorithm, p, m * p if collective in WHOLE else m, root=root)
            n = 4 * (s.count // p if collective == "all_to_all" else s.count)
            got = cost(s, A, B, G, 4)
            assert got == pytest.approx(_closed_form(collective, algorithm, p, n), rel=1e-12), \
                (p, root)


def test_barrier_costs_one_latency_per_round() -> None:
    for p in (2, 3, 8, 13):
        s = build_plan("barrier", "dissemination", p, 1)
        assert cost(s, A, 0.0, 0.0, 4) == pytest.approx(math.ceil(math.log2(p)) * A)


def test_double_binary_tree_is_nccls_btree_and_its_complement() -> None:
    # the 14-rank tree drawn in NCCL's src/graph/trees.cc: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; ...
    assert btree_parents(14) == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]
    for p in range(2, 40):
        parents = btree_parents(p)
        kids = [sum(1 for q in parents if q == x) for x in range(p)]
        assert max(kids) <= 2 and sorted(parents)[1:] == sorted(parents[1:])
        inner = [{r for x, r in enumerate(tree_ranks(p, t)) if kids[x]} for t in (False, True)]
        if p % 2 == 0:  # every rank is an inner node in at most one tree
            assert not (inner[0] & inner[1] - {tree_ranks(p, False)[0],
                                               tree_ranks(p, True)[0]})
        s = build_plan("all_reduce", "double_binary_tree", p, 10)
        assert check(s) == []
        assert len(s.steps) <= 2 * (p.bit_length() + 1)
        # each half of the vector travels on one tree only
        halves = {(t.start, t.stop) for st_ in s.steps for t in st_.transfers}
        assert halves == {(0, 5), (5, 10)}


def test_packed_steps_are_one_message_in_cost_plan_and_listing() -> None:
    s = build_plan("all_to_all", "bruck", 4, 8)
    step = s.steps[0]
    assert step.packed and len(step.transfers) == 8 and len(step.messages()) == 4
    assert s.num_messages < s.num_transfers
    assert "packed" in format_schedule(s)
    plan = rank_plan(s, 0)
    send = plan.steps[0].sends[0]
    assert len(send.ranges) == 2 and send.offset is not None and send.count == 4
    assert plan.staging == 2 * plan.half and plan.scratch >= plan.staging + send.count
    unpacked = Schedule("bruck", 4, 32, tuple(Step(st_.transfers, st_.label) for st_ in s.steps),
                        {}, "all_to_all")
    assert cost(unpacked, A, B, G, 4) - cost(s, A, B, G, 4) == pytest.approx(
        sum(len(st_.transfers) // 4 - 1 for st_ in s.steps) * A)


def test_a_read_only_source_is_read_until_written_and_never_copied_up_front() -> None:
    p, m = 4, 3
    s = build_plan("reduce_scatter", "ring", p, p * m)
    plan = rank_plan(s, 1, (0, p * m))
    first = plan.steps[0]
    assert first.fill == () and all(r[3] for msg in first.sends for r in msg.ranges)
    assert all(r[3] for msg in first.recvs for r in msg.ranges)  # reduce(source, incoming)
    later = plan.steps[1]
    assert not any(r[3] for msg in later.sends for r in msg.ranges)  # now written: the tensor
    assert plan.untouched == ((0, 3),)  # block 0 rank 1 only sends (step 0), never receives
    assert rank_plan(build_plan("reduce_scatter", "ring", 1, 5), 0, (0, 5)).untouched == ((0, 5),)
    ag = rank_plan(build_plan("all_gather", "ring", p, p * m), 2, (6, 9))
    assert ag.untouched == ((6, 9),)  # its own block is only ever sent, from the source
    assert all(r[3] for r in ag.steps[0].sends[0].ranges)


def test_registry_and_layout_errors_name_the_argument() -> None:
    assert set(PLANS) == set(COLLECTIVES) == set(DEFAULT_ALGORITHM)
    with pytest.raises(ValueError, match=r"algorithm for gather must be one of \['binomial'"):
        build_plan("gather", "ring", 4, 8)
    with pytest.raises(ValueError, match="collective must be one of"):
        build_plan("allgatherv", "ring", 4, 8)
    with pytest.raises(ValueError, match="count .elements. must be a multiple of world_size=4"):
        build_plan("all_gather", "ring", 4, 10)
    with pytest.raises(ValueError, match="root must be"):
        build_plan("broadcast", "binomial", 4, 10, root=4)
    with pytest.raises(TypeError, match="takes options"):
        build_plan("all_gather", "bruck", 4, 8, pieces=2)
    lay = layout("all_to_all", 3, 6)
    assert lay.buffer == 18 and lay.block == 2
    assert lay.outputs(1) == [(2, 4), (8, 10), (14, 16)] and lay.inputs(1) == [(6, 12)]
