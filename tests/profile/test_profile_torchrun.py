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


def _torchrun(ranks: int, *argv: str, cwd: Path, timeout: float,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc-per-node ranks`` on a free local port, then ``argv``; output captured.

    A port found free can be taken before torchrun's store binds it (another test process, or
    anything else on the machine, asked the kernel for a port in between): torchrun then fails
    with EADDRINUSE before any rank starts, and the run is made again on a new port, at most
    three times."""
    exe = str(TORCHRUN) if TORCHRUN.exists() else "torchrun"
    for _ in range(3):
        proc = subprocess.run([exe, "--nproc-per-node", str(ranks), "--master-addr",
                               "127.0.0.1", "--master-port", str(_free_port()), *argv],
                              env=env or {**os.environ, "PYTHONPATH": str(ROOT / "lib")},
                              cwd=cwd, capture_output=True, text=True, timeout=timeout)
        if "EADDRINUSE" not in proc.stderr:
            break
    return proc


@pytest.mark.skipif(not TORCHRUN.exists() and shutil.which("torchrun") is None,
                    reason="torchrun not installed next to this Python")
@pytest.mark.timeout(300)
def test_torchrun_two_ranks_rank0_writes(tmp_path: Path) -> None:
    out = tmp_path / "tr"
    proc = _torchrun(2, "-m", "distlab.profile", "--quick", "--no-progress", "--only",
                     "transfers,collectives", "--out", str(out), cwd=tmp_path, timeout=280)
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
    out = tmp_path / "tr"
    proc = _torchrun(2, str(ROOT / "tests" / "helpers" / "profile_fail_script.py"), "--quick",
                     "--no-progress", "--only", "transfers,collectives", "--timeout", "600",
                     "--out", str(out), cwd=tmp_path, timeout=240,
                     env={**os.environ, "PYTHONPATH": f"{ROOT / 'lib'}:{ROOT / 'tests'}",
                          "DISTLAB_TEST_FAIL_PART": "transfers"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    index = json.loads((out / "profile.json").read_text())
    assert index["parts"]["transfers"]["status"] == "failed"
    assert "rank 1" in index["parts"]["transfers"]["reason"]
    assert "injected failure" in index["parts"]["transfers"]["reason"]
    assert index["parts"]["collectives"]["status"] == "ok"
    run = json.loads((out / "collectives.json").read_text())["runs"][0]
    assert run["world_size"] == 2 and all(r["wrong"] == 0 for r in run["rows"])


@pytest.mark.skipif(not TORCHRUN.exists() and shutil.which("torchrun") is None,
                    reason="torchrun not installed next to this Python")
@pytest.mark.timeout(420)
def test_rehearsal_of_an_8_gpu_box_goes_through_every_multi_gpu_part_at_4_ranks(
        tmp_path: Path) -> None:
    """``--rehearse dgx_h100_like`` under torchrun with 4 ranks: every part runs on the code path
    a real 8-GPU box takes (the matrix and host-to-all over host memory, the NCCL family planned
    as on that box and run on gloo, DDP placed on CUDA and run on the CPU), every row so made is
    labelled rehearsal and none is judged, and nothing picks the rehearsal as a machine's."""
    from distlab.profile.expected import REHEARSAL, profile_verdicts
    from distlab.profile.load import choose_profile, load_profile, machine_key_here
    from distlab.trace import read_chrome_trace
    from distlab.viz.gpus import gpus_figure

    out = tmp_path / "rehearsal"
    proc = _torchrun(4, "-m", "distlab.profile", "--quick", "--no-progress", "--rehearse",
                     "dgx_h100_like", "--out", str(out), cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("wrote ") == 1
    index = json.loads((out / "profile.json").read_text())
    assert index["complete"] and index["rehearsal"] == "dgx_h100_like"
    assert list(index["parts"]) == ["env", "transfers", "gpus", "collectives", "ddp"]
    assert all(p["status"] == "ok" for p in index["parts"].values()), index["parts"]

    gpus = json.loads((out / "gpus.json").read_text())
    assert gpus["box"]["gpus"] == 8 and gpus["box"]["rehearsal"] and gpus["wrong"] == 0
    one_way = {(r["src"], r["dst"]) for r in gpus["peer"] if r["direction"] == "one-way"}
    assert one_way == {(s, d) for s in range(8) for d in range(8) if s != d}
    assert {r["path"] for r in gpus["peer"]} == {"NV18"}
    assert {r["run"] for r in gpus["host_to_all"]} >= {"local", "remote"}
    assert all(r["rehearsal"] for r in gpus["peer"] + gpus["host_to_all"])

    coll = json.loads((out / "collectives.json").read_text())
    nccl = [r for r in coll["runs"] if r["backend"] == "nccl"]
    assert nccl and all(r["rehearsal"]["ran_on"].startswith("gloo") for r in nccl)
    ops = {r["op"] for r in coll["collective_runs"] if r["backend"] == "nccl"}
    assert ops == {"all_gather", "reduce_scatter", "all_to_all", "broadcast"}
    assert all(r["wrong"] == 0 for run in coll["runs"] + coll["collective_runs"]
               for r in run["rows"])
    lanes = {s.lane for s in read_chrome_trace(out / "trace.json").spans
             if s.category == "allreduce" and s.lane.startswith("collectives/")}
    assert lanes == {f"collectives/{b} ws4 rank{r}" for r in range(4)
                     for b in ("gloo", "nccl (rehearsal on gloo)")}   # never one lane for both
    ddp = json.loads((out / "ddp.json").read_text())
    assert ddp["rehearsal"]["stands_for"] == "cuda" and ddp["config"]["device"] == "cpu"

    prof = load_profile(out)
    verdicts = profile_verdicts(prof.parts)
    for v in verdicts:   # a row a rehearsal made is priced, never judged; gloo's own rows are
        stand_in = v.part in ("gpus", "ddp") or v.row.startswith("nccl ")
        assert (v.verdict == REHEARSAL) == stand_in, v
    assert {v.part for v in verdicts if v.verdict == REHEARSAL} == {"gpus", "collectives", "ddp"}
    summary = (out / "summary.md").read_text()
    assert "a REHEARSAL of box dgx_h100_like" in summary.splitlines()[0]
    assert "rows are a rehearsal's" in summary
    with pytest.raises(ValueError, match="no complete profile"):
        choose_profile([prof], machine_key_here())
    assert "REHEARSAL" in gpus_figure(prof)._suptitle.get_text()
