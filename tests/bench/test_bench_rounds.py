"""distlab.bench.rounds: the one timed loop, driven by fake fences (no process group, no clock).

The fake clock only moves when a call or hook moves it, so every recorded duration is known
exactly from what the test made each call cost; the event log shows what ran in which order.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.bench.rounds import (
    Fences,
    Phases,
    Round,
    SpanLabels,
    Timings,
    progress_line,
    round_order,
    timed_rounds,
)


class FakeRank:
    """Fences whose clock advances only by :meth:`spend`; every fence call is logged."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.cpu = 0.0
        self.log: list[Any] = []

    def spend(self, seconds: float, cpu: float = 0.0) -> None:
        self.t += seconds
        self.cpu += cpu

    def fences(self) -> Fences:
        def clock() -> float:
            self.log.append("clock")
            return self.t

        def thread_clock() -> float:
            self.log.append("cpu")
            return self.cpu

        return Fences(sync=lambda: self.log.append("sync"),
                      barrier=lambda: self.log.append("barrier"), clock=clock,
                      thread_clock=thread_clock)


def _cost(rnd: Round, case: int) -> float:
    """What the fake call of ``case`` in round ``rnd`` costs: distinct per (round, case)."""
    return 10.0 * (rnd.index + 1) + case


def _run(n: int, warmup: int, rounds: int, rotate: bool, **kw: Any) -> tuple[Timings, FakeRank,
                                                                           list[tuple[int, int]]]:
    """Run the loop over cases ``0..n-1``; returns the timings, the fake rank and the calls as
    (round index, case)."""
    fake = FakeRank()
    calls: list[tuple[int, int]] = []

    def call(case: int, phases: Phases) -> None:
        calls.append((phases.round.index, case))
        fake.log.append(("call", case))
        fake.spend(_cost(phases.round, case), cpu=0.5 * _cost(phases.round, case))

    timings = timed_rounds(list(range(n)), call, warmup=warmup, rounds=rounds, rotate=rotate,
                           fences=fake.fences(), **kw)
    return timings, fake, calls


def test_rotation_order_is_the_documented_one() -> None:
    # round i (warm-ups counted) runs cases[i % n:] + cases[:i % n]
    _, _, calls = _run(3, warmup=2, rounds=3, rotate=True)
    order = [[c for r, c in calls if r == i] for i in range(5)]
    assert order == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2], [1, 2, 0]]
    _, _, calls = _run(3, warmup=2, rounds=3, rotate=False)
    assert [[c for r, c in calls if r == i] for i in range(5)] == [[0, 1, 2]] * 5


def test_rotate_has_no_default_and_must_be_a_bool() -> None:
    with pytest.raises(TypeError):
        timed_rounds([1], lambda c, p: None, warmup=0, rounds=1,  # type: ignore[call-arg]
                     fences=FakeRank().fences())
    with pytest.raises(TypeError, match="rotate"):
        timed_rounds([1], lambda c, p: None, warmup=0, rounds=1, rotate=1,  # type: ignore[arg-type]
                     fences=FakeRank().fences())


@pytest.mark.parametrize("kw,match", [({"warmup": -1}, "warmup"), ({"rounds": -1}, "rounds"),
                                      ({"rounds": 1.5}, "rounds")])
def test_round_counts_are_checked(kw: dict[str, Any], match: str) -> None:
    args = {"warmup": 1, "rounds": 1, **kw}
    with pytest.raises((TypeError, ValueError), match=match):
        timed_rounds([1], lambda c, p: None, rotate=False, fences=FakeRank().fences(), **args)


def test_warmups_are_run_but_never_recorded() -> None:
    timings, _, calls = _run(2, warmup=3, rounds=2, rotate=True, cpu_time=True)
    assert len(calls) == 2 * 5  # warm-ups run every case
    # timed rounds are indexes 3 and 4: each case's seconds are exactly its calls there
    assert timings.seconds == [pytest.approx([40.0, 50.0]), pytest.approx([41.0, 51.0])]
    assert timings.cpu_seconds == [pytest.approx([20.0, 25.0]), pytest.approx([20.5, 25.5])]


def test_a_turn_is_prepare_sync_barrier_clock_call_clock() -> None:
    fake = FakeRank()
    timed_rounds(["a"], lambda c, p: fake.log.append(("call", c)), warmup=0, rounds=1,
                 rotate=False, fences=fake.fences(), prepare=lambda c: fake.log.append("prep"),
                 cpu_time=True)
    assert fake.log == ["prep", "sync", "barrier", "cpu", "clock", ("call", "a"), "clock",
                        "cpu"]


def test_hooks_run_at_the_start_of_every_round_progress_first() -> None:
    fake = FakeRank()
    timed_rounds([0, 1], lambda c, p: fake.log.append(("call", c)), warmup=1, rounds=1,
                 rotate=False, fences=fake.fences(),
                 progress=lambda r: fake.log.append(("progress", r.index, r.timed)),
                 before_round=lambda r: fake.log.append(("hook", r.index, r.number)))
    marks = [e for e in fake.log if isinstance(e, tuple)]
    assert marks == [("progress", 0, False), ("hook", 0, None), ("call", 0), ("call", 1),
                     ("progress", 1, True), ("hook", 1, 0), ("call", 0), ("call", 1)]


def test_spans_carry_the_timed_round_number_and_the_clock_in_microseconds() -> None:
    fake = FakeRank()

    def call(case: int, phases: Phases) -> None:
        fake.spend(_cost(phases.round, case))

    labels = SpanLabels("rank3/allreduce", lambda c: (f"case {c}", "allreduce", {"case": c}),
                        ("calibration exchanges", "calibration"))
    timings = timed_rounds([0, 1], call, warmup=2, rounds=2, rotate=True, fences=fake.fences(),
                           before_round=lambda r: fake.spend(0.25), spans=labels)
    names = [(s["name"], s["args"].get("round")) for s in timings.spans]
    # round 2 (timed 0) starts at case 0, round 3 (timed 1) at case 1
    assert names == [("calibration exchanges", 0), ("case 0", 0), ("case 1", 0),
                     ("calibration exchanges", 1), ("case 1", 1), ("case 0", 1)]
    assert {s["lane"] for s in timings.spans} == {"rank3/allreduce"}
    assert [s["category"] for s in timings.spans[:2]] == ["calibration", "allreduce"]
    assert timings.spans[1]["args"] == {"case": 0, "round": 0}
    durations = [s["duration_us"] for s in timings.spans]
    assert durations == pytest.approx([0.25e6, 30e6, 31e6, 0.25e6, 41e6, 40e6])
    # spans follow each other on the fake clock: each starts where the one before ended
    ends = [s["start_us"] + s["duration_us"] for s in timings.spans]
    assert [s["start_us"] for s in timings.spans[1:]] == pytest.approx(ends[:-1])


def test_a_case_records_its_own_phases_in_timed_rounds_only() -> None:
    fake = FakeRank()

    def call(case: str, phases: Phases) -> None:
        t0 = phases.now()
        fake.spend(1.0)
        t1 = phases.now()
        fake.spend(2.0)
        phases.record("forward", t1 - t0)
        phases.record("rest", phases.now() - t1)

    timings = timed_rounds(["x", "y"], call, warmup=1, rounds=3, rotate=False,
                           fences=fake.fences())
    assert [sorted(p) for p in timings.phases] == [["forward", "rest"]] * 2
    assert all(p["forward"] == pytest.approx([1.0] * 3) and p["rest"] == pytest.approx([2.0] * 3)
               for p in timings.phases)
    assert timings.seconds == [pytest.approx([3.0] * 3)] * 2
    assert timings.cpu_seconds == [[], []] and timings.spans == []


def test_progress_line() -> None:
    assert progress_line("allreduce", Round(0, 7, 2), ": 3 sizes") == \
        "[allreduce] round 1/7 (warmup): 3 sizes"
    assert progress_line("zero", Round(2, 7, 2)) == "[zero] round 3/7"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 6), warmup=st.integers(0, 4), rounds=st.integers(0, 6),
       rotate=st.booleans(), hook=st.booleans())
def test_every_round_runs_every_case_once_and_records_only_timed_rounds(
        n: int, warmup: int, rounds: int, rotate: bool, hook: bool) -> None:
    labels = SpanLabels("r/l", lambda c: (str(c), "case", {}), ("hook", "hook") if hook else None)
    before = (lambda r: None) if hook else None
    timings, _, calls = _run(n, warmup, rounds, rotate, spans=labels, before_round=before)
    for i in range(warmup + rounds):
        ran = [c for r, c in calls if r == i]
        assert ran == round_order(n, i, rotate=rotate)
        assert sorted(ran) == list(range(n))
        assert ran[:1] == ([i % n if rotate else 0] if n else [])
    for c in range(n):
        want = [_cost(Round(warmup + k, warmup + rounds, warmup), c) for k in range(rounds)]
        assert timings.seconds[c] == pytest.approx(want)
    assert len(timings.spans) == rounds * (n + hook)
    assert [s["args"]["round"] for s in timings.spans] == \
        [k for k in range(rounds) for _ in range(n + hook)]


@given(n=st.integers(0, 12), group=st.integers(1, 5), index=st.integers(0, 30))
def test_rotating_within_groups_keeps_the_groups_in_order(n: int, group: int, index: int) -> None:
    order = round_order(n, index, rotate=True, group=group)
    assert sorted(order) == list(range(n))
    for start in range(0, n, group):
        members = list(range(start, min(start + group, n)))
        part = order[start:start + len(members)]
        assert sorted(part) == members                     # a group stays in its place
        assert part[0] == members[index % len(members)]    # each member first in turn
    assert round_order(n, index, rotate=False, group=group) == list(range(n))


def test_each_algorithm_of_a_size_comes_first_in_turn_in_the_allreduce_rounds() -> None:
    orders = [round_order(6, i, rotate=True, group=3) for i in range(3)]
    assert orders == [[0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3], [2, 0, 1, 5, 3, 4]]


def test_process_cpu_is_read_outermost_around_each_timed_call() -> None:
    """With ``process_cpu``, the process clock is read before the thread clock and the wall
    clock, and after them, so the call's CPU over every thread is what lies between."""
    fake = FakeRank()
    process = [0.0]

    def process_clock() -> float:
        fake.log.append("process")
        return process[0]

    def call(case: int, phases: Phases) -> None:
        fake.log.append(("call", case))
        process[0] += 3.0 + case   # the whole process's CPU, gloo's threads included

    fences = fake.fences()
    fences = Fences(fences.sync, fences.barrier, fences.clock, fences.thread_clock,
                    process_clock)
    t = timed_rounds([0, 1], call, warmup=1, rounds=2, rotate=False, fences=fences,
                     process_cpu=True, cpu_time=True)
    assert t.process_cpu_seconds == [[3.0, 3.0], [4.0, 4.0]]
    turn = fake.log[fake.log.index(("call", 0)) - 3:fake.log.index(("call", 0)) + 4]
    assert turn == ["process", "cpu", "clock", ("call", 0), "clock", "cpu", "process"]
    without = timed_rounds([0], call, warmup=0, rounds=1, rotate=False, fences=fences)
    assert without.process_cpu_seconds == [[]]


def test_process_cpu_seconds_counts_every_thread() -> None:
    import threading
    import time

    from distlab.bench.rounds import process_cpu_seconds

    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    before_process, before_thread = process_cpu_seconds(), time.thread_time()
    worker = threading.Thread(target=spin, args=(0.2,))
    worker.start()
    worker.join()
    # the other thread's 0.2 s of CPU is in the process's count, not in this thread's
    assert process_cpu_seconds() - before_process >= 0.15
    assert time.thread_time() - before_thread < 0.1
