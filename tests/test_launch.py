"""distlab.launch.run: results, failure contract, cleanup, torchrun mode."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from distlab import launch
from helpers import launch_targets as targets
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
        launch.run(targets.hang, 2, timeout=8)
    elapsed = time.monotonic() - t0
    assert isinstance(info.value, launch.LaunchTimeoutError)
    assert info.value.missing == [0, 1] and "[0, 1]" in str(info.value)
    assert elapsed < 8 + 15, f"took {elapsed:.1f} s for timeout=8"


def test_unpicklable_result_is_reported(no_leaks):
    with pytest.raises(launch.RankError, match="could not be sent back"):
        launch.run(targets.unpicklable_result, 1, timeout=60)


def test_function_from_interactive_main_is_refused(monkeypatch):
    main = sys.modules["__main__"]
    monkeypatch.delattr(main, "__file__", raising=False)
    namespace = {"__name__": "__main__"}
    exec("def cell_fn(rank, world_size):\n    return rank\n", namespace)
    with pytest.raises(TypeError, match="importable module"):
        launch.run(namespace["cell_fn"], 2)


def test_lambda_and_closure_are_refused():
    with pytest.raises(TypeError, match="importable module"):
        launch.run(lambda rank, ws: rank, 2)
    value = 3

    def closure(rank, ws):
        return value

    with pytest.raises(TypeError, match="importable module"):
        launch.run(closure, 2)


@pytest.mark.parametrize("kwargs, exc, text", [
    ({"fn": 3, "world_size": 2}, TypeError, "fn must be callable"),
    ({"fn": targets.hang, "world_size": 0}, ValueError, "world_size must be an int >= 1, got 0"),
    ({"fn": targets.hang, "world_size": 2.0}, TypeError, "world_size must be an int"),
    ({"fn": targets.hang, "world_size": True}, TypeError, "world_size must be an int"),
    ({"fn": targets.hang, "world_size": 2, "backend": "mpi"}, ValueError, "backend must be one of"),
    ({"fn": targets.hang, "world_size": 2, "timeout": 0}, ValueError, "timeout must be"),
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


def test_torchrun_runs_current_rank_and_gathers(no_leaks):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HELPERS.parent), env.get("PYTHONPATH", "")])
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", str(HELPERS / "torchrun_launch_script.py"), "2"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each torchrun rank prints the gathered list (the two prints may share a line)
    found = re.findall(r"RESULT (\[.*?\])(?=RESULT|$)", proc.stdout, flags=re.M)
    assert len(found) == 2, proc.stdout
    for text in found:
        values = json.loads(text)
        assert [v["rank"] for v in values] == [0, 1]
        assert all(v["pg_world_size"] == 2 and v["sum"] == 3.0 and v["tag"] == "torchrun"
                   for v in values)


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
