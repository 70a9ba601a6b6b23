"""NCCL's tuning model on GPU boxes we cannot reach: the graphs and tables worked out by hand
from NVIDIA/nccl v2.28.9-1, its structure (hypothesis), input checks, and every published 8-GPU
point >= 64 KiB (bus bandwidth within 20%, except the points listed with their reason)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.nccl import tuning as M
from distlab.nccl.boxes import GPU_BOXES, GpuBox, nccl_graphs
from distlab.profile.load import published

PRESETS = sorted(GPU_BOXES)
PROTO_ORDER = {"LL": 0, "LL128": 1, "Simple": 2}
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


# --- the graphs and the table, by hand ----------------------------------------------------

def test_graphs_are_what_ncclTopoCompute_finds_by_hand() -> None:
    # H100: 18 x 20.6 = 370.8 GB/s; ring 6 x 60 then duplicated to 12 x 30 (bw >= 25, not
    # "sm > 80 and < 50 and > 4 channels"); NVLS: 8 channels x 40 (9 x 40 <= 370.8 < 9 x 50),
    # bwInter raised to 60 in pass 2. A100: 12 x 20 = 240 -> 6 x 40, duplicated to 12 x 20.
    # PCIe Gen5 x16: 16 x 240 / 80 = 48 -> 2 x 24 (24 < 25: no duplication).
    expect = {"h100_sxm8": (12, 30.0, (8, 40.0, 60.0)), "a100_sxm8": (12, 20.0, None),
              "pcie5_8": (2, 24.0, None)}
    for key, (ch, bw, nvls) in expect.items():
        g = nccl_graphs(key, 8)
        assert (g["ring"].n_channels, g["ring"].bw_intra_gbps) == (ch, bw), key
        assert (g["tree"].n_channels, g["tree"].bw_intra_gbps) == (ch, bw), key
        if nvls is None:
            assert "nvls" not in g
        else:
            assert (g["nvls"].n_channels, g["nvls"].bw_intra_gbps,
                    g["nvls"].bw_inter_gbps) == nvls
    assert GPU_BOXES["h100_sxm8"].nccl_link_gbps == pytest.approx(370.8)
    two = nccl_graphs("h100_sxm8", 2)["nvls"]  # 3 x 60 <= 370.8 per link: 2 x 60, perfect
    assert (two.n_channels, two.bw_intra_gbps, two.bw_inter_gbps) == (2, 60.0, 60.0)


def test_h100_tuning_table_by_hand() -> None:
    # (latency us, algbw GB/s): base + 14 hops; busbw refinements; ring and NVLS n/2(n-1),
    # tree 0.5; NVLS per channel min(40 x 0.85 x 7/8 x 2, 60) (see the module doc).
    expect = {("tree", "LL"): (6.8 + 14 * 0.6, min(360 * .92 / 3.8, 141) * .5),
              ("tree", "LL128"): (14.0 + 14 * 1.25, 360 * .92 * 7 / 9 * .5),
              ("tree", "Simple"): (8.4 + 14 * 4.0, 360 * .92 * .5),
              ("ring", "LL"): (6.6 + 14 * 0.6, 141 * 8 / 14),
              ("ring", "LL128"): (14.0 + 14 * 1.9, 360 * .92 * 8 / 14),
              ("ring", "Simple"): (8.4 + 14 * 3.4, 360 * 8 / 14),
              ("nvls", "Simple"): (25.0, 8 * min(40 * .85 * 7 / 8 * 2, 60) * 8 / 14)}
    table = M.tuning_table("h100_sxm8", 8)
    assert [(e.algorithm, e.protocol) for e in table] == list(expect)
    for e in table:
        lat, alg = expect[(e.algorithm, e.protocol)]
        assert e.enabled and e.latency_us == pytest.approx(lat) and \
            e.algbw_gbps == pytest.approx(alg), e
    pcie = {(e.algorithm, e.protocol): e for e in M.tuning_table("pcie5_8", 8)}
    assert not pcie[("ring", "LL128")].enabled and "NVLink" in pcie[("ring", "LL128")].reason
    assert pcie[("ring", "Simple")].latency_us == pytest.approx(8.4 + 14 * 5.7)
    assert not pcie[("nvls", "Simple")].enabled
    lines = M.format_tuning_table("a100_sxm8", 8)
    assert len(lines) == 8 and "off: needs compute capability >= 9.0" in lines[-1]


def test_choice_and_candidates() -> None:
    (c,) = M.nccl_allreduce("h100_sxm8", 8, [64 * KiB])
    assert (c.algorithm, c.protocol) == ("ring", "LL")
    assert c.seconds == min(x.seconds for x in c.candidates)
    assert c.seconds == pytest.approx((15.0 + 64 * KiB / (1000 * 141 * 8 / 14)) * 1e-6)
    assert len(c.candidates) == 7 and c.busbw_gbps == pytest.approx(
        64 * KiB / c.seconds / 1e9 * 14 / 8)
    (big,) = M.nccl_allreduce("h100_sxm8", 8, [8 * GiB])
    assert big.algorithm == "nvls"
    # NCCL_ALGO / NCCL_PROTO restrict the candidates
    (r,) = M.nccl_allreduce("h100_sxm8", 8, [8 * GiB], algorithms=["ring"], protocols=["LL128"])
    assert (r.algorithm, r.protocol, len(r.candidates)) == ("ring", "LL128", 1)
    # tree correction: tree/Simple at 64 MiB (log2(64 MiB / 64) = 20) runs at .8 of its table bw
    (t,) = M.nccl_allreduce("h100_sxm8", 8, [64 * MiB], algorithms=["tree"], protocols=["Simple"])
    assert t.candidates[0].algbw_gbps == pytest.approx(360 * .92 * .5 * .8)
    assert M.predict_nccl_allreduce("pcie5_8", 8, [1, 2]) == [
        c.seconds for c in M.nccl_allreduce("pcie5_8", 8, [1, 2])]


def test_world_size_one_is_free() -> None:
    # enqueue.cc updateCollCostTable: one rank prices Ring/Simple at 0
    for key in PRESETS:
        (c,) = M.nccl_allreduce(key, 1, [GiB])
        assert (c.algorithm, c.protocol, c.seconds, c.busbw_gbps) == ("ring", "Simple", 0.0, 0.0)
    assert M.predict_nccl_allreduce("a100_sxm8", 1, [8, 1 << 20]) == [0.0, 0.0]


# --- structure (hypothesis) ----------------------------------------------------------------

@st.composite
def boxes(draw: st.DrawFn) -> GpuBox:
    """Any NVSwitch or PCIe box whose link NCCL's speed table covers."""
    fabric = draw(st.sampled_from(["nvswitch", "pcie"]))
    sm = draw(st.sampled_from([80, 89, 90, 100, 120]))
    gpus = draw(st.integers(2, 8))
    if fabric == "nvswitch":  # 25 GB/s per link per direction (NVLink 3 and 4), 50 (NVLink 5)
        kw = {"nvlinks": draw(st.integers(1, 18))}
        spec = kw["nvlinks"] * (50.0 if sm >= 100 else 25.0)
    else:  # per lane and direction: Gen3 8 GT/s, Gen4 16, Gen5 32 with 128b/130b encoding
        kw = {"pcie_gen": draw(st.sampled_from([3, 4, 5])), "pcie_lanes": draw(st.integers(1, 16))}
        spec = kw["pcie_lanes"] * {3: 8, 4: 16, 5: 32}[kw["pcie_gen"]] * 128 / 130 / 8
    cpu = draw(st.sampled_from(["amd", "intel"]))
    try:
        return GpuBox("x", "x", "x", gpus, sm, fabric, "x", spec, "x", cpu_vendor=cpu, **kw)
    except ValueError:  # a link below NCCL's lowest speed (rejected on purpose)
        return GPU_BOXES[draw(st.sampled_from(PRESETS))]


sizes = st.lists(st.integers(1, 1 << 36), min_size=2, max_size=12, unique=True).map(sorted)


@settings(max_examples=150, deadline=None)
@given(box=boxes(), data=st.data(), s=sizes)
def test_time_increases_with_size(box: GpuBox, data: st.DataObject, s: list[int]) -> None:
    n = data.draw(st.integers(2, box.gpus))
    t = M.predict_nccl_allreduce(box, n, s)
    assert all(a < b for a, b in zip(t, t[1:], strict=False))


@settings(max_examples=150, deadline=None)
@given(box=boxes(), data=st.data(), s=sizes)
def test_busbw_within_what_the_link_and_algorithm_allow(box: GpuBox, data: st.DataObject,
                                                        s: list[int]) -> None:
    n = data.draw(st.integers(2, box.gpus))
    for c in M.nccl_allreduce(box, n, s):
        assert 0 < c.busbw_gbps <= M.busbw_bound_gbps(box, n, c.algorithm)
        for cand in c.candidates:  # every estimate, not only the pick
            assert M.busbw_gbps(c.nbytes, cand.seconds, n) <= \
                M.busbw_bound_gbps(box, n, cand.algorithm)


@settings(max_examples=100, deadline=None)
@given(box=boxes(), data=st.data(), s=sizes)
def test_ring_protocols_go_ll_ll128_simple(box: GpuBox, data: st.DataObject,
                                           s: list[int]) -> None:
    # Within the ring the order holds on any box. Tree does not (treeCorrectionFactor dips and
    # recovers with size), nor does the full choice where NVLS is cheap at mid sizes and ring
    # LL128 wins again above it (e.g. Hopper with 2 NVLinks per GPU and 7 GPUs).
    n = data.draw(st.integers(2, box.gpus))
    order = [PROTO_ORDER[c.protocol] for c in M.nccl_allreduce(box, n, s, algorithms=["ring"])]
    assert order == sorted(order)


@pytest.mark.parametrize("key", PRESETS)
@pytest.mark.parametrize("n", range(2, 9))
def test_presets_choose_ll_then_ll128_then_simple(key: str, n: int) -> None:
    # NCCL's own pick on the full box; on fewer GPUs without NVLS, which on 5 to 7 H100s wins
    # between ring LL and ring LL128 (fewer NVLS channels, 25 us) and breaks the order
    s = sorted({int(m * 2 ** k) for k in range(36) for m in (1, 1.5)})
    algos = None if n == GPU_BOXES[key].gpus else ["ring", "tree"]
    picks = M.nccl_allreduce(key, n, s, algorithms=algos)
    order = [PROTO_ORDER[c.protocol] for c in picks]
    assert order == sorted(order)
    assert order[0] == 0 and order[-1] == 2, "LL for the smallest sizes, Simple for the largest"
    if GPU_BOXES[key].fabric == "pcie":
        assert 1 not in order, "no LL128 over PCIe"


@settings(max_examples=100, deadline=None)
@given(box=boxes(), data=st.data())
def test_nvls_only_on_nvswitch_hopper_or_later_with_two_gpus(box: GpuBox,
                                                             data: st.DataObject) -> None:
    n = data.draw(st.integers(1, box.gpus))
    algos = {c.algorithm for c in M.nccl_allreduce(box, n, [GiB])[0].candidates}
    allowed = box.fabric == "nvswitch" and box.sm >= 90 and n >= 2
    assert ("nvls" in algos) == (allowed and "nvls" in nccl_graphs(box, n))
    if not allowed and n >= 2:
        with pytest.raises(ValueError, match="no algorithm/protocol available"):
            M.nccl_allreduce(box, n, [GiB], algorithms=["nvls"])


# --- the published points ------------------------------------------------------------------

POINTS = published()["allreduce_8gpu"]
SOURCES = published()["allreduce_8gpu_sources"]

# Points the model misses by more than 20%, and why (the report and the notebook explain them).
# NVLS forced (NCCL_ALGO=NVLS) on Azure ND H100/H200 v5: below 64 MiB the runs take 1.2-1.7x
# NCCL's NVLS estimate (25 us flat + size / 272 GB/s); the runs floor at 42 us (NCCL 2.18.5)
# and 31 us (2.20.5; 29 us on the 2.26.2 page of the same VM) from 64 KiB to 1-2 MiB and ramp to
# full bandwidth only above 64 MiB.
# Azure ND A100 v4: floor of ~45 us from 1 KiB to 256 KiB (3x NCCL's LL latency) and 30-55% under
# NCCL's ring estimate up to 128 MiB; its algorithm is not identifiable (page says NVLS).
# PCIe Gen5 (torch.distributed, NCCL 2.27.5): faster than NCCL's PCI estimate at 64-256 KiB (LL
# is capped at half the link and 20.6 us in the model) and at 4 MiB (Simple's 88 us latency).
# stas00's 8x H200 (torch, one call per trial on an idle GPU): torch's host overhead per call is
# in every time, 1.2-2.5x NCCL's estimate up to 64 MiB. stas00's 8x A100 (nccl-tests -g 8): the
# Azure A100 table's shape, 1.2-3.2x the estimate up to 256 MiB.
H100 = "8x H100 SXM 80GB HBM3, NVSwitch (Azure ND H100 v5)"
H200 = "8x H200 SXM 141GB, NVSwitch (Azure ND H200 v5)"
H200_226 = "8x H200 SXM 141GB, NVSwitch (Azure ND H200 v5, NCCL 2.26.2)"
A100 = "8x A100 SXM4 80GB, NVSwitch (Azure ND A100 v4)"
WRX_A = "8x RTX PRO 6000 Blackwell, 2 PCIe Gen5 switches (WRX90 group A)"
WRX_B = "8x RTX PRO 6000 Blackwell, 2 PCIe Gen5 switches (WRX90 group B)"
H200_TORCH = "8x H200 SXM 141GB, NVSwitch (stas00/ml-engineering all_reduce_bench.py)"
A100_STAS = "8x A100 SXM, NVSwitch (stas00/ml-engineering)"
KNOWN_MISSES = {
    H100: {64 * KiB << k for k in range(10)},                       # 64 KiB .. 32 MiB
    H200: {64 * KiB, 128 * KiB} | {MiB << k for k in range(6)},      # and 1 .. 32 MiB
    H200_226: {2 * MiB << k for k in range(5)},                      # 2 .. 32 MiB
    A100: {64 * KiB << k for k in range(12)},                       # 64 KiB .. 128 MiB
    WRX_A: {64 * KiB, 256 * KiB, 4 * MiB},
    WRX_B: {256 * KiB, 4 * MiB},
    H200_TORCH: {64 * KiB << k for k in range(11)},                 # 64 KiB .. 64 MiB
    A100_STAS: {64 * KiB << k for k in range(13)},                  # 64 KiB .. 256 MiB
}


def test_published_points_carry_source_quote_and_their_numbers() -> None:
    assert len(POINTS) >= 3 * 8
    for p in POINTS:
        assert p["world_size"] == 8 and p["nbytes"] >= 64 * KiB
        assert p["source"].startswith("https://github.com/") and p["source"] in SOURCES
        assert p["preset"] in GPU_BOXES and p["quote"]
        assert re.search(rf"(?<![\d.]){re.escape(str(p['busbw_gbps']))}0*(?![\d])", p["quote"]), p
        assert p["size_label"] in p["quote"]
    ran_on = {p.get("box") or p["preset"] for p in POINTS}  # an H200 run: box h200_sxm8
    assert ran_on >= {"h100_sxm8", "h200_sxm8", "a100_sxm8", "pcie5_8"} and ran_on <= set(PRESETS)
    for key in ran_on:
        assert {p["nbytes"] for p in POINTS if (p.get("box") or p["preset"]) == key} >= {
            64 * KiB, GiB}, key


def test_published_8gpu_points_within_20_percent_except_the_known_misses() -> None:
    rows = M.compare_published(POINTS)
    misses: dict[str, set[int]] = {}
    for r in rows:
        assert math.isfinite(r.error_pct)
        if abs(r.error_pct) > 20.0:
            misses.setdefault(r.point["system"], set()).add(r.point["nbytes"])
    assert misses == KNOWN_MISSES
    hits = [r for r in rows if r.point["nbytes"] not in KNOWN_MISSES.get(r.point["system"], ())]
    assert len(hits) == 66 and all(abs(r.error_pct) <= 20.0 for r in hits)
    # the largest size of every published system is matched
    for system in {p["system"] for p in POINTS}:
        top = max((r for r in rows if r.point["system"] == system), key=lambda r: r.point["nbytes"])
        assert abs(top.error_pct) <= 12.0, (system, top.error_pct)


def test_forced_algorithm_is_honoured_in_the_comparison() -> None:
    nvls = [p for p in POINTS if p["nccl_algo"] == "NVLS"]
    assert nvls
    for r in M.compare_published(nvls):
        assert r.choice.algorithm == "nvls"


# --- input checks ---------------------------------------------------------------------------

def test_input_checks_name_the_argument() -> None:
    with pytest.raises(ValueError, match="preset must be one of 'h100_sxm8'"):
        M.predict_nccl_allreduce("h100", 8, [1])
    with pytest.raises(TypeError, match="preset must be a GpuBox"):
        M.predict_nccl_allreduce(8, 8, [1])
    for bad, exc in ((0, ValueError), (9, ValueError), (True, TypeError), (8.0, TypeError)):
        with pytest.raises(exc, match="world_size"):
            M.predict_nccl_allreduce("a100_sxm8", bad, [1])
    for bad, exc in (("1024", TypeError), (1024, TypeError), ([0], ValueError),
                     ([-8], ValueError), ([1.5], TypeError), ([True], TypeError)):
        with pytest.raises(exc, match="sizes_bytes"):
            M.predict_nccl_allreduce("a100_sxm8", 8, bad)
    with pytest.raises(ValueError, match="algorithms must be a non-empty subset"):
        M.nccl_allreduce("h100_sxm8", 8, [1], algorithms=["NVLS"])
    with pytest.raises(ValueError, match="protocols must be a non-empty subset"):
        M.nccl_allreduce("h100_sxm8", 8, [1], protocols=[])
    with pytest.raises(TypeError, match="algorithms must be a sequence"):
        M.nccl_allreduce("h100_sxm8", 8, [1], algorithms="ring")
    with pytest.raises(ValueError, match="no algorithm/protocol available"):
        M.nccl_allreduce("pcie5_8", 8, [1], protocols=["LL128"])
    with pytest.raises(ValueError, match="algorithm must be one of"):
        M.busbw_bound_gbps("pcie5_8", 8, "rabenseifner")
    with pytest.raises(ValueError, match="nccl_algo must be one of"):
        M.compare_published([{"preset": "h100_sxm8", "world_size": 8, "nbytes": 1,
                              "busbw_gbps": 1.0, "nccl_algo": "CollNet"}])
    with pytest.raises(ValueError, match="world_size must be an int in \\[2, 8\\]"):
        M.tuning_table("h100_sxm8", 1)


def test_gpu_box_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="fabric must be one of"):
        GpuBox("x", "x", "x", 8, 90, "infiniband", "x", 450.0, "x", nvlinks=18)
    with pytest.raises(ValueError, match="sm must be one of"):
        GpuBox("x", "x", "x", 8, 75, "nvswitch", "x", 450.0, "x", nvlinks=18)
    with pytest.raises(ValueError, match="nvlinks must be an int >= 1"):
        GpuBox("x", "x", "x", 8, 90, "nvswitch", "x", 450.0, "x")
    with pytest.raises(ValueError, match="lowest speed NCCL tries"):
        GpuBox("x", "x", "x", 8, 120, "pcie", "x", 15.75, "x", pcie_gen=3, pcie_lanes=16)
    with pytest.raises(ValueError, match="link_gbps must be the spec bandwidth"):
        GpuBox("x", "x", "x", 8, 90, "nvswitch", "x", 300.0, "x", nvlinks=18)
    for box in GPU_BOXES.values():  # NCCL's figures sit under the specs
        assert box.nccl_link_gbps < box.link_gbps
