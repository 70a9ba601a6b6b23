"""calibrate() fits and the nccl-tests-style benchmark (tiny sizes; no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from distlab.bench import allreduce as bench
from distlab.collectives import Calibration, build, cost, fit_linear, simulate
from distlab.collectives.calibrate import calibrate_local, exchange_schedule
from distlab.collectives.presets import loopback_preset


def test_fit_linear_recovers_a_line_and_reports_quality() -> None:
    xs = [1e3, 1e4, 1e5, 1e6, 1e7]
    a, b, r2, worst = fit_linear(xs, [5e-5 + 2e-10 * x for x in xs])
    assert a == pytest.approx(5e-5) and b == pytest.approx(2e-10) and r2 == pytest.approx(1.0)
    assert worst < 1e-9
    noisy = [t * f for t, f in zip([5e-5 + 2e-10 * x for x in xs], [1.3, 0.8, 1.1, 0.9, 1.05])]
    assert fit_linear(xs, noisy)[3] > 0.1


def test_fit_linear_clips_negative_terms_and_rejects_bad_data() -> None:
    a, b, _, _ = fit_linear([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert a == pytest.approx(0.0, abs=1e-12) and b == pytest.approx(1.0, rel=1e-6)
    # y = -1 + 2x: the unclipped intercept is -1, so a is clipped to exactly 0 and b refitted
    # through the origin (weighted by 1/y^2: sum(x y w^2) / sum(x^2 w^2))
    xs, ys = [1.0, 2.0, 3.0], [1.0, 3.0, 5.0]
    a, b, _, _ = fit_linear(xs, ys)
    w2 = [1 / y ** 2 for y in ys]
    assert a == 0.0
    assert b == pytest.approx(sum(x * y * w for x, y, w in zip(xs, ys, w2)) /
                              sum(x * x * w for x, w in zip(xs, w2)))
    a, b, _, _ = fit_linear(xs, [5.0, 3.0, 1.0])  # falling: slope clipped, a = weighted mean
    assert b == 0.0 and a == pytest.approx(sum(1 / y for y in (5, 3, 1)) /
                                           sum(1 / y ** 2 for y in (5, 3, 1)))
    with pytest.raises(ValueError, match="positive y"):
        fit_linear([1.0, 2.0], [1.0, 0.0])


def test_exchange_schedule_swaps_between_pairs() -> None:
    s = exchange_schedule(5, 3, chain=2)
    assert len(s.steps) == 2 and s.count == 6
    outs = simulate(s, [[r] * 6 for r in range(5)], "sum")
    assert list(outs[0]) == [0, 0, 0, 1, 1, 1] and list(outs[1]) == [0, 0, 0, 1, 1, 1]
    assert list(outs[4]) == [4] * 6, "the odd rank out keeps its data"


def test_calibration_round_trip_and_loopback_preset(tmp_path) -> None:
    cal = Calibration(1e-4, 5e-10, 1e-10, 0.99, 0.1, 0.98, 0.2, backend="gloo", world_size=2)
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"calibration": cal.to_dict(),
                                "provenance": {"host": "box", "date": "2026-01-01"}}))
    preset = loopback_preset(path)
    assert preset is not None and preset.alpha == 1e-4 and "box" in preset.source
    assert loopback_preset(tmp_path / "missing.json") is None


@pytest.mark.multiprocess
def test_calibrate_on_two_ranks() -> None:
    """The returned terms are the fits of the returned data, in the cost model's units.

    Each check can fail: alpha/beta must be the exchange fit divided by the ranks that exchange,
    gamma the fit of the reduce timings, and the cost model applied to the very exchange that
    was timed must give back the fitted line (so the calibration's units match :func:`cost`).
    """
    cal = calibrate_local(2, sizes=(1024, 16384, 262144), reduce_sizes=(65536, 262144), iters=3,
                          warmup=1)
    assert cal.duplex == "shared" and cal.world_size == 2 and cal.backend == "gloo"
    assert cal.sizes == [1024, 16384, 262144] and len(cal.single_seconds) == 3
    assert len(cal.comm_seconds) == 3 and all(t > 0 for t in cal.comm_seconds)
    a, slope, r2, worst = fit_linear(cal.sizes, cal.comm_seconds)
    assert cal.alpha == pytest.approx(a / 2) and cal.beta == pytest.approx(slope / 4)
    assert cal.comm_r2 == pytest.approx(r2) and cal.comm_max_rel_residual == pytest.approx(worst)
    r0, gamma, _, _ = fit_linear(cal.reduce_sizes, cal.reduce_seconds)
    assert cal.gamma == pytest.approx(gamma) and cal.reduce_offset == pytest.approx(r0)
    overhead = sorted(one - step for one, step in zip(cal.single_seconds, cal.comm_seconds))[1]
    assert cal.call_overhead == pytest.approx(max(0.0, overhead))
    for nbytes, measured in zip(cal.sizes, cal.comm_seconds):
        model = cost(exchange_schedule(2, nbytes // 4, 1), cal.alpha, cal.beta, 0.0, 4,
                     duplex="shared")
        assert model == pytest.approx(a + slope * nbytes, rel=1e-9)
        assert abs(model - measured) <= worst * measured * (1 + 1e-9)


@pytest.mark.parametrize("alpha, beta", [(5e-5, 2e-10), (1e-6, 1e-9), (2e-4, 0.0)])
def test_calibration_fit_recovers_known_terms_from_synthetic_timings(alpha, beta) -> None:
    """What calibrate() does with timings, on a synthetic source with known alpha and beta:
    exchanges of 2 ranks timed as ``cost(exchange)`` give back alpha and beta exactly."""
    sizes = [4 ** k * 1024 for k in range(6)]
    times = [cost(exchange_schedule(2, n // 4, 1), alpha, beta, 0.0, 4, duplex="shared")
             for n in sizes]
    a, slope, r2, worst = fit_linear(sizes, times)
    assert a / 2 == pytest.approx(alpha, rel=1e-6, abs=1e-15)
    assert slope / 4 == pytest.approx(beta, rel=1e-6, abs=1e-18)
    assert r2 == pytest.approx(1.0) and worst < 1e-6


def test_parse_size_and_sweep() -> None:
    assert bench.parse_size("1K") == 1024 and bench.parse_size("64M") == 64 << 20
    assert bench.parse_size("100") == 100
    assert bench._sizes(1024, 65536, 4) == [1024, 4096, 16384, 65536]
    with pytest.raises(ValueError, match="stepfactor must be >= 2"):
        bench._sizes(1, 8, 1)


def test_format_table_has_nccl_tests_columns_and_ratio() -> None:
    rows = [{"nbytes": 4096, "count": 1024, "dtype": "float32", "op": "sum", "algorithm": a,
             "time_us": t, "algbw_gbps": 4096 / t / 1e3, "busbw_gbps": 4096 / t / 1e3,
             "wrong": 0, "predicted_us": p, "error_pct": None if p is None else 100 * (t - p) / p}
            for a, t, p in (("ring", 20.0, 10.0), ("builtin", 10.0, None))]
    text = bench.format_table(rows)
    head = text.splitlines()[0].split()
    assert head[:4] == ["size(B)", "count", "type", "redop"]
    assert "busbw(GB/s)" in head and "#wrong" in head and "predicted(us)" in head
    assert "+100.0" in text and "0.50x" in text


@pytest.mark.multiprocess
def test_benchmark_cli_writes_json_with_provenance(tmp_path, capsys) -> None:
    out = tmp_path / "ar.json"
    code = bench.main(["--world-size", "2", "-b", "1K", "-e", "4K", "-f", "4",
                       "--algorithms", "ring,tree,builtin", "--iters", "2", "--warmup", "1",
                       "--no-calibrate", "-q", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "out of bounds values: 0 OK" in printed
    data = json.loads(out.read_text())
    assert data["provenance"]["world_size"] == 2 and data["provenance"]["backend"] == "gloo"
    assert {"host", "torch", "date", "command", "device"} <= set(data["provenance"])
    algos = {(r["algorithm"], r["nbytes"]) for r in data["rows"]}
    assert algos == {(a, s) for a in ("ring", "tree", "builtin") for s in (1024, 4096)}
    assert all(r["wrong"] == 0 and r["predicted_us"] is None for r in data["rows"])
    # predictions from a stored calibration
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"alpha": 1e-4, "beta": 1e-9, "gamma": 1e-10, "duplex": "full",
                               "comm_r2": 1, "comm_max_rel_residual": 0, "reduce_r2": 1,
                               "reduce_max_rel_residual": 0}))
    code = bench.main(["--world-size", "2", "-b", "1K", "-e", "1K", "--algorithms", "ring",
                       "--iters", "1", "--warmup", "0", "--calibration", str(cal), "-q"])
    assert code == 0
    expected = cost(build("ring", 2, 256), 1e-4, 1e-9, 1e-10, 4) * 1e6
    assert f"{expected:.1f}" in capsys.readouterr().out


def test_cli_rejects_bad_algorithm(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--algorithms", "warp"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --algorithms" in err and "'warp'" in err and "Traceback" not in err
