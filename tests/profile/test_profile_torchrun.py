"""Under torchrun every rank measures and only rank 0 writes the profile."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import ROOT

TORCHRUN = Path(sys.executable).with_name("torchrun")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not TORCHRUN.exists() and shutil.which("torchrun") is None,
                    reason="torchrun not installed next to this Python")
@pytest.mark.timeout(300)
def test_torchrun_two_ranks_rank0_writes(tmp_path: Path) -> None:
    exe = str(TORCHRUN) if TORCHRUN.exists() else "torchrun"
    out = tmp_path / "tr"
    proc = subprocess.run([exe, "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                           "--master-port", str(_free_port()), "-m", "distlab.profile", "--quick",
                           "--no-progress", "--only", "transfers,collectives", "--out", str(out)],
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib")}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("wrote ") == 1                       # rank 0 only
    index = json.loads((out / "profile.json").read_text())
    assert index["complete"] and index["provenance"]["world_size"] == 2
    transfers = json.loads((out / "transfers.json").read_text())
    assert [d["rank"] for d in transfers["devices"]] == [0, 1]   # every rank measured
    run = json.loads((out / "collectives.json").read_text())["runs"][0]
    assert run["backend"] == "gloo" and run["world_size"] == 2
    assert all(r["wrong"] == 0 for r in run["rows"])
    assert not (tmp_path / "results").exists()                  # nothing written elsewhere


@pytest.mark.skipif(not TORCHRUN.exists() and shutil.which("torchrun") is None,
                    reason="torchrun not installed next to this Python")
@pytest.mark.timeout(300)
def test_a_part_failing_on_one_rank_fails_on_every_rank_and_nothing_waits(tmp_path: Path) -> None:
    """Rank 1's transfers part fails before it joins the part's process group; rank 0 must not
    wait for it (--timeout is 600 s: a wait would outlast this test's 240 s), both ranks record
    the part as failed with rank 1's reason, and the next part runs on both."""
    exe = str(TORCHRUN) if TORCHRUN.exists() else "torchrun"
    out = tmp_path / "tr"
    proc = subprocess.run([exe, "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                           "--master-port", str(_free_port()),
                           str(ROOT / "tests" / "helpers" / "profile_fail_script.py"),
                           "--quick", "--no-progress", "--only", "transfers,collectives",
                           "--timeout", "600", "--out", str(out)],
                          env={**os.environ, "PYTHONPATH": f"{ROOT / 'lib'}:{ROOT / 'tests'}",
                               "DISTLAB_TEST_FAIL_PART": "transfers"},
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    index = json.loads((out / "profile.json").read_text())
    assert index["parts"]["transfers"]["status"] == "failed"
    assert "rank 1" in index["parts"]["transfers"]["reason"]
    assert "injected failure" in index["parts"]["transfers"]["reason"]
    assert index["parts"]["collectives"]["status"] == "ok"
    run = json.loads((out / "collectives.json").read_text())["runs"][0]
    assert run["world_size"] == 2 and all(r["wrong"] == 0 for r in run["rows"])
