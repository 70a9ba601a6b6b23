"""NCCL releases: the constants that moved between 2.18 and 2.30 change NCCL's estimate as its
source says, and a release is named the ways users write it."""

from __future__ import annotations

import re
import warnings

import pytest

from distlab.collectives import predict_builtin
from distlab.nccl.execution import nccl_execution
from distlab.nccl.tuning import nccl_allreduce, tuning_table
from distlab.nccl.versions import (
    DEFAULT_NCCL_VERSION,
    NCCL_CONSTANTS,
    NcclReleaseWarning,
    nccl_constants,
    resolve_nccl_version,
)


@pytest.mark.parametrize("text", ["2.24", "2.24.3", "v2.24.3-1", " 2.24.9 "])
def test_a_release_is_named_as_users_write_it(text: str) -> None:
    assert nccl_constants(text).tag == "v2.24.3-1"


def test_default_is_torch_2_11s_nccl() -> None:
    assert nccl_constants(None) is NCCL_CONSTANTS[DEFAULT_NCCL_VERSION]
    assert nccl_constants(None).tag == "v2.28.9-1"


@pytest.mark.parametrize("bad", ["latest", "", "2", "2.x.1", "two.29"])
def test_a_malformed_release_is_refused_naming_the_forms(bad: str) -> None:
    with pytest.raises(ValueError, match=r"nccl_version must be a release like '2\.26'.*2\.30"):
        nccl_constants(bad)
    with pytest.raises(TypeError):
        nccl_constants(2.24)  # type: ignore[arg-type]


@pytest.mark.parametrize(("asked", "priced", "why"), [
    ("2.31.0", "2.30.7", "newer than every release"),
    ("3.0", "2.30.7", "newer than every release"),
    ("v2.32.1-1", "2.30.7", "newer than every release"),
    ("2.17.1", "2.18.5", "older than every release"),
    ("2.16", "2.18.5", "older than every release"),
    ("2.25.1+cuda12.8", "2.24.3", "not a release the model holds"),
])
def test_a_release_the_model_does_not_hold_is_priced_with_a_neighbour_and_says_so(
        asked: str, priced: str, why: str) -> None:
    r = resolve_nccl_version(asked)
    assert r.priced_as == priced and r.asked == asked
    assert len(r.note.splitlines()) == 1 and why in r.note and f"priced as NCCL {priced}" in r.note
    with pytest.warns(NcclReleaseWarning, match=f"priced as NCCL {re.escape(priced)}"):
        assert nccl_constants(asked).release == priced
    # and it prices: the same times as the release it is priced with
    with pytest.warns(NcclReleaseWarning):
        got = predict_builtin("h100_sxm8", 8, [1 << 20, 1 << 30], nccl_version=asked)
    assert got == predict_builtin("h100_sxm8", 8, [1 << 20, 1 << 30], nccl_version=priced)


@pytest.mark.parametrize("held", ["2.29.7", "v2.29.3-1", "2.30.4", "2.30.7+cuda13.0", "2.28"])
def test_a_release_the_model_holds_says_nothing(held: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = resolve_nccl_version(held)
        assert r.note == "" and nccl_constants(held) is r.version
    assert r.version is NCCL_CONSTANTS[re.findall(r"2\.\d+", held)[0]]


def test_2_29_and_2_30_differ_from_2_28_only_in_their_blackwell_rows() -> None:
    v28, v29, v30 = (NCCL_CONSTANTS[k] for k in ("2.28", "2.29", "2.30"))
    # tuning.cc perChMaxRingLL128Bws Blackwell: {2*36.7, 34.6, 2*36.7} -> {40, 40, 40}
    assert v28.blackwell_ring_ll128_gbps == pytest.approx((73.4, 34.6, 73.4))
    assert v29.blackwell_ring_ll128_gbps == v30.blackwell_ring_ll128_gbps == (40.0, 40.0, 40.0)
    # search.cc sm100SpeedArrayIntra gains 45; sm100SpeedArrayInter gains 80 then 86
    assert 45.0 not in v28.sm100_speeds_intra and 45.0 in v29.sm100_speeds_intra
    assert v29.sm100_speeds_inter[:3] == (96.0, 80.0, 48.0)
    assert v30.sm100_speeds_inter[:4] == (96.0, 86.0, 80.0, 48.0)
    # perChMaxNVLSTreeBws Blackwell N4: 43.8 -> 80 in 2.30
    assert (v28.blackwell_nvls_tree_gbps, v30.blackwell_nvls_tree_gbps) == ((96.0, 43.8),
                                                                            (96.0, 80.0))
    same = ("nvls_latency_us", "tree_simple_base_us", "tree_simple_hop_us", "ring_ll_fraction",
            "ll_max_hopper_gbps", "blackwell_row", "nvls_bandwidth", "ll128_all_arches",
            "max_channels", "nvls_min_gpus")
    for field in same:
        assert getattr(v28, field) == getattr(v29, field) == getattr(v30, field), field
    # so on Hopper and Ampere every release from 2.28 on prices the same
    sizes = [1 << k for k in range(10, 34, 3)]
    for box in ("h100_sxm8", "a100_sxm8"):
        assert (predict_builtin(box, 8, sizes, nccl_version="2.28")
                == predict_builtin(box, 8, sizes, nccl_version="2.30"))
    # and on Blackwell the ring LL128 cap moves: 16 channels x 40 instead of x 73.4
    e28 = _entry("b200_sxm8", 8, "ring", "LL128", "2.28")
    e30 = _entry("b200_sxm8", 8, "ring", "LL128", "2.30")
    assert e30.busbw_gbps == pytest.approx(16 * 40.0) and e28.busbw_gbps > e30.busbw_gbps


def _entry(box: str, n: int, algo: str, proto: str, version: str):
    return next(e for e in tuning_table(box, n, nccl_version=version)
                if (e.algorithm, e.protocol) == (algo, proto))


def test_default_release_is_the_estimate_as_before() -> None:
    sizes = [1 << 16, 1 << 24, 1 << 30]
    for box in ("h100_sxm8", "a100_sxm8", "pcie5_8"):
        assert nccl_allreduce(box, 8, sizes) == nccl_allreduce(box, 8, sizes,
                                                               nccl_version="2.28")


def test_nvls_latency_and_bandwidth_per_release() -> None:
    lat = {v: _entry("h100_sxm8", 8, "nvls", "Simple", v).latency_us for v in NCCL_CONSTANTS}
    assert lat == {"2.18": 23.0, "2.20": 23.0, "2.24": 25.0, "2.26": 25.0, "2.27": 25.0,
                   "2.28": 25.0, "2.29": 25.0, "2.30": 25.0}
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
