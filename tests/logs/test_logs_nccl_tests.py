"""nccl-tests' output read back: every layout nccl-tests prints (with and without ``root``,
``#wrong`` or ``error``, ``N/A``, mpirun's prefixes), the devices, the NCCL release, and one
line naming what is wrong with a log that cannot be read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.logs.nccl_tests import LogError, parse_text, read_log
from helpers.paths import ROOT

DATA = ROOT / "tests" / "logs" / "data"
LOGS = ROOT / "results" / "nccl-tests-logs"
HEAD = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong")


def _table(rows: list[tuple[int, int, str, str, int, float, float]], *, binary: str = "",
           devices: int = 0, gpus: int = 1) -> str:
    """A log as nccl-tests prints it: ``(size, count, type, redop, root, time_oop, time_ip)``
    rows under the header, ``devices`` device lines."""
    lines = [f"# nThread 1 nGpus {gpus} minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5"]
    if binary:
        lines.append(f"# Collective test starting: {binary}")
    lines += ["# Using devices"] + [
        f"#  Rank {r:2d} Group  0 Pid  1 on host{r // 8} device {r % 8:2d} [0x18] NVIDIA H100 "
        "80GB HBM3" for r in range(devices)]
    lines += ["#                                   out-of-place                       in-place",
              HEAD]
    for size, count, dtype, redop, root, t1, t2 in rows:
        ip = "N/A     N/A     N/A    N/A" if t2 < 0 else f"{t2:.2f}  1.00  1.00  0"
        lines.append(f"{size:12d} {count:12d} {dtype:>8} {redop:>6} {root:6d} {t1:.2f} 1.00 "
                     f"1.00 0 {ip}")
    return "\n".join(lines + ["# Avg bus bandwidth    : 1.0", ""])


def test_a_one_node_log_states_devices_process_and_release() -> None:
    (run,) = read_log(LOGS / "h100_3nodes_roce_two_racks.log")
    assert run.collective == "all_reduce" and run.ranks == 24 and len(run.hosts) == 3
    assert run.gpu_names == ("NVIDIA H100 80GB HBM3",) and run.gpus_per_process == 1
    assert run.nccl_version == "2.22.3"
    oop = run.column()
    assert [r.nbytes for r in oop][:2] == [512 << 10, 1 << 20]
    assert oop[0].time_us == pytest.approx(366.5, abs=0.05) and oop[-1].wrong == 0
    assert len(run.column("in-place")) == len(oop) == 11


def test_mpirun_prefixes_and_an_older_layout_are_read() -> None:
    """No ``root`` column, ``error`` instead of ``#wrong``, ``[1,0]<stdout>:`` on every line,
    the binary named by the command line."""
    (run,) = read_log(DATA / "mpirun_old_format.log")
    assert run.collective == "all_gather" and run.ranks == 16 and run.hosts == ("node1", "node2")
    assert run.command and "all_gather_perf" in run.command
    assert run.column()[2].time_us == 14811 and run.column()[2].root is None
    assert run.column()[0].wrong is None          # "0e+00": a float error, not a count


@pytest.mark.parametrize(("row", "collective"), [
    ((1024, 256, "float", "sum", -1), "all_reduce"),
    ((1024, 32, "float", "sum", -1), "reduce_scatter"),     # count per rank, 8 ranks
    ((1024, 512, "half", "sum", -1), "all_reduce"),
    ((1024, 256, "float", "sum", 0), "reduce"),
    ((1024, 256, "float", "none", 3), "broadcast"),
])
def test_the_collective_is_inferred_where_the_columns_leave_no_doubt(row, collective) -> None:
    (run,) = parse_text(_table([(*row, 5.0, 5.0)], devices=8))
    assert run.collective == collective


def test_all_gather_and_all_to_all_look_alike_and_must_be_named() -> None:
    text = _table([(1024, 32, "float", "none", -1, 5.0, 5.0)], devices=8)
    with pytest.raises(LogError, match="give the collective"):
        parse_text(text)
    assert parse_text(text, collective="alltoall")[0].collective == "all_to_all"
    named = _table([(1024, 32, "float", "none", -1, 5.0, 5.0)], binary="alltoall_perf",
                   devices=8)
    with pytest.raises(LogError, match="runs alltoall_perf but --collective says all_gather"):
        parse_text(named, collective="all_gather")


def test_not_applicable_columns_are_left_out() -> None:
    (run,) = parse_text(_table([(1024, 256, "float", "sum", -1, 5.0, -1)], devices=2))
    assert [r.column for r in run.rows] == ["out-of-place"]


@pytest.mark.parametrize(("text", "message"), [
    ("hello\nworld\n", "no nccl-tests table"),
    (_table([(1024, 256, "float", "sum", -1, 5.0, 5.0)]).replace("5.00 1.00", "5.00"),
     r":\d+: 12 fields where the table's header names 13"),
])
def test_a_log_that_cannot_be_read_says_why_and_where(text: str, message: str) -> None:
    with pytest.raises(LogError, match=message):
        parse_text(text, source="x.log")


def test_a_missing_file_is_named(tmp_path) -> None:
    with pytest.raises(LogError, match="nope.log: No such file"):
        read_log(tmp_path / "nope.log")


def test_the_environment_nccl_reports_is_kept() -> None:
    text = "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n" + _table(
        [(1024, 256, "float", "sum", -1, 5.0, 5.0)], devices=8)
    assert parse_text(text)[0].env == (("NCCL_ALGO", "Ring"),)


def test_json_output_is_read(tmp_path) -> None:
    data = {"collective": "all_reduce_perf", "nGpus": 1, "nccl_version": "2.26.2",
            "devices": [{"rank": r, "host": "a", "device": r, "name": "NVIDIA B200"}
                        for r in range(8)],
            "results": [{"size": 1 << 20, "count": 1 << 18, "type": "float", "redop": "sum",
                         "root": -1, "out_of_place": {"time": 20.5, "algbw": 51.2,
                                                      "busbw": 89.6, "wrong": 0},
                         "in_place": {"time": "N/A"}}]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    (run,) = read_log(path)
    assert run.collective == "all_reduce" and run.ranks == 8 and run.nccl_version == "2.26.2"
    assert [(r.column, r.time_us) for r in run.rows] == [("out-of-place", 20.5)]
    path.write_text(json.dumps({"collective": "all_reduce_perf"}))
    with pytest.raises(LogError, match="needs 'collective'"):
        read_log(path)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 34), st.floats(0.01, 1e7, allow_nan=False)),
                min_size=1, max_size=12, unique_by=lambda t: t[0]),
       st.sampled_from(["", "[1,0]<stdout>:", "0: "]))
def test_every_row_printed_is_read_back(rows, prefix) -> None:
    """Any sizes and times, printed as nccl-tests prints them (two decimals), read back."""
    text = _table([(s, s, "int8", "sum", -1, t, t) for s, t in rows], devices=2)
    text = "\n".join(prefix + line for line in text.splitlines())
    (run,) = parse_text(text)
    got = {(r.nbytes, r.column): r.time_us for r in run.rows}
    for s, t in rows:
        assert got[s, "out-of-place"] == float(f"{t:.2f}")
        assert got[s, "in-place"] == float(f"{t:.2f}")
