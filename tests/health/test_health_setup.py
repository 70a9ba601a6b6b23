"""The box a log ran on: what the log says, what the flags add, and one sentence for what
cannot be priced."""

from __future__ import annotations

from dataclasses import replace

import pytest

from distlab.health.setup import algorithms_of, box_of_device, protocols_of, setup_of
from distlab.logs.nccl_tests import Device, NcclTestsRun, Row

ROW = Row(1 << 20, 1 << 18, "float", "sum", -1, "out-of-place", 50.0, 1.0, 1.0, 0)


def _run(name: str = "NVIDIA H100 80GB HBM3", per_host: tuple[int, ...] = (8,), gpus: int = 1,
         release: str | None = "2.26.2") -> NcclTestsRun:
    devices, rank = [], 0
    for h, n in enumerate(per_host):
        for d in range(n):
            devices.append(Device(rank, f"host{h}", d, name))
            rank += 1
    return NcclTestsRun("all_reduce", (ROW,), tuple(devices), gpus, release)


@pytest.mark.parametrize(("name", "box"), [
    ("NVIDIA H100 80GB HBM3", "h100_sxm8"), ("NVIDIA H200", "h200_sxm8"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm8"), ("NVIDIA A100 80GB PCIe", "a100_pcie8"),
    ("NVIDIA B200", "b200_sxm8"), ("NVIDIA L40S", "l40s_pcie8"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "pcie5_8"),
    ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None), ("NVIDIA H800", None),
    ("NVIDIA H20", None), ("NVIDIA GeForce RTX 5090", None)])
def test_a_device_name_finds_the_box_that_holds_it(name: str, box: str | None) -> None:
    assert box_of_device(name) == box


def test_the_log_says_gpus_nodes_process_and_release() -> None:
    s = setup_of(_run(per_host=(8, 8)), nics=8, nic_gbits=400)
    assert (s.box.key, s.world_size, s.nodes, s.harness) == ("h100_sxm8", 16, 2, "torch")
    assert s.network is not None and s.network.rails == 8 and s.network.nic_gbps == 50.0
    assert "NCCL 2.26.2" in s.line() and "16 x NVIDIA H100 80GB HBM3 on 2 hosts" in s.line()
    assert setup_of(_run(gpus=8)).harness == "nccl-tests"


@pytest.mark.parametrize(("run", "kwargs", "message"), [
    (_run("NVIDIA GeForce RTX 5090"), {}, "no box of the NCCL model holds NVIDIA GeForce RTX "
                                          "5090.*give --box BOX"),
    (_run(per_host=(8, 4)), {"nics": 8, "nic_gbits": 400}, "GPUs per node differ between "
                                                            "hosts \\(host0 8, host1 4\\)"),
    (_run(per_host=(8, 8)), {}, "2 nodes: the log cannot say what joins them: give --nics"),
    (_run(per_host=(8, 8)), {"network": "ib_ndr400x8", "nics": 8, "nic_gbits": 400},
     "not both"),
    (_run(per_host=(8, 8)), {"nics": 8, "nic_gbits": 12.5}, r"--nic-gbps is a port's rate in Gb/s"),
    (_run(), {"gpus": 16}, "--gpus 16: the log's device lines name 8 GPUs"),
    (_run(), {"release": "2.18.5"}, "--release 2.18.5: the log says NCCL 2.26.2"),
    (_run(), {"env": ["ALGO=Ring"]}, "is not NCCL_NAME=VALUE"),
    (_run(), {"env": ["NCCL_ALGO=Spiral"]}, "NCCL_ALGO=Spiral: unknown spiral"),
    (replace(_run(), devices=()), {}, "no device lines"),
    (_run(per_host=(9,)), {}, "9 GPUs per node: a h100_sxm8 node holds 8"),
])
def test_what_cannot_be_priced_is_one_sentence(run, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        setup_of(run, **kwargs)


def test_a_stand_in_box_is_said() -> None:
    s = setup_of(_run("NVIDIA GeForce RTX 5090"), box="pcie5_8")
    assert s.stand_in == "NVIDIA GeForce RTX 5090" and "a stand-in for" in s.line()
    bare = setup_of(replace(_run(), devices=()), gpus=8, box="h100_sxm8")
    assert bare.world_size == 8 and not bare.stand_in


def test_a_release_the_model_does_not_hold_is_said_in_the_report_line() -> None:
    s = setup_of(_run(release="2.22.3"))
    assert s.release.priced_as == "2.20.5" and "priced as NCCL 2.20.5" in s.line()
    assert "the log does not print it" in setup_of(_run(release=None)).line()


@pytest.mark.parametrize(("env", "nodes", "release", "algorithms"), [
    ({}, 1, (2, 26), None),
    ({"NCCL_ALGO": "Ring"}, 1, (2, 26), ("ring",)),
    ({"NCCL_ALGO": "ring,tree"}, 2, (2, 26), ("ring", "tree")),
    ({"NCCL_ALGO": "^NVLS,NVLSTree"}, 1, (2, 26), ("ring", "tree")),
    ({"NCCL_ALGO": "NVLSTree,Ring"}, 2, (2, 26), ("nvls_tree", "ring")),
    ({"NCCL_NVLS_ENABLE": "0"}, 1, (2, 26), ("ring", "tree")),
    ({}, 1, (2, 16), ("ring", "tree")),            # no NVLS before 2.17
])
def test_nccl_algo_and_nvls_leave_these_algorithms(env, nodes, release, algorithms) -> None:
    assert algorithms_of(env, nodes=nodes, release=release) == algorithms


def test_nccl_proto() -> None:
    assert protocols_of({}) is None
    assert protocols_of({"NCCL_PROTO": "Simple"}) == ("Simple",)
    assert protocols_of({"NCCL_PROTO": "^LL128"}) == ("LL", "Simple")


def test_variables_the_model_cannot_price_are_listed() -> None:
    s = setup_of(_run(), env=["NCCL_P2P_DISABLE=1", "NCCL_ALGO=Ring"])
    assert s.unpriced == ("NCCL_P2P_DISABLE=1",) and s.algorithms == ("ring",)
