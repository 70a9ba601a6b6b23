"""Run every distlab test and fail loudly when nothing ran.

Usage (what `make test` calls):  python tools/run_tests.py [extra pytest args]

pytest exits 5 when it collected no test; that is a failure here, never a silent pass.

Where Chromium is there to run them, the real-browser tests (``tests/browser``: every notebook
run in JupyterLab, and then the folders of :data:`BESIDE`) run in a second pytest process beside
the rest: they mostly wait on JupyterLab, kernels and the page while the rest mostly computes, so
on two cores the two overlap. Each process gets its own ``/dev/shm`` (a private mount namespace
with a fresh tmpfs there, ``unshare``, as CI runs: root), so the leak checks of one, which count
new ``/dev/shm`` entries, never see the shared memory of the other's kernels and ranks; and the
two are siblings (the leak checks also count a test's new child processes: the browser's
JupyterLab, Chromium and kernels must not be among the rest's). The rest is told
(``DISTLAB_BROWSER_ELSEWHERE=1``) to leave the browser tests and the notebooks they run to the
other process (:mod:`helpers.notebook_owner`), and skips the :data:`BESIDE` folders: every test
still runs, each notebook once. The rest's output streams; the other process's is printed when
both have ended, and kept in ``test-artifacts/browser-tests.log``.

One process runs everything, as before, where the split cannot hold: no Chromium, no private
``/dev/shm`` (not root, no ``unshare``), ``DISTLAB_TEST_SPLIT=0``, or test paths named on the
command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Behave like `python -m pytest` run from the repository root: the root is importable, so
# spawned child processes can import test modules (tests.test_x) by name in either case.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from helpers.chromium import chromium_executable  # noqa: E402 (after the path set-up)

ELSEWHERE = "DISTLAB_BROWSER_ELSEWHERE"
"""helpers.notebook_owner.ELSEWHERE (not imported here: pytest loads that plugin itself, and a
module imported first could not have its asserts rewritten)."""

BROWSER_TESTS = "tests/browser"
BESIDE = ("tests/ddp", "tests/loading", "tests/zero", "tests/moe", "tests/hogwild")
"""Test folders the browser process also runs, after its browser tests, so the two processes
take about as long: in CI's run (2 cores) the rest took 1543 s with ddp and loading beside and
the browser process 1145 s; zero, moe and hogwild held about 200 s of the rest's (measured with
``--junitxml`` on this machine, scaled to CI's run)."""
LOG = ROOT / "test-artifacts" / "browser-tests.log"
_PRIVATE_SHM = ("mount -t tmpfs -o mode=1777 tmpfs /dev/shm && cd \"$1\" && shift && "
                "exec \"$@\"")
"""The shell line run in the new mount namespace: a fresh /dev/shm, then pytest."""


def _names_tests(args: list[str]) -> bool:
    """Whether ``args`` name test paths (then the run is the user's selection: one process)."""
    return any(not a.startswith("-") and Path(a.split("::")[0]).exists() for a in args)


def _filtered(args: list[str]) -> bool:
    """Whether ``args`` select by keyword or marker (either process may then select nothing)."""
    return any(a in ("-k", "-m") or a.startswith(("-k", "-m")) for a in args)


def private_shm_prefix() -> list[str] | None:
    """The command prefix that runs a command with its own ``/dev/shm``, or None where this
    machine cannot give one (not root, or no ``unshare``)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return None
    prefix = [unshare, "--mount", "--propagation", "private", "--", "sh", "-c", _PRIVATE_SHM,
              "sh", str(ROOT)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=60, check=False)
    return prefix if probe.returncode == 0 else None


def split_reason(args: list[str]) -> str | None:
    """Why everything runs in one process here, or None when the browser tests run beside."""
    if os.environ.get("DISTLAB_TEST_SPLIT", "1") == "0":
        return "DISTLAB_TEST_SPLIT=0"
    if _names_tests(args):
        return "test paths named"
    if chromium_executable() is None:
        return "no Chromium (the browser tests skip, or fail in CI)"
    return None


def combine(rest: int, browser: int, filtered: bool) -> int:
    """One exit status for the two processes: 0 when both passed; a run where neither collected
    a test fails (1), as does a browser process that collected nothing when no ``-k`` / ``-m``
    narrowed the selection; otherwise the first failure's status."""
    if rest == browser == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("run_tests: pytest collected no tests; failing instead of passing silently",
              file=sys.stderr)
        return 1
    if browser == pytest.ExitCode.NO_TESTS_COLLECTED and not filtered:
        print("run_tests: the browser process collected no tests", file=sys.stderr)
        return 1
    for code in (rest, browser):
        if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            return int(code)
    return 0


def _single(args: list[str]) -> int:
    code = int(pytest.main(args))
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("run_tests: pytest collected no tests; failing instead of passing silently",
              file=sys.stderr)
        return 1
    return code


def main(argv: list[str]) -> int:
    reason = split_reason(argv)
    prefix = None if reason else private_shm_prefix()
    if reason is None and prefix is None:
        reason = "no private /dev/shm for the browser process (needs root and unshare)"
    if reason is not None:
        print(f"run_tests: one process ({reason})", flush=True)
        return _single(argv)
    LOG.parent.mkdir(parents=True, exist_ok=True)
    print(f"run_tests: the real-browser tests (and {', '.join(BESIDE)}) run beside the rest in "
          f"a second process, each with its own /dev/shm; its output follows this run's (and is "
          f"kept in {LOG.relative_to(ROOT)})", flush=True)
    pytest_cmd = [sys.executable, "-m", "pytest"]
    beside = [d for d in BESIDE if (ROOT / d).is_dir()]
    with LOG.open("w") as log:
        browser = subprocess.Popen([*prefix, *pytest_cmd, BROWSER_TESTS, *beside, *argv],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                   env={**os.environ, ELSEWHERE: "0"})
        try:
            rest = subprocess.run([*prefix, *pytest_cmd, *(f"--ignore={d}" for d in beside),
                                   *argv], cwd=ROOT, check=False,
                                  env={**os.environ, ELSEWHERE: "1"}).returncode
        finally:
            code = browser.wait()
    shown = " ".join([BROWSER_TESTS, *beside])
    print(f"\n===== the second process ({shown}) =====", flush=True)
    sys.stdout.write(LOG.read_text())
    sys.stdout.flush()
    return combine(rest, code, _filtered(argv))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
