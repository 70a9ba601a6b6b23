"""Build a C++ extension once per environment, torch release and source, and load it without ninja.

``torch.utils.cpp_extension.load`` keeps one build folder per extension *name* for every Python
on the machine, asks the ``ninja`` found on ``PATH`` whether to rebuild on every load (a venv's
ninja and the system's disagree about each other's logs, so a changed ``PATH`` rebuilt it), and
guards a build with a lock *file* that an interrupted build leaves behind, after which every
later load waits forever. This module replaces those three behaviours:

- **Where**: ``<folder>/<name>-<key>/<name>.so``, ``key`` a hash of the source bytes, the compile
  flags, the torch and Python versions and the platform. ``folder`` is ``DISTLAB_EXTENSIONS_DIR``
  when set, else ``<sys.prefix>/share/distlab/extensions`` (it belongs to the environment, so
  two checkouts of the same source share one build and two sources never rebuild each other's),
  else, where the environment is read-only, a per-environment folder under ``~/.cache/distlab``.
- **Loading**: a built ``.so`` is imported directly (``importlib``): no ninja, no compiler, no
  ``PATH``.
- **Building**: under an ``fcntl.flock`` on ``<name>-<key>/lock``, which the kernel releases when
  its holder dies however it dies, so a stale lock cannot exist. A process that finds the lock
  held says what it waits for within :data:`SAY_WAIT_AFTER_S` seconds (the holder's pid and the
  lock's path) and gives up after ``wait_s`` seconds (:class:`BuildWaitTimeout`). The build runs
  in ``build/`` (emptied first: an interrupted build leaves torch's own lock there) and the
  finished ``.so`` is moved into place atomically, so a reader never sees half a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import torch

__all__ = ["BuildWaitTimeout", "SAY_WAIT_AFTER_S", "build_key", "extension_folder",
           "extensions_root", "load_or_build"]

SAY_WAIT_AFTER_S = 2.0
"""Seconds a process waits on another's build before it says so (once)."""
_POLL_S = 0.2

Built = tuple[Path, ModuleType | None]
"""What a build returns: the ``.so`` and, where the build imported it, the module."""


class BuildWaitTimeout(TimeoutError):
    """Another process held the build lock for longer than the caller would wait."""


def extensions_root() -> Path:
    """Where built extensions live (see the module docstring for the order of choice)."""
    named = os.environ.get("DISTLAB_EXTENSIONS_DIR", "").strip()
    if named:
        return Path(named).expanduser()
    env_folder = Path(sys.prefix) / "share" / "distlab" / "extensions"
    if _writable(env_folder):
        return env_folder
    tag = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "distlab" / "extensions" / tag


def _writable(folder: Path) -> bool:
    """Whether ``folder`` exists writable, or can be made under a writable parent."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return os.access(probe, os.W_OK | os.X_OK)


def build_key(source: Path, cflags: Sequence[str]) -> str:
    """A 16-hex-digit key of everything that changes the built binary."""
    h = hashlib.sha256()
    h.update(source.read_bytes())
    for part in (*cflags, torch.__version__, str(torch.version.git_version), sys.version,
                 platform.machine(), platform.system()):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def extension_folder(name: str, source: Path, cflags: Sequence[str]) -> Path:
    """The folder that holds (or will hold) ``name``'s build for this source and environment."""
    return extensions_root() / f"{name}-{build_key(source, cflags)}"


def _import(name: str, so_path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, so_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {so_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _holder(lock_path: Path) -> str:
    try:
        pid = lock_path.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid else "another process"


def _acquire(fd: int, lock_path: Path, wait_s: float, say: Callable[[str], None]) -> None:
    """Take the exclusive lock on ``fd``, waiting at most ``wait_s`` seconds."""
    start = time.monotonic()
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - start
            if waited >= wait_s:
                raise BuildWaitTimeout(
                    f"{_holder(lock_path)} held the build lock {lock_path} for {waited:.0f} s"
                ) from None
            if not said and waited >= SAY_WAIT_AFTER_S:
                say(f"distlab: waiting for {_holder(lock_path)} to finish building the compiled "
                    f"plan executor (lock {lock_path}; gives up after {wait_s:.0f} s)")
                said = True
            time.sleep(_POLL_S)


def load_or_build(name: str, source: Path, cflags: Sequence[str], *, wait_s: float,
                  say: Callable[[str], None],
                  compile_into: Callable[[Path], Built] | None = None) -> ModuleType:
    """Import ``name`` built from ``source``, building it first where no build exists.

    Args:
        name: the extension's module name (its ``PyInit_<name>``).
        source: the one C++ source file.
        cflags: extra compiler flags (part of the key).
        wait_s: seconds to wait for another process's build before :class:`BuildWaitTimeout`.
        say: where the one "waiting for ..." line goes.
        compile_into: builds into the given empty folder and returns the ``.so`` path with the
            module where building already imported it (default: ``torch.utils.cpp_extension.load``,
            with this interpreter's folder first on ``PATH`` so the environment's own ninja is
            found). Tests pass a stand-in.

    Raises:
        BuildWaitTimeout: another live process kept the lock for ``wait_s`` seconds.
        Exception: whatever the compiler raises (no compiler, bad headers, ...).
    """
    folder = extension_folder(name, source, cflags)
    loaded: ModuleType | None = None
    so_path = folder / f"{name}.so"
    if so_path.exists():
        return _import(name, so_path)
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = folder / "lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, lock_path, wait_s, say)
        if not so_path.exists():  # nobody finished it while we waited
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            build_dir = folder / "build"
            shutil.rmtree(build_dir, ignore_errors=True)  # an interrupted build's leftovers
            build_dir.mkdir()
            built, loaded = (compile_into or _torch_compile(name, source, cflags))(build_dir)
            staged = folder / f".{name}.so.{os.getpid()}"
            shutil.copy2(built, staged)
            os.replace(staged, so_path)
            shutil.rmtree(build_dir, ignore_errors=True)
    finally:
        os.close(fd)  # releases the lock
    return loaded if loaded is not None else _import(name, so_path)


def _torch_compile(name: str, source: Path, cflags: Sequence[str]) -> Callable[[Path], Built]:
    def compile_into(build_dir: Path) -> Built:
        from torch.utils.cpp_extension import load

        bindir = str(Path(sys.executable).parent)
        old_path = os.environ.get("PATH", "")
        os.environ["PATH"] = bindir + os.pathsep + old_path if old_path else bindir
        try:
            module = load(name, [str(source)], extra_cflags=list(cflags),
                          build_directory=str(build_dir), verbose=False)
        finally:
            os.environ["PATH"] = old_path
        built = build_dir / f"{name}.so"
        if not built.exists():
            raise FileNotFoundError(f"the build finished without {built}")
        return built, module  # a second import of the same pybind11 module would fail

    return compile_into
