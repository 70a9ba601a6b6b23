"""Every public function of the NCCL model checks its arguments as ``python -m distlab.nccl``
does: a release (NCCL's are 2.x: a CUDA version is refused, not priced as the newest release),
a harness whatever the model (``predict_builtin(..., nccl_model="estimate", harness=<bad>)``
ignored it), a NIC's rate in GB/s within one range, a collective in any spelling the command
takes, and the same checks for one rank as for many."""

from __future__ import annotations

import warnings

import pytest

from distlab.collectives import predict_builtin
from distlab.nccl.boxes import nccl_graphs
from distlab.nccl.execution import nccl_execution, predict_nccl_measured
from distlab.nccl.family import nccl_collective
from distlab.nccl.multinode import NETWORKS, Network, multinode_choices, multinode_table
from distlab.nccl.tuning import nccl_allreduce, tuning_table

BOX = "h100_sxm8"


@pytest.mark.parametrize("call", [
    lambda: predict_builtin(BOX, 8, [1 << 20], harness="mpi"),
    lambda: predict_builtin(BOX, 8, [1 << 20], nccl_model="estimate", harness="mpi"),
    lambda: predict_builtin(BOX, 1, [1 << 20], harness="mpi"),
    lambda: predict_builtin("loopback", 2, [1 << 20], harness="mpi"),
    lambda: predict_nccl_measured(BOX, 1, [1 << 20], harness="mpi"),
    lambda: nccl_execution(BOX, 8, [1 << 20], harness="mpi"),
    lambda: nccl_collective(BOX, 8, [1 << 20], "all_gather", harness="mpi")])
def test_a_bad_harness_is_refused_whatever_the_model(call) -> None:
    with pytest.raises(ValueError, match="harness must be one of 'nccl-tests', 'torch', "
                                         "'torch-isolated', got 'mpi'"):
        call()


@pytest.mark.parametrize("call", [
    lambda v: predict_builtin(BOX, 8, [1 << 20], nccl_version=v),
    lambda v: predict_builtin(BOX, 1, [1 << 20], nccl_version=v),
    lambda v: predict_builtin(BOX, 16, [1 << 20], nccl_version=v, nodes=2,
                              network="ib_ndr400x8"),
    lambda v: predict_nccl_measured(BOX, 1, [1 << 20], nccl_version=v),
    lambda v: nccl_allreduce(BOX, 1, [1 << 20], nccl_version=v),
    lambda v: nccl_execution(BOX, 8, [1 << 20], nccl_version=v),
    lambda v: tuning_table(BOX, 8, nccl_version=v),
    lambda v: nccl_graphs(BOX, 8, version=v),
    lambda v: multinode_choices(BOX, 16, [1 << 20], 2, "ib_ndr400x8", version=v),
    lambda v: multinode_table(BOX, 16, 2, "ib_ndr400x8", version=v)])
@pytest.mark.parametrize("release", ["12.8", "latest"])
def test_a_release_that_is_not_an_nccl_one_is_refused(call, release) -> None:
    with pytest.raises(ValueError, match="nccl_version .*12.8.* is not an NCCL release|"
                                         "nccl_version must be a release like"):
        call(release)


def test_a_release_string_is_taken_where_constants_were() -> None:
    """``version=`` of the multi-node and graph functions takes a release as the others do."""
    sizes = [1 << 20, 1 << 30]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a held release: no warning
        by_text = multinode_choices(BOX, 16, sizes, 2, "ib_ndr400x8", version="2.28")
    from distlab.nccl.versions import nccl_constants

    by_constants = multinode_choices(BOX, 16, sizes, 2, "ib_ndr400x8",
                                     version=nccl_constants("2.28"))
    for a, b in zip(by_text, by_constants, strict=True):
        assert (a.algorithm, a.protocol) == (b.algorithm, b.protocol)
        assert a.seconds == pytest.approx(b.seconds, rel=1e-12)
    with pytest.raises(TypeError, match="version must be an NCCL release"):
        nccl_graphs(BOX, 8, version=2.28)


def test_the_estimate_across_nodes_reads_the_release_it_is_given() -> None:
    """It ignored ``nccl_version``; now it prices the release's Blackwell rows as the measured
    model does (2.29's NVLS-Tree correction differs from 2.28's on a B200 box)."""
    sizes = [1 << 20, 64 << 20, 1 << 30]
    kw = {"nodes": 2, "network": "ib_ndr400x8"}
    default = predict_builtin("b200_sxm8", 16, sizes, **kw)
    assert predict_builtin("b200_sxm8", 16, sizes, nccl_version="2.28", **kw) == pytest.approx(
        default, rel=1e-12)
    newer = predict_builtin("b200_sxm8", 16, sizes, nccl_version="2.29", **kw)
    assert newer[1] > default[1] * 1.05   # 64 MiB: the 2.29 correction moves the estimate


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"nccl_version": "2.26"}, "nccl_version='2.26' prices NCCL on a GPU box"),
    ({"nodes": 2}, "nodes=2 prices NCCL on a GPU box"),
    ({"network": "tcp100"}, "network='tcp100' prices NCCL on a GPU box")])
def test_nccl_arguments_with_a_gloo_calibration_are_refused(kwargs, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        predict_builtin("loopback", 2, [1 << 20], **kwargs)


def test_a_nic_rate_in_gb_per_s_by_mistake_is_refused_naming_the_unit() -> None:
    base = NETWORKS["ib_ndr400x8"]
    with pytest.raises(ValueError, match=r"one NIC port's rate in GB/s \(bytes\), in \(0, 100\]"
                                         r".*a 400 Gb/s NIC is 50 GB/s"):
        Network("x", "400 Gb/s given as 400", 400.0, 8, "a typo")
    with pytest.raises(ValueError, match="nic_gbps"):
        Network("x", "none", 0.0, 8, "a typo")
    with pytest.raises(ValueError, match="rails"):
        Network("x", "no ports", base.nic_gbps, 0, "a typo")
    assert all(n.nic_gbps <= 100 for n in NETWORKS.values())  # every preset passes


def test_a_collective_in_the_commands_spellings() -> None:
    ours = nccl_collective(BOX, 8, [1 << 20], "allgather")
    canonical = nccl_collective(BOX, 8, [1 << 20], "all_gather")
    assert ours[0].seconds == pytest.approx(canonical[0].seconds, rel=1e-12)
    with pytest.raises(ValueError, match="unknown collective 'gatherall'"):
        nccl_collective(BOX, 8, [1 << 20], "gatherall")


@pytest.mark.parametrize("call", [
    lambda: nccl_execution(BOX, 8, [1 << 20], constants={}),
    lambda: nccl_collective(BOX, 8, [1 << 20], "all_gather", constants=3)])
def test_constants_of_another_type_are_a_type_error(call) -> None:
    with pytest.raises(TypeError, match="constants must be a ExecutionConstants"):
        call()
