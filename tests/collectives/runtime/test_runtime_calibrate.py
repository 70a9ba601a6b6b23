"""calibrate() and its pure fit, and the nccl-tests-style benchmark (tiny sizes; no timing is
asserted)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from distlab.bench import allreduce as bench
from distlab.cli import options
from distlab.collectives import Calibration, build, cost, simulate
from distlab.collectives.model.calibration import (
    exchange_schedule,
    fit_calibration,
    oneway_schedule,
    shift_schedule,
)
from distlab.collectives.model.predict import call_model
from distlab.collectives.model.presets import loopback_preset
from distlab.collectives.runtime.rounds import calibrate_local
from distlab.report.jsonfile import write_json


def test_exchange_schedule_swaps_between_pairs() -> None:
    s = exchange_schedule(5, 3, chain=2)
    assert len(s.steps) == 2 and s.count == 6
    outs = simulate(s, [[r] * 6 for r in range(5)], "sum")
    assert list(outs[0]) == [0, 0, 0, 1, 1, 1] and list(outs[1]) == [0, 0, 0, 1, 1, 1]
    assert list(outs[4]) == [4] * 6, "the odd rank out keeps its data"


def test_calibration_round_trip_and_loopback_preset(tmp_path) -> None:
    cal = Calibration(1e-4, 5e-10, 1e-10, 0.99, 0.1, 0.98, 0.2, backend="gloo", world_size=2)
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    path = write_json(tmp_path / "cal.json", {"calibration": cal.to_dict(),
                                              "provenance": {"host": "box", "date": "2026-01-01"}})
    preset = loopback_preset(path)
    assert preset is not None and preset.alpha == 1e-4 and "box" in preset.source
    assert loopback_preset(tmp_path / "missing.json") is None


@pytest.mark.multiprocess
def test_calibrate_on_two_ranks() -> None:
    """The returned terms are the fit of the returned series, in the cost model's units.

    Each check can fail: the terms must equal the pure refit of the series the ranks measured
    (so a stored calibration can be refitted offline), and the cost model applied to the very
    exchange that was timed must land within the fit's worst residual of the measurement.
    """
    cal = calibrate_local(2, sizes=(1024, 16384, 262144), iters=3, warmup=1)
    assert cal.duplex == "shared" and cal.world_size == 2 and cal.backend == "gloo"
    assert cal.method == "upfront" and cal.sizes == [1024, 16384, 262144]
    series = (cal.comm_seconds, cal.oneway_seconds, cal.single_seconds, cal.reduce_seconds,
              cal.shift_seconds)
    assert all(len(v) == 3 and all(t > 0 for t in v) for v in series)
    assert cal.shift_seconds == cal.comm_seconds, "with 2 ranks the shift is the exchange"
    # every recorded round is kept (slowest rank), and the series are their medians
    rounds = np.asarray(cal.round_seconds)
    assert rounds.shape == (3, 3 * 5 + 2)
    med = np.median(rounds, axis=0)
    for i, name in enumerate(("comm_seconds", "oneway_seconds", "single_seconds",
                              "reduce_seconds", "shift_seconds")):
        assert np.allclose(med[i:-2:5], getattr(cal, name), rtol=1e-12), name
    # the builtin's floor (gloo's own allreduce of the smallest size) and call (of an empty
    # tensor), timed in the same rounds
    assert cal.builtin_floor_bytes == 1024 and cal.builtin_floor == pytest.approx(med[-2])
    assert cal.builtin_call == pytest.approx(med[-1]) and cal.builtin_call > 0
    assert cal.cpus_allowed == len(os.sched_getaffinity(0)) and cal.local_world_size == 2
    refit = fit_calibration(cal.sizes, *series, world_size=2, backend="gloo", method="upfront",
                            builtin_floor=cal.builtin_floor,
                            builtin_floor_bytes=cal.builtin_floor_bytes,
                            builtin_call=cal.builtin_call, cpus_allowed=cal.cpus_allowed,
                            local_world_size=cal.local_world_size, round_seconds=cal.round_seconds)
    assert refit == cal
    for nbytes, measured in zip(cal.sizes, cal.comm_seconds, strict=True):
        model = cost(exchange_schedule(2, nbytes // 4, 1), cal.alpha, cal.beta, 0.0, 4,
                     duplex="shared", handoff=cal.handoff, relay=cal.relay)
        assert abs(model - measured) <= cal.comm_max_rel_residual * measured * (1 + 1e-9)


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("terms", [(80e-6, 15e-6, 0.3e-9, 120e-6), (0.0, 5e-5, 2e-10, 0.0),
                                   (2e-4, 1e-6, 1e-9, 3e-5)])
def test_fit_calibration_recovers_known_terms_from_synthetic_timings(world_size, terms) -> None:
    """What the calibration does with timings, on a synthetic machine whose steps cost exactly
    what :func:`cost` says for known (handoff, alpha, beta, relay): the fit gives them back."""
    handoff, alpha, beta, relay = terms
    sizes = [4 ** k * 1024 for k in range(6)]

    def step(sched):
        return cost(sched, alpha, beta, 0.0, 4, duplex="shared", handoff=handoff, relay=relay)

    exch = [step(exchange_schedule(world_size, n // 4, 1)) for n in sizes]
    oneway = [step(oneway_schedule(world_size, n // 4, 1)) for n in sizes]
    shift = [step(shift_schedule(world_size, n // 4, 1)) for n in sizes]
    red = [1e-6 + 1e-10 * n for n in sizes]
    cal = fit_calibration(sizes, exch, oneway, [e + 1e-5 for e in exch], red, shift,
                          world_size=world_size)
    want_relay = relay if world_size > 2 else 0.0  # no rank beyond a pair: relay unseen
    got = (cal.handoff, cal.alpha, cal.beta, cal.relay)
    # a zero term comes back ~1e-15
    for g, w in zip(got, (handoff, alpha, beta, want_relay), strict=True):
        assert g == pytest.approx(w, rel=1e-6, abs=1e-12 if w == 0 else 0.0)
    assert cal.gamma == pytest.approx(1e-10) and cal.reduce_offset == pytest.approx(1e-6)
    assert cal.call_overhead == pytest.approx(1e-5)
    assert cal.comm_r2 == pytest.approx(1.0) and cal.comm_max_rel_residual < 1e-6


def test_parse_size_and_sweep() -> None:
    assert options.size_bytes("1K") == 1024 and options.size_bytes("64M") == 64 << 20
    assert options.size_bytes("100") == 100
    assert options.size_list("4K,1M") == [4096, 1 << 20]
    assert options.size_sweep(1024, 65536, 4) == [1024, 4096, 16384, 65536]
    with pytest.raises(ValueError, match="stepfactor must be >= 2"):
        options.size_sweep(1, 8, 1)


def test_format_table_has_nccl_tests_columns_and_ratio() -> None:
    rows = [{"nbytes": 4096, "count": 1024, "dtype": "float32", "op": "sum", "algorithm": a,
             "time_us": t, "algbw_gbps": 4096 / t / 1e3, "busbw_gbps": 4096 / t / 1e3,
             "wrong": 0, "predicted_us": p, "error_pct": None if p is None else 100 * (t - p) / p}
            for a, t, p in (("ring", 20.0, 10.0), ("builtin", 10.0, None))]
    text = bench.allreduce_table(rows)
    head = text.splitlines()[0].split()
    assert head[:4] == ["size(B)", "count", "type", "redop"]
    assert "busbw(GB/s)" in head and "#wrong" in head and "predicted(us)" in head
    assert "+100.0" in text and "vs builtin(x)" in text.splitlines()[0]
    assert text.splitlines()[1].split()[-1] == "0.50" and text.splitlines()[2].split()[-1] == "1.00"


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
    cal = write_json(tmp_path / "cal.json",
                     {"alpha": 1e-4, "beta": 1e-9, "gamma": 1e-10, "duplex": "full",
                      "comm_r2": 1, "comm_max_rel_residual": 0, "reduce_r2": 1,
                      "reduce_max_rel_residual": 0})
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


@pytest.mark.multiprocess
@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_benchmark_judges_the_model_by_the_statistic_it_fitted_on(tmp_path, statistic) -> None:
    """The calibration measured in the rounds is fitted on the rows' own statistic, and each
    row's error compares the prediction with that statistic of its slowest-rank rounds."""
    out = tmp_path / "ar.json"
    argv = ["--world-size", "2", "-b", "1K", "-e", "4K", "-f", "4", "--algorithms",
            "ring,builtin", "--iters", "3", "--warmup", "1", "-q", "--json", str(out)]
    assert bench.main(argv + ([] if statistic == "mean" else ["--statistic", "median"])) == 0
    data = json.loads(out.read_text())
    cal = data["calibration"]
    assert cal["statistic"] == statistic and len(cal["round_seconds"]) == 3
    model = call_model(cal)
    for row in data["rows"]:
        slowest = np.max(np.asarray(row["seconds_per_rank"]), axis=0)
        assert row["mean_us"] == pytest.approx(np.mean(slowest) * 1e6)
        assert row["time_us"] == pytest.approx(np.median(slowest) * 1e6)
        assert row["predicted_us"] == pytest.approx(
            model.seconds(row["algorithm"], 2, row["count"], 4, row["options"]) * 1e6)
        judged = row["mean_us"] if statistic == "mean" else row["time_us"]
        assert row["error_pct"] == pytest.approx(
            100 * (judged - row["predicted_us"]) / row["predicted_us"])
