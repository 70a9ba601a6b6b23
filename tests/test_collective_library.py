"""The one collective-library interface (:mod:`distlab.collective_library`): NCCL's and RCCL's
models fill it alike (the same types, seconds), and give what their own functions give."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collective_library import (
    CollectiveLibrary,
    LibraryRelease,
    SizeChoice,
    SizeTime,
    load_published,
)
from distlab.evidence.nccl.published import published_tables
from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.nccl.library import NCCL
from distlab.rccl.execution import rccl_allreduce_times
from distlab.rccl.library import RCCL

REL = 1e-12
"""Relative tolerance between the interface's seconds and the package's own: the same float
arithmetic, at most a unit conversion apart."""

SIZES = st.lists(st.integers(min_value=1, max_value=2**31), min_size=1, max_size=4)


def _check_types(rows: list[SizeTime], sizes: list[int]) -> None:
    assert [r.choice.nbytes for r in rows] == sizes
    for r in rows:
        assert isinstance(r, SizeTime) and isinstance(r.choice, SizeChoice)
        assert isinstance(r.why, str)
        if r.seconds is None:
            assert r.why
        else:
            assert isinstance(r.seconds, float) and 0 < r.seconds < 10
        est = r.choice.estimate_seconds
        assert est is None or (isinstance(est, float) and 0 < est < 10)


@pytest.mark.parametrize("lib", [NCCL, RCCL], ids=["nccl", "rccl"])
def test_both_fill_the_interface(lib: CollectiveLibrary) -> None:
    assert isinstance(lib, CollectiveLibrary)
    release = lib.resolve_release()
    assert isinstance(release, LibraryRelease) and release.library == lib.name
    assert release.note == "" and release.priced_as
    for key in lib.networks():
        net = lib.network(key)
        assert net.key == key and net.nic_gbps > 0 and net.rails >= 1
    with pytest.raises(ValueError, match="network must be one of"):
        lib.network("nope")


@settings(max_examples=25, deadline=None)
@given(sizes=SIZES, nodes=st.sampled_from([1, 2, 4]))
def test_nccl_through_the_interface_is_nccl(sizes: list[int], nodes: int) -> None:
    network = "ib_ndr400x8" if nodes > 1 else None
    rows = NCCL.times("h100_sxm8", 8 * nodes, sizes, nodes=nodes, network=network)
    _check_types(rows, sizes)
    own = nccl_execution("h100_sxm8", 8 * nodes, sizes, nodes=nodes, network=network)
    for r, e in zip(rows, own, strict=True):
        assert r.seconds is not None and math.isclose(r.seconds, e.seconds, rel_tol=REL)
        assert (r.choice.algorithm, r.choice.protocol) == (e.algorithm, e.protocol)
        assert r.choice.estimate_seconds is not None
        assert math.isclose(r.choice.estimate_seconds, e.estimate_us * 1e-6, rel_tol=REL)


@settings(max_examples=25, deadline=None)
@given(sizes=SIZES, nodes=st.sampled_from([1, 2, 4]),
       box=st.sampled_from(["mi300x_8", "mi325x_8", "mi355x_8"]))
def test_rccl_through_the_interface_is_rccl(sizes: list[int], nodes: int, box: str) -> None:
    arch = "gfx950" if box == "mi355x_8" else "gfx942"
    rows = RCCL.times(box, 8 * nodes, sizes, nodes=nodes)
    _check_types(rows, sizes)
    own, _ = rccl_allreduce_times(nodes, sizes, arch=arch)
    for r, t in zip(rows, own, strict=True):
        assert (r.seconds is None) == (t.seconds is None) and r.why == t.why
        if r.seconds is not None and t.seconds is not None:
            assert math.isclose(r.seconds, t.seconds, rel_tol=REL)
        est = t.choice.estimate_us
        assert (r.choice.estimate_seconds is None) == (est is None)
        if r.choice.estimate_seconds is not None and est is not None:
            assert math.isclose(r.choice.estimate_seconds, est * 1e-6, rel_tol=REL)
    assert [c.algorithm for c in RCCL.choices(box, 8 * nodes, sizes, nodes=nodes)] == \
        [t.choice.algorithm for t in own]


def test_what_a_model_does_not_price_says_why() -> None:
    (row,) = RCCL.times("mi300x_8", 4, [1 << 20])
    assert row.seconds is None and "whole 8-GPU nodes only" in row.why
    (row,) = RCCL.times("mi300x_8", 8, [1 << 20], collective="allgather")
    assert row.seconds is None and "allreduce only" in row.why
    (row,) = NCCL.times("h100_sxm8", 16, [1 << 20], collective="all_gather", nodes=2,
                        network="ib_ndr400x8")
    assert row.seconds is None and "across nodes" in row.why
    (row,) = NCCL.times("h100_sxm8", 8, [1 << 20], collective="all_gather")
    own = nccl_collective("h100_sxm8", 8, [1 << 20], "all_gather")[0].seconds
    assert row.seconds is not None and math.isclose(row.seconds, own, rel_tol=REL)
    with pytest.raises(ValueError, match="box must be one of mi300x_8"):
        RCCL.times("h100_sxm8", 8, [1])


def test_nccls_all_to_all_is_its_alltoall_model_in_one_node_and_across_nodes() -> None:
    """``collective="all_to_all"``: NCCL's all-to-all model (grouped send/recv, PXN across
    nodes) for the same fabric, across nodes at the network's NIC rate per GPU; RCCL says why
    it prices none."""
    from distlab.nccl.alltoall import alltoall_times, fabric
    from distlab.nccl.multinode import NETWORKS

    sizes = [1 << 20, 1 << 28]
    for world, nodes, network, nic in (
            (8, 1, None, 0.0), (4, 1, None, 0.0), (16, 2, "ib_ndr400x8", 50.0),
            (16, 2, "efa3200", 50.0), (16, 2, "efa400", 6.25), (8, 8, "ib_ndr400x8", 50.0)):
        rows = NCCL.times("h100_sxm8", world, sizes, collective="alltoall", nodes=nodes,
                          network=network)
        own = alltoall_times(fabric("h100_sxm8", world, nodes=nodes, nic_gbps=nic), sizes)
        for r, o in zip(rows, own, strict=True):
            assert r.seconds is not None and r.why == ""
            assert math.isclose(r.seconds, o.seconds, rel_tol=REL)
            assert (r.choice.nbytes, r.choice.algorithm, r.choice.protocol) == (
                o.nbytes, "p2p", o.layout.protocol)
            assert r.choice.estimate_seconds is None
        if network is not None:
            assert NETWORKS[network].gbps_per_gpu(world // nodes) == nic
    with pytest.raises(ValueError, match="needs a network"):
        NCCL.times("h100_sxm8", 16, sizes, collective="all_to_all", nodes=2)
    for nodes in (1, 2):
        (row,) = RCCL.times("mi300x_8", 8 * nodes, [1 << 20], collective="all_to_all",
                            nodes=nodes, network="cx7" if nodes > 1 else None)
        assert row.seconds is None and "all_to_all: not priced" in row.why


def test_one_loader_reads_a_package_table() -> None:
    assert load_published("distlab.evidence.nccl") == published_tables()
    assert "tables" in load_published("distlab.evidence.rccl")
