"""python -m distlab.bench collective: nccl-tests' busbw factors, option errors before any rank
starts, and one small run whose rows are right and carry the model."""

from __future__ import annotations

import pytest

from distlab.bench import collective as bench
from distlab.bench.__main__ import main as dispatch

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("argv,needle", [
    (["--op", "gather", "--algorithms", "ring"], "algorithms of gather"),
    (["--op", "reduce", "--root", "2"], "--root"),
    (["--op", "reduce_scatter", "--redop", "avg", "--dtype", "int64"], "--redop"),
    (["--op", "allgather"], "invalid choice"), (["-b", "2"], "-b/--minbytes"),
    (["-b", "4M", "-e", "1M"], "-e/--maxbytes")])
def test_bad_options_exit_2_before_any_rank(argv: list[str], needle: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatch(["collective", *argv]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_small_rooted_reduction_is_right_and_predicted() -> None:
    config = bench.CollectiveConfig(op="reduce", world_size=3, minbytes=3 << 10,
                                    maxbytes=48 << 10, redop="max", root=1, iters=2, warmup=1,
                                    quiet=True)
    report = bench.BENCHMARK.run(config)
    rows = report.rows
    assert not report.failed and all(r["wrong"] == 0 for r in rows)
    assert [r["algorithm"] for r in rows[:3]] == ["binomial", "rabenseifner", "builtin"]
    assert {r["nbytes"] for r in rows} == {3072, 12288, 49152}
    for r in rows:
        assert r["root"] == 1 and r["op"] == "max"
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"])  # reduce: factor 1
        assert (r["predicted_us"] is None) == (r["algorithm"] == "builtin")
    assert report.tables[1].key == "vs_builtin" and report.data["busbw_factor"] == 1.0
    assert any("rabenseifner busbw / builtin over 3 sizes" in line for line in report.tail)
