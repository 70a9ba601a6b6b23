"""The stage-3 communication queue: calls run one at a time in submission order on one worker
thread, a failure is re-raised where it is waited for and fails every later call, a wait has a
bound, spans record when each call ran, and a closed queue refuses new calls."""

from __future__ import annotations

import threading

import pytest

from distlab.timeline import Timeline
from distlab.zero.comm_queue import CommQueue


def test_calls_run_in_order_on_one_other_thread():
    q = CommQueue("rank0")
    ran: list[tuple[int, str]] = []
    gate = threading.Event()
    first = q.submit("call 0", "all_gather", lambda: (gate.wait(5), ran.append(
        (0, threading.current_thread().name))))
    rest = [q.submit(f"call {k}", "all_gather",
                     lambda k=k: ran.append((k, threading.current_thread().name)))
            for k in range(1, 6)]
    assert not first.done and not any(p.done for p in rest)   # held behind the first
    gate.set()
    for p in [first, *rest]:
        assert p.wait(5) >= 0 and p.done
        assert p.end_us >= p.start_us > 0
    assert [k for k, _ in ran] == list(range(6))
    names = {n for _, n in ran}
    assert len(names) == 1 and names != {threading.current_thread().name}
    assert all(a.end_us <= b.start_us for a, b in zip([first, *rest], rest, strict=False))
    q.close()


def test_a_failure_is_raised_where_waited_and_fails_every_later_call():
    q = CommQueue("rank1")
    ok = q.submit("fine", "all_gather", lambda: None)

    def boom() -> None:
        raise ValueError("peer gone")
    bad = q.submit("reduce-scatter unit 2", "reduce_scatter", boom)
    ran: list[int] = []
    later = q.submit("all-gather unit 1", "all_gather", lambda: ran.append(1))
    ok.wait(5)
    with pytest.raises(ValueError, match="peer gone") as info:
        bad.wait(5)
    assert any(f.name == "boom" for f in info.traceback), "the call's own traceback"
    with pytest.raises(RuntimeError, match="all-gather unit 1: not run, an earlier collective "
                                           "failed .peer gone."):
        later.wait(5)
    assert ran == []
    q.close()


def test_a_wait_has_a_bound_and_spans_say_when_calls_ran():
    q = CommQueue("rank3")
    gate = threading.Event()
    tl = Timeline()
    slow = q.submit("all-gather unit 0 (forward)", "all_gather", lambda: gate.wait(5),
                    {"unit": 0}, tl)
    with pytest.raises(TimeoutError, match=r"all-gather unit 0 \(forward\): not finished "
                                           r"after 0.05 s"):
        slow.wait(0.05)
    gate.set()
    slow.wait(5)
    (span,) = tl.to_dicts()
    assert span["lane"] == "rank3/all_gather" and span["category"] == "all_gather"
    assert span["args"]["unit"] == 0
    assert span["args"]["issued_us"] <= span["start_us"] == slow.start_us
    q.close()


def test_close_runs_what_was_queued_then_refuses():
    q = CommQueue("rank0")
    ran: list[int] = []
    for k in range(3):
        q.submit(f"call {k}", "all_gather", lambda k=k: ran.append(k))
    q.close()
    assert ran == [0, 1, 2]
    with pytest.raises(RuntimeError, match="communication thread has stopped"):
        q.submit("late", "all_gather", lambda: None)
    q.close()   # a second close is a no-op
