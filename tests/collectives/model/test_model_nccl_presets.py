"""Every box and network preset is priced, each one's NCCL figures follow NCCL's source, and a bad
name is one line that lists the known ones."""

from __future__ import annotations

import math

import pytest

from distlab.collectives import predict_builtin
from distlab.nccl.boxes import GPU_BOXES, gpu_box, nccl_graphs
from distlab.nccl.execution import (
    HARNESSES,
    nccl_execution,
    nvls_channels,
    shipped_constants,
)
from distlab.nccl.multinode import NETWORKS, multinode_graphs

SIZES = [1 << k for k in range(12, 35, 2)]


@pytest.mark.parametrize("box", sorted(GPU_BOXES))
@pytest.mark.parametrize("model", ["estimate", "measured"])
def test_every_box_is_priced_on_all_its_gpus(box: str, model: str) -> None:
    n = GPU_BOXES[box].gpus
    t = predict_builtin(box, n, SIZES, nccl_model=model, harness="nccl-tests")
    assert all(math.isfinite(x) and x > 0 for x in t)
    # non-decreasing: under nccl-tests the host's enqueue floor holds the smallest sizes level
    assert all(a <= b for a, b in zip(t, t[1:], strict=False)) and t[0] < t[-1]


@pytest.mark.parametrize("net", sorted(NETWORKS))
@pytest.mark.parametrize("box", ["h100_sxm8", "b200_sxm8", "a100_sxm8", "l40s_pcie8"])
def test_every_network_is_priced_across_two_nodes(net: str, box: str) -> None:
    n = 2 * GPU_BOXES[box].gpus
    for v in ("2.28", "2.30"):
        t = predict_builtin(box, n, SIZES, nccl_model="measured", nodes=2, network=net,
                            nccl_version=v)
        assert all(math.isfinite(x) and x > 0 for x in t)


@pytest.mark.parametrize(("bad", "kind"), [("b200", "preset"), ("H100_SXM8", "preset"),
                                           ("efa", "network")])
def test_a_bad_name_is_one_line_listing_the_known_ones(bad: str, kind: str) -> None:
    with pytest.raises(ValueError) as err:
        if kind == "preset":
            gpu_box(bad)
        else:
            predict_builtin("h100_sxm8", 16, [1 << 20], nccl_model="measured", nodes=2,
                            network=bad)
    text = str(err.value)
    assert "\n" not in text and repr(bad) in text
    for known in (GPU_BOXES if kind == "preset" else NETWORKS):
        assert repr(known) in text


def test_h200_is_h100s_fabric_and_b200_nccl_credits_nvlink_5() -> None:
    # topo.h: SM90_NVLINK_BW 20.6 and SM100_NVLINK_BW 40.1 GB/s per link, 18 links each
    assert GPU_BOXES["h200_sxm8"].nccl_link_gbps == pytest.approx(18 * 20.6)
    assert GPU_BOXES["b200_sxm8"].nccl_link_gbps == pytest.approx(18 * 40.1)
    assert nccl_graphs("h200_sxm8", 8) == nccl_graphs("h100_sxm8", 8)
    # search.cc sm100SpeedArrayIntra starts at 90: 8 channels of 90 fill 721.8 GB/s, then
    # ncclTopoDupChannels doubles them at half speed
    ring = nccl_graphs("b200_sxm8", 8)["ring"]
    assert (ring.n_channels, ring.bw_intra_gbps) == (16, 45.0)


def test_two_socket_pcie_boxes_cross_the_cpu_link_on_sys_paths() -> None:
    # topo.h SRP_QPI_BW 22 / AMD_BW 16 bound every channel, below PCIe Gen4 x16's 24 GB/s
    for key, cpu in (("l40s_pcie8", 22.0), ("a100_pcie8", 16.0)):
        b = GPU_BOXES[key]
        assert b.path == "SYS" and b.nccl_link_gbps == cpu
        g = nccl_graphs(b, 8)
        assert g["ring"].path == "SYS" and g["ring"].busbw_gbps <= cpu
        assert "nvls" not in g
    assert GPU_BOXES["pcie4_8"].path == "PCI" and GPU_BOXES["pcie4_8"].nccl_link_gbps == 24.0
    # no LL128 off NVLink, as on every PCIe box
    picks = {(e.algorithm, e.protocol) for e in nccl_execution("l40s_pcie8", 8, SIZES)}
    assert all(p != "LL128" for _, p in picks)


def test_gb200_is_one_nvlink_domain_with_hosts_of_four() -> None:
    b = GPU_BOXES["gb200_nvl72"]
    assert (b.gpus, b.gpus_per_host, b.nvlink_domain, b.cpu_vendor) == (72, 4, 72, "arm")
    assert GPU_BOXES["gb200_nvl36"].gpus == 36
    # one -g process drives at most one host's 4 GPUs, not the 72 of the domain
    c = shipped_constants()
    assert HARNESSES["nccl-tests"].host_us(c, 72, b) == pytest.approx(4 * c.host_us_per_gpu)
    assert HARNESSES["nccl-tests"].host_us(c, 8, "h100_sxm8") == pytest.approx(
        8 * c.host_us_per_gpu)
    # nvls.cc: 24 NVLS channels on Blackwell inside one NVLink domain, 32 across, 16 on Hopper
    assert nvls_channels(b) == 24 and nvls_channels(b, multinode=True) == 32
    assert nvls_channels(gpu_box("h100_sxm8")) == 16
    # search.cc: NVLS has one head per GPU, at most NCCL_MAX_NVLS_ARITY 32
    assert nccl_graphs(b, 72)["nvls"].n_channels == 32
    (e,) = nccl_execution(b, 72, [1 << 30])
    assert (e.algorithm, e.channels) == ("nvls", 24)


def test_efa_and_gcp_networks_follow_the_vendor_figures() -> None:
    # mbps / 8000 per NIC (topo.cc ncclTopoAddNet), NICs per node from the vendors' pages
    assert (NETWORKS["efa400"].nic_gbps, NETWORKS["efa400"].rails) == (12.5, 4)
    assert (NETWORKS["efa3200"].nic_gbps, NETWORKS["efa3200"].rails) == (12.5, 32)
    assert (NETWORKS["efa3200_p5en"].nic_gbps, NETWORKS["efa3200_p5en"].rails) == (25.0, 16)
    assert (NETWORKS["gcp_tcpxo"].nic_gbps, NETWORKS["gcp_tcpxo"].rails) == (25.0, 8)
    assert (NETWORKS["gcp_roce400x8"].nic_gbps, NETWORKS["gcp_roce400x8"].rails) == (50.0, 8)
    # p4d's 4 NICs hold fewer channels than p5's 32: the network bounds the ring
    p4d = multinode_graphs(gpu_box("a100_sxm8"), 2, NETWORKS["efa400"])
    p5 = multinode_graphs(gpu_box("a100_sxm8"), 2, NETWORKS["efa3200"])
    assert p4d.n_channels * p4d.speed_gbps <= 4 * 12.5 < p5.n_channels * p5.speed_gbps
    # SHARP needs CollNet, off by default: the preset prices NCCL's default run
    sharp = predict_builtin("h100_sxm8", 16, SIZES, nccl_model="measured", nodes=2,
                            network="ib_ndr400x8_sharp")
    plain = predict_builtin("h100_sxm8", 16, SIZES, nccl_model="measured", nodes=2,
                            network="ib_ndr400x8")
    assert sharp == plain and "CollNet" in NETWORKS["ib_ndr400x8_sharp"].source


def test_2_30_raises_blackwell_nvls_tree_across_four_nodes_and_leaves_hopper() -> None:
    # tuning.cc perChMaxNVLSTreeBws Blackwell N4: 43.8 -> 80 GB/s per channel in 2.30.7, so
    # NCCL's estimate now prefers NVLS-Tree to the ring at 4 GiB on 4 nodes of B200
    big = [1 << 32]
    b200 = {v: nccl_execution("b200_sxm8", 32, big, nodes=4, network="ib_ndr400x8",
                              nccl_version=v)[0] for v in ("2.28", "2.30")}
    assert (b200["2.28"].algorithm, b200["2.30"].algorithm) == ("ring", "nvls_tree")
    assert b200["2.30"].estimate_us < b200["2.28"].estimate_us
    h100 = [nccl_execution("h100_sxm8", 32, big, nodes=4, network="ib_ndr400x8",
                           nccl_version=v)[0] for v in ("2.28", "2.30")]
    assert h100[0] == h100[1]  # the Hopper rows did not move
