"""No hop leaks: after every path, and after a worker killed mid-hop, /dev/shm, this process's fd
table and its shared-memory mappings are as they were; the worker dies with its parent.

/dev/shm is shared with every other process on the machine, so it is checked for the names a hop
makes (``torch_*``; multiprocessing's semaphores ``sem.mp-*`` are checked through this process's
mappings instead, which only its own can be in).

One thing torch keeps by design: a process that received a tensor by the ``file_system``
strategy stays connected (one socket) to the sending worker's ``torch_shm_manager`` until it
exits, and that manager lives as long as the connection. The ``hop_shm_fs`` tests allow exactly
that one socket, and a separate test shows the manager exits with the trainer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from distlab.transfers.hop import HopLink, HopWorkerDied
from distlab.transfers.shm import SHM_DIR, segments_of, sweep_segments
from helpers.leaks import fd_table, no_leaks
from helpers.loading_util import children_outlive_parent

HOST_PATHS = ("hop_shm_fd", "hop_shm_fs", "hop_pickle", "hop_ring")


@pytest.fixture(scope="module", autouse=True)
def warm() -> None:
    """Open what a process opens once and keeps (multiprocessing's resource tracker and resource
    sharer, torch's caches) before any leak check."""
    with HopLink() as link:
        for path in HOST_PATHS:
            link.hop(path, 4096)


def _sockets() -> set[int]:
    return {fd for fd, target in fd_table().items() if target.startswith("socket:")}


def _session(paths: tuple[str, ...]) -> list[int]:
    """Hops on ``paths`` (idle and busy worker, two sizes); returns the pids of the
    torch_shm_managers the worker started."""
    with HopLink() as link:
        for path in paths:
            for nbytes, busy in ((4096, False), (1 << 20, True)):
                assert link.hop(path, nbytes, seed=7, busy=busy).wrong == 0
        return [c.pid for c in psutil.Process(link.worker_pid).children()
                if c.name().startswith("torch_shm_man")]


def test_fd_pickle_and_ring_paths_leave_nothing() -> None:
    with no_leaks(fds=True, maps=True):
        managers = _session(("hop_shm_fd", "hop_pickle", "hop_ring"))
    assert managers == []


def test_file_system_path_leaves_only_torchs_manager_connection() -> None:
    sockets = _sockets()
    with no_leaks(fds=True, maps=True,
                  allow_fd=lambda target: target.startswith("socket:")):
        managers = _session(("hop_shm_fs",))
    assert len(managers) == 1, "the worker starts one torch_shm_manager"
    assert len(_sockets() - sockets) == 1, "one connection to it, nothing else"
    assert psutil.pid_exists(managers[0])


@pytest.mark.parametrize("path, die_at", [
    ("hop_shm_fd", "after_share"), ("hop_shm_fs", "after_share"),
    ("hop_shm_fd", "after_put"), ("hop_shm_fs", "after_put"),
    ("hop_pickle", "after_put"), ("hop_ring", "after_put")])
def test_a_worker_killed_mid_hop_leaves_nothing(path, die_at) -> None:
    """The worker SIGKILLs itself with a segment made and not sent (after_share) or with the
    message in the pipe and the handle not fetched (after_put). The hop raises HopWorkerDied
    unless the bytes had fully arrived (a flushed pickle, a written slot, a named file); either
    way, once the link is closed nothing of it remains here or in /dev/shm."""
    allow = (lambda target: target.startswith("socket:")) if path == "hop_shm_fs" else None
    with no_leaks(fds=True, maps=True, allow_fd=allow):
        link = HopLink(timeout_s=30)
        try:
            link.start()
            pid = link.worker_pid
            try:
                sample = link.hop(path, 1 << 20, seed=3, die_at=die_at)
                assert sample.wrong == 0   # it had arrived whole before the worker died
            except HopWorkerDied as exc:
                assert "died" in str(exc)
        finally:
            link.close()
        assert not segments_of(pid), f"segments of the dead worker remain: {segments_of(pid)}"


def test_sweep_removes_only_a_dead_process_segments(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    orphan = SHM_DIR / f"torch_{proc.pid}_123_0"
    orphan.write_bytes(b"x")
    try:
        assert segments_of(proc.pid) == [orphan.name]
        assert sweep_segments(proc.pid) == [orphan.name]
        assert not orphan.exists() and sweep_segments(proc.pid) == []
    finally:
        orphan.unlink(missing_ok=True)
    with pytest.raises(ValueError, match="still running"):
        sweep_segments(os.getpid())


def test_the_hop_worker_dies_with_a_killed_parent() -> None:
    """SIGKILL the process holding a HopLink whose worker is busy: the worker is gone within
    seconds (it arms the kernel's parent-death signal and a watchdog thread)."""
    code = ("from distlab.transfers.hop import HopLink\n"
            "link = HopLink(); link.start()\n"
            "print(link.worker_pid, flush=True)\n"
            "import time; time.sleep(60)\n")
    alive = children_outlive_parent(code)
    assert not alive, f"the hop worker outlived its killed parent: {alive}"


def test_torch_shm_manager_exits_with_the_trainer() -> None:
    """The one thing the file_system path leaves while the trainer lives goes when it dies."""
    code = ("import psutil\n"
            "from distlab.transfers.hop import HopLink\n"
            "with HopLink() as link:\n"
            "    link.hop('hop_shm_fs', 4096)\n"
            "    managers = [c.pid for c in psutil.Process(link.worker_pid).children()]\n"
            "print(*managers, flush=True)\n"
            "import time; time.sleep(60)\n")
    alive = children_outlive_parent(code)
    assert not alive, f"torch_shm_manager outlived the trainer: {alive}"


def test_leak_checker_sees_an_open_fd_and_a_mapping(tmp_path) -> None:
    """The checker can fail: a descriptor left open, a shared mapping left mapped."""
    with pytest.raises(AssertionError, match="file descriptors left open"), \
            no_leaks(fds=True, grace_s=0.1):   # left open on purpose: no reaping to wait for
        fd = os.open(tmp_path / "f", os.O_CREAT | os.O_RDWR)
    os.close(fd)
    import torch
    with pytest.raises(AssertionError, match="shared memory left mapped"), \
            no_leaks(maps=True, grace_s=0.1):
        kept = torch.zeros(4096, dtype=torch.uint8).share_memory_()
    del kept
    time.sleep(0.01)
    assert Path("/proc/self/maps").exists()
