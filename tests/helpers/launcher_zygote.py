"""Forks launchers on request, for tests/test_lifetime_parent_kill.py.

    python tests/helpers/launcher_zygote.py WORLD_SIZE MARK

Prints ``ready`` once it has imported distlab, then reads one line per launcher from stdin:
``fork N`` or ``fork N slow``. Each forks a child that sets ``DISTLAB_KILL_MARK=MARK-N`` in its
environment (so the fork server it starts, the resource tracker and every rank carry it in
``/proc/<pid>/environ``) and calls ``launch.run(hang, WORLD_SIZE)``; the zygote prints the
child's pid. ``slow``: the server also
imports ``helpers.slow_preload`` last, which takes ``SLOW_S`` seconds (as torch's import does on a
busy machine). The child is a real
launcher: this process imported ``distlab.launch`` and never started a fork server, so the child
starts its own, as a fresh interpreter would; forking it saves the seconds of importing torch
again for every launcher. Finished children are reaped at each request.
"""

from __future__ import annotations

import os
import sys

from distlab import launch
from helpers.launch_targets import hang

SLOW_S = 8.0
"""Seconds the ``slow`` server's last preload takes."""


def main(world_size: int, mark: str) -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        word, number, *how = line.split()
        if word != "fork":
            break
        while True:  # reap launchers the test killed
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        pid = os.fork()
        if pid == 0:
            os.environ["DISTLAB_KILL_MARK"] = f"{mark}-{number}"
            if how == ["slow"]:
                os.environ["DISTLAB_TEST_SLOW_PRELOAD_S"] = str(SLOW_S)
                launch._FORKSERVER_PRELOAD.append("helpers.slow_preload")
            try:
                launch.run(hang, world_size, timeout=120)
            finally:
                os._exit(0)
        print(pid, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
