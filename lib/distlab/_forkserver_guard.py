"""Imported first inside the fork server that :func:`distlab.launch.run` starts: the server dies
with its launcher, and every process it forks dies with the server, at once and whatever the load.

multiprocessing's own rule is slower and has gaps: the server leaves when every copy of its
"alive" pipe is closed, and it reads that pipe only after its preloads (torch: seconds on a busy
2-core machine). A launcher killed before then, or while a start request (which carries a copy
of the pipe) waits in the server's socket, or while a rank has not yet reached its own code,
left the server and its ranks running for many seconds.

So, when the launcher names itself in :data:`LAUNCHER_ENV` while it starts the server
(:func:`server_environment`):

- the server asks the kernel for ``SIGKILL`` when the launcher's thread ends
  (``PR_SET_PDEATHSIG``; only when the launcher started it from its main thread, since the
  signal follows the thread), then checks that the launcher is still its parent (it may have
  died before the prctl) and exits if not;
- every process the server forks does the same towards the server in the fork itself
  (``os.register_at_fork``), before any of multiprocessing's code runs in it; a process that
  one of them forks in turn (the hooks are inherited) is left alone.

Importing this module anywhere else (no :data:`LAUNCHER_ENV`) does nothing. Linux only; other
platforms keep multiprocessing's rule and the ranks' watchdog (:mod:`distlab._lifetime`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from distlab._lifetime import die_with_parent_now

__all__ = ["LAUNCHER_ENV", "guard_this_server", "server_environment"]

LAUNCHER_ENV = "DISTLAB_FORKSERVER_LAUNCHER"
"""``"<pid>:main"`` or ``"<pid>:thread"``: the launcher that starts the server, and whether it
does so from its main thread. Set only for the start (:func:`server_environment`)."""


@contextmanager
def server_environment(main_thread: bool) -> Iterator[None]:
    """Name this process in :data:`LAUNCHER_ENV` for the body (the server's start, which
    inherits the environment), and remove it after: ranks and other children never see it."""
    old = os.environ.get(LAUNCHER_ENV)
    os.environ[LAUNCHER_ENV] = f"{os.getpid()}:{'main' if main_thread else 'thread'}"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(LAUNCHER_ENV, None)
        else:
            os.environ[LAUNCHER_ENV] = old


def guard_this_server() -> bool:
    """In a fork server started under :func:`server_environment`: die with the launcher and
    make every child die with this server (module docstring). True when armed, False when the
    environment names no launcher (nothing is done)."""
    named = os.environ.pop(LAUNCHER_ENV, "")
    pid_text, _, how = named.partition(":")
    if not pid_text.isdigit():
        return False
    die_with_parent_now(int(pid_text), main_thread_spawn=how == "main")
    server = os.getpid()
    os.register_at_fork(before=_note_the_forker,
                        after_in_child=lambda: _die_with(server))
    return True


_FORKER = 0
"""The pid of the process that is forking (set just before every fork; a child reads its copy)."""


def _note_the_forker() -> None:
    global _FORKER
    _FORKER = os.getpid()


def _die_with(server: int) -> None:
    """In a just-forked child: die with ``server`` if the server forked it. The hooks are
    inherited by every descendant; a rank that forks a child of its own (a DataLoader worker)
    leaves it to the rank's own arrangements."""
    if _FORKER == server:
        die_with_parent_now(server)


guard_this_server()
