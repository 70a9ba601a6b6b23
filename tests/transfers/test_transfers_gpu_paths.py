"""The multi-GPU copy measurements on every fake box: the pairs a matrix holds, the routes it
labels, host-to-all's runs and bindings, and the bytes each copy moved (checked, not assumed)."""

from __future__ import annotations

import pytest
import torch

from distlab.transfers.gpu_box import (
    REHEARSAL_BOXES,
    Copy,
    RehearsalBox,
    box_here,
    node_cpus,
    parse_cpu_list,
)
from distlab.transfers.gpu_topology import dgx_h100_like, parse_topology
from distlab.transfers.host_to_all import host_to_all_rows
from distlab.transfers.peer_matrix import matrix_lines, peer_rows

SIZES = [4, 64 * 1024]


def test_cpu_lists_parse_as_taskset_prints_them() -> None:
    assert parse_cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("") == set()
    for bad in ("a-3", "3-1", "1-b"):
        with pytest.raises(ValueError, match="CPU list"):
            parse_cpu_list(bad)


def test_node_cpus_are_the_nodes_gpus_affinity_within_this_process() -> None:
    topo = parse_topology(dgx_h100_like())
    cpus, why = node_cpus(topo, 1, set(range(224)))
    assert cpus == set(range(56, 112)) | set(range(168, 224)) and why == ""
    cpus, why = node_cpus(topo, 1, {0, 1})
    assert cpus == set() and "not among this process's CPUs" in why
    assert node_cpus(topo, 5, {0})[1] == "nvidia-smi topo -m lists no CPUs for NUMA node 5"


@pytest.mark.parametrize("name, gpus, pairs", [("dgx_h100_like", 8, 56),
                                               ("pcie_two_switches", 4, 12),
                                               ("pcie_peer_off", 4, 12)])
def test_matrix_has_every_ordered_pair_one_way_and_each_unordered_pair_both_ways(
        name: str, gpus: int, pairs: int) -> None:
    box = RehearsalBox(name)
    rows, why = peer_rows(box, SIZES, repeats=1, iters=1, warmup=0)
    assert why is None and box.n_gpus == gpus
    for n in SIZES:
        one = {(r.src, r.dst) for r in rows if r.nbytes == n and r.direction == "one-way"}
        both = [(r.src, r.dst) for r in rows if r.nbytes == n and r.direction == "both"]
        assert len(one) == pairs and all(s != d for s, d in one)
        assert len(both) == pairs // 2 and {frozenset(p) for p in both} == \
            {frozenset(p) for p in one}
    assert all(r.wrong == 0 and r.rehearsal and r.gbps > 0 for r in rows)


def test_routes_follow_the_topology_and_peer_access() -> None:
    on = {(r.src, r.dst): r for r in peer_rows(RehearsalBox("pcie_two_switches"), [4],
                                               repeats=1, iters=1, warmup=0)[0]}
    off = {(r.src, r.dst): r for r in peer_rows(RehearsalBox("pcie_peer_off"), [4],
                                                repeats=1, iters=1, warmup=0)[0]}
    assert on[(0, 1)].route == "peer over PIX" and on[(0, 2)].route == "peer over SYS"
    assert off[(0, 1)].route == "staged through host memory (peer access off)"
    assert off[(0, 1)].path == "PIX"        # the link is still labelled
    dgx = peer_rows(RehearsalBox("dgx_h100_like"), [4], repeats=1, iters=1, warmup=0)[0]
    assert {r.path for r in dgx} == {"NV18"}


def test_one_gpu_and_no_gpu_are_one_line_each() -> None:
    rows, why = peer_rows(RehearsalBox("single_gpu"), SIZES)
    assert rows == [] and why == "skipped: GPU-to-GPU copies need two GPUs, this box has 1"
    h2a, lines = host_to_all_rows(RehearsalBox("single_gpu"), 1024)
    assert h2a == [] and lines == ["skipped: host-to-all on one GPU is the h2d row "
                                   "(transfers part)"]
    if not torch.cuda.is_available():
        assert box_here() == (None, "no CUDA device (torch.cuda.is_available() is False)")
    assert box_here("pcie_two_switches")[0].rehearsal


def test_wrong_bytes_are_counted() -> None:
    class Lossy(RehearsalBox):
        def time_together(self, copies: list[Copy], iters: int) -> list[float]:
            out = super().time_together(copies, iters)
            for c in copies:
                c.dst[:3] = 255       # three bytes wrong in every copy (the pattern is < 251)
            return out

    rows, _ = peer_rows(Lossy("pcie_two_switches"), [1024], repeats=1, iters=1, warmup=0)
    assert {r.wrong for r in rows if r.direction == "one-way"} == {3}
    assert {r.wrong for r in rows if r.direction == "both"} == {6}


@pytest.mark.parametrize("name", ["dgx_h100_like", "pcie_two_switches"])
def test_host_to_all_runs_local_and_remote_each_gpu_and_the_aggregate(name: str) -> None:
    box = RehearsalBox(name)
    rows, skipped = host_to_all_rows(box, 4096, repeats=1, iters=1, warmup=0)
    assert skipped == []
    for run in ("local", "remote"):
        for direction in ("h2d", "d2h"):
            mine = [r for r in rows if r.run == run and r.direction == direction]
            per = [r for r in mine if r.gpu != "all"]
            agg = [r for r in mine if r.gpu == "all"]
            assert [r.gpu for r in per] == list(range(box.n_gpus)) and len(agg) == 1
            assert agg[0].nbytes == 4096 * box.n_gpus
            assert agg[0].time_us == pytest.approx(max(r.time_us for r in per), rel=1e-12)
            assert all(r.wrong == 0 for r in mine)
    local = {r.gpu: r.node for r in rows if r.run == "local" and r.gpu != "all"}
    remote = {r.gpu: r.node for r in rows if r.run == "remote" and r.gpu != "all"}
    assert all(local[g] != remote[g] for g in local)
    assert all(r.bound in ("node 0", "node 1", "unbound") for r in rows if r.gpu != "all")
    assert all(r.why for r in rows if r.bound == "unbound")


def test_matrix_lines_read_as_src_by_dst() -> None:
    box = RehearsalBox("pcie_two_switches")
    rows, _ = peer_rows(box, SIZES, repeats=1, iters=1, warmup=0)
    lines = matrix_lines([r.as_dict() for r in rows], box.n_gpus)
    path_at = lines.index("path (nvidia-smi topo -m) (rehearsal: host memory stands in for "
                          "each GPU)")
    assert lines[path_at + 2].split() == ["0", "-", "PIX", "SYS", "SYS"]
    assert max(map(len, lines)) <= 110
    assert matrix_lines([], 4) == []


def test_every_rehearsal_box_is_named_for_what_it_fakes() -> None:
    for name in REHEARSAL_BOXES:
        box = RehearsalBox(name)
        assert box.describe() == {"box": f"rehearsal:{name}", "gpus": box.n_gpus,
                                  "rehearsal": True}
    with pytest.raises(ValueError, match="box"):
        RehearsalBox("dgx_b200")
