"""The network as NCCL holds it (merged ports, a plugin's rails and latency) and NVLS-Tree's
pipeline fill across nodes."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlab.nccl.boxes import gpu_box
from distlab.nccl.execution import nccl_execution
from distlab.nccl.multinode import (
    NETWORKS,
    multinode_graphs,
    multinode_table,
    net_hop_us,
    nvls_tree_fill_us,
)
from distlab.nccl.versions import NCCL_CONSTANTS


@pytest.mark.parametrize(("net", "release", "devices"), [
    ("ib_ndr400x8", None, (8, 50.0)), ("ib_ndr400x8", "2.18", (8, 50.0)),
    ("roce200x16", "2.18", (16, 25.0)),          # before NCCL merged a NIC's ports
    ("roce200x16", "2.20", (8, 50.0)), ("roce200x16", None, (8, 50.0)),
    ("roce100x16", "2.26", (8, 25.0)),
    ("efa3200", "2.18", (8, 50.0)),              # AWS's plugin groups, whatever the release
    ("efa3200_p5en", None, (8, 50.0)),
    ("efa400", None, (4, 12.5))])                # p4d: SENDRECV, no grouping
def test_devices_as_nccl_holds_them(net, release, devices) -> None:
    version = None if release is None else NCCL_CONSTANTS[release]
    assert NETWORKS[net].nccl_devices(version) == devices


def test_every_preset_keeps_its_line_rate_when_merged() -> None:
    """Merging changes how many devices NCCL sees, never the node's bandwidth."""
    for net in NETWORKS.values():
        for version in (None, *NCCL_CONSTANTS.values()):
            n, gbps = net.nccl_devices(version)
            assert n * gbps == pytest.approx(net.rails * net.nic_gbps), net.key
            assert net.rails % net.ports_per_device == 0, net.key
        assert net.merged_by in ("", "nccl", "plugin")
        assert (net.ports_per_device > 1) == bool(net.merged_by), net.key


def test_merged_roce_is_the_infiniband_box_to_nccl() -> None:
    """OCI's 16 x 200 Gb/s H100 shape under NCCL 2.21: the graph and NVLS-Tree's bandwidth of 8 x
    400 Gb/s InfiniBand (its published 2-node busbw is that box's); under 2.18 it is not."""
    box = gpu_box("h100_sxm8")
    v21, v18 = NCCL_CONSTANTS["2.20"], NCCL_CONSTANTS["2.18"]
    assert multinode_graphs(box, 2, NETWORKS["roce200x16"], version=v21) == \
        multinode_graphs(box, 2, NETWORKS["ib_ndr400x8"], version=v21)
    merged = {(e.algorithm, e.protocol): e.busbw_gbps
              for e in multinode_table(box, 16, 2, "roce200x16", version=v21)}
    ib = {(e.algorithm, e.protocol): e.busbw_gbps
          for e in multinode_table(box, 16, 2, "ib_ndr400x8", version=v21)}
    assert merged == ib
    old = {(e.algorithm, e.protocol): e.busbw_gbps
           for e in multinode_table(box, 16, 2, "roce200x16", version=v18)}
    assert old[("nvls_tree", "Simple")] < ib[("nvls_tree", "Simple")]


@pytest.mark.parametrize("box", ["h100_sxm8", "a100_sxm8", "b200_sxm8"])
def test_a_plugins_latency_is_added_to_each_network_hop_of_the_estimate(box) -> None:
    """``interLat += latencyInter`` (twice for Simple): the tree crosses ``log2(nodes)`` hops
    each way, a ring ``2(nodes - 1)``, NVLS-Tree ``2 log2(nodes)``."""
    efa = NETWORKS["efa400"]
    quiet = replace(efa, plugin_latency_us=0.0)
    for nodes in (2, 4):
        with_plugin = {(e.algorithm, e.protocol): e.latency_us
                       for e in multinode_table(box, 8 * nodes, nodes, efa)}
        without = {(e.algorithm, e.protocol): e.latency_us
                   for e in multinode_table(box, 8 * nodes, nodes, quiet)}
        hops = {"tree": 2 * int(math.log2(nodes)), "ring": 2 * (nodes - 1),
                "nvls_tree": 2 * int(math.log2(nodes))}
        for (a, p), lat in with_plugin.items():
            per_hop = 75.0 * (2 if p == "Simple" else 1)
            assert lat - without[(a, p)] == pytest.approx(hops[a] * per_hop), (a, p, nodes)


def test_a_plugins_latency_steers_the_choice_but_the_run_keeps_the_hardware_hops() -> None:
    """The same box over EFA with and without the plugin's 75 us: NCCL's estimate grows, and
    where it picks the same pair the priced run is the same."""
    sizes = [1 << k for k in range(16, 34, 2)]
    efa = NETWORKS["efa400"]
    quiet = replace(efa, plugin_latency_us=0.0)
    a = nccl_execution("a100_sxm8", 16, sizes, nodes=2, network=efa, harness="torch")
    b = nccl_execution("a100_sxm8", 16, sizes, nodes=2, network=quiet, harness="torch")
    assert all(x.estimate_us > y.estimate_us for x, y in zip(a, b, strict=True))
    same = [(x, y) for x, y in zip(a, b, strict=True)
            if (x.algorithm, x.protocol) == (y.algorithm, y.protocol)]
    assert same
    for x, y in same:
        assert x.latency_us == pytest.approx(y.latency_us)
        assert x.seconds == pytest.approx(y.seconds)


@given(transfer=st.floats(0.0, 1e6), chunk=st.integers(1, 1 << 20), channels=st.integers(1, 64),
       algbw=st.floats(0.1, 2000.0), depth=st.integers(2, 64))
def test_nvls_tree_fill_is_the_pipeline_fill_capped_by_the_transfer(transfer, chunk, channels,
                                                                    algbw, depth) -> None:
    fill = nvls_tree_fill_us(transfer, chunk, channels, algbw, depth)
    assert 0.0 <= fill <= transfer
    assert fill == pytest.approx(min(transfer, (depth - 1) * chunk * channels / (1e3 * algbw)))


def test_nvls_tree_across_nodes_pays_the_fill_not_the_nvls_step_waits() -> None:
    """2 x 8 H100 over 8 x 400 Gb/s: a 1 MiB allreduce moves at half speed (fewer chunks than
    the tree is deep), a 1 GiB one pays 15 chunk steps of 128 KiB on 16 channels."""
    small, large = nccl_execution("h100_sxm8", 16, [1 << 20, 1 << 30], nodes=2,
                                  network="ib_ndr400x8", harness="torch",
                                  algorithms=["nvls_tree"])
    assert small.sync_us == pytest.approx(small.transfer_us)
    algbw = (1 << 30) / (large.transfer_us * 1e3)
    assert large.chunk_bytes == 131072 and large.channels == 16
    assert large.sync_us == pytest.approx(15 * 131072 * 16 / (1e3 * algbw))


@pytest.mark.parametrize(("table", "protocol", "floor", "expected"), [
    (5.0, "LL", 0.0, 5.0), (5.0, "LL", 20.0, 20.0), (14.0, "Simple", 20.0, 23.0),
    (20.9, "Simple", 18.0, 21.0), (30.0, "LL128", 20.0, 30.0)])
def test_a_run_hop_is_the_tables_or_the_transports_whichever_is_longer(table, protocol, floor,
                                                                       expected) -> None:
    assert net_hop_us(table, protocol, floor) == pytest.approx(expected)


def test_efa_runs_pay_the_transports_hop_not_the_plugins_tuning_latency() -> None:
    """A 64 KiB tree/LL on 2 x p5: NCCL's estimate carries the plugin's 75 us per hop, the run
    the plugin tuner's 20 us hop in place of InfiniBand's 5 (two hops: up and down)."""
    ib, efa = (nccl_execution("h100_sxm8", 16, [65536], nodes=2, network=net, harness="torch",
                              algorithms=["tree"], protocols=["LL"])[0]
               for net in ("ib_ndr400x8", "efa3200"))
    assert efa.latency_us - ib.latency_us == pytest.approx(2 * (20.0 - 5.0))
    assert efa.estimate_us - ib.estimate_us == pytest.approx(2 * 75.0, rel=0.05)


def test_the_wire_graph_takes_the_specified_nvlink_on_nvswitch_boxes_only() -> None:
    """NCCL plans 2 x 8 H100 over 8 x 400 Gb/s with 8 channels of 45 GB/s (its 20.6 GB/s a
    link); at NVLink 4's 25 GB/s a link the NICs' 48 GB/s fits: 8 x 48. A two-socket PCIe box
    keeps NCCL's graph (its bound is the link between the sockets)."""
    ib = NETWORKS["ib_ndr400x8"]
    h100 = gpu_box("h100_sxm8")
    assert multinode_graphs(h100, 2, ib).n_channels * multinode_graphs(h100, 2, ib).speed_gbps \
        == pytest.approx(360.0)
    wire = multinode_graphs(h100, 2, ib, physical=True)
    assert (wire.n_channels, wire.speed_gbps) == (8, 48.0)
    l40s = gpu_box("l40s_pcie8")
    assert multinode_graphs(l40s, 2, ib, physical=True) == multinode_graphs(l40s, 2, ib)


def test_a_ring_across_nodes_runs_at_the_wire_graph_nvls_tree_at_ncclS() -> None:
    """The same choice, a ring's transfer at the wire graph's 384 GB/s busbw, not NCCL's 360;
    NVLS-Tree on 4 nodes (where the wire graph would lift its network term from 45 to 45.5 GB/s
    a head) at NCCL's own bandwidth."""
    ring = nccl_execution("h100_sxm8", 16, [1 << 30], nodes=2, network="ib_ndr400x8",
                          harness="torch", algorithms=["ring"], protocols=["Simple"])[0]
    algbw = (1 << 30) / (ring.transfer_us * 1e3) * ring.channels / ring.channels_total
    assert algbw * 2 * 15 / 16 == pytest.approx(384.0)
    nvls = nccl_execution("h100_sxm8", 32, [1 << 30], nodes=4, network="ib_ndr400x8",
                          harness="torch", algorithms=["nvls_tree"])[0]
    table = {(e.algorithm, e.protocol): e for e in multinode_table("h100_sxm8", 32, 4,
                                                                  "ib_ndr400x8")}
    assert (1 << 30) / (nvls.transfer_us * 1e3) == pytest.approx(
        table[("nvls_tree", "Simple")].algbw_gbps)
    assert table[("nvls_tree", "Simple")].busbw_gbps == pytest.approx(8 * 45.0)


@pytest.mark.parametrize(("box", "net", "intra"), [
    ("a100_sxm8", "efa400", 24.0),      # 4 x 12: 15, 18, 20, 24 fit; 24 is twice 12
    ("a100_sxm8", "ib_hdr200x8", 30.0),  # 8 x 30 = 240, NCCL's A100 link; 8 x 48 does not fit
    ("h100_sxm8", "ib_ndr400x8", 45.0),  # 8 x 48 > 370.8: the network's speed stays
    ("h100_sxm8", "gcp_tcpxo", 45.0)])
def test_the_tree_graph_raises_its_intra_speed_while_the_links_carry_it(box, net, intra) -> None:
    assert multinode_graphs(gpu_box(box), 2, NETWORKS[net]).tree_intra_gbps == intra


def test_on_two_p4d_nccl_prices_the_tree_at_its_intra_speed_and_picks_it() -> None:
    """``bw = nNodes <= 2 ? bwIntra : bwInter``: on 2 x p4d the tree's 24 GB/s channels beat the
    ring's 12 at 1 GiB; on 3 nodes the tree is back to the network's speed and the ring wins."""
    two = multinode_table("a100_sxm8", 16, 2, "efa400")
    busbw = {(e.algorithm, e.protocol): e.busbw_gbps for e in two}
    assert busbw[("tree", "Simple")] == pytest.approx(min(4 * 24 * 0.92, 4 * 23.6))
    assert busbw[("ring", "Simple")] == pytest.approx(4 * 12.0)
    assert nccl_execution("a100_sxm8", 16, [1 << 30], nodes=2, network="efa400",
                          harness="torch")[0].algorithm == "tree"
    assert nccl_execution("a100_sxm8", 24, [1 << 30], nodes=3, network="efa400",
                          harness="torch")[0].algorithm == "ring"


@pytest.mark.parametrize("net", ["ib_ndr400x8", "roce400x8", "ib_hdr200x8"])
def test_a_node_with_few_gpus_moves_through_their_nics_only(net: str) -> None:
    """g of a box's 8 GPUs per node reach g of its 8 rails (one NIC per GPU; PXN would need the
    other GPUs' ranks): two nodes of one GPU each move 1 GiB no faster than one NIC allows, and
    more GPUs per node never make the network slower."""
    from distlab.nccl.multinode import NETWORKS, usable_devices

    nw = NETWORKS[net]
    box = gpu_box("h100_sxm8" if net != "ib_hdr200x8" else "a100_sxm8")
    assert [usable_devices(8, box, g) for g in (1, 2, 4, 8, None)] == [1, 2, 4, 8, 8]
    size = 2**30
    rates = []
    for g in (1, 2, 4, 8):
        e = nccl_execution(box.key, 2 * g, [size], nodes=2, network=net)[0]
        rates.append(size / e.seconds / 1e9)
        # two nodes of g GPUs: each node's sum leaves through its g NICs at most
        assert size / e.seconds <= g * nw.nic_gbps * 1e9 * 1.001, (g, e.algorithm)
    assert rates == sorted(rates)
