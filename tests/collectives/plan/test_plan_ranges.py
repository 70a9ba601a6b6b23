"""Pipelined steps (``pieces``), the model's choice of k, and the executor's posted-ahead plan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives import ALGORITHMS, build, contributors, cost, holdings
from distlab.collectives.model.choice import (
    PIECES_CANDIDATES,
    best_pieces,
    default_calibration,
    pieces_curve,
    use_calibration,
)
from distlab.collectives.plan.ranges import check_pieces, split
from distlab.collectives.plan.schedule import Transfer
from distlab.collectives.runtime.rank_plan import rank_plan

PIECED = ("ring", "segmented_ring", "hierarchical")


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(PIECED), p=st.integers(1, 12), n=st.integers(0, 120),
       k=st.integers(1, 6))
def test_pieces_move_the_same_elements_in_k_times_the_messages(name: str, p: int, n: int,
                                                               k: int) -> None:
    one, many = build(name, p, n), build(name, p, n, pieces=k)
    assert many.options["pieces"] == k
    assert len(many.steps) == len(one.steps)
    assert many.elements_moved() == one.elements_moved()
    for a, b in zip(one.steps, many.steps, strict=True):
        # every transfer becomes min(k, its length) consecutive pieces covering it exactly
        assert len(b.transfers) == sum(min(k, t.count) for t in a.transfers)
        assert {(t.src, t.dst) for t in a.transfers} == {(t.src, t.dst) for t in b.transfers}
    assert (contributors(holdings(many)[-1]) == p).all()


def test_split_cuts_in_order_and_drops_empty_pieces() -> None:
    t = Transfer(0, 1, 10, 15, "reduce")
    assert split([t], 2) == [Transfer(0, 1, 10, 13, "reduce"), Transfer(0, 1, 13, 15, "reduce")]
    assert split([t], 9) == [Transfer(0, 1, i, i + 1, "reduce") for i in range(10, 15)]
    assert split([t], 1) == [t]
    with pytest.raises(ValueError, match=r"pieces \(messages per transfer\) must be"):
        check_pieces(0)
    with pytest.raises(ValueError, match="pieces"):
        build("ring", 2, 8, pieces=0)
    with pytest.raises(TypeError, match="takes options"):
        build("tree", 2, 8, pieces=2)


@pytest.mark.parametrize("p,k", [(2, 4), (4, 3), (8, 2)])
def test_cost_charges_alpha_per_piece_and_hides_all_but_the_last_reduction(p: int, k: int) -> None:
    n, a, b, g = 4096 * p, 7e-6, 3e-10, 1e-10
    one, many = build("ring", p, n), build("ring", p, n, pieces=k)
    steps = 2 * (p - 1)
    chunk_bytes = 4 * n // p
    # latency: k messages per step; reduce-scatter steps: the reduction of the first k-1 pieces
    # hides behind the transfer (beta chunk > gamma chunk (k-1)/k here)
    expected = (cost(one, a, b, g, 4) + steps * (k - 1) * a
                - (p - 1) * g * chunk_bytes * (k - 1) / k)
    assert cost(many, a, b, g, 4) == pytest.approx(expected, rel=1e-12)


def test_best_pieces_is_the_argmin_of_the_curve_and_follows_the_calibration() -> None:
    n = 1 << 22
    curve = pieces_curve("ring", 4, n, 4)
    assert list(curve) == list(PIECES_CANDIDATES)
    assert best_pieces("ring", 4, n, 4) == min(curve, key=lambda k: (curve[k], k))
    free_messages = {"alpha": 0.0, "beta": 1e-9, "gamma": 1e-10, "duplex": "full"}
    costly_messages = {"alpha": 1.0, "beta": 1e-9, "gamma": 1e-10, "duplex": "full"}
    assert best_pieces("ring", 4, n, 4, free_messages) == max(PIECES_CANDIDATES)
    assert best_pieces("ring", 4, n, 4, costly_messages) == 1
    assert best_pieces("segmented_ring", 4, n, 4, free_messages,
                       options={"segment_size": 1 << 16}) == max(PIECES_CANDIDATES)
    shipped = default_calibration()
    try:
        use_calibration(free_messages)
        assert best_pieces("ring", 4, n, 4) == max(PIECES_CANDIDATES)  # the cache follows
        assert default_calibration()["alpha"] == 0.0
    finally:
        use_calibration(None)
    assert default_calibration() == shipped and shipped["backend"] == "gloo"
    with pytest.raises(ValueError, match="takes no pieces option"):
        pieces_curve("tree", 4, n, 4)
    with pytest.raises(ValueError, match=r"calibration lacks \['gamma'\]"):
        use_calibration({"alpha": 1.0, "beta": 1.0})
    with pytest.raises(TypeError, match="calibration must be a Calibration"):
        use_calibration(3)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 8])
def test_posted_ahead_receives_never_touch_live_elements(name: str, p: int) -> None:
    """A receive lands in the tensor only where this rank neither sends in that step nor
    received in its previous one; one posted ahead (not deferred) also touches nothing the
    previous step sent, and a deferred one (posted once those sends finished) exactly where it
    does. Workspace halves alternate between steps, and every copy lands in place."""
    opts = {"pieces": 2} if name in PIECED else {}
    s = build(name, p, 12 * p + 5, **opts)

    def apart(a: int, b: int, spans: list[tuple[int, int]]) -> bool:
        return all(b <= x or y <= a for x, y in spans)

    for rank in range(p):
        plan = rank_plan(s, rank)
        prev_sent: list[tuple[int, int]] = []
        prev_received: list[tuple[int, int]] = []
        prev_scratch: list[tuple[int, int]] = []
        for rs in plan.steps:
            sends = [(a, b) for m in rs.sends for a, b, *_ in m.ranges]
            scratch = []
            for m in rs.recvs:
                if m.offset is None:
                    (a, b, kind, _), = m.ranges
                    assert kind == "copy"
                    assert apart(a, b, sends + prev_received), (name, rank)
                    assert m.deferred == (not apart(a, b, prev_sent)), (name, rank)
                else:
                    assert not m.deferred
                    assert 0 <= m.offset and m.offset + m.count <= 2 * plan.half
                    scratch.append((m.offset, m.offset + m.count))
                    assert not (len(m.ranges) == 1 and m.ranges[0][2] == "copy"
                                and apart(*m.ranges[0][:2], sends + prev_received)), \
                        f"{name} rank {rank}: a copy landed in the workspace and was copied over"
            assert all(b <= x or y <= a for a, b in scratch for x, y in prev_scratch)
            prev_sent = sends
            prev_received = [(a, b) for m in rs.recvs for a, b, *_ in m.ranges]
            prev_scratch = scratch
