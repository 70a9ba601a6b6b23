"""``nvidia-smi topo -m`` read as the real tool prints it (the committed H100's, ANSI codes and
empty fields included) and on the fake boxes the multi-GPU parts rehearse on; the pairs a GPU-to-GPU
matrix measures, or one skipped line."""

from __future__ import annotations

import json

import pytest

from distlab.transfers.gpu_topology import (
    FAKE_TOPOLOGIES,
    copy_route,
    dgx_h100_like,
    parse_topology,
    path_rank,
    pcie_two_switches,
    peer_pairs,
)
from helpers.paths import PROFILES


def test_the_committed_h100_topology() -> None:
    env = json.loads((PROFILES / "h100-2026-11-23" / "env.json").read_text())
    topo = parse_topology(env["facts"]["gpu_topology"])
    assert topo.gpus == ("GPU0",) and topo.path(0, 0) == "X"
    assert topo.numa == {"GPU0": 0} and topo.cpus == {"GPU0": "0-15"}


def test_dgx_h100_like_box() -> None:
    topo = parse_topology(dgx_h100_like())
    assert len(topo.gpus) == 8
    assert {topo.nvlinks(a, b) for a in range(8) for b in range(8) if a != b} == {18}
    assert [topo.numa[g] for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.cpus["GPU5"] == "56-111,168-223"


def test_pcie_box_with_two_switches() -> None:
    topo = parse_topology(pcie_two_switches())
    assert topo.path(0, 1) == "PIX" and topo.path(2, 3) == "PIX"
    assert topo.path(1, 2) == "SYS" and topo.nvlinks(1, 2) == 0
    assert path_rank(topo.path(0, 1)) < path_rank(topo.path(0, 2))
    with pytest.raises(ValueError, match="no path between GPU0 and GPU7"):
        topo.path(0, 7)


@pytest.mark.parametrize("name", sorted(FAKE_TOPOLOGIES))
def test_every_fake_is_symmetric_and_self_is_x(name) -> None:
    topo = parse_topology(FAKE_TOPOLOGIES[name]())
    for a in topo.gpus:
        assert topo.path(a, a) == "X"
        for b in topo.gpus:
            assert topo.path(a, b) == topo.path(b, a)


@pytest.mark.parametrize("text, match", [
    ("no matrix here", "no header line naming GPU0"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n", "asymmetric"),
    ("\tGPU0\tGPU1\nGPU0\t X \tWARP\nGPU1\tWARP\t X \n", "unknown topology path 'WARP'"),
    ("\tGPU0\tGPU1\nGPU0\t X \n", "row GPU0 has 1 cells for 2 devices"),
])
def test_bad_text_is_refused_with_the_reason(text, match) -> None:
    with pytest.raises(ValueError, match=match):
        parse_topology(text)


@pytest.mark.parametrize("n, pairs", [(0, 0), (1, 0), (2, 2), (8, 56)])
def test_pairs_a_matrix_measures(n, pairs) -> None:
    got, why = peer_pairs(None, n)
    assert len(got) == pairs and all(a != b for a, b in got)
    assert (why is None) == (n >= 2)
    if why:
        assert why.startswith("skipped: ") and "\n" not in why


def test_a_topology_naming_other_gpus_is_said_not_guessed() -> None:
    got, why = peer_pairs(parse_topology(dgx_h100_like()), 4)
    assert got == [] and "names 8 GPUs, torch sees 4" in why
    with pytest.raises(ValueError):
        peer_pairs(None, -1)


def test_peer_access_off_is_a_host_staged_copy_whatever_the_link() -> None:
    topo = parse_topology(dgx_h100_like())
    assert copy_route(topo, 0, 5, peer_access=True) == "peer over NV18"
    assert copy_route(topo, 0, 5, peer_access=False).startswith("staged through host memory")
    assert copy_route(None, 0, 1, peer_access=True) == "peer over an unlabelled path"
