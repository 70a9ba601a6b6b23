"""``python -m distlab.judge trace``: the report names the planted straggler and the loader's
stall, --json holds every number the report prints, --timeline is a valid Chrome trace whose
stragglers' waits are their own slices."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distlab.judge.trace_command import main
from distlab.judge.trace_judgement import judge_trace, judgement_timeline
from distlab.trace import check_trace, read_chrome_trace
from helpers.paths import LIB, RESULTS

TRACES = RESULTS / "traces"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_report_names_the_planted_straggler(capsys, n: int) -> None:
    assert main([str(TRACES / f"gloo_ddp_{n}ranks")]) == 0
    out = capsys.readouterr().out
    assert f"stragglers: rank {n - 1}\n" in out
    assert f"rank {n - 1} last in 3/3 calls" in out
    assert "priced, 0 not" in out and "gloo ring/tcp" in out and "shipped loopback" in out


def test_json_and_timeline(tmp_path, capsys) -> None:
    j, t = tmp_path / "j.json", tmp_path / "t.json"
    assert main([str(TRACES / "gloo_ddp_3ranks"), "--json", str(j), "--timeline", str(t)]) == 0
    doc = json.loads(j.read_text())
    assert doc["stragglers"] == [2]
    judged = judge_trace(TRACES / "gloo_ddp_3ranks")
    assert doc["total_wait_us"] == pytest.approx(judged.collectives.total_wait_us)
    for r, a in judged.analyses.items():
        assert doc["ranks"][str(r)]["whole"]["idle_us"] == pytest.approx(a.whole.idle_us)
    check_trace(t)  # raises on any overlapping pair of slices
    tl = read_chrome_trace(t)
    waits = [s for s in tl.spans if s.category == "straggler_wait"]
    assert waits and {s.name for s in waits} == {"wait for rank 2"}
    assert {s.lane.split("/")[0] for s in waits} == {"rank0", "rank1"}
    assert sum(s.duration_us for s in waits) == pytest.approx(
        judged.collectives.total_wait_us, rel=1e-6)
    assert len(judgement_timeline(judged).spans) == len(tl.spans)


def test_step_and_rank(capsys) -> None:
    assert main([str(TRACES / "hta_sampled_2of128"), "--rank", "1", "--step", "551"]) == 0
    out = capsys.readouterr().out
    assert "ProfilerStep#551" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("   1 gpu")]
    assert len(rows) == 1 and not any(ln.startswith("   0 ") for ln in out.splitlines())


def test_registered_with_judge() -> None:
    r = subprocess.run([sys.executable, "-m", "distlab.judge", "trace",
                        str(TRACES / "gloo_ddp_2ranks")], capture_output=True, text=True,
                       timeout=120, env={"PYTHONPATH": str(LIB), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "stragglers: rank 1" in r.stdout


@pytest.mark.parametrize("option, path", [("--json", "/proc/nope/x.json"), ("--json", "/"),
                                          ("--json", "/sys/x.json"),
                                          ("--timeline", "/proc/t.json")])
def test_an_output_path_that_cannot_be_written_is_one_line_before_any_trace_is_read(
        capsys, option: str, path: str) -> None:
    try:
        code = main([str(TRACES / "gloo_ddp_2ranks"), option, path])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    out, err = capsys.readouterr()
    assert out == ""                                     # no report, nothing read
    lines = err.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and repr(path) in lines[0], err


def test_rank_keeps_json_and_timeline_to_that_rank_and_step_labels_the_rest(tmp_path,
                                                                            capsys) -> None:
    j, t = tmp_path / "j.json", tmp_path / "t.json"
    assert main([str(TRACES / "gloo_ddp_3ranks"), "--rank", "1", "--json", str(j),
                 "--timeline", str(t)]) == 0
    doc = json.loads(j.read_text())
    assert doc["rank"] == 1 and set(doc["ranks"]) == {"1"} and set(doc["files"]) == {"1"}
    assert doc["collectives"] and all(set(c["ranks"]) == {"1"} for c in doc["collectives"])
    assert doc["stragglers"] == [2]                     # a fact of the run, kept
    assert {s.lane.split("/")[0] for s in read_chrome_trace(t).spans} == {"rank1"}
    capsys.readouterr()
    judged = judge_trace(TRACES / "gloo_ddp_3ranks")
    step = next(n for a in judged.analyses.values() for n in a.per_step)
    assert main([str(TRACES / "gloo_ddp_3ranks"), "--step", str(step)]) == 0
    out = capsys.readouterr().out
    assert "## collectives (every step: --step selects the breakdown above)" in out


@pytest.mark.parametrize("name", ["gloo_ddp_2ranks", "hta_sampled_2of128", "hta_rocm_mi250",
                                  "hta_cpu_only", "hta_a100_2ranks_rank0"])
def test_a_run_line_says_what_is_unknown_instead_of_none(name: str) -> None:
    from distlab.judge.trace_report import run_line

    line = run_line(name, judge_trace(TRACES / name))
    assert "None" not in line and len(line) <= 110, line
    if name == "hta_rocm_mi250":
        assert "1 of ? ranks" in line and "RCCL not stated" in line   # an AMD GPU: RCCL
    if name == "hta_cpu_only":
        assert "GPU none (CPU-only trace)" in line


def test_help_uses_the_folder_the_readme_records(capsys) -> None:
    readme = (LIB.parent / "README.md").read_text()
    assert 'record("traces/run1"' in readme
    try:
        code = main(["--help"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0 and "traces/run1 --rank 0" in capsys.readouterr().out
