"""A Ctrl-C that lands while the launcher starts a child with SIGINT ignored is deferred, not
lost; a child started then unblocks it after ignoring it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from distlab._lifetime import ctrl_c_ignored


@pytest.mark.timeout(60)
def test_a_ctrl_c_inside_the_window_arrives_after_it() -> None:
    """In a process of one thread (a test process has others, any of which the kernel may hand
    a process-directed signal to): the signal waits, pending, and arrives as the window ends."""
    probe = ("import os, signal\n"
             "from distlab._lifetime import ctrl_c_ignored\n"
             "reached = pending = False\n"
             "try:\n"
             "    with ctrl_c_ignored():\n"
             "        os.kill(os.getpid(), signal.SIGINT)\n"
             "        pending = signal.SIGINT in signal.sigpending()\n"
             "        reached = True\n"
             "except KeyboardInterrupt:\n"
             "    print('interrupted', reached, pending,\n"
             "          signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),\n"
             "          signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         timeout=50, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                      signal.SIG_DFL))
    assert out.stdout.split() == ["interrupted", "True", "True", "False", "True"], out.stderr


def test_the_window_restores_the_handler_and_the_mask_with_no_ctrl_c() -> None:
    with ctrl_c_ignored():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.timeout(60)
def test_a_child_started_in_the_window_ignores_ctrl_c_and_can_unblock_it() -> None:
    probe = ("import signal, sys; from distlab._lifetime import leave_ctrl_c_to_the_parent as f; "
             "m = signal.pthread_sigmask(signal.SIG_BLOCK, []); "
             "ign = signal.getsignal(signal.SIGINT) is signal.SIG_IGN; f(); "
             "print(signal.SIGINT in m, ign, "
             "signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with ctrl_c_ignored():
        proc = subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE,
                                text=True, env=env)
    out, _ = proc.communicate(timeout=50)
    assert out.split() == ["True", "True", "False"]
