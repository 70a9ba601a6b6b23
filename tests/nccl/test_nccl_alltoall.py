"""NCCL's all-to-all model: NCCL's p2p layout (channels, LL threshold, PXN), nccl-tests'
bandwidths, the calibration refitted from the published tables, and the judgement's numbers
computed from the model and the tables (never written down here)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.evidence.nccl.alltoall_judged import (
    alltoall_tables,
    fit_alltoall,
    judge_alltoall,
    network_rates,
    table_fabric,
)
from distlab.judge.nccl_command import main as judge_main
from distlab.nccl.__main__ import main as nccl_main
from distlab.nccl.alltoall import (
    LL_THRESHOLD_BYTES,
    alltoall_layout,
    alltoall_times,
    fabric,
    p2p_time,
    shipped_alltoall,
)
from distlab.vocabulary import ErrorSummary, busbw_factor, error_pct, gb_per_s

TABLES = alltoall_tables()["tables"]


def test_layout_is_nccls_p2p_layout_on_an_nvswitch_box() -> None:
    f = fabric("b200_sxm8", 8)
    lay = alltoall_layout(f, 8 << 20)
    # ring graph 16 channels -> comm 32 -> p2pnChannels 32; per peer pow2Up(2 * 18) capped at 32
    assert (lay.p2p_channels, lay.channels_per_peer) == (32, 32)
    threshold = lay.channels_per_peer * LL_THRESHOLD_BYTES  # 512 KiB per peer
    assert alltoall_layout(f, 8 * threshold).protocol == "LL"
    assert alltoall_layout(f, 8 * 2 * threshold).protocol == "Simple"
    assert lay.nvl_bytes == (8 << 20) // 8 * 7 and lay.net_bytes == 0


def test_published_step_down_is_where_the_model_leaves_ll() -> None:
    """Where a published one-node table's time falls by over 10% as the size doubles (noise
    moves a few percent), the model switches from LL to Simple between those two sizes
    (NCCL_P2P_LL_THRESHOLD per channel)."""
    checked = 0
    for t in TABLES:
        if t["nodes"] != 1 or len(t["rows"]) < 8:
            continue
        f = table_fabric(t)
        rows = t["rows"]
        for a, b in zip(rows, rows[1:], strict=False):
            if b["size"] == 2 * a["size"] and b["time_us"] < a["time_us"] * 0.9:
                protos = [alltoall_layout(f, r["size"]).protocol for r in (a, b)]
                assert protos == ["LL", "Simple"], (t["id"], a["size"])
                checked += 1
    assert checked >= 3


def test_pxn_forwards_remote_bytes_over_nvlink_and_the_nic_carries_the_other_nodes_share() -> None:
    f = fabric("b200_sxm8", 16, nodes=2, nic_gbps=50.0)
    s = 16 << 20
    lay = alltoall_layout(f, s)
    m = s // 16
    assert lay.net_bytes == m * 8  # (N-1)/N of S
    assert lay.nvl_bytes == m * 7 + m * 8 * 7 // 8
    run = alltoall_times(f, [1 << 30])[0]
    assert run.bound == "network"


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["a100_sxm8", "h100_sxm8", "b200_sxm8"]), st.sampled_from([2, 4, 8]),
       st.integers(min_value=1, max_value=1 << 34))
def test_bandwidths_are_nccl_tests_and_time_grows_within_a_protocol(box: str, n: int,
                                                                    nbytes: int) -> None:
    f = fabric(box, n)
    a, b = alltoall_times(f, [nbytes, 2 * nbytes])
    assert a.algbw_gbps == pytest.approx(gb_per_s(nbytes, a.seconds), rel=1e-12)
    assert a.busbw_gbps == pytest.approx(a.algbw_gbps * busbw_factor("all_to_all", n), rel=1e-12)
    if a.layout.protocol == b.layout.protocol:
        assert b.seconds >= a.seconds


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([2, 3]), st.sampled_from([8, 64]),
       st.integers(min_value=1, max_value=1 << 34),
       st.sampled_from([16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10]),
       st.sampled_from([12.5, 25.0, 50.0, 100.0, 200.0]))
def test_across_nodes_the_network_is_the_slower_of_the_nics_and_the_proxy(
        nodes: int, g: int, nbytes: int, chunk: int, nic: float) -> None:
    box = "gb200_nvl72" if g == 64 else "b200_sxm8"
    c = shipped_alltoall()
    f = fabric(box, nodes * g, nodes=nodes, nic_gbps=nic, net_chunk_bytes=chunk)
    big = fabric(box, nodes * g, nodes=nodes, nic_gbps=nic, net_chunk_bytes=512 << 10)
    run, bigger = alltoall_times(f, [nbytes])[0], alltoall_times(big, [nbytes])[0]
    lay = run.layout
    if lay.protocol == "Simple":
        assert lay.step_bytes == chunk
        assert bigger.seconds <= run.seconds * (1 + 1e-12)  # a larger chunk: fewer proxy steps
    proxy_us = lay.net_bytes / lay.step_bytes * c.net_proxy_us[lay.protocol]
    wire_us = lay.net_bytes / (c.net_efficiency[lay.protocol] * nic * 1e3)
    faster = fabric(box, nodes * g, nodes=nodes, nic_gbps=2 * nic, net_chunk_bytes=chunk)
    again = alltoall_times(faster, [nbytes])[0]
    assert again.seconds <= run.seconds * (1 + 1e-12)
    if proxy_us >= 2 * wire_us:  # the proxy binds even at half the NIC time: more NIC buys nothing
        assert again.seconds == pytest.approx(run.seconds, rel=1e-12)


def test_chunk_size_moves_only_the_network_and_is_checked() -> None:
    one = alltoall_times(fabric("b200_sxm8", 8, net_chunk_bytes=4096), [1 << 30])[0]
    assert one.seconds == alltoall_times(fabric("b200_sxm8", 8), [1 << 30])[0].seconds
    for bad in (1000, 1 << 20):
        with pytest.raises(ValueError, match="net_chunk_bytes"):
            fabric("b200_sxm8", 16, nodes=2, nic_gbps=50.0, net_chunk_bytes=bad)
    for t in TABLES:  # the published NCCL_P2P_NET_CHUNKSIZE reaches the model, else NCCL's
        assert table_fabric(t).net_chunk_bytes == t.get("p2p_net_chunksize", 128 << 10)


def test_fabric_and_p2p_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="world_size"):
        fabric("b200_sxm8", 9)
    with pytest.raises(ValueError, match="nic_gbps"):
        fabric("b200_sxm8", 16, nodes=2)
    with pytest.raises(ValueError, match="nbytes"):
        p2p_time(fabric("b200_sxm8", 8), -1, cross_node=False)
    with pytest.raises(ValueError, match="nic_gbps"):
        p2p_time(fabric("b200_sxm8", 8), 1 << 20, cross_node=True)
    across = p2p_time(fabric("b200_sxm8", 16, nodes=2, nic_gbps=50.0), 1 << 20, cross_node=True)
    assert across.layout.net_bytes == 1 << 20 and across.bound == "network"
    one = p2p_time(fabric("h100_sxm8", 8), 1 << 20, cross_node=False)
    assert one.layout.nvl_bytes == 1 << 20 and one.seconds > 0


def test_judgement_is_computed_from_the_model_and_the_tables() -> None:
    judged = {j.id: j for j in judge_alltoall()}
    assert set(judged) == {t["id"] for t in TABLES}
    held = [t for t in TABLES if t["role"] == "held_out"]
    assert held and not {t["id"] for t in held} & set(shipped_alltoall().calibrated_on)
    for t in TABLES:
        j = judged[t["id"]]
        f = table_fabric(t)
        model = [r.seconds * 1e6 for r in alltoall_times(f, [r["size"] for r in t["rows"]])]
        want = [error_pct(r["time_us"], m) for r, m in zip(t["rows"], model, strict=True)]
        assert j.errors_pct == pytest.approx(want, rel=1e-9)
        assert j.summary.n == len(t["rows"])
    cal = ErrorSummary.of([e for j in judged.values() if j.role == "calibrate"
                           for e in j.errors_pct])
    assert cal.median <= 10.0  # in sample: the layout carries the shape, 3 constants the scale


def test_network_rates_are_the_published_times_beside_the_models_two_bounds() -> None:
    rates = {r.id: r for r in network_rates()}
    c = shipped_alltoall()
    assert set(rates) == {t["id"] for t in TABLES if t["nodes"] > 1}
    for t in TABLES:
        if t["id"] not in rates:
            continue
        r, f = rates[t["id"]], table_fabric(t)
        row = max(t["rows"], key=lambda x: x["size"])
        lay = alltoall_layout(f, row["size"])
        assert r.published_gbps == pytest.approx(lay.net_bytes / row["time_us"] / 1e3)
        assert r.proxy_gbps == pytest.approx(lay.step_bytes / c.net_proxy_us["Simple"] / 1e3)
        assert r.nic_gbps == pytest.approx(f.nic_gbps * c.net_efficiency["Simple"])
        assert r.chunk_bytes == f.net_chunk_bytes
    cal = [r for r in rates.values() if r.id in c.calibrated_on]
    for r in cal:  # fitted there: the slower bound is the published rate
        assert min(r.nic_gbps, r.proxy_gbps) == pytest.approx(r.published_gbps, rel=0.05)


def test_published_rows_are_consistent_and_sourced() -> None:
    for t in TABLES:
        assert t["source"] and t["hardware"] and t["role"] in ("calibrate", "held_out")
        for r in t["rows"]:
            assert gb_per_s(r["size"], r["time_us"] * 1e-6) == pytest.approx(
                r["algbw_gbps"], rel=0.01, abs=0.02)


def test_command_prints_alltoall_perf_columns(capsys) -> None:
    assert nccl_main(["b200_sxm8", "--collective", "alltoall", "--sizes", "128,1M,1G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["size(B)"])
    assert lines[head].split()[:6] == ["size(B)", "count", "type", "time(us)", "algbw(GB/s)",
                                       "busbw(GB/s)"]
    rows = [ln.split() for ln in lines[head + 1:]]
    assert [int(r[0]) for r in rows] == [128, 1 << 20, 1 << 30]
    for r in rows:
        size, count, time_us, algbw, busbw = int(r[0]), int(r[1]), *map(float, r[3:6])
        assert count == size // 8 // 4
        assert algbw == pytest.approx(size / time_us / 1e3, rel=0.01, abs=0.01)
        assert busbw == pytest.approx(algbw * 7 / 8, rel=0.01, abs=0.01)
    assert max(len(ln) for ln in lines) <= 110


def test_command_across_nodes_is_network_bound(capsys) -> None:
    assert nccl_main(["b200_sxm8", "--collective", "all_to_all", "--nodes", "2", "--network",
                      "ib_ndr400x8", "--sizes", "1G"]) == 0
    out = capsys.readouterr().out
    assert "2 x b200_sxm8 over ib_ndr400x8" in out and out.splitlines()[-1].split()[-1] == "network"


@pytest.mark.parametrize("argv", [["b200_sxm8", "--collective", "all_to_all", "-n", "9"],
                                  ["b200_sxm8", "--collective", "all_to_all", "--nodes", "2"],
                                  ["b200_sxm8", "--collective", "all_to_all", "--json", "x.json"]])
def test_command_bad_input_is_one_line_and_exit_2(argv, capsys) -> None:
    assert nccl_main(argv) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_judge_command_prints_each_table_and_writes_the_fit(tmp_path, capsys) -> None:
    out_path = tmp_path / "cal.json"
    assert judge_main(["--alltoall", "--write", str(out_path)]) == 0
    text = capsys.readouterr().out
    for t in TABLES:
        assert t["label"] in text
    held = ErrorSummary.of([e for j in judge_alltoall() if j.role == "held_out"
                            for e in j.errors_pct])
    assert f"# held-out rows: n={held.n}, median {held.median:.1f}%" in text
    for r in network_rates():
        assert f"#   {r.id:18} {r.published_gbps:5.1f} GB/s; NIC {r.nic_gbps:5.1f}" in text
    written = json.loads(out_path.read_text())["constants"]
    assert written["efficiency"]["Simple"] == pytest.approx(
        fit_alltoall().efficiency["Simple"], rel=1e-9)
    assert not math.isnan(held.median)
