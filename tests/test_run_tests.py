"""tools/run_tests.py: the tests split by folder over five processes, each with its own
/dev/shm, or everything in one process where that cannot hold; exit 5 never passes silently."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import cpu_clock, notebook_owner
from helpers.paths import ROOT
from helpers.tools import load_tool

run_tests = load_tool("run_tests")
NO_TESTS = int(pytest.ExitCode.NO_TESTS_COLLECTED)


def test_the_two_processes_agree_on_the_variables_that_split_them() -> None:
    assert run_tests.ELSEWHERE == notebook_owner.ELSEWHERE
    assert run_tests.SHARD == notebook_owner.SHARD
    assert (run_tests.CGROUP, run_tests.CPU_TSV) == (cpu_clock.CGROUP, cpu_clock.TSV)


def test_every_browser_test_file_is_in_exactly_one_shard() -> None:
    files = sorted(p.stem.removeprefix("test_browser_")
                   for p in (ROOT / "tests" / "browser").glob("test_browser_*.py"))
    shards = [n for shard in run_tests.BROWSER_SHARDS for n in shard]
    assert sorted(shards) == files
    beside = run_tests._processes()
    assert [k for _, k in beside if k is not None] == list(range(len(run_tests.BROWSER_SHARDS)))
    envs = [run_tests._env(k) for _, k in beside]
    assert [e[run_tests.ELSEWHERE] for e in envs].count("0") == len(run_tests.BROWSER_SHARDS)
    assert all(run_tests.SHARD not in e for e, (_, k) in zip(envs, beside, strict=True)
               if k is None)


def test_the_clock_says_each_process_wall_and_cpu_time() -> None:
    clock = run_tests.Clock()
    busy = subprocess.Popen(["python3", "-c", "sum(range(3_000_000))"])
    failing = subprocess.Popen(["sh", "-c", "exit 3"])
    clock.watch("busy", busy)
    clock.watch("failing", failing)
    assert (clock.wait(busy), clock.wait(failing)) == (0, 3)
    assert busy.returncode == 0 and failing.returncode == 3
    ended = {e.name: e for e in clock.ended.values()}
    assert ended["busy"].cpu_s > 0 and ended["busy"].wall_s >= ended["busy"].cpu_s * 0.5
    text = clock.summary()
    assert "busy" in text and "(exit 3)" in text and "cores were" in text


@pytest.mark.parametrize(("rest", "others", "filtered", "code"), [
    (0, [0, 0], False, 0),
    (1, [0, 0], False, 1), (0, [1, 0], False, 1), (0, [0, 3], False, 3), (2, [1, 0], False, 2),
    (NO_TESTS, [NO_TESTS, NO_TESTS], True, 1),     # nothing ran anywhere: a failure
    (NO_TESTS, [NO_TESTS, NO_TESTS], False, 1),
    (0, [NO_TESTS, 0], False, 1),                  # the browser process ran nothing, unasked
    (0, [0, NO_TESTS], False, 1),                  # another process ran nothing, unasked
    (0, [NO_TESTS, NO_TESTS], True, 0),            # -k / -m left them nothing: fine
    (NO_TESTS, [0, 0], True, 0)])
def test_one_exit_status_for_all(rest, others, filtered, code) -> None:
    assert run_tests.combine(rest, others, filtered) == code


def test_the_groups_are_distinct_folders_of_tests_and_the_browser_is_one() -> None:
    folders = [d for group in run_tests.GROUPS for d in group]
    assert len(folders) == len(set(folders))
    assert run_tests.BROWSER_TESTS in folders
    for d in folders:
        assert (ROOT / d).is_dir(), d
        assert any((ROOT / d).rglob("test_*.py")), f"{d} holds no tests"
    # every process keeps its own log
    logs = [run_tests._log(group, shard) for group, shard in run_tests._processes()]
    assert len(set(logs)) == len(logs)


@pytest.mark.parametrize(("args", "filtered"), [(["-k", "x"], True), (["-mbrowser"], True),
                                                 (["-q", "--durations=20"], False)])
def test_a_keyword_or_marker_selection_is_a_filter(args, filtered) -> None:
    assert run_tests._filtered(args) is filtered


def test_named_test_paths_or_the_switch_keep_one_process(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    assert run_tests.split_reason(["tests/test_vocabulary.py::test_x"]) == "test paths named"
    monkeypatch.setenv("DISTLAB_TEST_SPLIT", "0")
    assert run_tests.split_reason([]) == "DISTLAB_TEST_SPLIT=0"
    monkeypatch.delenv("DISTLAB_TEST_SPLIT")
    monkeypatch.setenv("DISTLAB_CHROMIUM", str(ROOT / "no-such-chromium"))
    assert run_tests.split_reason(["-q"]).startswith("no Chromium")


@pytest.mark.skipif(os.geteuid() != 0, reason="a private /dev/shm needs root (CI runs as root)")
def test_the_browser_process_gets_a_fresh_dev_shm_of_its_own() -> None:
    prefix = run_tests.private_shm_prefix()
    if prefix is None:
        pytest.skip("unshare cannot make a mount namespace here")
    marker = f"distlab-shm-probe-{os.getpid()}"
    inside = subprocess.run([*prefix, "sh", "-c", f"touch /dev/shm/{marker} && ls /dev/shm"],
                            capture_output=True, text=True, timeout=60)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == [marker]            # empty but for what it made
    assert not os.path.exists(f"/dev/shm/{marker}")     # and none of it is seen outside


class _Mark:
    def __init__(self, *args: str) -> None:
        self.args = args


class _Item:
    """What notebook_owner reads of a collected test: its path and markers."""

    def __init__(self, path: str, **marks: tuple[str, ...]) -> None:
        self.path = ROOT / path
        self.marks = {k: _Mark(*v) for k, v in marks.items()}

    def get_closest_marker(self, name: str) -> _Mark | None:
        return self.marks.get(name)

    def iter_markers(self, name: str) -> list[_Mark]:
        return [self.marks[name]] if name in self.marks else []


class _Config:
    def __init__(self) -> None:
        self.deselected: list[_Item] = []
        self.stash: dict = {}
        self.hook = self

    def pytest_deselected(self, items: list[_Item]) -> None:
        self.deselected += items


@pytest.mark.parametrize(("shard", "kept"), [
    ("test_browser_ddp", ["test_browser_ddp.py"]),
    ("test_browser_zero,test_browser_clean_open", ["test_browser_zero.py",
                                                   "test_browser_clean_open.py"])])
def test_a_browser_shard_keeps_its_own_files_and_leaves_the_same_notebooks(
        monkeypatch, shard: str, kept: list[str]) -> None:
    monkeypatch.setattr(notebook_owner, "chromium_executable", lambda: "/usr/bin/chromium")
    monkeypatch.setenv(notebook_owner.ELSEWHERE, "0")
    monkeypatch.setenv(notebook_owner.SHARD, shard)
    items = [_Item("tests/browser/test_browser_ddp.py", browser=(), notebook=("06_ddp.ipynb",)),
             _Item("tests/browser/test_browser_zero.py", browser=(), notebook=("09_zero.ipynb",)),
             _Item("tests/browser/test_browser_clean_open.py", browser=(),
                   opens_notebook=("06_ddp.ipynb",)),
             _Item("tests/browser/test_browser_clean_open.py", browser=(),
                   opens_notebook=("00_start_here.ipynb",))]
    # the clean-open case of a notebook a browser test runs is left to it, whichever shard
    # holds that test; the other cases run in the shard holding their file
    expected = [i for i in [items[0], items[1], items[3]] if i.path.name in kept]
    config = _Config()
    notebook_owner.pytest_collection_modifyitems(config, items)
    assert items == expected
    assert len(config.deselected) == 4 - len(expected)
