"""A Ctrl-C that lands while the launcher starts a child with SIGINT ignored is deferred, not
lost; a child started then unblocks it after ignoring it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from distlab._lifetime import ctrl_c_ignored


def test_a_ctrl_c_inside_the_window_arrives_after_it() -> None:
    reached_the_end_of_the_body = False
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_ignored():
            os.kill(os.getpid(), signal.SIGINT)
            assert signal.SIGINT in signal.sigpending()
            reached_the_end_of_the_body = True
    assert reached_the_end_of_the_body
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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
