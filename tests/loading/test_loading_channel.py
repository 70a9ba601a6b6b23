"""Channel: bounded FIFO semantics, the stop flag ends every wait, argument checks."""

from __future__ import annotations

import threading
import time

import pytest

from distlab.loading.channel import STOPPED, Channel

pytestmark = pytest.mark.timeout(60)


def test_fifo_order_and_capacity() -> None:
    stop = threading.Event()
    ch = Channel(3, stop, poll_s=0.01)
    for i in range(3):
        assert ch.put(i) is True
    assert ch.qsize() == 3
    # full: a fourth put blocks until the stop flag is set, then returns False, queues nothing
    threading.Timer(0.1, stop.set).start()
    assert ch.put(99) is False
    assert ch.qsize() == 3
    assert [ch.get() for _ in range(3)] == [0, 1, 2]
    assert ch.get() is STOPPED  # empty and stopped


def test_get_frees_room_for_a_blocked_put() -> None:
    stop = threading.Event()
    ch = Channel(1, stop, poll_s=0.01)
    assert ch.put("a")
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(ch.put("b")))
    t.start()
    time.sleep(0.1)
    assert not done, "put returned while the channel was full"
    assert ch.get() == "a"
    t.join(5)
    assert done == [True] and ch.get() == "b"
    stop.set()


def test_never_more_than_depth_items_queued() -> None:
    """A channel of depth 2 holds at most 2 items, and a producer that is ahead fills it to
    exactly 2 whenever the consumer pauses; items come out in order."""
    stop = threading.Event()
    ch = Channel(2, stop, poll_s=0.005)
    seen: list[int] = []

    def producer() -> None:
        for i in range(200):
            ch.put(i)
            seen.append(ch.qsize())

    t = threading.Thread(target=producer)
    t.start()
    got, full = [], []
    for _ in range(200):
        got.append(ch.get())
        if len(got) % 20 == 0 and len(got) < 199:
            # let the producer fill the channel up: wait until it has (however long a loaded
            # machine keeps the producer off a core), not a fixed 5 ms it may not get
            deadline = time.monotonic() + 5
            while ch.qsize() < 2 and time.monotonic() < deadline:
                time.sleep(0.001)
            full.append(ch.qsize())
    t.join(5)
    assert got == list(range(200))
    assert max(seen) <= 2 and full == [2] * 9  # reached each time, never exceeded


def test_get_waits_for_an_item() -> None:
    stop = threading.Event()
    ch = Channel(1, stop, poll_s=0.01)
    threading.Timer(0.1, ch.put, ("late",)).start()
    assert ch.get() == "late"
    stop.set()


@pytest.mark.parametrize("depth, exc", [(0, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_depth(depth, exc) -> None:
    with pytest.raises(exc, match="depth"):
        Channel(depth, threading.Event())


def test_bad_stop_and_poll() -> None:
    with pytest.raises(TypeError, match="stop"):
        Channel(1, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll_s"):
        Channel(1, threading.Event(), poll_s=0)
