"""RCCL's tree across MI355X nodes: its formula (a fixed cost that grows as RCCL's tree latency,
the node's wire bytes at the fitted rate, never faster than the NICs), its fit on the two
2 x 8 MI355X tables that lend their tree sizes, the leave-one-out judgement that stands for it,
and the gfx942 tree left unpriced with the reason the tables give."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.evidence.rccl.judged import (
    fit_constants,
    fit_tree,
    judge,
    published_tables,
    tree_fit_tables,
    tree_note,
)
from distlab.rccl.execution import LINE_BYTES, SHIPPED, rccl_allreduce_times
from distlab.rccl.lines import time_lines
from distlab.rccl.tuning import tree_latency_us

MIB = 1 << 20
TABLES = {t["id"]: t for t in published_tables()}


def _times(table_id: str) -> dict[int, float]:
    return {p["bytes"]: p["time_us"] for p in TABLES[table_id]["points"]}


def test_the_tree_term_is_fitted_on_the_two_mi355x_tables_that_lend_their_tree_sizes() -> None:
    assert [t["id"] for t in tree_fit_tables()] == ["aac14_mi355x_2node", "alib_mi355x_2node"]
    assert (SHIPPED.tree_net_fixed_us, SHIPPED.tree_net_gbps) == pytest.approx(fit_tree(),
                                                                               abs=0.011)
    # physical: a fixed cost of tens of microseconds, a rate under the node's eight NICs
    assert 30 < SHIPPED.tree_net_fixed_us < 100 and 50 < SHIPPED.tree_net_gbps < 8 * 50
    # each cluster alone: the later one (RCCL 2.27.7) moves the tree faster
    slow, fast = (fit_tree([t]) for t in tree_fit_tables())
    assert slow[1] < SHIPPED.tree_net_gbps < fast[1]


def test_the_tree_fit_refuses_other_tables() -> None:
    with pytest.raises(ValueError, match="two-node gfx950 tables only, not on aac10_mi300x_2node"):
        fit_tree([TABLES["aac10_mi300x_2node"]])
    with pytest.raises(ValueError, match="not on alib_mi355x_1node"):
        fit_tree([TABLES["alib_mi355x_1node"]])
    ring_only = dict(TABLES["aac14_mi355x_2node"],
                     points=[p for p in TABLES["aac14_mi355x_2node"]["points"]
                             if p["bytes"] >= 256 * MIB])
    with pytest.raises(ValueError, match="no tree size"):
        fit_tree([ring_only])
    with pytest.raises(ValueError, match="no tree size"):
        fit_constants(tree_tables=[ring_only])


def test_two_nodes_pay_the_fixed_cost_and_the_wire_bytes_at_the_fitted_rate() -> None:
    sizes = [64 << 10, 4 * MIB, 64 * MIB]
    rows, _ = rccl_allreduce_times(2, sizes, arch="gfx950")
    assert [(r.choice.algorithm, r.choice.protocol) for r in rows] == \
        [("tree", "LL"), ("tree", "LL128"), ("tree", "Simple")]
    for r in rows:
        wire = r.choice.nbytes * LINE_BYTES[r.choice.protocol]
        assert r.seconds == pytest.approx(
            (SHIPPED.tree_net_fixed_us + wire / (1e3 * SHIPPED.tree_net_gbps)) * 1e-6)
    assert LINE_BYTES == {"LL": 2.0, "LL128": pytest.approx(128 / 120), "Simple": 1.0}


def test_deeper_trees_pay_rccls_latency_ratio_and_slow_nics_bound_the_bytes() -> None:
    (two,), _ = rccl_allreduce_times(2, [1 << 16], arch="gfx950")
    for nodes in (4, 8, 16):
        (deep,), _ = rccl_allreduce_times(nodes, [1 << 16], arch="gfx950")
        ratio = tree_latency_us(nodes, "LL", arch="gfx950") / tree_latency_us(2, "LL",
                                                                              arch="gfx950")
        wire = 2.0 * (1 << 16) / (1e3 * SHIPPED.tree_net_gbps)
        assert deep.seconds == pytest.approx(
            (SHIPPED.tree_net_fixed_us * ratio + wire) * 1e-6)
        assert deep.seconds > two.seconds
    # RCCL's latency: baseLat + 2 (7 hwLat[xGMI] + log2(nodes) hwLat[NET]), table 6's LL
    assert tree_latency_us(8, "LL", arch="gfx950") == pytest.approx(12 + 2 * (7 * 0.9 + 3 * 10.5))
    # a 10 GB/s NIC: the busiest node's wire bytes (2 S from three nodes) over its NICs
    (slow,), _ = rccl_allreduce_times(4, [16 * MIB], arch="gfx950", nic_gbps=10)
    wire = 16 * MIB * LINE_BYTES["LL128"]
    assert slow.seconds is not None and slow.seconds * 1e6 > 2 * wire / (1e3 * 8 * 10)
    assert slow.seconds * 1e6 == pytest.approx(
        SHIPPED.tree_net_fixed_us * tree_latency_us(4, "LL128", arch="gfx950")
        / tree_latency_us(2, "LL128", arch="gfx950")
        + 2 * wire / (1e3 * SHIPPED.net_efficiency * 8 * 10))


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(2, 32), sizes=st.lists(st.integers(1, 1 << 30), min_size=2,
                                                max_size=6, unique=True))
def test_every_tree_size_across_mi355x_nodes_is_priced_and_grows_with_size(
        nodes: int, sizes: list[int]) -> None:
    rows, _ = rccl_allreduce_times(nodes, sorted(sizes), arch="gfx950")
    trees = [r for r in rows if r.choice.algorithm == "tree"]
    assert all(r.seconds is not None and r.seconds > 0 and r.why == "" for r in trees)
    for a, b in zip(trees, trees[1:], strict=False):
        if a.choice.protocol == b.choice.protocol:
            assert b.seconds >= a.seconds   # type: ignore[operator]
    assert ("beyond two nodes" in tree_note(rows)) == (nodes > 2 and bool(trees))


def test_each_lending_table_is_judged_on_the_fit_of_the_other() -> None:
    """Leave-one-out: 2 x 8 MI355X at RCCL 2.26.6 (AMD's ANP plugin) priced with the tree
    fitted on the RCCL 2.27.7 cluster takes 4-58% more time than the model at its tree sizes;
    the 2.27.7 cluster priced with the other's fit 10-33% less. Neither meets a 12% median:
    the clusters differ by up to 1.5x at 4-64 MiB."""
    judged = {j.id: j for j in judge()}
    inside = {j.id: j for j in judge(leave_one_out=False)}
    for i in ("aac14_mi355x_2node", "alib_mi355x_2node"):
        assert judged[i].tree_left_out and not inside[i].tree_left_out
        assert judged[i].median_pct > 12 > inside[i].median_pct
    assert not any(j.tree_left_out for k, j in judged.items() if not TABLES[k].get("fits"))
    aac14 = [e for n, *_, e in judged["aac14_mi355x_2node"].rows if n <= 128 * MIB]
    alib = [e for n, *_, e in judged["alib_mi355x_2node"].rows if n <= 128 * MIB]
    assert all(4 < e < 58 for e in aac14) and all(-33 < e < -10 for e in alib)
    assert judged["aac14_mi355x_2node"].median_pct == pytest.approx(17.1, abs=0.05)
    assert judged["alib_mi355x_2node"].median_pct == pytest.approx(13.9, abs=0.05)
    # what the judge priced aac14's tree with is the fit on alib alone
    fixed, gbps = fit_tree([TABLES["alib_mi355x_2node"]])
    loso = dataclasses.replace(SHIPPED, tree_net_fixed_us=fixed, tree_net_gbps=gbps)
    (again,) = judge(loso, [TABLES["aac14_mi355x_2node"]], leave_one_out=False)
    assert [r[:2] for r in again.rows] == [r[:2] for r in judged["aac14_mi355x_2node"].rows]
    assert [x for r in again.rows for x in r[2:]] == pytest.approx(
        [x for r in judged["aac14_mi355x_2node"].rows for x in r[2:]], rel=1e-9)
    a, b = _times("aac14_mi355x_2node"), _times("alib_mi355x_2node")
    ratios = [a[n] / b[n] for n in a if 4 * MIB <= n <= 64 * MIB]
    assert 1.45 < max(ratios) < 1.55                                 # "up to 1.5x"


def test_the_tree_across_gfx942_nodes_takes_the_same_constants_and_says_what_its_table_runs(
        ) -> None:
    """gfx942 is priced with the constants fitted on gfx950; the one citable MI300X table with
    tree sizes (RCCL 2.22.3) takes 1.3-6x what both MI355X clusters take at the same sizes, and
    0.9-5.5x the model: the note computes and says so."""
    (gfx942,), _ = rccl_allreduce_times(2, [MIB])
    (gfx950,), _ = rccl_allreduce_times(2, [MIB], arch="gfx950")
    assert (gfx942.choice.algorithm, gfx942.choice.protocol) == ("tree", "LL")
    assert gfx942.seconds == pytest.approx(
        (SHIPPED.tree_net_fixed_us + 2 * MIB / (1e3 * SHIPPED.tree_net_gbps)) * 1e-6)
    assert gfx950.choice.protocol == "LL128"   # table 6's override: a different choice
    note = tree_note([gfx942])
    assert "gfx942 takes the same constants; its published tree sizes run 0.9-5.5x" in note
    (aac10,) = judge(tables=[TABLES["aac10_mi300x_2node"]])
    rows = {n: (t, m) for n, t, m, _ in aac10.rows}
    ratios = [t / m for n, (t, m) in rows.items() if n <= 256 * MIB]
    assert round(min(ratios), 1) == 0.9 and round(max(ratios), 1) == 5.5
    assert tree_note(rccl_allreduce_times(2, [MIB], arch="gfx950")[0]).count("gfx942") == 0
    mi300 = _times("aac10_mi300x_2node")
    ratios = [mi300[n] / other[n]
              for other in (_times("aac14_mi355x_2node"), _times("alib_mi355x_2node"))
              for n in mi300 if n in other and 64 << 10 <= n <= 128 * MIB]
    assert 1.3 <= min(ratios) < 1.4 and 5.9 < max(ratios) < 6.05


def test_the_lines_say_what_the_tree_rests_on() -> None:
    rows, _ = rccl_allreduce_times(4, [MIB, 1 << 30], arch="gfx950")
    text = "\n".join(time_lines(rows, 4, "2.26.6", "gfx950", notes=[tree_note(rows)]))
    assert "not priced" not in text and all(len(ln) <= 110 for ln in text.splitlines())
    flat = " ".join(ln.lstrip("# ") for ln in text.splitlines() if ln.startswith("#"))
    assert "fitted on the tree sizes of 2 published 2 x 8 MI355X tables" in flat
    assert "median |error| 14-17%" in flat and "beyond two nodes" in flat
    ring, _ = rccl_allreduce_times(2, [1 << 30], arch="gfx950")
    assert tree_note(ring) == ""


def test_rccls_tree_latency_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="protocol must be one of LL, LL128, Simple, got 'LL64'"):
        tree_latency_us(2, "LL64")
    with pytest.raises(ValueError, match="nodes"):
        tree_latency_us(0, "LL")
    with pytest.raises(ValueError, match="gfx90a"):
        tree_latency_us(2, "LL", arch="gfx90a")
