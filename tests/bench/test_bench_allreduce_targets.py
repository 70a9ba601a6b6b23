"""The allreduce benchmark's targets beside gloo's builtin: CPU time per call summed over the
ranks where the ranks outnumber the cores (4 ranks on 2 cores), busbw elsewhere; and the CPU
columns of a real run."""

from __future__ import annotations

import numpy as np
import pytest

from distlab.bench import allreduce as bench
from distlab.bench.allreduce_targets import CPU_MAX, cpu_ratios, target_lines, uses_cpu_target
from distlab.report.jsonfile import read_json

MIB = 1 << 20


def _rows(cpu: dict[str, dict[int, float]], busbw: dict[str, dict[int, float]] | None = None):
    out = []
    for algo, by_size in cpu.items():
        for nbytes, us in by_size.items():
            out.append({"nbytes": nbytes, "algorithm": algo, "cpu_us": us,
                        "busbw_gbps": (busbw or {}).get(algo, {}).get(nbytes, 1.0)})
    return out


def test_which_target_applies() -> None:
    assert uses_cpu_target(4, 2) and uses_cpu_target(8, 4)
    assert not uses_cpu_target(4, 4) and not uses_cpu_target(2, 1)  # 2 ranks keep speed


def test_cpu_target_is_each_plans_worst_ratio_from_1_to_16_mib() -> None:
    rows = _rows({"builtin": {MIB // 4: 10.0, MIB: 100.0, 4 * MIB: 200.0, 16 * MIB: 400.0,
                              64 * MIB: 800.0},
                  "ring": {MIB // 4: 90.0, MIB: 104.0, 4 * MIB: 206.0, 16 * MIB: 400.0,
                           64 * MIB: 2000.0},
                  "tree": {MIB: 150.0, 4 * MIB: 100.0, 16 * MIB: 100.0}})
    assert cpu_ratios(rows)["ring"] == pytest.approx({MIB: 1.04, 4 * MIB: 1.03, 16 * MIB: 1.0})
    lines = target_lines(rows, 4, 2)
    assert lines[0].startswith("target (4 ranks on 2 cores: CPU time per call summed over the "
                               "ranks, getrusage): every plan <= 1.05x the builtin's at 1M-16M")
    assert lines[1] == "  ring: worst 1.04x at 1M met"        # 256 KiB and 64 MiB not judged
    assert lines[2] == "  tree: worst 1.50x at 1M NOT met"
    assert CPU_MAX == 1.05


def test_speed_targets_stay_for_two_ranks() -> None:
    busbw = {"builtin": {MIB: 1.0, 4 * MIB: 1.0, 16 * MIB: 1.0},
             "ring": {MIB: 0.80, 4 * MIB: 0.97, 16 * MIB: 0.96},
             "tree": {MIB: 0.96, 4 * MIB: 0.90, 16 * MIB: 0.90}}
    rows = _rows({a: dict.fromkeys(b, 1.0) for a, b in busbw.items()}, busbw)
    assert target_lines(rows, 2, 2) == [
        "target ring >= 0.95x builtin busbw at 16M: 0.96x met",
        "target best plan >= 0.95x builtin busbw at every size 1M-16M: lowest 0.96x at 1M met"]
    assert target_lines(rows, 4, 4)[1].startswith("target best plan >= 1.00x")
    assert target_lines([r for r in rows if r["algorithm"] != "builtin"], 2, 2) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_run_reports_cpu_per_call_and_its_ratio(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    assert bench.main(["-n", "2", "-b", "1M", "-e", "1M", "-a", "ring,builtin", "--iters", "2",
                       "--warmup", "0", "--no-calibrate", "--quiet", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cpu(us)" in text and "cpu vs builtin(x)" in text
    assert "cpu = the ranks' CPU seconds per call (getrusage" in text
    assert "target best plan >= 0.95x builtin busbw" in text   # 2 ranks: the speed targets
    rows = read_json(out)["rows"]
    for r in rows:
        assert r["cpu_us"] > 0 and len(r["cpu_seconds_per_rank"]) == 2
        summed = [sum(per_round) for per_round in zip(*r["cpu_seconds_per_rank"], strict=True)]
        assert r["cpu_us"] == pytest.approx(float(np.median(summed)) * 1e6, rel=1e-9)
    builtin = next(r for r in rows if r["algorithm"] == "builtin")
    ring = next(r for r in rows if r["algorithm"] == "ring")
    assert ring["cpu_vs_builtin"] == pytest.approx(ring["cpu_us"] / builtin["cpu_us"], rel=1e-9)
