"""The pipeline benchmark CLI: every bad option is one line naming it (exit 2), --help gives
every option a description and default, and a tiny run writes complete JSON with start-up
reported apart from the steady pipeline."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass

import pytest

from distlab.bench import loading as bench
from distlab.loading import RunResult, equal_stages
from distlab.loading.bottleneck import bound_s, plan_for_stages, simulate_pipeline
from distlab.timeline import Timeline
from helpers.cli_errors import one_error_line

pytestmark = pytest.mark.timeout(120)

BAD = [  # (argv, option named in the error, text that must appear)
    (["--items", "0"], "--items", "0"),
    (["--items", "two"], "--items", "two"),
    (["--stages", "-1"], "--stages", "-1"),
    (["--cost-ms", "-1"], "--cost-ms", "-1"),
    (["--cost-ms", "nan"], "--cost-ms", "nan"),
    (["--cost-ms", "inf"], "--cost-ms", "inf"),
    (["--kind", "gpu"], "--kind", "gpu"),
    (["--queue-depth", "0"], "--queue-depth", "0"),
    (["--workers", "-1"], "--workers", "-1"),
    (["--repeats", "0"], "--repeats", "0"),
    (["--warmup", "-1"], "--warmup", "-1"),
    (["--overhead-items", "1.5"], "--overhead-items", "1.5"),
    (["--executors", "sync,gpu"], "--executors", "sync,gpu"),
    (["--executors", ""], "--executors", "''"),
    (["--torch-threads", "0"], "--torch-threads", "0"),
    (["--json", "/"], "--json", "folder"),
]


@pytest.mark.parametrize("argv, option, text", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_option_is_one_line_and_exit_2(argv, option, text, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, option, text, out=captured.out)


def test_compare_executors_rows_and_model() -> None:
    """Real executors: the rows' model columns are the model of the stages with the costs the
    sync runs measured, and the wall is a time one of the timed runs took."""
    stages = equal_stages("sleep", 3, 0.001)
    cmp = bench.compare_executors(stages, 5, ["threads"], workers=2, queue_depth=2,
                                  repeats=3, warmup=0)
    assert [r["executor"] for r in cmp["rows"]] == ["sync", "threads"]
    assert set(cmp["runs"]) == {"sync", "threads"} and cmp["runs"]["threads"].n_items == 5
    assert list(cmp["costs_s"]) == ["sleep0", "sleep1", "sleep2"]
    assert all(c >= 0.001 for c in cmp["costs_s"].values())   # a sleep lasts at least its cost
    sync, threads = cmp["rows"]
    total = sum(cmp["costs_s"].values())
    assert sync["bound_s"] == pytest.approx(5 * total)             # no overlap: n * sum
    assert threads["bound_s"] == pytest.approx(total + 4 * max(cmp["costs_s"].values()))
    costs = list(cmp["costs_s"].values())
    for r in cmp["rows"]:
        run = cmp["runs"][r["executor"]]
        plan = plan_for_stages(r["executor"], stages, workers=2, queue_depth=2, costs_s=costs)
        assert r["startup_s"] == run.startup_s == 0.0   # the run's own figure: none here
        assert r["sim_s"] == pytest.approx(simulate_pipeline(plan, 5).wall_us() * 1e-6)
        assert r["wall_s"] == run.wall_s        # 3 repeats: the median is the middle run's wall
        assert r["wall_min_s"] <= r["wall_s"] <= r["wall_max_s"]


@dataclass
class _Script:
    """What a fake executor's runs report, in order (warm-up runs first): each run's wall
    seconds and, per run, each stage's cost per item (seconds)."""

    walls: list[float]
    costs: list[list[float]]


class _FakeExecutor:
    """Stands for an executor in :func:`bench.compare_executors`: run ``k`` returns a
    :class:`RunResult` with the wall time and stage spans of ``script`` run ``k``, no clock
    read. Every run it returned is kept in ``results``."""

    def __init__(self, name: str, script: _Script) -> None:
        self.name, self.script, self.results = name, script, []

    def __enter__(self) -> _FakeExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, stages: list, items: int) -> RunResult:
        k = len(self.results)
        tl = Timeline()
        for stage, cost in zip(stages, self.script.costs[k], strict=False):
            for i in range(items):   # spans of one stage vary around its cost, mean = cost
                tl.record(stage.name, "cpu", "fake/" + stage.name, 0.0,
                          cost * 1e6 * (1 + (i - (items - 1) / 2) * 0.1), {"item": i})
        res = RunResult(self.name, tl, items, 0.0, self.script.walls[k] * 1e6,
                        "fake/" + stages[-1].name, config={"run": k})
        self.results.append(res)
        return res


def _fake_compare(monkeypatch: pytest.MonkeyPatch, scripts: dict[str, _Script], items: int,
                  warmup: int) -> tuple[dict, dict[str, _FakeExecutor]]:
    """:func:`bench.compare_executors` over fake executors that play ``scripts``; returns its
    result and the executors made (by name)."""
    made: dict[str, _FakeExecutor] = {}

    def make(name: str, **_: object) -> _FakeExecutor:
        made[name] = _FakeExecutor(name, scripts[name])
        return made[name]

    monkeypatch.setattr(bench, "make_executor", make)
    repeats = len(scripts["sync"].walls) - warmup
    cmp = bench.compare_executors(STAGES, items, [n for n in scripts if n != "sync"],
                                  workers=2, queue_depth=2, repeats=repeats, warmup=warmup)
    return cmp, made


STAGES = equal_stages("identity", 3, 0.0)
SYNC = _Script([9.0, 0.30, 0.10, 0.20],            # warm-up first: out of every median
               [[1.0, 1.0, 1.0], [0.030, 0.020, 0.010], [0.034, 0.018, 0.012],
                [0.031, 0.025, 0.008]])
THREADS = _Script([9.0, 0.14, 0.50, 0.12], [[0.0] * 3] * 4)
PROCESSES = _Script([9.0, 0.07, 0.09, 0.08], [[0.0] * 3] * 4)


def test_compare_executors_rows_come_from_the_runs_and_the_model(monkeypatch) -> None:
    """Walls are the median of the timed runs' own walls (warm-up left out), stage costs the
    median over sync runs of each stage's mean span, bound and sim those of the executor's
    plan with these costs: every expected number here is computed apart from the bench."""
    items = 6
    scripts = {"sync": SYNC, "threads": THREADS, "processes": PROCESSES}
    cmp, made = _fake_compare(monkeypatch, scripts, items, warmup=1)
    costs = [statistics.median(run[i] for run in SYNC.costs[1:]) for i in range(3)]
    assert list(cmp["costs_s"].values()) == pytest.approx(costs)
    assert costs == pytest.approx([0.031, 0.020, 0.010])
    walls = {"sync": 0.20, "threads": 0.14, "processes": 0.08}     # medians of runs 1..3
    assert [r["executor"] for r in cmp["rows"]] == ["sync", "threads", "processes"]
    for r in cmp["rows"]:
        name, wall = r["executor"], walls[r["executor"]]
        plan = plan_for_stages(name, STAGES, workers=2, queue_depth=2, costs_s=costs)
        bound = bound_s(plan, items)
        sim = simulate_pipeline(plan, items).wall_us() * 1e-6
        assert r["wall_s"] == pytest.approx(wall)
        assert (r["wall_min_s"], r["wall_max_s"]) == pytest.approx(
            (min(scripts[name].walls[1:]), max(scripts[name].walls[1:])))
        assert r["bound_s"] == pytest.approx(bound) and r["sim_s"] == pytest.approx(sim)
        assert r["efficiency"] == pytest.approx(bound / wall)
        assert r["sim_error_pct"] == pytest.approx(100 * (wall - sim) / sim)   # slower: positive
        assert r["items_per_s"] == pytest.approx(items / wall)
        assert r["speedup_vs_sync"] == pytest.approx(0.20 / wall)
        assert cmp["runs"][name] is made[name].results[1 + scripts[name].walls[1:].index(wall)]
    sync, threads, processes = cmp["rows"]
    assert sync["bound_s"] == pytest.approx(items * sum(costs))       # no overlap
    assert threads["bound_s"] == pytest.approx(sum(costs) + (items - 1) * max(costs))
    assert len({r["sim_s"] for r in cmp["rows"]}) == 3          # each executor its own plan


def test_a_slower_executor_has_lower_efficiency(monkeypatch) -> None:
    """The same stage costs with threads runs twice as long: the bound stays, efficiency and
    items/s halve, the error (measured against the model) grows."""
    fast, _ = _fake_compare(monkeypatch, {"sync": SYNC, "threads": THREADS}, 6, warmup=1)
    slow_threads = _Script([2 * w for w in THREADS.walls], THREADS.costs)
    slow, _ = _fake_compare(monkeypatch, {"sync": SYNC, "threads": slow_threads}, 6, warmup=1)
    f, s = fast["rows"][1], slow["rows"][1]
    assert s["bound_s"] == pytest.approx(f["bound_s"]) and s["sim_s"] == pytest.approx(f["sim_s"])
    assert s["efficiency"] == pytest.approx(f["efficiency"] / 2)
    assert s["items_per_s"] == pytest.approx(f["items_per_s"] / 2)
    assert s["sim_error_pct"] > f["sim_error_pct"]


def test_overlap_saving_is_worded_with_its_sign() -> None:
    saved = bench.overlap_saving_text(0.480, 0.200, 0.300)
    assert saved == "overlap saved 280 ms of the 300 ms the model predicts (93%)"
    lost = bench.overlap_saving_text(1.000, 2.441, 1.264)    # the overlapped run was slower
    assert lost == ("no saving: the overlapped run took 1441 ms longer than sync (the model "
                    "predicts 1264 ms saved)")
    assert "-" not in lost and "saved 1441" not in lost
    assert bench.overlap_saving_text(0.2, 0.2, 0.0) == (
        "no saving: the overlapped run took 0 ms longer than sync (the model predicts no "
        "saving)")
    with pytest.raises(ValueError, match="overlapped_s"):
        bench.overlap_saving_text(0.2, -1.0, 0.1)


def test_startup_is_reported_apart() -> None:
    class Fake:
        startup_s = 1.25
    assert bench.startup_s(Fake()) == 1.25 and bench.startup_s(object()) == 0.0


def test_tiny_run_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    code = bench.main(["--items", "6", "--cost-ms", "1", "--repeats", "1", "--warmup", "0",
                       "--executors", "sync,threads", "--overhead-items", "50",
                       "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "executor" in text and "threads" in text and "us/item/stage" in text
    assert re.search(r"start\(s\)\s+wall\(s\)", text)
    data = json.loads(out.read_text())
    assert data["provenance"]["torch"] and data["provenance"]["command"]
    assert [r["executor"] for r in data["rows"]] == ["sync", "threads"]
    assert [r["executor"] for r in data["overhead"]] == ["sync", "threads"]
    costs = list(data["stage_costs_s_measured_sync"].values())
    for r in data["rows"]:
        assert r["startup_s"] in (0.0, None)        # sync/threads start no workers
        plan = plan_for_stages(r["executor"], equal_stages("sleep", 3, 0.001), costs_s=costs)
        assert r["bound_s"] == pytest.approx(bound_s(plan, 6))
    assert data["rows"][0]["bound_s"] == pytest.approx(sum(costs) * 6)
    assert {"threads_efficiency", "threads_speedup_vs_sync",
            "threads_overhead_us_per_item_per_stage"} <= set(data["targets"])


def test_the_dispatcher_runs_the_loading_benchmark_by_its_name(capsys) -> None:
    """``python -m distlab.bench loading`` runs this benchmark, listed beside
    ``pipeline-parallel``; ``pipeline`` names no benchmark."""
    from distlab.bench.__main__ import MODULES
    from distlab.bench.__main__ import main as bench_main

    assert MODULES["loading"] == "distlab.bench.loading" and bench.BENCHMARK.name == "loading"
    assert bench_main(["loading", "--help"]) == 0
    assert "usage: python -m distlab.bench loading" in capsys.readouterr().out
    assert bench_main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert "  loading " in listed and "  pipeline " not in listed
    assert bench_main(["pipeline"]) == 2
