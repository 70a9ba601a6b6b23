"""Run a function on N local ``torch.distributed`` ranks and get the per-rank results back.

    from distlab import launch
    sums = launch.run(my_module.allreduce_ones, 4)   # [4.0, 4.0, 4.0, 4.0]

``run(fn, world_size)`` starts ``world_size`` processes, initializes a process group in each (gloo
by default, NCCL on request), calls ``fn(rank, world_size, *args, **kwargs)`` and returns the
return values in rank order. Ranks are forked from multiprocessing's fork server, started once
per process with torch and distlab already imported, so a launch costs milliseconds, not a torch
import per rank (seconds each on a 2-core machine); it works from a Jupyter kernel and a script
alike, and no CUDA state is ever forked (the server never touches CUDA). Each rank gets the
launcher's environment and working directory as they are at the call, as a spawned process would.
``DISTLAB_START_METHOD=spawn`` starts every rank as a fresh interpreter instead.

Rendezvous goes through a ``TCPStore`` that the parent opens on a free loopback port
(port 0, chosen by the kernel, held for the whole run, so there is no race for the port).

Failure contract (each case is a test in ``tests/test_launch.py``):

- a rank raises -> :class:`RankError` in the parent, naming the rank, with its traceback text;
  where several have raised by then, the one that raised first (one rank's failure makes its
  peers' collectives fail at once, "Connection closed by peer": that is not the cause), the
  others' last lines after it;
- a rank exits without returning (``os._exit``, a signal, a segfault) -> :class:`RankExitedError`
  naming the ranks and their exit codes or signals;
- nothing happens within ``timeout`` seconds -> :class:`LaunchTimeoutError` (a ``TimeoutError``)
  naming the ranks that have not returned;
- in every case the remaining ranks are terminated (then killed), pipes and the store are closed,
  and the parent's own process group state is untouched;
- Ctrl-C belongs to the parent: ranks start with ``SIGINT`` ignored (a terminal sends it to the
  whole process group, and a rank still importing torch printed its own traceback), and the
  parent's ``KeyboardInterrupt`` stops them.

Under torchrun (``RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR`` set), ``run`` calls ``fn`` on the
current rank only, inside the env:// process group, and gathers every rank's value with
``all_gather_object``, so every rank gets the same list as a local launch would return. Scripts
written on ``run`` therefore go multi-node unchanged:

    torchrun --nproc-per-node 8 -m distlab.bench allreduce --backend nccl
"""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from distlab._checks import check_choice, check_float, check_instance, check_int, check_str
from distlab._forkserver_guard import server_environment
from distlab._lifetime import (
    ctrl_c_ignored,
    die_with_parent,
    leave_ctrl_c_to_the_parent,
    main_module_for_ranks,
    spawned_from_main_thread,
    start_ignoring_ctrl_c,
    stop_processes,
)
from distlab.devices import gpu_sharing_problem

__all__ = [
    "BACKENDS",
    "LaunchError",
    "LaunchTimeoutError",
    "RankError",
    "RankExitedError",
    "START_METHODS",
    "in_torchrun",
    "run",
    "start_method",
]

BACKENDS = ("gloo", "nccl")
START_METHODS = ("forkserver", "spawn")
"""How ranks start (``DISTLAB_START_METHOD``; default ``forkserver`` where the platform has it)."""
_FORKSERVER_PRELOAD = ["distlab._forkserver_guard", "torch", "torch.distributed", "cloudpickle",
                       "distlab.launch"]
"""What the fork server imports before it forks a rank; the guard first, so the server dies
with the launcher even while it is still importing torch (:mod:`distlab._forkserver_guard`)."""
_LOOPBACK = "127.0.0.1"
_STOP_GRACE_S = 3.0
_EXIT_GRACE_S = 10.0


class LaunchError(RuntimeError):
    """Base class of the errors :func:`run` raises for failed ranks."""


class RankError(LaunchError):
    """A rank raised. ``rank`` is its number, ``traceback_text`` its formatted traceback;
    ``others`` maps the ranks that had also raised when it was reported (later than ``rank``)
    to their tracebacks."""

    def __init__(self, rank: int, traceback_text: str,
                 others: Mapping[int, str] | None = None) -> None:
        self.rank = rank
        self.traceback_text = traceback_text
        self.others = dict(others or {})
        text = f"rank {rank} raised:\n{traceback_text.rstrip()}"
        for r, tb in sorted(self.others.items()):
            last = tb.strip().splitlines()[-1] if tb.strip() else "?"
            text += f"\n(rank {r} raised after it: {last})"
        super().__init__(text)


class RankExitedError(LaunchError):
    """Ranks exited without returning a value. ``exitcodes`` maps rank -> exit code."""

    def __init__(self, exitcodes: Mapping[int, int | None]) -> None:
        self.exitcodes = dict(exitcodes)
        parts = [f"rank {r} ({_describe_exit(code)})" for r, code in sorted(self.exitcodes.items())]
        super().__init__(
            "ranks exited without returning a result: " + ", ".join(parts)
            + "; the other ranks were stopped"
        )


class LaunchTimeoutError(LaunchError, TimeoutError):
    """Ranks did not return within the timeout. ``missing`` lists them."""

    def __init__(self, missing: Sequence[int], timeout: float) -> None:
        self.missing = list(missing)
        self.timeout = timeout
        super().__init__(
            f"ranks {self.missing} did not return within timeout={timeout:g} s; all ranks were "
            "stopped (a hung collective, or a peer that died mid-collective?)"
        )


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def in_torchrun() -> bool:
    """True when this process was started by torchrun (or any env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def _validate(fn: Any, world_size: Any, backend: Any, args: Any, kwargs: Any,
              timeout: Any) -> tuple[int, str, dict[str, Any]]:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__} {fn!r}")
    world_size = check_int("world_size", world_size, minimum=1)
    if backend is None:
        backend = "gloo"
    backend = check_choice("backend", check_str("backend", backend).lower(), BACKENDS)
    check_instance("args", args, (tuple, list), "a tuple or list")
    if kwargs is None:
        kwargs = {}
    check_instance("kwargs", kwargs, Mapping, "a mapping or None")
    check_float("timeout", timeout, minimum=0.0, exclusive_minimum=True)
    return world_size, backend, dict(kwargs)


def _check_backend_available(backend: str, world_size: int, *, local: bool) -> None:

    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this torch build")
    if backend == "gloo" and not dist.is_gloo_available():
        raise RuntimeError("backend='gloo' requested but this torch build has no gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("backend='nccl' needs CUDA devices, and torch sees none "
                               "(use backend='gloo' on CPU)")
        if not dist.is_nccl_available():
            raise RuntimeError("backend='nccl' requested but this torch build has no NCCL")
        if local and torch.cuda.device_count() < world_size:
            raise RuntimeError(f"backend='nccl' with world_size={world_size} needs that many "
                               f"CUDA devices, found {torch.cuda.device_count()}")


def _pickle_payload(fn: Callable[..., Any], args: Sequence[Any],
                    kwargs: Mapping[str, Any]) -> bytes:
    """Serialize ``(fn, args, kwargs)`` for the ranks with cloudpickle.

    cloudpickle sends importable functions by reference (module + name, as pickle does) and
    functions it cannot import on the other side (a notebook cell, an interactive ``__main__``,
    a lambda, a closure) by value, code and captured variables included. What still fails is
    state no process can share: a lock, an open socket or file, a generator in the closure.
    """

    try:
        return cloudpickle.dumps((fn, tuple(args), dict(kwargs)))
    except Exception as exc:  # pickling raises many types (PicklingError, TypeError, ...)
        raise TypeError(
            f"cannot send fn/args/kwargs to spawned ranks: {exc}. "
            "Functions defined in a notebook cell, lambdas and closures are fine, but what they "
            "capture (and args/kwargs) must be picklable: create locks, sockets, open files and "
            "CUDA streams inside fn on each rank instead of capturing them") from exc


def start_method() -> str:
    """How :func:`run` starts ranks here: ``DISTLAB_START_METHOD`` if set (one of
    :data:`START_METHODS`), else ``forkserver`` where this platform has it, else ``spawn``."""
    named = os.environ.get("DISTLAB_START_METHOD", "").strip().lower()
    if named:
        if named not in START_METHODS:
            raise ValueError(f"DISTLAB_START_METHOD must be one of {list(START_METHODS)}, got "
                             f"{named!r}")
        return named
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _context(method: str) -> Any:
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_FORKSERVER_PRELOAD)  # takes effect when the server starts
        _start_server_ignoring_ctrl_c()
    return ctx


def _start_server_ignoring_ctrl_c() -> None:
    """Start the fork server (once per process) with ``SIGINT`` ignored from its exec on: a
    Ctrl-C while it imports torch printed its traceback, and the ranks it forks inherit the
    ignored signal. The parent ignores ``SIGINT`` only for the milliseconds of the fork and exec
    (the server's imports run after); from a thread other than the main one it is a plain
    start."""
    from multiprocessing import forkserver

    with ctrl_c_ignored(), server_environment(spawned_from_main_thread()):
        forkserver.ensure_running()


def _server_pid() -> int:
    """The running fork server's pid (the parent of every forked rank); -1 where multiprocessing
    does not say."""
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    return pid if isinstance(pid, int) and pid > 0 else -1


def _let_the_server_die_with_the_launcher() -> None:
    """Close this forked rank's copy of the fork server's lifeline.

    The server exits when every holder of the lifeline's write end is gone, and multiprocessing
    hands a copy to every process it forks (so they could use the server themselves). A rank
    that kept it would keep the server alive after the launcher died, and the server's death is
    what kills the ranks (:func:`~distlab._lifetime.die_with_parent`)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


_JOINED = "distlab/joined"


def _all_joined(store: Any, world_size: int, timeout: datetime.timedelta) -> None:
    """Return once every rank's ``init_process_group`` has returned (through the store, so no
    device is touched). A rank whose function returns at once could otherwise exit while a
    slower peer still connects gloo's full mesh: the peer then fails with "Connection closed by
    peer" (seen on a loaded 2-core machine)."""
    if int(store.add(_JOINED, 1)) == world_size:
        store.set(f"{_JOINED}/all", "1")
    store.wait([f"{_JOINED}/all"], timeout)


def _rank_entry(rank: int, world_size: int, backend: str, port: int, payload: bytes,
                conn: mp_connection.Connection, timeout_s: float, threads: int,
                parent_pid: int, main_thread_spawn: bool,
                environ: Mapping[str, str] | None = None, forked: bool = False) -> None:
    """Body of one rank: rendezvous, call, send ("ok", rank, value, 0.0) or ("error", rank,
    traceback, time.monotonic() when it raised).

    First of all it leaves Ctrl-C to the launcher and arranges to die with its parent: the
    launcher, or for a rank the fork server forked (``forked``), the server, whose pid the
    launcher passes as ``parent_pid`` (a pid read here with ``os.getppid()`` could already be
    whichever process adopted an orphan). SIGKILL of the launcher leaves no orphan: the server
    dies with it (:mod:`distlab._forkserver_guard`, and multiprocessing's alive pipe, whose copy
    this rank closes only after arming). ``environ``: the launcher's environment at the call (a
    forked rank otherwise has the fork server's, from when it started)."""
    leave_ctrl_c_to_the_parent()
    if forked and parent_pid < 0:  # a server multiprocessing does not name: still our parent,
        parent_pid = os.getppid()  # since this rank holds a copy of its alive pipe
    die_with_parent(parent_pid, main_thread_spawn=main_thread_spawn)
    if forked:  # armed first: closing this copy may be what lets the server exit
        _let_the_server_die_with_the_launcher()
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    try:
        torch.set_num_threads(threads)
        try:
            fn, args, kwargs = pickle.loads(payload)
        except (AttributeError, ImportError) as exc:
            raise RuntimeError("the rank could not import fn (or something it references); the "
                               "module must be importable in a fresh process (on sys.path or "
                               "PYTHONPATH)") from exc
        td = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(_LOOPBACK, port, world_size, False, timeout=td)
        if backend == "nccl":  # the local world was checked: one GPU per rank
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=td)
        _all_joined(store, world_size, td)
        result = fn(rank, world_size, *args, **kwargs)
    except BaseException:
        raised_at = time.monotonic()  # one clock for every process of the machine
        message: tuple[str, int, Any, float] = ("error", rank, traceback.format_exc(), raised_at)
    else:
        try:
            message = ("ok", rank, pickle.dumps(result), 0.0)
        except Exception:
            message = ("error", rank, "the rank's return value could not be sent back (it must "
                       "pickle):\n" + traceback.format_exc(), time.monotonic())
    try:
        conn.send(message)
    finally:
        conn.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def _run_local(fn: Callable[..., Any], world_size: int, backend: str, args: Sequence[Any],
               kwargs: Mapping[str, Any], timeout: float) -> list[Any]:

    payload = _pickle_payload(fn, args, kwargs)
    method = start_method()
    ctx = _context(method)
    threads = max(1, (os.cpu_count() or 1) // world_size)
    forked = method == "forkserver"
    if forked:  # the rank's parent is the server; it forks from its main thread
        parent_pid, main_spawn, environ = _server_pid(), True, dict(os.environ)
    else:
        parent_pid, main_spawn, environ = os.getpid(), spawned_from_main_thread(), None
    store = dist.TCPStore(_LOOPBACK, 0, None, True,
                          timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False)
    procs: list[Any] = []
    readers: list[mp_connection.Connection] = []
    results: dict[int, Any] = {}
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_rank_entry, name=f"distlab-rank-{rank}", daemon=True,
                args=(rank, world_size, backend, store.port, payload, writer, timeout, threads,
                      parent_pid, main_spawn, environ, forked),
            )
            # Ctrl-C is the parent's: it stops every rank (a rank still importing torch printed
            # a traceback of its own beside the parent's one line). A forked rank ignores it from
            # its first line and the server ignores it always, so the parent never has to: its
            # first start waits seconds for the server to import torch, and a Ctrl-C ignored
            # there would be lost.
            with main_module_for_ranks():
                if method == "forkserver":
                    proc.start()
                else:
                    start_ignoring_ctrl_c(proc)
            writer.close()
            procs.append(proc)
            readers.append(reader)

        deadline = time.monotonic() + timeout
        pending = set(range(world_size))
        exited: dict[int, int | None] = {}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LaunchTimeoutError(sorted(pending), timeout)
            waitables: list[Any] = [readers[r] for r in pending]
            waitables += [procs[r].sentinel for r in pending]
            ready = mp_connection.wait(waitables, timeout=remaining)
            errors: dict[int, tuple[float, str]] = {}
            # every rank that has sent, not only the ones this wait saw: a rank's error is sent
            # before its connections close, so a peer's error that this failure caused ("closed
            # by peer") is never readable without it
            for rank in sorted(pending):
                if readers[rank].poll():
                    try:
                        status, _, body, raised_at = readers[rank].recv()
                    except EOFError:
                        procs[rank].join(_STOP_GRACE_S)
                        exited[rank] = procs[rank].exitcode
                        continue
                    if status == "error":
                        errors[rank] = (raised_at, body)
                        continue
                    results[rank] = pickle.loads(body)
                    pending.discard(rank)
                elif procs[rank].sentinel in ready and not procs[rank].is_alive():
                    exited[rank] = procs[rank].exitcode
            if errors:
                first = min(errors, key=lambda r: (errors[r][0], r))
                raise RankError(first, errors[first][1],
                                {r: tb for r, (_, tb) in errors.items() if r != first})
            if exited:
                raise RankExitedError(exited)
        for p in procs:  # ranks tear down their process groups after sending
            p.join(_EXIT_GRACE_S)
        return [results[r] for r in range(world_size)]
    finally:
        stop_processes(procs, grace_s=_STOP_GRACE_S)
        for reader in readers:
            reader.close()
        for p in procs:
            p.close()
        del store


# Under torchrun: the env:// store, made once per process, and how many groups it has served.
_ENV_STORE: Any = None
_ENV_GROUPS = 0


def _env_group_store(rank: int, world_size: int, timeout: float) -> Any:
    """A fresh key space on this process's env:// store for one process group.

    Every :func:`run` under torchrun creates a process group and destroys it afterwards. Made
    from ``env://`` each time, the next group reads the same store keys as the last one, and
    a rank that gets there first can read a peer's *previous* address and fail with gloo's
    "connectFullMesh ... Connection refused". So the store is made once and each group gets
    its own prefix; every rank calls :func:`run` in the same order, so the prefixes agree.

    Before the group is made every rank posts that it is ready and waits for the others, or for
    an abort a peer posted with :func:`torchrun_abort` (a rank whose work failed before it
    reached this group): then it raises at once instead of waiting for the timeout.
    """
    global _ENV_GROUPS
    store = _torchrun_store(rank, world_size, timeout)
    number = _ENV_GROUPS + 1
    store.set(f"distlab/ready/{number}/{rank}", "1")
    ready = [f"distlab/ready/{number}/{r}" for r in range(world_size)]
    abort = f"distlab/abort/{number}"
    deadline = time.monotonic() + timeout
    while not store.check(ready):
        if store.check([abort]):
            raise RuntimeError(f"a peer rank failed before joining process group {number}: "
                               f"{store.get(abort).decode()}")
        if time.monotonic() > deadline:
            missing = [r for r, k in enumerate(ready) if not store.check([k])]
            raise TimeoutError(f"ranks {missing} did not join process group {number} within "
                               f"{timeout:g} s")
        time.sleep(0.02)
    _ENV_GROUPS = number
    return dist.PrefixStore(f"distlab/launch/{number}/", store)


def torchrun_abort(reason: str, *, timeout: float = 60.0) -> None:
    """Under torchrun: tell the peers that this rank will not join the next :func:`run` (its
    work failed first), so theirs fails at once with ``reason`` instead of waiting."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = _torchrun_store(rank, world, timeout)
    store.set(f"distlab/abort/{_ENV_GROUPS + 1}", f"rank {rank}: {reason}")


def torchrun_exchange(key: str, value: str, *, timeout: float = 60.0) -> list[str]:
    """Under torchrun: every rank posts ``value`` under ``key`` on the env:// store and gets every
    rank's value, in rank order, without a process group (so it works after a failed part).

    Also aligns the process-group counter of :func:`run` across ranks (one past the highest, so
    an abort posted for a group that was never made cannot stop the next one), so a rank that
    skipped a :func:`run` the others made does not rendezvous on a different key space next
    time. Raises ``TimeoutError`` naming the ranks that did not post within ``timeout`` seconds.
    """
    global _ENV_GROUPS
    check_str("key", key, nonempty=True)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = _torchrun_store(rank, world, timeout)
    store.set(f"distlab/exchange/{key}/{rank}", json.dumps([value, _ENV_GROUPS]))
    keys = [f"distlab/exchange/{key}/{r}" for r in range(world)]
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout))
    except Exception as exc:  # the store raises a RuntimeError/DistStoreError on timeout
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        raise TimeoutError(f"ranks {missing} did not reach {key!r} within {timeout:g} s") from exc
    posted = [json.loads(store.get(k)) for k in keys]
    _ENV_GROUPS = max(count for _, count in posted) + 1
    return [v for v, _ in posted]


def _torchrun_store(rank: int, world_size: int, timeout: float) -> Any:
    """The env:// store of this torchrun process (made once)."""
    global _ENV_STORE
    if _ENV_STORE is None:
        _ENV_STORE, _, _ = next(dist.rendezvous(
            "env://", rank, world_size, timeout=datetime.timedelta(seconds=timeout)))
    return _ENV_STORE


def _run_torchrun(fn: Callable[..., Any], world_size: int, backend: str, args: Sequence[Any],
                  kwargs: Mapping[str, Any], timeout: float) -> list[Any]:

    env_world = int(os.environ["WORLD_SIZE"])
    if world_size != env_world:
        raise ValueError(f"world_size={world_size} but torchrun started WORLD_SIZE={env_world} "
                         "ranks; pass the same number")
    rank = int(os.environ["RANK"])
    created = False
    if not dist.is_initialized():
        if backend == "nccl":
            gpus = torch.cuda.device_count()
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", env_world))
            problem = gpu_sharing_problem(gpus, local_world)
            if problem:  # every rank of the host sees the same counts: all fail, none waits
                raise RuntimeError(f"backend='nccl' under torchrun: {problem}")
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, store=_env_group_store(rank, env_world, timeout),
                                rank=rank, world_size=env_world,
                                timeout=datetime.timedelta(seconds=timeout))
        created = True
    try:
        value = fn(rank, env_world, *args, **kwargs)
        gathered: list[Any] = [None] * env_world
        dist.all_gather_object(gathered, value)
        return gathered
    finally:
        if created:
            dist.destroy_process_group()


def run(fn: Callable[..., Any], world_size: int, *, backend: str | None = None,
        args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
        timeout: float = 120.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` ranks; return their values.

    Args:
        fn: any function: importable ones are sent by reference, ones defined in a notebook
            cell, ``__main__``, a lambda or a closure by value (cloudpickle); what it captures
            must pickle. Its return value must pickle.
        world_size: number of ranks, >= 1.
        backend: ``"gloo"`` (default, CPU) or ``"nccl"`` (needs ``world_size`` CUDA devices
            locally; rank r uses device r).
        args, kwargs: extra arguments passed to every rank.
        timeout: seconds for the whole run, also the process-group timeout of every collective.

    Returns:
        The per-rank return values, in rank order.

    Raises:
        TypeError / ValueError: bad arguments, or a function that cannot be sent to spawned ranks.
        RuntimeError: the backend is not usable here (e.g. NCCL without CUDA).
        RankError, RankExitedError, LaunchTimeoutError: a rank failed (see module docstring).
    """
    world_size, backend_name, kw = _validate(fn, world_size, backend, args, kwargs, timeout)
    torchrun = in_torchrun()
    _check_backend_available(backend_name, world_size, local=not torchrun)
    if torchrun:
        return _run_torchrun(fn, world_size, backend_name, args, kw, float(timeout))
    return _run_local(fn, world_size, backend_name, args, kw, float(timeout))
