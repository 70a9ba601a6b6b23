"""Run every distlab test and fail loudly when nothing ran.

Usage (what `make test` calls):  python tools/run_tests.py [extra pytest args]

pytest exits 5 when it collected no test; that is a failure here, never a silent pass.

Where Chromium is there to run them, the tests run in five pytest processes at once, split by
folder (:data:`GROUPS`): the real-browser tests (``tests/browser``: every notebook run in
JupyterLab) in two (:data:`BROWSER_SHARDS`, each with its own JupyterLab and Chromium), the
multi-process labs of :data:`BESIDE` with the planner's and judge's tests in another, the
collective, profile and bench tests in a fourth, and the rest in this one. A single run keeps
two cores only about half busy (tests wait on ranks, kernels, JupyterLab and the page), so the
five overlap. When all have ended, one line per process says its wall and CPU seconds, and
how busy the machine's cores were (:class:`Clock`).
Each process gets its own ``/dev/shm`` (a private mount namespace with a fresh tmpfs there,
``unshare``, as CI runs: root), so the leak checks of one, which count new ``/dev/shm``
entries, never see the shared memory of another's kernels and ranks; and they are siblings (the
leak checks also count a test's new child processes: the browser's JupyterLab, Chromium and
kernels must not be among the rest's). The rest is told (``DISTLAB_BROWSER_ELSEWHERE=1``) to
leave the browser tests and the notebooks they run to the browser's processes
(:mod:`helpers.notebook_owner`; each browser process is told its shard,
``DISTLAB_BROWSER_SHARD``), and skips the other processes' folders: every test still
runs, each notebook once. The rest's output streams; the others' is printed when all have
ended, and kept in ``test-artifacts/*.log``.

One process runs everything, as before, where the split cannot hold: no Chromium, no private
``/dev/shm`` (not root, no ``unshare``), ``DISTLAB_TEST_SPLIT=0``, or test paths named on the
command line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

# Behave like `python -m pytest` run from the repository root: the root is importable, so
# spawned child processes can import test modules (tests.test_x) by name in either case.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from helpers.cgroups import cgroup_cpu_s, make_cgroup, move_into, remove_cgroup  # noqa: E402
from helpers.chromium import chromium_executable  # noqa: E402 (after the path set-up)

CGROUP = "DISTLAB_TEST_CGROUP"
"""helpers.cpu_clock.CGROUP (not imported, as :data:`ELSEWHERE`)."""
CPU_TSV = "DISTLAB_TEST_CPU_TSV"
"""helpers.cpu_clock.TSV (not imported, as :data:`ELSEWHERE`)."""
COSTLIEST = 25
"""How many of the run's costliest tests by CPU the summary lists."""
ELSEWHERE = "DISTLAB_BROWSER_ELSEWHERE"
"""helpers.notebook_owner.ELSEWHERE (not imported here: pytest loads that plugin itself, and a
module imported first could not have its asserts rewritten)."""

BROWSER_TESTS = "tests/browser"
SHARD = "DISTLAB_BROWSER_SHARD"
"""helpers.notebook_owner.SHARD (not imported, as :data:`ELSEWHERE`)."""
BROWSER_SHARDS: tuple[tuple[str, ...], ...] = (
    ("planner", "pipeline", "judging", "allreduce", "process_hop", "profile", "samplers",
     "transfers", "start_here", "clean_open"),
    ("ddp", "mixture_of_experts", "images", "nccl_model", "collectives", "pipeline_parallel",
     "zero", "tensor_parallel", "your_run", "stored_outputs"),
)
"""The real-browser tests (``tests/browser/test_browser_<name>.py``) shared out over two
processes, each with its own JupyterLab and Chromium: one process ran them all in 1441 s on CI
(most of it waiting on the page and the kernel), the longest of the four. Split by their CI
times (planner 224 s, DDP 151 s, MoE 138 s, pipeline 125 s, images 123 s, judging 116 s, ...)
into two halves of about 690 s each."""
BESIDE = ("tests/ddp", "tests/loading", "tests/zero", "tests/moe", "tests/hogwild")
"""The multi-process labs' folders (mostly waiting on their ranks), run in a process of their
own beside the browser's."""
GROUPS: tuple[tuple[str, ...], ...] = (
    (BROWSER_TESTS,),
    (*BESIDE, "tests/plan", "tests/judge"),
    ("tests/collectives", "tests/profile", "tests/bench", "tests/samplers", "tests/transfers",
     "tests/trace"),
)
"""The test folders each extra process runs, beside the rest (everything else: the unit,
figure, notebook and command tests) in this one. One run of the whole suite kept 2 cores only
about half busy (CI: 1648 s of wall time, most tests waiting on ranks, kernels, JupyterLab or
the page); with three processes a fresh clone's run here still used 1.2 of the 2 cores (24 min,
29 CPU-minutes; the browser's process with the labs beside it the last to end, 1404 s, the rest
1245 s, the collectives' 1134 s). Four processes, grouped so that each takes about a quarter of
the whole (times measured with ``--durations``), overlap more of the waiting."""
LOG_DIR = ROOT / "test-artifacts"
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


def combine(rest: int, others: Sequence[int], filtered: bool) -> int:
    """One exit status for all the processes (``rest`` the main one's, ``others`` those of
    :data:`GROUPS`, the browser's first): 0 when all passed; a run where none collected a test
    fails (1), as does any other process that collected nothing when no ``-k`` / ``-m``
    narrowed the selection (its folders hold tests: collecting none means something is wrong);
    otherwise the first failure's status."""
    codes = [rest, *others]
    if all(c == pytest.ExitCode.NO_TESTS_COLLECTED for c in codes):
        print("run_tests: pytest collected no tests; failing instead of passing silently",
              file=sys.stderr)
        return 1
    if not filtered and pytest.ExitCode.NO_TESTS_COLLECTED in others:
        print("run_tests: a process beside the rest collected no tests", file=sys.stderr)
        return 1
    for code in codes:
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


def _log(group: Sequence[str], shard: int | None = None) -> Path:
    """Where the output of the process running ``group`` (browser shard ``shard``) is kept."""
    name = f"browser-tests-{shard + 1}" if shard is not None else "-".join(
        Path(d).name for d in group[:2])
    return LOG_DIR / f"{name}.log"


def _processes() -> list[tuple[tuple[str, ...], int | None]]:
    """``(folders, browser shard)`` of each process beside the rest: one per browser shard,
    then one per other group of :data:`GROUPS` (folders this checkout has)."""
    out: list[tuple[tuple[str, ...], int | None]] = []
    for group in GROUPS:
        present = tuple(d for d in group if (ROOT / d).is_dir())
        if present == (BROWSER_TESTS,):
            out += [(present, k) for k in range(len(BROWSER_SHARDS))]
        elif present:
            out.append((present, None))
    return out


def _env(shard: int | None) -> dict[str, str]:
    """The environment of a process beside the rest (``shard``: its browser shard)."""
    if shard is None:
        return {**os.environ, ELSEWHERE: "1"}
    names = ",".join(f"test_browser_{n}" for n in BROWSER_SHARDS[shard])
    return {**os.environ, ELSEWHERE: "0", SHARD: names}


def _describe(group: Sequence[str], shard: int | None) -> str:
    return f"browser {shard + 1}" if shard is not None else " ".join(Path(d).name for d in group)


def _busy_jiffies() -> tuple[int, int] | None:
    """``(busy, total)`` clock ticks of all cores since boot (``/proc/stat``), None elsewhere."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    total = sum(fields)
    return total - fields[3] - fields[4], total   # less idle and iowait


@dataclass(frozen=True)
class Ended:
    """One pytest process, ended: its name, exit status, wall seconds and CPU seconds (its
    cgroup's, where it ran in one: its own and every process it started; else its own and its
    waited-for descendants', from ``wait4``)."""

    name: str
    code: int
    wall_s: float
    cpu_s: float


class Clock:
    """Waits for the test processes (a thread each, so each one's end is its own) and says
    what each took, and how busy the machine was: the line CI's log ends with, so a slow run
    shows where its time went."""

    def __init__(self, *, cgroups: bool = False) -> None:
        self.start = time.monotonic()
        self.busy0 = _busy_jiffies()
        self.ended: dict[int, Ended] = {}
        self._threads: dict[int, threading.Thread] = {}
        self.cgroups = make_cgroup(f"distlab-tests-{os.getpid()}") if cgroups else None
        """This run's cgroups' folder (one per process under it; ``cgroups``), None where none
        can be made (:mod:`helpers.cgroups`): then CPU is counted by ``wait4`` only; removed by
        :meth:`close`."""
        self.tsvs: list[Path] = []

    def env(self, name: str) -> dict[str, str]:
        """What a process called ``name`` adds to its environment so that
        :mod:`helpers.cpu_clock` counts each of its tests' CPU, its cgroup made here (nothing
        where none can be)."""
        label = name.replace(" ", "-")
        folder = None if self.cgroups is None else make_cgroup(label, self.cgroups)
        if folder is None:
            return {}
        tsv = LOG_DIR / f"cpu-{label}.tsv"
        self.tsvs.append(tsv)
        return {CGROUP: str(folder), CPU_TSV: str(tsv)}

    def watch(self, name: str, proc: subprocess.Popen[bytes],
              env: dict[str, str] | None = None) -> None:
        """Move ``proc`` into its cgroup (``env``: what :meth:`env` gave it), before it starts
        anything but ``mount`` (the shell line of :data:`_PRIVATE_SHM`), and wait for it."""
        folder = Path(env[CGROUP]) if env and CGROUP in env else None
        if folder is not None and not move_into(folder, proc.pid):
            folder = None

        def wait() -> None:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = cgroup_cpu_s(folder) if folder is not None else None
            self.ended[proc.pid] = Ended(name, proc.returncode, time.monotonic() - self.start,
                                         usage.ru_utime + usage.ru_stime if cpu is None
                                         else cpu)
        self._threads[proc.pid] = threading.Thread(target=wait, daemon=True)
        self._threads[proc.pid].start()

    def wait(self, proc: subprocess.Popen[bytes]) -> int:
        """``proc``'s exit status once it has ended (Ctrl-C still interrupts the wait)."""
        thread = self._threads[proc.pid]
        while thread.is_alive():
            thread.join(0.5)
        return self.ended[proc.pid].code

    def summary(self) -> str:
        """One line per process (wall and CPU seconds), then the cores' busy share."""
        wall = time.monotonic() - self.start
        what = ("every process it started, from its cgroup" if self.cgroups is not None else
                "the children it waited for, which leaves out processes that outlive their "
                "parents' waits")
        lines = [f"run_tests: time by process (wall s; CPU s of it and {what}):"]
        for e in sorted(self.ended.values(), key=lambda e: -e.wall_s):
            lines.append(f"  {e.name:28} {e.wall_s:7.0f} s wall {e.cpu_s:7.0f} s CPU"
                         + ("" if e.code == 0 else f"  (exit {e.code})"))
        busy1 = _busy_jiffies()
        if self.busy0 is not None and busy1 is not None and busy1[1] > self.busy0[1]:
            share = (busy1[0] - self.busy0[0]) / (busy1[1] - self.busy0[1])
            cores = os.cpu_count() or 1
            counted = sum(e.cpu_s for e in self.ended.values())
            lines.append(f"  the machine's {cores} cores were {share:.0%} busy over {wall:.0f} s "
                         f"({share * cores * wall:.0f} CPU s; {counted:.0f} s counted above; at "
                         f"100% the run is bound by its CPU, not by waiting)")
        return "\n".join(lines + self.costliest())

    def costliest(self) -> list[str]:
        """The run's :data:`COSTLIEST` tests by CPU (each with every process it started), from
        the processes' :mod:`helpers.cpu_clock` files; nothing without them."""
        rows: list[tuple[float, str]] = []
        for tsv in self.tsvs:
            with contextlib.suppress(OSError, ValueError):
                for line in tsv.read_text().splitlines():
                    seconds, _, nodeid = line.partition("\t")
                    rows.append((float(seconds), nodeid))
        if not rows:
            return []
        rows.sort(reverse=True)
        total = sum(s for s, _ in rows)
        return [f"run_tests: the costliest {min(COSTLIEST, len(rows))} of {len(rows)} tests by "
                f"CPU (each with every process it started; {total:.0f} CPU s in all tests; "
                f"every test's in {LOG_DIR.relative_to(ROOT)}/cpu-*.tsv):",
                *(f"  {s:7.1f} s  {n}" for s, n in rows[:COSTLIEST])]

    def close(self) -> None:
        """Remove this run's cgroups, waiting up to 10 s for what a process left behind (a fork
        server outlives its pytest process by a moment); where a leaked process still holds
        one after that, it stays."""
        if self.cgroups is None:
            return
        deadline = time.monotonic() + 10.0
        while not remove_cgroup(self.cgroups) and time.monotonic() < deadline:
            time.sleep(0.2)


def main(argv: list[str]) -> int:
    reason = split_reason(argv)
    prefix = None if reason else private_shm_prefix()
    if reason is None and prefix is None:
        reason = "no private /dev/shm for the browser process (needs root and unshare)"
    if reason is not None:
        print(f"run_tests: one process ({reason})", flush=True)
        return _single(argv)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    beside = _processes()
    print(f"run_tests: {len(beside)} processes run beside this one, each with its own /dev/shm "
          f"(their output follows this run's and is kept in {LOG_DIR.relative_to(ROOT)}/):",
          flush=True)
    for group, shard in beside:
        print(f"  {' '.join(group)}" + ("" if shard is None else
                                        f" ({', '.join(BROWSER_SHARDS[shard])})"), flush=True)
    pytest_cmd = [sys.executable, "-m", "pytest"]
    ignored = [f"--ignore={d}" for g, _ in beside for d in g if d != BROWSER_TESTS]
    procs: list[subprocess.Popen[bytes]] = []
    clock = Clock(cgroups=True)
    with contextlib.ExitStack() as stack:
        stack.callback(clock.close)
        for group, shard in beside:
            log = stack.enter_context(_log(group, shard).open("w"))
            cpu_env = clock.env(_describe(group, shard))
            procs.append(subprocess.Popen(
                [*prefix, *pytest_cmd, *group, *argv], stdout=log, stderr=subprocess.STDOUT,
                cwd=ROOT, env={**_env(shard), **cpu_env}))
            clock.watch(_describe(group, shard), procs[-1], cpu_env)
        try:
            # The rest still collects the browser tests (to leave the notebooks they run to the
            # browser's processes, helpers.notebook_owner) and deselects them.
            cpu_env = clock.env("the rest")
            rest_proc = subprocess.Popen([*prefix, *pytest_cmd, *ignored, *argv], cwd=ROOT,
                                         env={**os.environ, ELSEWHERE: "1", **cpu_env})
            clock.watch("the rest", rest_proc, cpu_env)
            rest = clock.wait(rest_proc)
        finally:
            others = [clock.wait(p) for p in procs]
    for group, shard in beside:
        print(f"\n===== the process beside ({_describe(group, shard)}) =====", flush=True)
        sys.stdout.write(_log(group, shard).read_text())
        sys.stdout.flush()
    print(clock.summary(), flush=True)
    return combine(rest, others, _filtered(argv))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
