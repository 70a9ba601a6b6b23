"""bench allreduce-tuning (the default call, the pieces curve, the check modes) and the
whole-curve comparison with the built-in (bench/versus.py) that bench allreduce prints."""

from __future__ import annotations

import pytest

from distlab.bench import allreduce_tuning as tuning
from distlab.bench.versus import ratios, versus_lines, versus_table
from distlab.collectives.model.choice import best_pieces

pytestmark = pytest.mark.multiprocess


def _row(algorithm: str, nbytes: int, busbw: float) -> dict:
    return {"algorithm": algorithm, "nbytes": nbytes, "busbw_gbps": busbw}


def test_versus_covers_every_size_and_names_the_extremes() -> None:
    rows = [_row("builtin", 1024, 2.0), _row("ring", 1024, 1.0), _row("tree", 1024, 3.0),
            _row("builtin", 4096, 4.0), _row("ring", 4096, 5.0), _row("tree", 4096, 2.0),
            _row("ring", 65536, 1.0)]  # no builtin at 64K: left out, not divided by zero
    assert ratios(rows) == {"ring": {1024: 0.5, 4096: 1.25}, "tree": {1024: 1.5, 4096: 0.5}}
    table = versus_table(rows)
    assert table is not None and table.key == "vs_builtin"
    assert [(r["nbytes"], r["ring"], r["tree"]) for r in table.rows] == [(1024, 0.5, 1.5),
                                                                         (4096, 1.25, 0.5)]
    assert versus_lines(rows, prefix="- ") == [
        "- ring busbw / builtin over 2 sizes (1K-4K): lowest 0.50x at 1K, median 0.88x, "
        "highest 1.25x at 4K",
        "- tree busbw / builtin over 2 sizes (1K-4K): lowest 0.50x at 4K, median 1.00x, "
        "highest 1.50x at 1K"]
    assert versus_table([_row("ring", 1024, 1.0)]) is None


@pytest.mark.parametrize("argv,needle", [
    (["--world-size", "1"], ">= 2"), (["--pieces", "0"], "--pieces"),
    (["-b", "4M", "-e", "1M"], "-e/--maxbytes"), (["--algorithm", "tree"], "invalid choice"),
    (["--op", "avg", "--dtype", "int32"], "--op")])
def test_bad_options_exit_2_before_any_rank(argv: list[str], needle: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        tuning.main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_small_run_is_right_and_says_what_the_model_chose() -> None:
    config = tuning.TuningConfig(world_size=2, minbytes=1 << 16, maxbytes=1 << 18, iters=2,
                                 warmup=1, pieces=(1, 2, 4), quiet=True)
    report = tuning.BENCHMARK.run(config)
    rows, summary = report.rows, report.tables[1].rows
    assert not report.failed and all(r["wrong"] == 0 for r in rows)
    names = [r["variant"] for r in rows if r["nbytes"] == 1 << 16]
    assert names == ["builtin", "default", "k=1", "k=2", "k=4", "check=gather", "check=off"]
    assert [r["check"] for r in rows[:7]] == ["-", "inline", "inline", "inline", "inline",
                                              "gather", "off"]
    for s in summary:
        assert s["default_k"] == best_pieces("ring", 2, s["nbytes"] // 4, 4)
        curve = {r["pieces"]: r["time_us"] for r in rows
                 if r["nbytes"] == s["nbytes"] and r["variant"].startswith("k=")}
        assert curve[s["best_k"]] == min(curve.values())
        assert s["model_k"] in curve  # this run's calibration predicted every k
    builtin = [r for r in rows if r["variant"] == "builtin"]
    assert all(r["vs_builtin"] == 1.0 and r["predicted_us"] is None for r in builtin)
    assert all(r["predicted_us"] > 0 for r in rows if r["variant"] != "builtin")
    assert report.data["load_before"] and len(report.data["calibration"]["sizes"]) >= 2
