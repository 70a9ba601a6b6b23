"""The compiled executor's build: once per environment and source, loaded without ninja, and
never blocked by a build that was interrupted or crashed (its lock dies with its holder)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from distlab.collectives.runtime import compiled, extension_build
from distlab.collectives.runtime.extension_build import BuildWaitTimeout, load_or_build

_HOLD_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from distlab.collectives.runtime.extension_build import load_or_build

    def slow(build_dir):
        (build_dir / "lock").write_text("torch's own baton, left behind")
        print("building", flush=True)
        time.sleep(120)
        raise SystemExit(3)

    load_or_build("fake_ext", Path(sys.argv[1]), ["-O2"], wait_s=5, say=print,
                  compile_into=slow)
""")


def _ctrl_c_default() -> None:
    """SIGINT back to its default in the child: a suite started in the background of a shell
    (or by CI) hands its children SIGINT ignored, and then the Ctrl-C these tests send is lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "fake.cpp"
    src.write_text("// a stand-in source\n")
    return src


def _start_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> subprocess.Popen:
    """A process that takes the build lock and sits in its 'build' until killed."""
    monkeypatch.setenv("DISTLAB_EXTENSIONS_DIR", str(tmp_path / "ext"))
    script = tmp_path / "hold.py"
    script.write_text(_HOLD_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(_source(tmp_path))],
                            stdout=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_default)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "building"  # the lock is held from here
    return proc


def _fake_build(calls: list[Path]):
    def compile_into(build_dir: Path):
        calls.append(build_dir)
        assert not (build_dir / "lock").exists()  # the interrupted build's leftovers are gone
        so = build_dir / "fake_ext.so"
        so.write_text("built")
        return so, "module"

    return compile_into


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_a_build_killed_midway_never_blocks_the_next(tmp_path, monkeypatch, how) -> None:
    holder = _start_holder(tmp_path, monkeypatch)
    holder.send_signal(how)
    holder.wait(30)
    said: list[str] = []
    calls: list[Path] = []
    module = load_or_build("fake_ext", _source(tmp_path), ["-O2"], wait_s=30, say=said.append,
                           compile_into=_fake_build(calls))
    assert module == "module" and len(calls) == 1
    assert said == []  # the lock died with its holder: nothing to wait for
    folder = extension_build.extension_folder("fake_ext", _source(tmp_path), ["-O2"])
    assert (folder / "fake_ext.so").read_text() == "built"
    assert not (folder / "build").exists()


def test_a_live_build_is_named_within_seconds_then_given_up(tmp_path, monkeypatch) -> None:
    holder = _start_holder(tmp_path, monkeypatch)
    try:
        said: list[str] = []
        with pytest.raises(BuildWaitTimeout, match=rf"pid {holder.pid} held the build lock"):
            load_or_build("fake_ext", _source(tmp_path), ["-O2"], wait_s=3,
                          say=said.append, compile_into=_fake_build([]))
        assert len(said) == 1, said
        assert f"waiting for pid {holder.pid}" in said[0] and "lock" in said[0], said
    finally:
        holder.kill()
        holder.wait(30)


def test_a_finished_build_is_imported_not_rebuilt(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DISTLAB_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setattr(extension_build, "_import", lambda name, path: ("imported", path))
    calls: list[Path] = []
    first = load_or_build("fake_ext", _source(tmp_path), ["-O2"], wait_s=5, say=print,
                          compile_into=_fake_build(calls))
    second = load_or_build("fake_ext", _source(tmp_path), ["-O2"], wait_s=5, say=print,
                           compile_into=_fake_build(calls))
    assert first == "module" and second[0] == "imported" and len(calls) == 1
    other = tmp_path / "other.cpp"  # another source (another checkout's change) gets its own
    other.write_text("// changed\n")
    assert (extension_build.extension_folder("fake_ext", other, ["-O2"])
            != extension_build.extension_folder("fake_ext", _source(tmp_path), ["-O2"]))


def test_the_environment_owns_the_build_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("DISTLAB_EXTENSIONS_DIR", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    assert extension_build.extensions_root() == tmp_path / "env/share/distlab/extensions"
    other = extension_build.extensions_root()
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env2"))
    assert extension_build.extensions_root() != other  # two environments, two builds
    monkeypatch.setattr(extension_build, "_writable", lambda folder: False)
    read_only = extension_build.extensions_root()  # a read-only environment: one of the user's
    assert read_only.parent == Path.home() / ".cache/distlab/extensions"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    assert extension_build.extensions_root() != read_only


@pytest.mark.compiler
def test_two_loads_with_different_paths_do_not_rebuild(tmp_path) -> None:
    """The environment's build (made by ``make install`` / this run's header) is imported with
    any PATH and with no compiler at all: a rebuild would fail on the missing compiler."""
    if not compiled.available():
        pytest.skip(f"the compiled executor is not available here: {compiled.status()}")
    folder = extension_build.extension_folder(compiled.NAME, compiled.SOURCE, compiled.CFLAGS)
    so = folder / f"{compiled.NAME}.so"
    before = so.stat().st_mtime_ns
    code = "from distlab.collectives.runtime import compiled; print(compiled.status())"
    for path in ("/usr/bin:/bin", f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"):
        env = {**os.environ, "PATH": path, "CXX": str(tmp_path / "no-such-c++")}
        env.pop("DISTLAB_EXECUTOR", None)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "compiled", done.stderr[-2000:]
    assert so.stat().st_mtime_ns == before


_COLLECTIVE_SCRIPT = textwrap.dedent("""
    import torch
    from distlab import launch
    import distlab.collectives as C

    def rank_fn(rank, world_size):
        t = torch.arange(4.0) + rank
        C.all_reduce(t, algorithm="ring")
        return t.tolist()

    if __name__ == "__main__":
        print(launch.run(rank_fn, 2, timeout=60))
""")


@pytest.mark.multiprocess
@pytest.mark.compiler
def test_a_real_build_interrupted_by_ctrl_c_then_a_collective_runs(tmp_path) -> None:
    """Ctrl-C during the real build, then a collective: it completes (here on
    the Python executor: the second phase has no compiler, so it cannot wait on a rebuild)."""
    env = {**os.environ, "DISTLAB_EXTENSIONS_DIR": str(tmp_path / "ext")}
    env.pop("DISTLAB_EXECUTOR", None)
    build = subprocess.Popen(
        [sys.executable, "-c", "from distlab.collectives.runtime import compiled; "
         "print(compiled.status())"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=_ctrl_c_default)
    folder_glob = tmp_path / "ext"
    deadline = time.monotonic() + 60
    while not list(folder_glob.glob("*/build/*")) and time.monotonic() < deadline:
        time.sleep(0.1)  # torch has started its build (its own lock is in build/)
    assert list(folder_glob.glob("*/build/*")), "the build never started"
    build.send_signal(signal.SIGINT)
    build.communicate(timeout=60)
    script = tmp_path / "collective.py"
    script.write_text(_COLLECTIVE_SCRIPT)
    env["CXX"] = str(tmp_path / "no-such-c++")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[[1.0, 3.0, 5.0, 7.0], [1.0, 3.0, 5.0, 7.0]]"
    # nothing waits on the interrupted build's lock (a rank may wait on its peer's live attempt
    # on a busy machine, and says so naming that peer)
    assert f"waiting for pid {build.pid} " not in done.stderr, done.stderr
