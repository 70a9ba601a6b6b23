"""tools/run_tests.py: the tests split by folder over four processes, each with its own
/dev/shm, or everything in one process where that cannot hold; exit 5 never passes silently."""

from __future__ import annotations

import os
import subprocess

import pytest

from helpers import notebook_owner
from helpers.paths import ROOT
from helpers.tools import load_tool

run_tests = load_tool("run_tests")
NO_TESTS = int(pytest.ExitCode.NO_TESTS_COLLECTED)


def test_the_two_processes_agree_on_the_variable_that_splits_them() -> None:
    assert run_tests.ELSEWHERE == notebook_owner.ELSEWHERE


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
    logs = [run_tests._log(group) for group in run_tests.GROUPS]
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
