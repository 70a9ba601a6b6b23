"""Child-process lifetime: everything distlab spawns dies with its parent, and is reaped in one way.

Two halves:

- :func:`die_with_parent` runs first thing inside a spawned child (launch ranks, pipeline
  workers, part-loader producers). However the parent dies (exception, SIGTERM, SIGKILL, the
  kernel restarting), the child exits within about ``poll_s`` seconds: on Linux the kernel sends
  it ``SIGKILL`` through ``prctl(PR_SET_PDEATHSIG)`` when its parent *thread* ends, and a daemon
  watchdog thread checks ``os.getppid()`` as a portable backstop. ``PR_SET_PDEATHSIG`` fires
  when the spawning *thread* exits, so it is armed only when the parent says it spawned from its
  main thread. The parent's pid is passed in, never read after the fact: a parent that died
  before the prctl took effect shows as ``os.getppid() != parent_pid`` right after it, and the
  child exits (read afterwards, ``os.getppid()`` would name whichever process adopted it).
- :func:`die_with_parent_now` is the same check with no thread, safe in a just-forked child
  (:mod:`distlab._forkserver_guard` runs it in every process the fork server forks).
- :func:`stop_processes` is the one terminate -> kill -> join sequence used to reap children.

:func:`start_ignoring_ctrl_c` starts a child that leaves Ctrl-C to its parent from its first
instruction: a spawned child imports its modules before its own code can ignore ``SIGINT``, and a
Ctrl-C in that second (the terminal sends it to the whole process group) printed the child's
``KeyboardInterrupt`` traceback beside the parent's one line.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ORPHAN_EXIT_CODE", "ctrl_c_ignored", "die_with_parent", "die_with_parent_now",
           "leave_ctrl_c_to_the_parent", "main_module_for_ranks",
           "spawned_from_main_thread", "start_ignoring_ctrl_c", "stop_processes"]

_PR_SET_PDEATHSIG = 1
#: Exit status of a child whose parent died (128 + SIGKILL, like a shell reports a kill).
ORPHAN_EXIT_CODE = 128 + 9


def spawned_from_main_thread() -> bool:
    """True when the calling thread is the main thread (pass it to the child's die_with_parent)."""
    return threading.current_thread() is threading.main_thread()


_PRCTL: Any = None


def _prctl() -> Any:
    """libc's ``prctl``, looked up once per process (None off Linux or where it is missing).
    ``CDLL(None)`` reads the symbols already loaded: no ``ldconfig`` subprocess, which
    ``ctypes.util.find_library`` starts and which a just-forked child must not."""
    global _PRCTL
    if _PRCTL is None:
        found: Any = False
        if sys.platform.startswith("linux"):
            try:
                found = ctypes.CDLL(None, use_errno=True).prctl
            except (OSError, AttributeError):
                try:
                    found = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6",
                                        use_errno=True).prctl
                except (OSError, AttributeError):
                    found = False
        _PRCTL = found
    return _PRCTL or None


def _arm_pdeathsig() -> bool:
    """Ask the kernel for ``SIGKILL`` when this process's parent thread ends; True if armed."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


def die_with_parent_now(parent_pid: int, *, main_thread_spawn: bool = True) -> None:
    """Arm the kernel's parent-death ``SIGKILL`` (when ``main_thread_spawn``) and exit at once
    with :data:`ORPHAN_EXIT_CODE` if ``parent_pid`` is no longer this process's parent. No
    thread and no subprocess: safe right after ``fork``. Armed first, checked second, so a
    parent that dies at any moment is caught by one or the other."""
    if main_thread_spawn:
        _arm_pdeathsig()
    if os.getppid() != parent_pid:
        os._exit(ORPHAN_EXIT_CODE)


def die_with_parent(parent_pid: int, *, main_thread_spawn: bool = False,
                    poll_s: float = 0.5) -> None:
    """Make the calling (child) process exit when process ``parent_pid`` is gone.

    Args:
        parent_pid: the pid of the process that spawned this child (``os.getpid()`` in the parent,
            passed through the spawn arguments; ``os.getppid()`` in the child may already be 1).
        main_thread_spawn: True when the parent spawned from its main thread; only then is the
            kernel's parent-death signal armed (it tracks the spawning thread, not the process).
        poll_s: how often, in seconds, the watchdog thread compares ``os.getppid()`` with
            ``parent_pid``.
    """
    die_with_parent_now(parent_pid, main_thread_spawn=main_thread_spawn)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=watch, name="distlab-parent-watchdog", daemon=True).start()


def start_ignoring_ctrl_c(proc: Any) -> None:
    """``proc.start()`` (a ``multiprocessing.Process``) with ``SIGINT`` ignored in the child from
    its start: an ignored signal stays ignored across ``exec`` and Python then installs no
    ``KeyboardInterrupt`` handler, so the parent alone handles Ctrl-C and stops the child. The
    parent ignores ``SIGINT`` for the milliseconds of the start (a Ctrl-C inside them is
    delivered after, see :func:`ctrl_c_ignored`);
    from a thread other than the main one, where handlers cannot be set, it is a plain start."""
    with ctrl_c_ignored():
        proc.start()


@contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """``SIGINT`` ignored in this process for the body (what a child started in it inherits
    across ``exec``), restored after; off the main thread, where handlers cannot be set, the
    body runs as it is.

    The signal is also blocked for the body in this thread, so in a process with no other thread
    a Ctrl-C that lands inside it is deferred, not lost: the kernel keeps a blocked signal
    pending even while it is ignored, and delivers it (``KeyboardInterrupt``) once the old
    handler is back and the mask restored. Where another thread leaves SIGINT unblocked the
    kernel may hand the signal to it, and the ignore drops it: those milliseconds still lose a
    Ctrl-C, as they did before the block. A child started in the body inherits the block as well
    as the ignore; that changes nothing for a signal it ignores (ranks unblock it after ignoring
    it, :func:`leave_ctrl_c_to_the_parent`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def leave_ctrl_c_to_the_parent() -> None:
    """In a child: ``SIGINT`` ignored and unblocked (it may arrive blocked from
    :func:`ctrl_c_ignored`; a fork starts with no signal pending, so nothing is delivered)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def stop_processes(procs: Iterable[Any], *, grace_s: float = 2.0) -> None:
    """Terminate every live process in ``procs``, wait up to ``grace_s`` seconds for them all,
    kill the ones still alive, then join every one (a ``multiprocessing.Process`` API)."""
    procs = list(procs)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(grace_s)


@contextmanager
def main_module_for_ranks() -> Iterator[None]:
    """Hide ``__main__.__file__`` for the body when it names no file (a script read on stdin,
    ``python - <<EOF``, says ``<stdin>``): multiprocessing would have every rank run that path
    again as its ``__main__`` and fail with ``FileNotFoundError``. Without it the rank leaves
    ``__main__`` alone, as for ``python -c``; the function and what it uses travel by value
    (cloudpickle), so nothing is lost. Every ``spawn`` start of distlab (ranks, loading workers,
    the part loader's producer) runs inside it."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    hide = (main is not None and isinstance(path, str)
            and getattr(main, "__spec__", None) is None
            and not os.path.isfile(os.path.join(mp.process.ORIGINAL_DIR or "", path)))
    if hide:
        del main.__file__
    try:
        yield
    finally:
        if hide:
            main.__file__ = path
