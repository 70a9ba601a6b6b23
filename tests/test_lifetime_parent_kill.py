"""A launcher killed with SIGKILL while the machine is busy: nothing ``launch.run`` started
(fork server, resource tracker, ranks) outlives it by 5 s, at whichever moment it dies.

Each launcher is killed at one of three moments, in turn: as soon as its fork server exists
(still importing torch: it reads multiprocessing's "alive" pipe only after that), as soon as
the first rank exists (the others are still being forked, their start requests in flight with
copies of that pipe), and when every rank has run for half a second. A busy loop per core
keeps the machine loaded throughout every launcher's life, as a JupyterLab session and a test
run beside it do (started once the zygote below has imported distlab: its import is the test's
set-up, not a launcher's, and spinning beside it only burnt CPU).
Before :mod:`distlab._forkserver_guard`, a launcher killed at the first moment left its server
alive until the server's imports ended, many seconds under load; so that this holds on a fast
machine too, the servers killed at that moment import one more module that takes
``launcher_zygote.SLOW_S`` (8) seconds, as torch's import does on a busy one.

Bounded: 6 launchers, each started by forking a process that has already imported distlab
(``helpers/launcher_zygote.py``), and every wait has a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(420)]

HELPERS = Path(__file__).parent / "helpers"
WORLD = 3
MOMENTS = ("server", "first rank", "all ranks") * 2
GONE_WITHIN_S = 5.0


def _marked(mark: str) -> dict[int, str]:
    """``{pid: command line}`` of every live, non-zombie process whose environment holds
    ``DISTLAB_KILL_MARK=<mark>``."""
    needle = f"DISTLAB_KILL_MARK={mark}\0".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state not in ("Z", "X"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ") \
                    .decode(errors="replace")
        except OSError:
            continue
    return found


def _reached(moment: str, procs: dict[int, str]) -> bool:
    servers = sum("multiprocessing.forkserver" in cmd for cmd in procs.values())
    # a rank is forked by the server and shows its command line
    return {"server": servers >= 1, "first rank": servers >= 2,
            "all ranks": servers >= 1 + WORLD}[moment]


def _kill(pids: dict[int, str]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _busy_loops() -> list[subprocess.Popen]:
    """One busy loop per core: with the launchers' own imports the machine is overloaded."""
    n = os.cpu_count() or 2
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_nothing_outlives_a_killed_launcher_by_5_s_under_load() -> None:
    mark = f"t{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS.parent), *sys.path])}
    zygote = subprocess.Popen([sys.executable, str(HELPERS / "launcher_zygote.py"), str(WORLD),
                               mark], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=env, cwd=HELPERS.parent)
    busy: list[subprocess.Popen] = []
    survivors: list[str] = []
    try:
        assert zygote.stdout.readline().strip() == "ready", "the zygote did not start"
        busy = _busy_loops()
        time.sleep(0.5)   # the loops are spinning before the first launcher starts
        for number, moment in enumerate(MOMENTS):
            tag = f"{mark}-{number}"
            zygote.stdin.write(f"fork {number}{' slow' if moment == 'server' else ''}\n")
            zygote.stdin.flush()
            launcher = int(zygote.stdout.readline())
            deadline = time.monotonic() + 90
            while not _reached(moment, _marked(tag)):
                assert time.monotonic() < deadline, f"launcher {number} never reached {moment}"
                time.sleep(0.02)
            if moment == "all ranks":
                time.sleep(0.5)
            os.kill(launcher, signal.SIGKILL)
            killed = time.monotonic()
            left = _marked(tag)
            while left and time.monotonic() - killed < GONE_WITHIN_S:
                time.sleep(0.05)
                left = _marked(tag)
            survivors += [f"launcher {number} killed at '{moment}': pid {pid} {cmd[:90]}"
                          for pid, cmd in left.items()]
            _kill(left)  # leave nothing behind for the next launcher or test
    finally:
        for p in busy:
            p.kill()
            p.wait()
        zygote.stdin.close()
        zygote.kill()
        zygote.wait()
        for number in range(len(MOMENTS)):
            _kill(_marked(f"{mark}-{number}"))
    assert not survivors, "outlived a SIGKILLed launcher by 5 s:\n" + "\n".join(survivors)
