"""Executors: same results as sync, complete timelines, failure contract, bad configuration."""

from __future__ import annotations

import _thread
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from distlab.loading import (
    EXECUTORS,
    FnStage,
    IdentityStage,
    PipelineError,
    PipelineTimeoutError,
    ShardSet,
    StageError,
    WorkerExitedError,
    loading_stages,
    make_executor,
    run_pipeline,
    write_shards,
)
from distlab.loading.executors import RunResult, ThreadExecutor
from distlab.loading.procs import ProcessExecutor, split_stages
from distlab.loading.stage import accelerator_available
from distlab.loading.torchref import absorbed_by_dataloader
from distlab.timeline import Timeline, now_us
from helpers.leaks import no_leaks
from helpers.loading_util import (
    FailAt,
    HangAt,
    Slow,
    arm_hangs,
    children_outlive_parent,
    release_hangs,
)
from helpers.paths import LIB

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> ShardSet:
    d = tmp_path_factory.mktemp("shards")
    return ShardSet(write_shards(d, n_shards=3, records_per_shard=10, record_nbytes=64, seed=1),
                    64)


def test_executors_agree_with_sync_and_record_every_stage(shards) -> None:
    n = 12
    stages = loading_stages(shards, batch_size=4, read_latency_s=0.0, decode_s=0.0,
                            compute_s=0.0)
    stages[-1] = FnStage(torch.Tensor.sum, name="compute", category="compute", placement="host")
    # with an accelerator the h2d stage puts the batches on it: compare on the host
    expected = [y.cpu() for y in run_pipeline(stages, n, "sync", collect=True).outputs]
    ref = [torch.stack([torch.frombuffer(bytearray(shards.read_record(b * 4 + j)),
                                         dtype=torch.uint8).float() / 255 for j in range(4)]).sum()
           for b in range(n)]
    assert torch.allclose(torch.stack(expected), torch.stack(ref))
    accel = accelerator_available()
    with no_leaks():
        for name in EXECUTORS:
            res = run_pipeline(stages, n, name, queue_depth=2, workers=2, collect=True)
            assert torch.allclose(torch.stack([y.cpu() for y in res.outputs]),
                                  torch.stack(expected)), name
            startup = [s for s in res.timeline.spans if s.category == "startup"]
            spans = [s for s in res.timeline.spans if s.category != "startup"]
            if name in ("processes", "torch"):  # worker start-up: its own span, off the clock
                assert [s.lane for s in startup] == ["rank0/startup"], name
                assert startup[0].end_us <= res.start_us
                assert res.startup_s == pytest.approx(startup[0].duration_us * 1e-6)
                assert min(s.start_us for s in spans) >= res.start_us
            else:
                assert startup == [] and res.startup_s == 0.0
            # every (stage, item) ran exactly once; DataLoader pins in its own thread (with an
            # accelerator), uninstrumented: that stage is the one the torch executor cannot record
            absorbed = absorbed_by_dataloader(stages) if name == "torch" else []
            assert absorbed == (["pin"] if accel and name == "torch" else []), name
            got = sorted((s.name, s.args["item"]) for s in spans)
            assert got == sorted((st.name, i) for st in stages for i in range(n)
                                 if st.name not in absorbed), name
            assert res.consumer_lane == "rank0/compute"
            # pin and h2d run for real with an accelerator and say they skipped without one
            device_spans = [s for s in spans if s.name in ("pin", "h2d")]
            assert device_spans, name
            assert all(bool(s.args.get("skipped")) != accel for s in device_spans), name
            assert any("pin skipped" in note for note in res.timeline.notes) != accel, name
            lanes = {s.lane for s in spans}
            if name == "processes":
                assert {"rank0/worker0", "rank0/worker1"} <= lanes
            if name == "torch":
                assert {"rank0/dl_worker0", "rank0/dl_worker1"} <= lanes


def test_dataloader_absorbs_the_pin_stage_only_when_it_pins(shards) -> None:
    """With an accelerator DataLoader's pin thread replaces the pin stage (no
    span); without one, or with pin_memory=False, every stage is the executor's own."""
    stages = loading_stages(shards, batch_size=4, read_latency_s=0.0, decode_s=0.0,
                            compute_s=0.0)
    assert absorbed_by_dataloader(stages, accelerator=True) == ["pin"]
    assert absorbed_by_dataloader(stages, accelerator=False) == []
    assert absorbed_by_dataloader(stages, pin_memory=False, accelerator=True) == []
    assert absorbed_by_dataloader(stages) == (["pin"] if accelerator_available() else [])
    with pytest.raises(TypeError):
        absorbed_by_dataloader(stages, pin_memory="yes")


class _Meets(Slow):
    """Sleeps ``cost_s`` per item; on item ``at`` it first says it is there (``here``) and
    waits, at most 5 s, until the other stage says the same (``there``)."""

    def __init__(self, cost_s: float, name: str, at: int, here: threading.Event,
                 there: threading.Event, placement: str = "worker") -> None:
        super().__init__(cost_s, name, placement)
        self.at, self.here, self.there = at, here, there

    def process(self, item):
        if item == self.at:
            self.here.set()
            self.there.wait(5)
        return super().process(item)


def test_threads_overlap_on_one_lane_per_stage() -> None:
    """One thread per stage: a lane never overlaps itself, and stages overlap each other. Stage
    a on item 3 and stage c on item 0 wait for each other: a run with a thread per stage and
    room in its queues has both inside their calls at once, so the overlap is the executor's,
    not a loaded machine's luck; an executor that ran the stages one after another would keep
    them apart (each wait runs out) and fail."""
    a_in, c_in = threading.Event(), threading.Event()
    stages = [_Meets(0.005, "a", 3, a_in, c_in), Slow(0.005, "b"),
              _Meets(0.005, "c", 0, c_in, a_in, placement="host")]
    res = ThreadExecutor(queue_depth=2).run(stages, 10)
    tl = res.timeline
    assert tl.lanes == ["rank0/a", "rank0/b", "rank0/c"] or set(tl.lanes) == {
        "rank0/a", "rank0/b", "rank0/c"}
    for lane in tl.lanes:  # one thread per stage: a lane never overlaps itself
        ivs = sorted((s.start_us, s.end_us) for s in tl.spans if s.lane == lane)
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(ivs, ivs[1:], strict=False))
    # stages do overlap each other (this is the point of the executor)
    a = [(s.start_us, s.end_us) for s in tl.spans if s.name == "a"]
    c = [(s.start_us, s.end_us) for s in tl.spans if s.name == "c"]
    assert any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in c)


def test_processes_persistent_workers_reused() -> None:
    stages = [IdentityStage("a"), IdentityStage("b", placement="host")]
    with no_leaks():
        with ProcessExecutor(workers=2, queue_depth=1) as ex:
            r1 = ex.run(stages, 6, collect=True)
            pids = ex.pids
            r2 = ex.run(stages, range(10, 14), collect=True)
            assert ex.pids == pids and len(pids) == 2
        assert r1.outputs == list(range(6)) and r2.outputs == [10, 11, 12, 13]


@pytest.mark.parametrize("name", ["processes", "torch"])
def test_every_run_on_the_same_workers_reports_their_one_start_up(name) -> None:
    """Start-up has one definition: the time the run that started the workers took to start
    them. A later run on those workers (persistent) reports the same figure, and records only
    handing them its stages, as a "rearm" span, on the start-up lane."""
    stages = [IdentityStage("a"), IdentityStage("b", placement="host")]
    with no_leaks():
        with make_executor(name, workers=1, queue_depth=1) as ex:
            r1 = ex.run(stages, 3)
            r2 = ex.run(stages, 3)
    (s1,) = [s for s in r1.timeline.spans if s.category == "startup"]
    (s2,) = [s for s in r2.timeline.spans if s.category == "startup"]
    assert (s1.name, s2.name) == ("startup", "rearm")
    assert s1.lane == s2.lane == "rank0/startup"
    assert r1.startup_s == pytest.approx(s1.duration_us * 1e-6, rel=1e-9)
    assert r2.startup_s == r1.startup_s > 0      # one figure, not the re-arm's milliseconds
    assert s2.end_us <= r2.start_us


def test_split_stages() -> None:
    a, b = IdentityStage("a"), IdentityStage("b")
    p, c = IdentityStage("p", placement="host"), IdentityStage("c")
    assert split_stages([a, b, p, c], 2) == ([a, b], [p], c)
    assert split_stages([a, b], 2) == ([a], [], b)  # the consumer never goes to a worker
    assert split_stages([a, b, p, c], 0) == ([], [a, b, p], c)


@pytest.mark.parametrize("name", EXECUTORS)
@pytest.mark.parametrize("where", ["first", "consumer"])
def test_stage_error_names_stage_and_item_and_stops_everything(name, where) -> None:
    """A stage's error names the stage and item, and stops the pipeline: a pipeline that went
    on would sleep through all n items' 50 ms stage, at least n x 50 ms / 2 workers = 50 s
    (sleeps never end early), so the error surfaces before that. A stopping pipeline takes
    well under it even when a loaded machine slows torch's worker shutdown to seconds."""
    n, cost_s, workers = 2000, 0.05, 2
    if where == "first":
        stages = [FailAt(3, "boom", cost_s=0.001), Slow(cost_s, "mid"),
                  Slow(0.0, "sink", placement="host")]
    else:
        stages = [Slow(cost_s, "src"), Slow(0.0, "mid"),
                  FailAt(3, "boom", cost_s=0.001)]
        stages[-1].placement = "host"
    with no_leaks():
        with make_executor(name, workers=workers, queue_depth=2) as ex:
            if name in ("processes", "torch"):
                ex.run(stages[1:2] + stages[2:], 2)  # start (spawn) workers outside the clock
            tl = Timeline()
            t0 = now_us()
            with pytest.raises(StageError) as info:
                ex.run(stages, n, timeline=tl)
            # from the end of worker start-up (spawning is not the pipeline's reaction time)
            t0 = max([t0] + [s.end_us for s in tl.spans if s.category == "startup"])
            waited = (now_us() - t0) * 1e-6
    assert info.value.stage == "boom", str(info.value)
    assert info.value.item == 3
    assert "bad item 3" in str(info.value)
    assert waited < n * cost_s / workers, (f"the error took {waited:.1f} s to surface; the "
                                           "pipeline did not stop")


@pytest.fixture
def sigint_handled():
    """SIGINT raises KeyboardInterrupt during the test, whatever the suite inherited: a suite
    started in the background of a shell inherits SIGINT ignored, and then interrupt_main does
    nothing (the test would wait for 100000 items instead of checking the interrupt)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("name", ["threads", "processes"])
def test_keyboard_interrupt_stops_cleanly(name, sigint_handled) -> None:
    stages = [Slow(0.01, "a"), Slow(0.01, "b", placement="host")]
    with no_leaks():
        with make_executor(name, workers=1) as ex:
            ex.run(stages, 2)
            timer = threading.Timer(0.3, _thread.interrupt_main)
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                ex.run(stages, 100_000)
            timer.join()


def test_killed_worker_is_a_clear_error() -> None:
    import os
    import signal

    stages = [Slow(0.01, "a"), Slow(0.0, "b", placement="host")]
    with no_leaks():
        with ProcessExecutor(workers=2, queue_depth=2) as ex:
            ex.run(stages, 2)
            victim = ex.pids[0]
            threading.Timer(0.3, os.kill, (victim, signal.SIGKILL)).start()
            with pytest.raises(WorkerExitedError, match="exited unexpectedly"):
                ex.run(stages, 100_000)


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(executor="gpu"), ValueError, "executor"),
    (dict(queue_depth=0), ValueError, "queue_depth"),
    (dict(queue_depth=1.5), TypeError, "queue_depth"),
    (dict(workers=-1), ValueError, "workers"),
])
def test_bad_configuration(kwargs, exc, word) -> None:
    kw = dict(executor="threads", queue_depth=2, workers=2)
    kw.update(kwargs)
    with pytest.raises(exc, match=word):
        run_pipeline([IdentityStage()], 1, **kw)


def test_bad_stages_and_items() -> None:
    with pytest.raises(ValueError, match="stages"):
        run_pipeline([], 1)
    with pytest.raises(TypeError, match="FnStage"):
        run_pipeline([len], 1)
    with pytest.raises(ValueError, match="unique"):
        run_pipeline([IdentityStage("a"), IdentityStage("a")], 1)
    with pytest.raises(ValueError, match="items"):
        run_pipeline([IdentityStage()], -2)
    with pytest.raises(ValueError, match="lane_prefix"):
        ThreadExecutor().run([IdentityStage()], 1, lane_prefix="a/b")
    with pytest.raises(ValueError, match="placement"):
        run_pipeline([IdentityStage(placement="gpu")], 1)


def test_empty_run() -> None:
    res = run_pipeline([IdentityStage("a"), IdentityStage("b")], 0, "threads", collect=True)
    assert res.outputs == [] and res.n_items == 0 and len(res.timeline) == 0


def test_workers_die_with_a_killed_parent() -> None:
    """SIGKILL the process running a ProcessExecutor whose workers are stuck in a 60 s stage:
    the workers must be gone within seconds (they cannot poll while stuck in the stage)."""
    code = (
        "from distlab.loading.procs import ProcessExecutor\n"
        "from helpers.loading_util import Slow\n"
        "ex = ProcessExecutor(workers=2, timeout_s=300)\n"
        "ex.run([Slow(0.0, 'a'), Slow(0.0, 'b', placement='host')], 2)\n"
        "print(*ex.pids, flush=True)\n"
        "ex.run([Slow(60.0, 'a'), Slow(0.0, 'b', placement='host')], 4)\n")
    alive = children_outlive_parent(code)
    assert not alive, f"worker processes outlived their killed parent: {alive}"


@pytest.mark.parametrize("name", EXECUTORS)
@pytest.mark.parametrize("where", ["worker", "consumer"])
def test_stuck_stage_times_out_naming_stage_and_item(name, where) -> None:
    """A stage call that does not return within timeout_s raises PipelineTimeoutError naming the
    stage and item, long before the stage would have returned. Threads cannot be killed: the
    stuck one is abandoned (it ends once released, after the executor's clean-up, as it would on
    its own at the end of hang_s); stuck workers are terminated. The timeout (2 s) is far above
    what the instant calls on items 0-2 take even when a loaded machine deschedules them for
    hundreds of milliseconds: only the stuck call can reach it."""
    timeout_s = 2.0
    # a stuck stage in this process sleeps hang_s unless released first (no_leaks waits for its
    # thread to end), and it is released right after the run raised, so a long hang_s costs
    # nothing; it must outlast the executor's clean-up, so the stage is still stuck when the run
    # raises: under 4 spinning processes torch's worker shutdown outlasted 9.5 s
    hang_s = 60.0
    if where == "worker":
        stages = [HangAt(3, "stuck", hang_s), Slow(0.0, "sink", placement="host")]
    else:
        stages = [Slow(0.0, "src"), HangAt(3, "stuck", hang_s, placement="host")]
    tl = Timeline()
    arm_hangs()
    with no_leaks(grace_s=hang_s + 5):
        try:
            with make_executor(name, workers=2, queue_depth=2, timeout_s=timeout_s) as ex:
                with pytest.raises(PipelineTimeoutError) as info:
                    ex.run(stages, 8, timeline=tl)
                # raised while the stage was still stuck: its call on item 3 never recorded a span
                assert not [s for s in tl.spans if s.name == "stuck" and s.args["item"] == 3]
        finally:
            release_hangs()   # the abandoned call returns now, after the executor's clean-up
    err = info.value
    assert isinstance(err, PipelineError) and isinstance(err, TimeoutError)
    assert (err.stage, err.item, err.timeout_s) == ("stuck", 3, timeout_s), str(err)
    assert "stage 'stuck'" in str(err) and "item 3" in str(err)


def test_lambda_stage_runs_on_worker_processes() -> None:
    """Worker stages go to the workers with cloudpickle: a lambda and a closure work."""
    k = 10
    stages = [FnStage(lambda x: x * 2, name="double"), FnStage(lambda x: x + k, name="add"),
              IdentityStage("sink", placement="host")]
    with no_leaks():
        res = run_pipeline(stages, 5, "processes", workers=2, collect=True)
    assert res.outputs == [i * 2 + 10 for i in range(5)]
    assert {s.lane for s in res.timeline.spans if s.name == "double"} <= {
        "rank0/worker0", "rank0/worker1"}


def test_unpicklable_stage_says_what_to_do() -> None:
    lock = threading.Lock()
    stages = [FnStage(lambda x: (lock, x)[1], name="locked"), IdentityStage("sink")]
    with no_leaks():
        with pytest.raises(TypeError, match="cannot be sent to worker processes") as info:
            run_pipeline(stages, 2, "processes", workers=1)
    assert "'locked'" in str(info.value) and "create locks" in str(info.value)


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1.0, ValueError), ("1", TypeError),
                                      (float("nan"), ValueError)])
def test_bad_timeout(bad, exc) -> None:
    for name in EXECUTORS:
        with pytest.raises(exc, match="timeout_s"):
            make_executor(name, timeout_s=bad)


def test_stall_and_wall_from_a_synthetic_timeline() -> None:
    """stall_s = the consumer lane's idle gaps inside [start_us, end_us]; other lanes ignored."""
    tl = Timeline()
    tl.record("c", "compute", "rank0/c", 100.0, 10.0)   # busy 100-110
    tl.record("c", "compute", "rank0/c", 140.0, 20.0)   # busy 140-160
    tl.record("a", "io", "rank0/a", 0.0, 200.0)         # another lane: not the consumer
    res = RunResult("threads", tl, 2, 100.0, 200.0, "rank0/c")
    assert res.wall_s == pytest.approx(100e-6)
    assert res.stall_s == pytest.approx(70e-6)          # 110-140 and 160-200
    assert res.items_per_s == pytest.approx(2 / 100e-6)
    empty = RunResult("threads", Timeline(), 0, 0.0, 50.0, "rank0/c")
    assert empty.stall_s == pytest.approx(50e-6)


def test_stall_follows_the_slow_side_of_a_known_schedule() -> None:
    """Producer 20 ms/item, consumer 0: the consumer waits for every item, so its stall is at
    least the producer's n sleeps less the consumer's own (tiny) busy time. Producer 0, consumer
    20 ms/item: the consumer's own sleeps are busy time, never stall, so its stall is at most
    the wall time less those n sleeps. Each bound rests on sleeps, which never end early, and
    on the spans the run recorded: a loaded machine that deschedules a thread for any time can
    only add to the sides the bounds leave open (stall counted on the wrong lane, or the
    consumer's work counted as stall, still fails them)."""
    n, cost, tick = 10, 0.02, 1e-3   # tick: the microsecond stamps' rounding, summed

    def consumer_busy_s(res) -> float:
        return sum(s.duration_us for s in res.timeline.spans if s.lane == res.consumer_lane) * 1e-6

    slow_src = run_pipeline([Slow(cost, "src"), Slow(0.0, "sink")], n, "threads")
    assert slow_src.wall_s >= n * cost - tick
    assert slow_src.stall_s >= n * cost - consumer_busy_s(slow_src) - tick
    slow_sink = run_pipeline([Slow(0.0, "src"), Slow(cost, "sink")], n, "threads")
    assert consumer_busy_s(slow_sink) >= n * cost - tick
    assert slow_sink.stall_s <= slow_sink.wall_s - n * cost + tick


def test_pipeline_imports_have_no_cycle() -> None:
    """Build the import graph of distlab.loading (every import statement, function-level ones
    included) and assert it has no cycle (executors <-> procs <-> torchref)."""
    import ast

    import distlab.loading as pkg

    root = Path(pkg.__file__).parent
    mods = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for m in mods:
        deps: set[str] = set()
        for node in ast.walk(ast.parse((root / f"{m}.py").read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    deps.add(node.module.split(".")[0])
                elif node.level == 1:
                    deps.update(a.name for a in node.names)
                elif node.module and node.module.startswith("distlab.loading."):
                    deps.add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[2] for a in node.names
                            if a.name.startswith("distlab.loading."))
        graph[m] = deps & mods
    assert {"procs", "torchref"} <= graph["executors"]  # the registry knows the executors

    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [m, d])}"
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


@pytest.mark.timeout(120)
def test_unguarded_script_gets_the_main_guard_hint(tmp_path) -> None:
    """A script that runs the processes executor at module level (no `if __name__ ==
    "__main__":`) makes every spawned worker fail while re-importing it; the error says so."""
    script = tmp_path / "unguarded.py"
    script.write_text("from distlab.loading.build import equal_stages\n"
                      "from distlab.loading.executors import run_pipeline\n"
                      "run_pipeline(equal_stages('sleep', 2, 0.001), 4, executor='processes')\n")
    env = dict(os.environ, PYTHONPATH=str(LIB))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=100, env=env, cwd=tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("distlab.loading.errors.WorkerExitedError"), proc.stderr[-2000:]
    assert "during start-up" in last and 'if __name__ == "__main__":' in last, last
