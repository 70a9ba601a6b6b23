"""`python -m distlab.profile`: a --quick run end to end, bad options, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from distlab.envinfo import gpu_count
from distlab.trace import overlapping_slices, read_chrome_trace
from helpers.paths import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "distlab.profile", "--no-progress", *args]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One ``--quick`` run of every part, its progress bar on (stderr): the profile folder and
    the finished process, shared by the tests below (the bar's test reads its stderr)."""
    out = tmp_path_factory.mktemp("profile") / "quick"
    proc = subprocess.run([sys.executable, "-m", "distlab.profile", "--quick", "--out", str(out)],
                          env=ENV, capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc


@pytest.fixture(scope="module")
def quick(quick_run: tuple[Path, subprocess.CompletedProcess[str]]) -> tuple[Path, str]:
    out, proc = quick_run
    return out, proc.stdout


@pytest.mark.timeout(600)
def test_quick_profile_writes_every_file_with_provenance(quick: tuple[Path, str]) -> None:
    out, _ = quick
    names = {p.name for p in out.iterdir()}
    assert {"profile.json", "trace.json", "summary.md", "env.json", "transfers.json",
            "collectives.json", "ddp.json"} <= names
    index = json.loads((out / "profile.json").read_text())
    assert index["complete"] is True and index["stopped"] is None
    assert list(index["parts"]) == ["env", "transfers", "gpus", "collectives", "ddp"]
    for name in index["parts"]:
        doc = json.loads((out / f"{name}.json").read_text())
        # the gpus part needs a GPU (one GPU: its two paths are one skipped line each)
        want = "skipped" if name == "gpus" and gpu_count() == 0 else "ok"
        assert doc["part"] == name and doc["status"] == want
        assert {"host", "torch", "date", "command"} <= set(doc["provenance"])
    env = json.loads((out / "env.json").read_text())["facts"]
    assert {"cpu_model", "memory_bytes", "gpus", "gpu_topology", "pcie_links", "nccl",
            "cuda_runtime", "torch"} <= set(env)


@pytest.mark.timeout(600)
def test_quick_collectives_rows_have_nccl_tests_columns_and_model(quick: tuple[Path, str]) -> None:
    out, _ = quick
    doc = json.loads((out / "collectives.json").read_text())
    run = doc["runs"][0]
    assert run["backend"] == "gloo" and run["world_size"] == 2
    keys = {"nbytes", "count", "dtype", "op", "algorithm", "time_us", "algbw_gbps", "busbw_gbps",
            "wrong", "predicted_us", "error_pct"}
    assert all(keys <= set(r) for r in run["rows"])
    assert {r["algorithm"] for r in run["rows"]} >= {"builtin", "ring"}
    assert all(r["wrong"] == 0 for r in run["rows"])
    ring = [r for r in run["rows"] if r["algorithm"] == "ring"]
    assert all(r["predicted_us"] > 0 for r in ring)
    assert all(r["predicted_us"] > 0 for r in run["rows"])  # builtin too: gloo's own ring


@pytest.mark.timeout(600)
def test_quick_trace_has_a_lane_per_part_and_no_overlap(quick: tuple[Path, str]) -> None:
    out, _ = quick
    trace = json.loads((out / "trace.json").read_text())
    procs = {e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"profile", "env", "transfers", "collectives", "ddp"} <= procs
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) >= 8
    assert overlapping_slices(out / "trace.json") == []


@pytest.mark.timeout(600)
def test_quick_trace_holds_every_timed_call_of_every_rank(quick: tuple[Path, str]) -> None:
    """The merged trace is what the rows were measured from: per rank one span per timed call,
    inside the sweep's span, and the slowest rank's median duration is the row's time."""
    from statistics import median


    out, _ = quick
    tl = read_chrome_trace(out / "trace.json")
    run = json.loads((out / "collectives.json").read_text())["runs"][0]
    (sweep,) = [s for s in tl.spans if s.lane == "collectives/gloo"
                and s.name.startswith("allreduce sweep")]  # all-gather, reduce-scatter follow
    for rank in range(run["world_size"]):
        calls = [s for s in tl.spans if s.lane == f"collectives/gloo ws2 rank{rank}"
                 and s.category == "allreduce"]
        assert len(calls) == len(run["rows"]) * run["iters"]
        assert all(sweep.start_us <= s.start_us and s.end_us <= sweep.end_us for s in calls)
    for row in run["rows"]:
        per_rank = [[s.duration_us for s in tl.spans
                     if s.lane == f"collectives/gloo ws2 rank{r}" and s.category == "allreduce"
                     and s.args["algorithm"] == row["algorithm"]
                     and s.args["bytes"] == row["nbytes"]]
                    for r in range(run["world_size"])]
        slowest = [max(t) for t in zip(*per_rank, strict=True)]
        assert median(slowest) == pytest.approx(row["time_us"], rel=1e-6)
    ddp_lanes = {s.lane for s in tl.spans if s.lane.startswith("ddp/")}
    assert {"ddp/overlap cap 0.25 MB rank0/backward",
            "ddp/overlap cap 0.25 MB rank0/allreduce"} <= ddp_lanes


@pytest.mark.timeout(600)
def test_quick_summary_and_skip_lines(quick: tuple[Path, str]) -> None:
    out, stdout = quick
    text = (out / "summary.md").read_text()
    for head in ("## env", "## transfers", "## collectives", "## ddp"):
        assert head in text
    assert "complete;" in text and "busbw" in text
    import torch

    if not torch.cuda.is_available():
        assert "skipped collectives/nccl:" in stdout
        assert "skipped transfers/gpu:" in stdout
        assert "GPU: none" in text
    else:  # the GPU parts ran (NCCL itself needs 2 GPUs, so it may still be skipped)
        assert "skipped transfers/gpu:" not in stdout and "GPU: none" not in text


BAR = re.compile(r"^profile:\s+\d+%\|[^|]*\|\s*\d+/\d+ \[[^\[\]]*\]\s*$")


@pytest.mark.timeout(600)
def test_round_lines_never_break_the_progress_bar(
        quick_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """With the bar on, stderr holds bar frames (each a whole bar) and no round line glued to a
    bar or standing between its frames: the ranks' round lines go into the bar's postfix."""
    _, proc = quick_run
    frames = [f.strip() for line in proc.stderr.split("\n") for f in line.split("\r")]
    frames = [f for f in frames if f]
    bars = [f for f in frames if f.startswith("profile:")]
    assert len(bars) >= 3, proc.stderr
    broken = [f for f in bars if not BAR.match(f)]
    assert not broken, f"a bar line broken by other text: {broken[:3]}"
    strays = [f for f in frames if "round" in f and not f.startswith("profile:")]
    assert not strays, f"round lines printed beside the bar: {strays[:3]}"
    assert any("collectives: allreduce round" in f for f in bars), "the bar shows the rounds"
    assert "measured collectives" in proc.stdout


BAD_OPTIONS = [
    (["--only", "env,bogus"], "--only"),
    (["--timeout", "-1"], "--timeout"),
    (["--rounds", "0"], "--rounds"),
    (["--rehearse", "dgx_b200"], "--rehearse"),
    (["--rehearse"], "--rehearse"),
    (["--frobnicate"], "unrecognized"),
]


@pytest.mark.parametrize("args, needle", BAD_OPTIONS)
@pytest.mark.timeout(120)
def test_bad_option_exits_2_with_one_line(args: list[str], needle: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (the command's ``main``, which only parses here): the exit status, the
    one error line on stderr and no traceback are the command's own, not the interpreter's."""
    from distlab.profile import cli

    out = tmp_path / "x"
    assert cli.main(["--no-progress", "--out", str(out), *args]) == 2
    stderr = capsys.readouterr().err
    errors = [ln for ln in stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and needle in errors[0]
    assert "Traceback" not in stderr
    assert not out.exists()


@pytest.mark.timeout(120)
def test_out_naming_a_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from distlab.profile import cli

    f = tmp_path / "file"
    f.write_text("")
    assert cli.main(["--no-progress", "--out", str(f), "--only", "env"]) == 2
    assert "--out" in capsys.readouterr().err


def _ranks_of(pid: int) -> list[psutil.Process]:
    """The ranks among ``pid``'s descendants: those the fork server forked (grandchildren) or
    those spawned (``spawn_main`` in their command line). Neither the fork server nor the
    resource tracker counts: the launcher starts them with Ctrl-C ignored for the milliseconds
    of their fork and exec, and a SIGINT sent then is lost (a test that fired at the first
    child it saw flaked when it landed in that window)."""
    ranks = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.ppid() != pid or "spawn_main" in " ".join(child.cmdline()):
                ranks.append(child)
        except psutil.NoSuchProcess:
            continue
    return ranks


@pytest.mark.timeout(300)
def test_ctrl_c_writes_an_incomplete_profile_and_leaves_no_ranks(tmp_path: Path) -> None:
    out = tmp_path / "cut"
    # SIGINT back to its default in the child, so Python installs its handler even when this
    # suite was started in the background of a shell (which leaves SIGINT ignored)
    proc = subprocess.Popen(_cmd("--quick", "--only", "env,ddp", "--out", str(out)), env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # env done: ddp is spawning its ranks now
            if line.startswith("measured env"):
                break
        deadline = time.monotonic() + 60
        while not _ranks_of(proc.pid):
            assert time.monotonic() < deadline, "ddp never started its ranks"
            time.sleep(0.05)
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(timeout=120) == 130, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"ranks left running: {alive}"
    index = json.loads((out / "profile.json").read_text())
    assert index["complete"] is False and "Ctrl-C" in index["stopped"]
    assert index["parts"]["env"]["status"] == "ok"
    assert index["parts"]["ddp"]["status"] == "interrupted"
    assert "INCOMPLETE" in (out / "summary.md").read_text()
    assert overlapping_slices(out / "trace.json") == []


def test_a_cut_short_write_leaves_no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is written last and an older one removed first, so a folder whose writing
    failed is never taken for a profile."""
    from distlab.profile import writer
    from distlab.profile.parts import PartResult
    from distlab.timeline import Timeline

    out = tmp_path / "p"
    out.mkdir()
    (out / writer.INDEX).write_text("{}")

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(writer, "write_chrome_trace", full_disk)
    with pytest.raises(OSError):
        writer.write_profile(out, [PartResult("env")], ["env"], Timeline(), quick=True,
                             world_size=1)
    assert (out / "env.json").is_file() and not (out / writer.INDEX).exists()


def test_a_failed_write_is_one_line_naming_what_is_left(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys) -> None:
    from distlab.profile import cli, writer
    from distlab.profile.parts import PartResult

    def full_disk(out: Path, *args: object, **kwargs: object) -> None:
        out.mkdir()
        (out / "env.json").write_text("{}")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cli, "get_part", lambda name: lambda ctx: PartResult(name))
    monkeypatch.setattr(writer, "write_profile", full_disk)
    out = tmp_path / "p"
    assert cli.main(["--no-progress", "--only", "env", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "measured env" in captured.out and "Traceback" not in captured.err
    assert captured.err.splitlines() == [
        "python -m distlab.profile: error: writing the profile failed (OSError: [Errno 28] No "
        f"space left on device); {out} holds part of it and no profile.json, so it is not a "
        "profile"]
