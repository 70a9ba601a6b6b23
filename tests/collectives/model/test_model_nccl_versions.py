"""NCCL releases: the constants that moved between 2.18 and 2.28 change NCCL's estimate as its
source says, and a release is named the ways users write it."""

from __future__ import annotations

import pytest

from distlab.collectives import predict_builtin
from distlab.collectives.model.nccl.estimate import nccl_allreduce, tuning_table
from distlab.collectives.model.nccl.execution import nccl_execution
from distlab.collectives.model.nccl.versions import (
    DEFAULT_NCCL_VERSION,
    NCCL_VERSIONS,
    nccl_version,
)


@pytest.mark.parametrize("text", ["2.24", "2.24.3", "v2.24.3-1", " 2.24.9 "])
def test_a_release_is_named_as_users_write_it(text: str) -> None:
    assert nccl_version(text).tag == "v2.24.3-1"


def test_default_is_torch_2_11s_nccl() -> None:
    assert nccl_version(None) is NCCL_VERSIONS[DEFAULT_NCCL_VERSION]
    assert nccl_version(None).tag == "v2.28.9-1"


@pytest.mark.parametrize("bad", ["2.16", "3.0", "latest", ""])
def test_an_unknown_release_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="nccl_version must be one of 2.18, 2.20"):
        nccl_version(bad)
    with pytest.raises(TypeError):
        nccl_version(2.24)  # type: ignore[arg-type]


def _entry(box: str, n: int, algo: str, proto: str, version: str):
    return next(e for e in tuning_table(box, n, nccl_version=version)
                if (e.algorithm, e.protocol) == (algo, proto))


def test_default_release_is_the_estimate_as_before() -> None:
    sizes = [1 << 16, 1 << 24, 1 << 30]
    for box in ("h100_sxm8", "a100_sxm8", "pcie5_8"):
        assert nccl_allreduce(box, 8, sizes) == nccl_allreduce(box, 8, sizes,
                                                               nccl_version="2.28")


def test_nvls_latency_and_bandwidth_per_release() -> None:
    lat = {v: _entry("h100_sxm8", 8, "nvls", "Simple", v).latency_us for v in NCCL_VERSIONS}
    assert lat == {"2.18": 23.0, "2.20": 23.0, "2.24": 25.0, "2.26": 25.0, "2.27": 25.0,
                   "2.28": 25.0}
    e18 = _entry("h100_sxm8", 8, "nvls", "Simple", "2.18")
    assert e18.algbw_gbps == pytest.approx(e18.busbw_gbps * 5 / 6)   # ratio 5/6 before 2.28
    e28 = _entry("h100_sxm8", 8, "nvls", "Simple", "2.28")
    assert e28.algbw_gbps == pytest.approx(e28.busbw_gbps * 8 / 14)  # the ring's after


def test_ring_ll_was_a_quarter_of_the_link_before_2_24() -> None:
    old = _entry("a100_sxm8", 8, "ring", "LL", "2.20").busbw_gbps
    new = _entry("a100_sxm8", 8, "ring", "LL", "2.24").busbw_gbps
    assert old == pytest.approx(240 / 4) and new == pytest.approx(87.7)  # llMaxBws caps 2.24's


def test_tree_simple_latency_per_release() -> None:
    n = 8
    assert _entry("a100_sxm8", n, "tree", "Simple", "2.20").latency_us == pytest.approx(
        0 + 2 * (n - 1) * 28)
    assert _entry("a100_sxm8", n, "tree", "Simple", "2.24").latency_us == pytest.approx(
        8.4 + 2 * (n - 1) * 4.0)


def test_nvls_needs_three_gpus_before_2_28() -> None:
    for v, on in (("2.27", False), ("2.28", True)):
        e = _entry("h100_sxm8", 2, "nvls", "Simple", v)
        assert e.enabled is on
    assert "NVLS needs 3 GPUs in NCCL 2.27.5" in _entry("h100_sxm8", 2, "nvls", "Simple",
                                                         "2.27").reason


def test_older_releases_change_the_measured_time_and_predict_builtin_passes_them() -> None:
    sizes = [1 << 20, 1 << 26]
    old = nccl_execution("a100_sxm8", 8, sizes, nccl_version="2.18")
    new = nccl_execution("a100_sxm8", 8, sizes, nccl_version="2.28")
    assert old[0].protocol == "LL" and old[0].seconds > new[0].seconds  # LL at 1/4, not 1/2
    assert predict_builtin("a100_sxm8", 8, sizes, nccl_model="measured",
                           nccl_version="2.18") == [e.seconds for e in old]
    assert predict_builtin("a100_sxm8", 8, sizes, nccl_version="2.18.5") == \
        [c.seconds for c in nccl_allreduce("a100_sxm8", 8, sizes, nccl_version="2.18")]
