"""distlab.launch.run: results, failure contract, cleanup, torchrun mode."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from distlab import launch
from helpers import launch_targets as targets
from helpers.leaks import _is_tracker
from helpers.leaks import no_leaks as leak_check

pytestmark = pytest.mark.multiprocess
HELPERS = Path(__file__).parent / "helpers"


def _port_closed(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves child processes, shared memory or a process group behind."""
    with leak_check(shm_prefixes=None):
        yield
    assert not dist.is_initialized(), "the parent's default process group was touched"


@pytest.mark.parametrize("world_size", [1, 3, 4])
def test_results_in_rank_order(world_size, no_leaks):
    values = launch.run(targets.describe, world_size, args=("x",), kwargs={"scale": 2.0},
                        timeout=60)
    assert [v["rank"] for v in values] == list(range(world_size))
    expected_sum = 2.0 * world_size * (world_size + 1) / 2
    for rank, v in enumerate(values):
        assert v["pg_rank"] == rank and v["pg_world_size"] == world_size
        assert v["world_size"] == world_size and v["backend"] == "gloo" and v["tag"] == "x"
        assert v["sum"] == expected_sum
    assert len({v["pid"] for v in values}) == world_size
    port = values[0]["store_port"]
    if port is not None:
        assert _port_closed(port), f"rendezvous port {port} still accepts connections"


def test_rank_that_raises_names_rank_and_traceback(no_leaks):
    t0 = time.monotonic()
    with pytest.raises(launch.RankError) as info:
        launch.run(targets.raise_on, 3, args=(1,), timeout=60)
    err = info.value
    assert err.rank == 1
    assert "deliberate failure on rank 1" in err.traceback_text
    assert "Traceback (most recent call last)" in str(err) and "raise_on" in str(err)
    assert time.monotonic() - t0 < 60, "the failure must surface before the timeout"


def test_the_rank_that_failed_first_is_reported_not_the_peers_it_took_down(monkeypatch,
                                                                            no_leaks):
    """Rank 1 raises; rank 0's barrier then fails because rank 1's connections closed. With both
    errors waiting when the parent looks (its wait slowed until every rank has sent), the
    error is rank 1's, the cause, and rank 0's follows it as a consequence."""
    real_wait = launch.mp_connection.wait

    def wait_until_all_sent(objects, timeout=None):
        conns = [o for o in objects if isinstance(o, launch.mp_connection.Connection)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(real_wait(conns, timeout=0.1)) < len(conns):
            pass
        return real_wait(objects, timeout=timeout)

    monkeypatch.setattr(launch.mp_connection, "wait", wait_until_all_sent)
    with pytest.raises(launch.RankError) as info:
        launch.run(targets.raise_on, 2, args=(1,), timeout=60)
    err = info.value
    assert err.rank == 1 and "deliberate failure on rank 1" in err.traceback_text
    assert list(err.others) == [0] and "barrier" in err.others[0]
    assert str(err).splitlines()[0] == "rank 1 raised:"
    assert str(err).splitlines()[-1].startswith("(rank 0 raised after it: ")


@pytest.mark.parametrize("target, signal_text", [
    (targets.exit_on, "exit code 3"),
    (targets.segfault_on, "SIGSEGV"),
])
def test_rank_that_dies_without_returning(target, signal_text, no_leaks):
    with pytest.raises(launch.RankExitedError) as info:
        launch.run(target, 2, args=(1,), timeout=60)
    assert list(info.value.exitcodes) == [1]
    assert "rank 1" in str(info.value) and signal_text in str(info.value)


def test_hanging_ranks_time_out(no_leaks):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        launch.run(targets.hang, 2, timeout=3)
    elapsed = time.monotonic() - t0
    assert isinstance(info.value, launch.LaunchTimeoutError)
    assert info.value.missing == [0, 1] and "[0, 1]" in str(info.value)
    assert elapsed < 3 + 15, f"took {elapsed:.1f} s for timeout=3"


def test_unpicklable_result_is_reported(no_leaks):
    with pytest.raises(launch.RankError, match="could not be sent back"):
        launch.run(targets.unpicklable_result, 1, timeout=60)


def test_function_from_interactive_main_runs_by_value(monkeypatch, no_leaks):
    main = sys.modules["__main__"]
    monkeypatch.delattr(main, "__file__", raising=False)
    namespace = {"__name__": "__main__"}
    exec("import torch, torch.distributed as dist\n"
         "def cell_fn(rank, world_size):\n"
         "    t = torch.tensor([rank + 1.0])\n"
         "    dist.all_reduce(t)\n"
         "    return (rank, t.item())\n", namespace)
    assert launch.run(namespace["cell_fn"], 2, timeout=60) == [(0, 3.0), (1, 3.0)]


def test_lambda_and_closure_run_by_value(no_leaks):
    assert launch.run(lambda rank, ws: rank * 10, 2, timeout=60) == [0, 10]
    value = 3

    def closure(rank, ws):
        return value + rank

    assert launch.run(closure, 2, timeout=60) == [3, 4]


def test_ranks_leave_ctrl_c_to_the_parent_from_their_start(no_leaks):
    """SIGINT is ignored in every rank from exec on (so Python installed no KeyboardInterrupt
    handler while the rank imported torch): a terminal's Ctrl-C reaches the parent alone."""
    def handler(rank, world_size):
        import signal as sig
        return sig.getsignal(sig.SIGINT) == sig.SIG_IGN

    before = signal.getsignal(signal.SIGINT)
    assert launch.run(handler, 2, timeout=60) == [True, True]
    assert signal.getsignal(signal.SIGINT) is before  # the parent's own is back


def test_closure_over_a_lock_is_a_clear_error():
    import threading

    lock = threading.Lock()

    def uses_lock(rank, ws):
        with lock:
            return rank

    with pytest.raises(TypeError, match="inside fn on each rank"):
        launch.run(uses_lock, 2, timeout=60)


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"fn": 3, "world_size": 2}, TypeError, "fn must be callable"),
    ({"fn": targets.hang, "world_size": 0}, ValueError, "world_size must be an int >= 1, got 0"),
    ({"fn": targets.hang, "world_size": 2.0}, TypeError, "world_size must be an int"),
    ({"fn": targets.hang, "world_size": True}, TypeError, "world_size must be an int"),
    ({"fn": targets.hang, "world_size": 2, "backend": "mpi"}, ValueError, "backend must be one of"),
    ({"fn": targets.hang, "world_size": 2, "timeout": 0}, ValueError, "timeout must be"),
    ({"fn": targets.hang, "world_size": 2, "timeout": -1}, ValueError, "timeout must be"),
    ({"fn": targets.hang, "world_size": 2, "timeout": float("nan")}, ValueError,
     "timeout must be"),
    ({"fn": targets.hang, "world_size": 2, "args": 5}, TypeError, "args must be"),
    ({"fn": targets.hang, "world_size": 2, "kwargs": [1]}, TypeError, "kwargs must be"),
])
def test_bad_arguments(kwargs, exc, text):
    with pytest.raises(exc, match=text):
        launch.run(**kwargs)


def test_nccl_without_cuda_is_a_clear_error():
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 64:
        pytest.skip("a machine with 64 GPUs can run this")  # pragma: no cover
    with pytest.raises(RuntimeError, match="nccl"):
        launch.run(targets.describe, 64, backend="nccl")


@pytest.fixture(scope="module")
def torchrun_out() -> str:
    """One ``torchrun`` of 2 ranks (tests/helpers/torchrun_launch_script.py) for the two tests
    below: a launch.run gathering on the torchrun ranks, then 3 more calls back to back; the
    run exits 0 and leaves no child process, shared memory or process group behind. Its
    stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HELPERS.parent), env.get("PYTHONPATH", "")])
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(HELPERS / "torchrun_launch_script.py"), "2", "3"]
    with leak_check(shm_prefixes=None):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert not dist.is_initialized(), "the parent's default process group was touched"
    return proc.stdout


def test_torchrun_runs_current_rank_and_gathers(torchrun_out):
    # each torchrun rank prints the gathered list (the two prints may share a line)
    found = re.findall(r"GATHER (\[.*?\])(?=GATHER|REPEAT|$)", torchrun_out, flags=re.M)
    assert len(found) == 2, torchrun_out
    for text in found:
        values = json.loads(text)
        assert [v["rank"] for v in values] == [0, 1]
        assert all(v["pg_world_size"] == 2 and v["sum"] == 3.0 and v["tag"] == "torchrun"
                   for v in values)


def test_torchrun_back_to_back_runs_each_get_a_fresh_group(torchrun_out):
    """A group made after an earlier one was destroyed must not read the earlier one's store
    keys (rank 0 would connect to rank 1's closed address: gloo 'Connection refused')."""
    found = re.findall(r"REPEAT (\[.*?\]\])", torchrun_out)
    assert len(found) == 2, torchrun_out
    assert all(json.loads(text) == [[3.0, 3.0]] * 3 for text in found)


def test_torchrun_world_size_mismatch(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert launch.in_torchrun()
    with pytest.raises(ValueError, match="WORLD_SIZE=2"):
        launch.run(targets.describe, 3)


def test_from_a_script_with_fn_in_its_main(no_leaks):
    """A script's own __main__ functions work: spawn re-imports the script by path."""
    proc = subprocess.run([sys.executable, str(HELPERS / "script_main_launch.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT [3.0, 3.0, 3.0]" in proc.stdout


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_ranks_die_with_a_killed_parent(how):
    """A parent running launch.run is killed; none of its ranks may outlive it by seconds."""
    import psutil

    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from distlab import launch; from helpers import launch_targets as t; "
         "sys.stdout.write('go\\n'); sys.stdout.flush(); launch.run(t.hang, 3, timeout=300)"],
        cwd=Path(__file__).parent, stdout=subprocess.PIPE, env=os.environ.copy())
    try:
        assert parent.stdout.readline().strip() == b"go"
        proc = psutil.Process(parent.pid)
        deadline = time.monotonic() + 60
        ranks: list = []
        while time.monotonic() < deadline:
            ranks = [c for c in proc.children(recursive=True) if not _is_tracker(c)]
            if len(ranks) == 3:
                break
            time.sleep(0.2)
        assert len(ranks) == 3, f"expected 3 ranks, found {ranks}"
        time.sleep(1.0)  # let the ranks reach die_with_parent
        parent.send_signal(getattr(signal, how))
        parent.wait(30)
        alive = [c for c in ranks if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        _, alive = psutil.wait_procs(alive, timeout=5.0)
        assert not alive, f"ranks outlived their parent by > 5 s: {[c.pid for c in alive]}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_launch_from_a_non_main_thread(no_leaks):
    """PDEATHSIG is armed only for main-thread spawns; a launch from a worker thread still works
    (its ranks outlive the thread, not the process)."""
    import threading

    box: dict = {}

    def body():
        try:
            box["values"] = launch.run(targets.describe, 2, timeout=60)
        except BaseException as exc:  # pragma: no cover - reported below
            box["error"] = exc

    t = threading.Thread(target=body)
    t.start()
    t.join(120)
    assert "error" not in box, box.get("error")
    assert [v["sum"] for v in box["values"]] == [3.0, 3.0]


def test_importable_functions_are_pickled_by_reference():
    """Library functions travel as module + name (small), not as code."""
    payload = launch._pickle_payload(targets.describe, (), {})
    assert b"helpers.launch_targets" in payload and b"describe" in payload
    assert b"all_reduce" not in payload, "the function's code was shipped by value"
    by_value = launch._pickle_payload(lambda rank, ws: rank, (), {})
    assert b"helpers.launch_targets" not in by_value and len(by_value) > len(payload)


def test_from_a_script_read_on_stdin(no_leaks, tmp_path):
    """``python - <<EOF``: ``__main__`` names ``<stdin>``, no file; the ranks run fn (sent by
    value) without trying to run that path again, and print nothing."""
    script = ("from distlab import launch\n"
              "def double(rank, world_size):\n"
              "    return 2 * rank\n"
              "print('RESULT', launch.run(double, 2, timeout=60), flush=True)\n")
    proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT [0, 2]" in proc.stdout
    assert proc.stderr == ""


def test_ranks_do_not_see_the_fork_servers_launcher_variable(no_leaks):
    from distlab._forkserver_guard import LAUNCHER_ENV

    assert launch.run(lambda rank, world: os.environ.get(LAUNCHER_ENV), 2, timeout=60) \
        == [None, None]
    assert LAUNCHER_ENV not in os.environ


def test_the_guard_does_nothing_outside_a_server_distlab_started(monkeypatch):
    from distlab import _forkserver_guard as guard

    monkeypatch.delenv(guard.LAUNCHER_ENV, raising=False)
    assert guard.guard_this_server() is False


def test_a_rank_may_fork_children_of_its_own(no_leaks):
    """The fork server's at-fork guard is inherited by the ranks; a child a rank forks (a
    DataLoader worker) runs its own course instead of exiting as an orphan of the server."""
    assert launch.run(targets.fork_a_child, 2, timeout=60) == [7, 7]
