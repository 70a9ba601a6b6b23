"""run_main: how every command ends (one line, an exit status), timeouts included."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from distlab.cli.run import INTERRUPTED, TIMED_OUT, UsageError, run_main
from distlab.launch import LaunchTimeoutError


def _ending(work, capsys) -> tuple[int, list[str]]:
    code = run_main("python -m distlab.x", work, [])
    return code, capsys.readouterr().err.strip().splitlines()


def test_ranks_that_time_out_are_one_line_and_exit_1(capsys) -> None:
    def work(argv: list[str]) -> int:
        raise LaunchTimeoutError([0, 1], 5.0)

    code, err = _ending(work, capsys)
    assert code == TIMED_OUT == 1
    assert err == ["python -m distlab.x: error: ranks [0, 1] did not return within timeout=5 s; "
                   "all ranks were stopped (a hung collective, or a peer that died "
                   "mid-collective?)"]


def test_other_timeouts_are_bugs_and_keep_their_traceback(capsys) -> None:
    def work(argv: list[str]) -> int:
        raise TimeoutError("a bug's own timeout")

    with pytest.raises(TimeoutError, match="a bug's own timeout"):
        run_main("python -m distlab.x", work, [])


def test_usage_errors_and_ctrl_c(capsys) -> None:
    def bad(argv: list[str]) -> int:
        raise UsageError("--n must be >= 1, got 0")

    def interrupted(argv: list[str]) -> int:
        raise KeyboardInterrupt

    assert _ending(bad, capsys) == (
        2, ["python -m distlab.x: error: --n must be >= 1, got 0 (see --help)"])
    code, err = _ending(interrupted, capsys)
    assert code == INTERRUPTED and len(err) == 1 and "interrupted by Ctrl-C" in err[0]


@pytest.mark.parametrize("message", [
    "MODEL x.json: no such file",
    "MODEL x.json: no such file (see --help)",          # the hint once, not twice
    "python -m distlab.x: error: MODEL x.json: no such file",   # the prefix once
    "UsageError: MODEL x.json:\n  no such file",         # one line, no class name
])
def test_a_usage_error_is_one_line_ending_with_the_hint_once(message: str, capsys) -> None:
    def bad(argv: list[str]) -> int:
        raise UsageError(message)

    assert _ending(bad, capsys) == (
        2, ["python -m distlab.x: error: MODEL x.json: no such file (see --help)"])


_HUNG = textwrap.dedent("""
    import time
    from distlab import launch
    from distlab.cli.run import run_main

    def hang(rank, world_size):
        time.sleep(60)

    if __name__ == "__main__":  # ranks re-import the main script, as multiprocessing does
        raise SystemExit(run_main("hung", lambda argv: launch.run(hang, 2, timeout=3), []))
""")


@pytest.mark.multiprocess
def test_a_command_whose_ranks_hang_ends_with_one_line(tmp_path) -> None:
    script = tmp_path / "hung.py"
    script.write_text(_HUNG)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "hung: error: ranks [0, 1] did not return within timeout=3 s; all ranks were stopped "
        "(a hung collective, or a peer that died mid-collective?)"]
