"""RCCL's allreduce choice on gfx942 nodes: RCCL's own rules hold at every size, node count and
release (property), the estimate reproduces hand derivations from RCCL's formulas, releases
resolve with a note, bad input is refused."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.rccl import RCCL_TABLES, rccl_allreduce_choices, resolve_release
from distlab.rccl.tuning import MSCCL_SIMPLE_FROM, XGMI_BUS_GBPS

RELEASES = sorted(RCCL_TABLES)


@settings(max_examples=200, deadline=None)
@given(nodes=st.integers(1, 64), release=st.sampled_from(RELEASES),
       sizes=st.lists(st.integers(1, 1 << 36), min_size=1, max_size=6),
       msccl=st.booleans(), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_every_choice_follows_rccls_three_steps(nodes: int, release: str, sizes: list[int],
                                                msccl: bool, dtype: str) -> None:
    t = RCCL_TABLES[release]
    choices, note = rccl_allreduce_choices(nodes, sizes, release=release, msccl=msccl,
                                           dtype=dtype)
    assert note == "" and [c.nbytes for c in choices] == sizes
    for c in choices:
        pairs = {(k.algorithm, k.protocol) for k in c.candidates}
        assert all(k.time_us > k.latency_us > 0 and k.algbw_gbps > 0 for k in c.candidates)
        if nodes == 1:   # one node: no Tree/Simple, never LL128
            assert ("tree", "Simple") not in pairs and all(p != "LL128" for _, p in pairs)
        else:
            assert (("ring", "LL128") in pairs) == t.ll128_multinode
        skip = dtype == "bfloat16" and t.msccl_skips_bf16_over is not None and \
            c.nbytes > t.msccl_skips_bf16_over
        if nodes == 1 and msccl and c.nbytes <= t.msccl_max_bytes and not skip:
            assert (c.path, c.algorithm, c.estimate_us) == ("msccl", "allpairs", None)
            assert c.protocol == ("LL" if c.nbytes < MSCCL_SIMPLE_FROM else "Simple")
            continue
        best = min(c.candidates, key=lambda k: k.time_us)
        assert c.algorithm == best.algorithm
        if c.path == "cost model":
            assert (c.protocol, c.estimate_us) == (best.protocol, best.time_us)
        else:   # the override keeps the algorithm, changes the protocol (2.26.6 on, >1 node)
            assert c.path == "cost model + protocol override" and nodes > 1
            assert t.ll_max_bytes is not None and t.ll128_max_bytes is not None
            ll128_max = t.ll128_max_bytes * (3.8 if nodes > 2 else 1)
            assert c.protocol != best.protocol
            assert c.protocol == ("LL" if c.nbytes <= t.ll_max_bytes else
                                  "LL128" if c.nbytes <= ll128_max else "Simple")


def _ring(release: str, protocol: str, n: int = 8) -> tuple[float, float]:
    """(latency us, algorithm bandwidth GB/s) of a one-node ring, from the tables as RCCL's
    ncclTopoTuneModel combines them, written out again here."""
    t = RCCL_TABLES[release]
    p = ["LL", "LL128", "Simple"].index(protocol)
    lat = t.base_lat_us[p] + 2 * (n - 1) * t.xgmi_lat_us["ring"][p]
    return lat, XGMI_BUS_GBPS * t.bw_ratio[0]["ring"][p] * n / (2 * (n - 1))


@pytest.mark.parametrize(("release", "crossover"), [("2.20.5", 5.90e6), ("2.21.5", 3.87e5)])
def test_one_node_ll_gives_way_to_simple_where_the_two_estimates_cross(
        release: str, crossover: float) -> None:
    """docs/research/2026-11-27-rccl.md 2.9: the LL/Simple crossover moved from ~5.9 MB to
    ~0.39 MB when ROCm 6.3 cut Ring/LL's bandwidth ratio from 0.41 to 0.08."""
    (ll_lat, ll_bw), (s_lat, s_bw) = _ring(release, "LL"), _ring(release, "Simple")
    at = (s_lat - ll_lat) / (1 / (1000 * ll_bw) - 1 / (1000 * s_bw))
    assert at == pytest.approx(crossover, rel=0.01)
    below, above = int(at * 0.98), int(at * 1.02)
    # the crossover sizes sit between power-of-two correction buckets of equal factor on one
    # node (rings take no correction there), so the choice flips exactly at the crossing
    choices, _ = rccl_allreduce_choices(1, [below, above], release=release, msccl=False)
    assert [(c.algorithm, c.protocol) for c in choices] == [("ring", "LL"), ("ring", "Simple")]


def test_two_nodes_use_the_tree_below_hundreds_of_mib_as_the_research_derived() -> None:
    """The worked numbers of docs/research/2026-11-27-rccl.md (2 x 8 MI300X, 2.21.5's
    tables): 64 KiB Tree/LL about 52 us, 16 MiB Tree/Simple about 1.0 ms; rings only from
    512 MiB."""
    sizes = [64 << 10, 16 << 20, 256 << 20, 512 << 20]
    c64k, c16m, c256m, c512m = rccl_allreduce_choices(2, sizes, release="2.21.5")[0]
    assert (c64k.algorithm, c64k.protocol) == ("tree", "LL")
    # 12 + 2 (7 x 0.9 + 10.5) us latency, 336 x 0.06 / 2 GB/s at correction 1.0
    assert c64k.estimate_us == pytest.approx(12 + 2 * (7 * 0.9 + 10.5) + 65536 / 10080)
    assert (c16m.algorithm, c16m.protocol) == ("tree", "Simple")
    assert c16m.estimate_us == pytest.approx(17 + 2 * (7 * 2.3 + 25.0) + (16 << 20) / 18480)
    assert c256m.algorithm == "tree" and c512m.algorithm == "ring"
    # 2.26.6 turns the ring on from 128 MiB: its ring correction is 1.0 at 256 MiB, 0.1 below
    later = rccl_allreduce_choices(2, [64 << 20, 128 << 20], release="2.26.6")[0]
    assert [c.algorithm for c in later] == ["tree", "ring"]


def test_the_protocol_override_runs_ll128_up_to_9_mib_and_3_8x_that_beyond_two_nodes() -> None:
    size = 20 << 20     # above 9 MiB, below 9 MiB x 3.8
    two, four = (rccl_allreduce_choices(n, [4 << 20, size], release="2.26.6")[0]
                 for n in (2, 4))
    assert [c.protocol for c in two] == ["LL128", "Simple"]
    assert [c.protocol for c in four] == ["LL128", "LL128"]
    assert all(c.path == "cost model + protocol override" for c in (two[0], *four))
    assert all(math.isfinite(c.estimate_us or math.nan) for c in (*two, *four))


def test_bf16_over_8_mib_skips_msccl_from_2_26_6() -> None:
    size = 12 << 20
    (f32,), _ = rccl_allreduce_choices(1, [size], release="2.26.6")
    (bf16,), _ = rccl_allreduce_choices(1, [size], release="2.26.6", dtype="bfloat16")
    (old,), _ = rccl_allreduce_choices(1, [size], release="2.21.5", dtype="bfloat16")
    assert (f32.path, bf16.path, old.path) == ("msccl", "cost model", "msccl")


@pytest.mark.parametrize(("asked", "tables", "says"), [
    ("2.21.5", "2.21.5", ""), ("2.21", "2.21.5", ""), ("rocm-6.3", "2.21.5", ""),
    ("rocm-6.2.4", "2.20.5", ""), ("2.22.3", "2.21.5", "may choose as 2.26.6"),
    ("rocm-6.4", "2.21.5", "ROCm 6.4.2"), ("rocm-7.1", "2.26.6", "2.27.7 reads the same"),
    ("2.28.3", "2.26.6", "newer than"), ("2.18.6", "2.20.5", "older than"),
    ("2.24.3", "2.21.5", "between"), (None, "2.26.6", "")])
def test_releases_resolve_to_the_tables_that_price_them(asked: str | None, tables: str,
                                                        says: str) -> None:
    r = resolve_release(asked)
    assert r.tables.release == tables
    assert (says in r.note) if says else r.note == ""


@pytest.mark.parametrize(("call", "error", "needle"), [
    (lambda: rccl_allreduce_choices(0, [1]), ValueError, "nodes"),
    (lambda: rccl_allreduce_choices(1, [0]), ValueError, "size"),
    (lambda: rccl_allreduce_choices(1, [1.5]), TypeError, "size"),
    (lambda: resolve_release("two"), ValueError, "an RCCL release like 2.21.5"),
    (lambda: resolve_release("rocm-5.7"), ValueError, "ROCm 5.7"),
    (lambda: resolve_release(2.21), TypeError, "string"),
    # a ROCm release without its prefix is not read as RCCL 6.4.1 (priced as 2.26.6)
    (lambda: resolve_release("6.4.1"), ValueError,
     r"release '6.4.1' is not an RCCL release \(RCCL's are 2.x.*write 'rocm-6.4.1'"),
    (lambda: rccl_allreduce_choices(1, [1], release="7.0"), ValueError, "write 'rocm-7.0'"),
    (lambda: rccl_allreduce_choices(1, [1], dtype="bfloat"), ValueError,
     "dtype must be one of float32"),
    (lambda: rccl_allreduce_choices(1, [1], dtype=2), TypeError, "dtype must be a dtype name"),
    (lambda: rccl_allreduce_choices(1, [1], msccl="no"), TypeError, "msccl must be a bool"),
    (lambda: rccl_allreduce_choices(1, [1], amd_host=1), TypeError, "amd_host must be a bool"),
    (lambda: rccl_allreduce_choices(1, "1M"), TypeError, "sizes_bytes must be a sequence")])
def test_bad_input_is_refused_naming_it(call, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle):
        call()


@pytest.mark.parametrize("spelled", ["bfloat16", "bf16", "torch.bfloat16", "BFloat16"])
def test_every_spelling_of_bfloat16_takes_the_bf16_rule(spelled) -> None:
    """From 2.26.6, bf16 above 8 MiB skips MSCCL: "bf16" and "torch.bfloat16" were compared
    with "bfloat16" as written and silently took float32's path."""
    import torch

    big = 16 << 20
    paths = {d: rccl_allreduce_choices(1, [big], dtype=d)[0][0].path
             for d in (spelled, torch.bfloat16, "float32")}
    assert paths[spelled] == paths[torch.bfloat16] == "cost model"
    assert paths["float32"] == "msccl"


def test_a_rocm_release_resolves_with_its_prefix() -> None:
    assert resolve_release("rocm-6.4.1").tables.release == resolve_release("2.22.3").tables.release
