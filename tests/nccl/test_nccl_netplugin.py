"""AWS's net plugin in the NCCL model (:mod:`distlab.nccl.netplugin`): NCCL_PROTO=simple on EFA
v1, the stripe threshold on a grouped EFA device, and the plugin's NVLS chunk (aws-ofi-nccl
v1.18.0; each pinned where removing it would change the number)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from distlab.nccl.__main__ import main as nccl_main
from distlab.nccl.execution import nccl_execution
from distlab.nccl.multinode import NETWORKS, multinode_choices, nvls_tree_chunk
from distlab.nccl.netplugin import (
    PLUGIN_MIN_STRIPE_BYTES,
    PLUGIN_NVLS_CHUNK_BYTES,
    stripe_delay_us,
    stripes,
    wire_bytes,
)

KIB = 1024
SIZES = [64 * KIB, 256 * KIB, 1 << 20, 4 << 20, 16 << 20]


@pytest.mark.parametrize(("size", "ports", "expected"), [
    (0, 4, 1), (64 * KIB, 4, 1), (128 * KIB, 4, 1),       # up to the threshold: one port
    (128 * KIB + 1, 4, 2), (256 * KIB, 4, 2),
    (384 * KIB, 4, 2),                                     # 3 is not a divisor of 4: 2
    (384 * KIB + 1, 4, 4), (8 << 20, 4, 4),                # never more than the device's
    (200 * KIB, 2, 2), (64 * KIB, 2, 1), (1 << 20, 1, 1)])
def test_a_message_is_split_as_the_plugins_scheduler_splits_it(size, ports, expected) -> None:
    """``get_num_stripes``: ceil(size / 128 KiB), 1..ports, down to a divisor of the ports."""
    assert PLUGIN_MIN_STRIPE_BYTES == 128 * KIB
    assert stripes(size, ports) == expected


def test_the_stripe_delay_is_the_wire_time_on_fewer_ports() -> None:
    # 72000 B of LL128 data is 76800 B on the wire: one 12.5 GB/s port instead of four
    assert wire_bytes(72000, "LL128") == pytest.approx(76800)
    assert wire_bytes(4096, "LL") == 8192 and wire_bytes(4096, "Simple") == 4096
    assert stripe_delay_us(76800, 12.5, 4) == pytest.approx(76800 / 12.5e3 * (1 - 1 / 4))
    assert stripe_delay_us(256 * KIB, 12.5, 4) == pytest.approx(256 * KIB / 12.5e3 / 4)
    assert stripe_delay_us(512 * KIB, 12.5, 4) == 0.0          # on every port
    assert stripe_delay_us(76800, 12.5, 1) == 0.0              # a device of one port
    assert stripe_delay_us(76800, 12.5, 4, min_stripe_bytes=0) == 0.0


def test_on_p4d_the_plugin_leaves_nccl_only_simple() -> None:
    """EFA v1 under the SENDRECV protocol: NCCL_PROTO=simple, so no LL or LL128 at any size;
    a user's NCCL_PROTO (``protocols``) still wins."""
    efa = NETWORKS["efa400"]
    assert efa.nccl_protocols == ("Simple",)
    runs = nccl_execution("a100_sxm8", 16, SIZES, nodes=2, network="efa400", harness="torch")
    assert {e.protocol for e in runs} == {"Simple"}
    choices = multinode_choices("a100_sxm8", 16, SIZES, 2, "efa400")
    assert {c.protocol for c in choices} == {"Simple"}
    asked = nccl_execution("a100_sxm8", 16, SIZES, nodes=2, network="efa400", harness="torch",
                           protocols=["LL", "LL128", "Simple"])
    assert {"LL", "LL128"} & {e.protocol for e in asked}


def test_simple_only_makes_small_sizes_on_p4d_slower_and_leaves_1_gib_alone() -> None:
    """Without LL / LL128 a 64 KiB allreduce pays Simple's latency (its hops and the plugin's
    completion); at 1 GiB NCCL picked Simple anyway."""
    efa = NETWORKS["efa400"]
    free = replace(efa, nccl_protocols=())
    sizes = [64 * KIB, 1 << 30]
    forced = nccl_execution("a100_sxm8", 16, sizes, nodes=2, network=efa, harness="torch")
    before = nccl_execution("a100_sxm8", 16, sizes, nodes=2, network=free, harness="torch")
    assert before[0].protocol == "LL"
    assert forced[0].seconds > 1.5 * before[0].seconds
    assert forced[1].seconds == pytest.approx(before[1].seconds)


def test_on_p5_a_tree_hop_pays_the_stripe_threshold_on_its_chunk() -> None:
    """2 x 8 H100 over p5's EFA, tree/LL128 at 16 MiB: 72000-B chunks cross on one of a GPU's
    four 100 Gb/s ports, up and down (two hops): the run takes the wire time of three more."""
    efa = NETWORKS["efa3200"]
    plain = replace(efa, min_stripe_bytes=0)
    kw = dict(nodes=2, harness="torch", algorithms=["tree"], protocols=["LL128"])
    run = nccl_execution("h100_sxm8", 16, [16 << 20], network=efa, **kw)[0]
    ref = nccl_execution("h100_sxm8", 16, [16 << 20], network=plain, **kw)[0]
    assert run.chunk_bytes == 72000
    extra = 2 * stripe_delay_us(wire_bytes(72000, "LL128"), 12.5, 4)
    assert run.seconds * 1e6 - ref.seconds * 1e6 == pytest.approx(extra)
    assert run.latency_us == pytest.approx(ref.latency_us)  # the hop stays the 8-byte figure


@pytest.mark.parametrize("network", ["ib_ndr400x8", "roce200x16", "efa400"])
def test_no_stripe_threshold_outside_the_plugins_grouped_devices(network) -> None:
    assert NETWORKS[network].stripe_delay_us(76800) == 0.0


def test_a_ring_step_over_p5_pays_the_threshold_too() -> None:
    efa = NETWORKS["efa3200"]
    plain = replace(efa, min_stripe_bytes=0)
    kw = dict(nodes=2, harness="torch", algorithms=["ring"], protocols=["LL128"])
    run = nccl_execution("h100_sxm8", 16, [4 << 20], network=efa, **kw)[0]
    ref = nccl_execution("h100_sxm8", 16, [4 << 20], network=plain, **kw)[0]
    assert run.latency_us > ref.latency_us and run.transfer_us == ref.transfer_us


def test_the_plugins_nvls_chunk_starts_nvls_tree_at_512_kib() -> None:
    """``NCCL_NVLS_CHUNKSIZE`` = ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` = 512 KiB: the chunk starts
    there and is no longer capped at 64 KiB from 4 nodes on; the size rules still shrink it."""
    env = PLUGIN_NVLS_CHUNK_BYTES
    assert env == 512 * KIB
    ops = 16 * 8
    assert nvls_tree_chunk(1 << 34, 16, 8, 2) == 128 * KIB             # NCCL's default
    assert nvls_tree_chunk(1 << 34, 16, 8, 2, env_chunk=env) == 512 * KIB
    assert nvls_tree_chunk(1 << 34, 16, 8, 4) == 64 * KIB
    assert nvls_tree_chunk(1 << 34, 16, 8, 4, env_chunk=env) == 512 * KIB
    assert nvls_tree_chunk(32 * ops * env - 1, 16, 8, 2, env_chunk=env) == 256 * KIB
    assert nvls_tree_chunk(ops * 64 * KIB - 1, 16, 8, 2, env_chunk=env) == 32 * KIB
    big = [4 << 30]
    p5 = nccl_execution("h100_sxm8", 16, big, nodes=2, network="efa3200", harness="torch",
                        algorithms=["nvls_tree"])[0]
    ib = nccl_execution("h100_sxm8", 16, big, nodes=2, network="ib_ndr400x8", harness="torch",
                        algorithms=["nvls_tree"])[0]
    assert (p5.chunk_bytes, ib.chunk_bytes) == (512 * KIB, 128 * KIB)


def test_the_command_says_what_the_plugin_does(capsys) -> None:
    assert nccl_main(["a100_sxm8", "--nodes", "2", "--network", "efa400", "--sizes", "64K"]) == 0
    out = capsys.readouterr().out
    notes = " ".join(ln[2:] for ln in out.splitlines() if ln.startswith("#"))
    assert "NCCL_PROTO=simple" in notes
    rows = [ln.split() for ln in out.splitlines() if "KiB" in ln and not ln.startswith("#")]
    assert rows and rows[0][3] == "Simple"
    assert nccl_main(["h100_sxm8", "--nodes", "2", "--network", "efa3200", "--sizes", "64K"]) == 0
    notes = " ".join(ln[2:] for ln in capsys.readouterr().out.splitlines() if ln.startswith("#"))
    assert "under 128 KiB" in notes and "512 KiB" in notes
