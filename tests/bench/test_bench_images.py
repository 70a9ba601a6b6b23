"""The images benchmark: a tiny run prints every executor's images/s beside the model and writes
JSON; GPU and DALI rows are one skipped line each where they cannot run; bad input is one line
and exit 2; Ctrl-C is one line and exit 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from distlab.bench import images as bench
from distlab.bench.__main__ import MODULES
from distlab.loading.image_stages import gpu_path_missing, torchvision_missing
from helpers.cli_errors import one_error_line
from helpers.leaks import processes_with
from helpers.paths import ROOT

pytestmark = pytest.mark.timeout(120)

BAD = [  # (argv, option named in the error, text that must appear)
    (["--images", "0"], "--images", "0"),
    (["--variant", "huge"], "--variant", "huge"),
    (["--workers", "0"], "--workers", "0"),
    (["--workers", "1,x"], "--workers", "1,x"),
    (["--step-ms", "-1"], "--step-ms", "-1"),
    (["--step-ms", "nan"], "--step-ms", "nan"),
    (["--executors", "gpu"], "--executors", "gpu"),
    (["--layout", "zip"], "--layout", "zip"),
    (["--json", "/"], "--json", "folder"),
    (["--crop", "100000"], "--crop", "4096"),                  # would ask for tens of GB
    (["--batch-size", "20000"], "--batch-size", "MiB"),
]


@pytest.mark.parametrize("argv, option, text", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_option_is_one_line_and_exit_2(argv, option, text, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, option, text, out=captured.out)


def test_registered_like_every_benchmark() -> None:
    assert MODULES["images"] == "distlab.bench.images" and bench.BENCHMARK.name == "images"


def test_tiny_run_prints_rows_model_and_skips(tmp_path, capsys) -> None:
    out = tmp_path / "images.json"
    code = bench.main(["--variant", "tiny", "--images", "4", "--batch-size", "2", "--items", "3",
                       "--crop", "16", "--executors", "sync,threads", "--repeats", "1",
                       "--warmup", "0", "--step-ms", "1", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "decode model (Pillow" in text and "bytes per image over PCIe" in text
    assert all(len(line) <= 110 for line in text.splitlines()), "a line wider than 110"
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert [r["executor"] for r in rows if r["decoder"] == "pillow"] == ["sync", "threads"]
    for r in rows:
        assert r["images_per_s"] > 0 and r["bound_images_per_s"] > 0
    pillow = [r for r in rows if r["decoder"] == "pillow"]
    assert all(r["model_images_per_s"] > 0 and r["model_error_pct"] is not None for r in pillow)
    for r in pillow:   # percent; positive where the run made fewer images/s than the model
        assert r["model_error_pct"] == pytest.approx(
            100 * (r["model_images_per_s"] - r["images_per_s"]) / r["images_per_s"])
    assert [r["path"] for r in doc["pcie"]] == ["cpu_decode", "cpu_decode_gpu_crop", "gpu_decode"]
    assert doc["pcie"][0]["nbytes"] == 16 * 16 * 3
    assert doc["decode_model"]["points"] == 15 and doc["dataset"]["width"] == 96
    assert doc["hop"] is None                      # no worker process in this run
    assert sorted(doc["core_sharing_s"]) == ["1"]  # one process alone (JSON keys are strings)
    assert "threads: the CPU stages each" in text
    assert all(set(r["model_error_pct_without"]) == {"cores", "hop", "both"} for r in pillow)
    skipped = [line for line in text.splitlines() if line.startswith("# skipped:")]
    assert any("NVIDIA DALI" in line for line in skipped)           # never run here
    assert any("GPU decode" in line for line in skipped) == (gpu_path_missing() is not None)
    assert any("on the CPU" in line for line in skipped) == (torchvision_missing() is not None)
    assert doc["skipped"] == bench.skipped_lines()


def test_worker_configs_run_sync_first_and_process_executors_per_count() -> None:
    assert bench.worker_configs(["torch", "threads"], [1, 3]) == [
        ("sync", 0), ("torch", 1), ("torch", 3), ("threads", 0)]


def test_pcie_rows_compare_with_the_jpeg() -> None:
    rows = bench.pcie_rows(jpeg_nbytes=100_000, width=500, height=375, crop=224,
                           images_per_s=1000.0)
    by = {r["path"]: r for r in rows}
    assert by["gpu_decode"]["ratio"] == 1.0 and by["gpu_decode"]["gbps"] == pytest.approx(0.1)
    assert by["cpu_decode_gpu_crop"]["nbytes"] == 562_500


def test_decode_paths_skip_with_reasons(tmp_path) -> None:
    from distlab.loading.image_data import encode_jpeg, synthetic_image

    blobs = [encode_jpeg(synthetic_image(48, 32, index=k)) for k in range(2)]
    rows = {r["decoder"]: r for r in bench.decode_paths(blobs, repeats=1)}
    assert rows["Pillow"]["seconds"] > 0 and rows["Pillow"]["skipped"] is None
    assert rows["NVIDIA DALI"]["skipped"] and rows["NVIDIA DALI"]["seconds"] is None
    for name in ("torchvision", "torchvision nvJPEG"):
        assert (rows[name]["seconds"] is None) == (rows[name]["skipped"] is not None)


def test_processes_rows_carry_the_hop_and_the_cores(tmp_path, capsys) -> None:
    out = tmp_path / "images.json"
    code = bench.main(["--variant", "tiny", "--images", "4", "--batch-size", "2", "--items", "4",
                       "--crop", "16", "--executors", "processes", "--workers", "1",
                       "--repeats", "1", "--warmup", "1", "--step-ms", "1", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["hop"]["nbytes"] == 2 * 3 * 16 * 16           # the collated uint8 batch
    assert sorted(doc["core_sharing_s"]) == ["1"]
    procs = [r for r in doc["rows"] if r["executor"] == "processes"]
    assert [r["workers"] for r in procs] == [1]
    assert {name for name, _ in procs[0]["stations"]} >= {"worker", "step", "cores"}
    assert "hop per batch into the trainer" in text


def test_no_terms_leaves_the_hop_and_cores_out(tmp_path, capsys) -> None:
    out = tmp_path / "images.json"
    assert bench.main(["--variant", "tiny", "--images", "2", "--batch-size", "1", "--items", "2",
                       "--crop", "8", "--executors", "sync", "--repeats", "1", "--warmup", "0",
                       "--step-ms", "0", "--no-terms", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["hop"] is None and doc["core_sharing_s"] is None
    assert all("model_error_pct_without" not in r for r in doc["rows"])
    assert "without the cores term" not in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_ctrl_c_while_a_child_starts_is_one_line_and_130() -> None:
    """A terminal's Ctrl-C (SIGINT to the process group) just after the first child process is
    spawned, while it still imports: one line, exit 130, no traceback, nothing left running."""
    name, value = "DISTLAB_IMAGES_CTRL_C", uuid.uuid4().hex
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{name: value})
    proc = subprocess.Popen(
        [sys.executable, "-m", "distlab.bench", "images", "--variant", "tiny", "--images", "4",
         "--executors", "processes", "--workers", "1"], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: (os.setsid(), signal.signal(signal.SIGINT, signal.SIG_DFL)))
    try:
        deadline = time.monotonic() + 60
        while len(processes_with(value)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(processes_with(value)) >= 2, "no child process was started"
        time.sleep(0.3)                                    # the child is importing torch now
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert out == "" and "Traceback" not in err, err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip()
             and "it/s]" not in ln and "s/it]" not in ln]
    assert lines == ["python -m distlab.bench images: interrupted by Ctrl-C; nothing more was "
                     "measured or written"], err
    deadline = time.monotonic() + 10
    while processes_with(value) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(value) == []


def _line(worker_s: float, step_s: float) -> list:
    from distlab.loading.synthetic_stages import SleepStage
    return [SleepStage(worker_s, name="work"), SleepStage(step_s, name="step")]


def _exact_sync_runs(monkeypatch) -> list[list[float]]:
    """Stand in for the sync runs calibrate_step prices the stages with: a machine on which
    every stage lasts exactly its ``cost_s``, recorded as spans the way a run records them.
    Returns the list each run's stage costs are appended to."""
    from types import SimpleNamespace

    from distlab.loading.executors import RunResult
    from distlab.timeline import Timeline

    priced: list[list[float]] = []

    def run_configs(stages, items, configs, *, repeats, warmup):
        assert list(configs) == [("sync", 0)]          # the stages are priced by a sync run
        tl, t = Timeline(), 0.0
        for _ in range(items):
            for st in stages:
                tl.record(st.name, "io", f"rank0/{st.name}", t, st.cost_s * 1e6)
                t += st.cost_s * 1e6
        priced.append([st.cost_s for st in stages])
        median = RunResult("sync", tl, items, 0.0, t, f"rank0/{stages[-1].name}")
        return [SimpleNamespace(executor="sync", workers=0, median=median)]

    monkeypatch.setattr(bench, "run_configs", run_configs)
    return priced


def test_calibrated_step_fits_the_speed_the_sync_run_measures(monkeypatch) -> None:
    """The step is set to the priced worker time / sqrt(2) and checked on the sync run: kept when
    the measured ratio is in the band, priced again from that run when not, and reported as not
    met when the machine's speed keeps changing. The sync runs stand for a machine whose stages
    last exactly their cost (a loaded machine oversleeps by any amount, and what that does to
    the ratios is no property of this function), so the ratios and steps are exact."""
    quick = {"repeats": 1, "warmup": 0}
    priced = _exact_sync_runs(monkeypatch)
    steady = bench.calibrate_step(lambda step: _line(0.02, step), 3, 0.02, **quick)
    assert steady.met and steady.ratios == pytest.approx([2 ** 0.5])
    assert steady.step_s == pytest.approx(0.02 / 2 ** 0.5) and len(priced) == 1
    slow_probe = bench.calibrate_step(lambda step: _line(0.02, step), 3, 0.04, **quick)
    assert slow_probe.met and slow_probe.ratios == pytest.approx([0.02 / (0.04 / 2 ** 0.5),
                                                                 2 ** 0.5])
    assert slow_probe.step_s == pytest.approx(0.02 / 2 ** 0.5)   # priced again by a sync run
    assert [step for _, step in priced[-2:]] == pytest.approx([0.04 / 2 ** 0.5, 0.02 / 2 ** 0.5])
    assert f"sync run {len(slow_probe.ratios)} of" in slow_probe.describe()
    assert [s.name for s in slow_probe.stages] == ["work", "step"]
    speeds = iter([0.01, 0.04])                   # the machine's speed changes between every run
    restless = bench.calibrate_step(lambda step: _line(next(speeds), step), 3, 0.02, tries=2,
                                    **quick)
    assert not restless.met and len(restless.ratios) == 2
    assert restless.ratios == pytest.approx([0.01 / (0.02 / 2 ** 0.5), 0.04 / (0.01 / 2 ** 0.5)])
    assert "outside the band" in restless.describe()


def test_calibrate_step_prices_with_a_real_sync_run() -> None:
    """On real sleeps, whatever a loaded machine makes of them: each try's ratio is the sync
    run's measured worker seconds over its step seconds, and met says whether the last is in
    the band. Durations themselves are not asserted."""
    real = bench.calibrate_step(lambda step: _line(0.02, step), 3, 0.02, tries=2, repeats=1,
                                warmup=0)
    assert 1 <= len(real.ratios) <= 2 and all(0 < r < float("inf") for r in real.ratios)
    assert real.met == (1.15 <= real.ratios[-1] <= 1.75)
    assert real.run.executor == "sync" and real.run.median.n_items == 3
    costs = dict(zip(["work", "step"], bench.measured_costs(real.run.median.timeline,
                                                           ["work", "step"]), strict=True))
    assert real.ratios[-1] == pytest.approx(costs["work"] / costs["step"])
    # a sleep never ends early
    assert costs["work"] >= 0.02 - 1e-6 and costs["step"] >= real.step_s - 1e-6


@pytest.mark.parametrize(("kwargs", "text"), [({"first_worker_s": 0.0}, "first_worker_s"),
                                              ({"band": (1.5, 2.0)}, "band must hold"),
                                              ({"tries": 0}, "tries")])
def test_calibrate_step_refuses_bad_input(kwargs, text) -> None:
    args = {"first_worker_s": 0.02, **kwargs}
    with pytest.raises(ValueError, match=text):
        bench.calibrate_step(lambda step: _line(0.02, step), 1, **args)
