"""Progress lines that never break a progress bar, even when they come from other processes.

A benchmark's ranks tell the user where they are with one line per round (``[allreduce] round
3/7``), printed on stderr by :func:`emit`. A command that draws its own progress bar on stderr
(the profile) would see those lines land in the middle of the bar's line, since a bar redraws
its line in place. Inside :func:`relay` they are not printed: :func:`emit`, in this process and
in every process started from it meanwhile (they inherit the environment variable
:data:`ENV`), appends them to a file that a thread of this process reads, handing the newest
line to ``show`` (e.g. the bar's postfix), so the bar stays one line and still moves.

    with progress.relay(lambda line: bar.set_postfix_str(f"collectives: {line}")):
        run_the_part()          # its ranks call progress.emit(...)
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["ENV", "emit", "relay"]

ENV = "DISTLAB_PROGRESS_RELAY"
"""The environment variable naming the file :func:`emit` appends to inside :func:`relay`."""


def emit(line: str) -> None:
    """Show one progress line: appended to the relay file when :data:`ENV` names one (a parent
    draws a bar and shows it there), else printed on stderr. A relay file that cannot be
    written (the relay ended) drops the line: a bar may still be on the screen."""
    path = os.environ.get(ENV)
    if not path:
        print(line, file=sys.stderr, flush=True)
        return
    data = (" ".join(line.split()) + "\n").encode("utf-8")
    with contextlib.suppress(OSError):  # never O_CREAT: a relay that ended stays gone
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


@contextlib.contextmanager
def relay(show: Callable[[str], None], *, interval_s: float = 0.25) -> Iterator[None]:
    """While inside, lines given to :func:`emit` (here and in processes started meanwhile) go to
    ``show(line)`` instead of stderr: a thread reads them every ``interval_s`` seconds and calls
    ``show`` with the newest one (older ones a reader could not have seen are skipped). On exit
    the lines not yet shown are handed over, the environment is restored and the file removed.
    """
    fd, name = tempfile.mkstemp(prefix="distlab-progress-", suffix=".txt")
    os.close(fd)
    path = Path(name)
    before = os.environ.get(ENV)
    os.environ[ENV] = name
    stop = threading.Event()
    offset = 0

    def pump() -> None:
        nonlocal offset
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        offset += end + 1
        lines = chunk[:end].decode("utf-8", "replace").splitlines()
        if lines:
            show(lines[-1])

    def loop() -> None:
        while not stop.wait(interval_s):
            pump()

    thread = threading.Thread(target=loop, name="distlab-progress-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        pump()
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before
        path.unlink(missing_ok=True)
