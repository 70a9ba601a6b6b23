"""Ctrl-C on a benchmark: one line, exit 130, and no rank or worker left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
import uuid

import pytest

from distlab.bench import __main__ as bench_main
from helpers.leaks import processes_with
from helpers.paths import ROOT


def test_dispatcher_turns_keyboard_interrupt_into_one_line_and_130(monkeypatch, capsys) -> None:
    def interrupted(argv: list[str]) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "fake_bench", types.SimpleNamespace(main=interrupted))
    monkeypatch.setitem(bench_main.MODULES, "fake", "fake_bench")
    try:
        code = bench_main.main(["fake"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the dispatcher (a traceback for the user)")
    assert code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m distlab.bench fake: interrupted by Ctrl-C; nothing more was "
                   "measured or written"]


@pytest.mark.timeout(120)
def test_ctrl_c_on_the_process_group_stops_every_rank() -> None:
    """What a terminal's Ctrl-C does: SIGINT to the whole foreground process group."""
    marker = f"DISTLAB_CTRL_C_TEST={uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env[marker.split("=")[0]] = marker.split("=")[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "distlab.bench", "allreduce", "--world-size", "2", "-b", "1M",
         "-e", "64M", "--iters", "50"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=lambda: (os.setsid(), signal.signal(signal.SIGINT, signal.SIG_DFL)))
    try:
        seen = []
        deadline = time.monotonic() + 90
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until the ranks are measuring
            seen.append(line)
            if "round" in line or time.monotonic() > deadline:
                break
        assert any("round" in s for s in seen), "".join(seen)
        assert len(processes_with(marker)) >= 3  # the parent and its two ranks
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest, rest
    assert rest.strip().splitlines()[-1].startswith(
        "python -m distlab.bench allreduce: interrupted by Ctrl-C"), rest
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == []


@pytest.mark.timeout(120)
def test_ctrl_c_while_the_ranks_import_torch_is_one_line() -> None:
    """Ctrl-C the moment the ranks exist (they are still importing torch): the parent's one line
    only, no rank's KeyboardInterrupt traceback, no rank left."""
    marker = f"DISTLAB_CTRL_C_TEST={uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env[marker.split("=")[0]] = marker.split("=")[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "distlab.bench", "allreduce", "--world-size", "2", "-b", "1K",
         "-e", "1K"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=lambda: (os.setsid(), signal.signal(signal.SIGINT, signal.SIG_DFL)))
    try:
        deadline = time.monotonic() + 90
        while len(processes_with(marker)) < 3:  # the parent and both ranks
            assert proc.poll() is None and time.monotonic() < deadline, "no ranks started"
            time.sleep(0.01)
        time.sleep(0.3)  # both started (the parent ignores Ctrl-C for the milliseconds of a
        os.killpg(proc.pid, signal.SIGINT)  # start); they take seconds to import torch
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert out.strip().splitlines()[-1].startswith(
        "python -m distlab.bench allreduce: interrupted by Ctrl-C"), out
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == []
