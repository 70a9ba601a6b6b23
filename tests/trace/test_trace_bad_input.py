"""Bad input to ``python -m distlab.judge trace``: one clear line and exit 2, or an honest partial
report that names what is missing; never a traceback, never a silent zero."""

from __future__ import annotations

import gzip
import json

import pytest

from distlab.judge.trace_command import main
from distlab.timeline import Timeline
from distlab.trace import write_chrome_trace
from helpers.cli_errors import one_error_line
from helpers.paths import RESULTS
from helpers.trace_synth import synth_rank, write_run

TRACES = RESULTS / "traces"


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_not_a_trace(tmp_path, capsys) -> None:
    (tmp_path / "x.json").write_text('{"hello": 1}')
    rc, out, err = _run(capsys, tmp_path / "x.json")
    assert rc == 2
    one_error_line(err, "x.json", "not a torch.profiler trace", out=out)


def test_not_json_at_all(tmp_path, capsys) -> None:
    (tmp_path / "x.json").write_bytes(b"\x00\x01binary")
    rc, out, err = _run(capsys, tmp_path / "x.json")
    assert rc == 2
    one_error_line(err, "x.json", out=out)


def test_a_distlab_trace(tmp_path, capsys) -> None:
    tl = Timeline()
    tl.record("a", "c", "rank0/x", 0.0, 1.0)
    p = write_chrome_trace(tl, tmp_path / "d.json")
    rc, out, err = _run(capsys, p)
    assert rc == 2
    one_error_line(err, "d.json", "read_chrome_trace", out=out)


def test_truncated_gzip(tmp_path, capsys) -> None:
    src = next((TRACES / "gloo_ddp_2ranks").glob("rank0*.gz")).read_bytes()
    (tmp_path / "rank0.json.gz").write_bytes(src[: len(src) // 2])
    rc, out, err = _run(capsys, tmp_path / "rank0.json.gz")
    assert rc == 2
    one_error_line(err, "rank0.json.gz", "gzip", out=out)


def test_corrupt_gzip(tmp_path, capsys) -> None:
    src = bytearray(next((TRACES / "gloo_ddp_2ranks").glob("rank0*.gz")).read_bytes())
    src[len(src) // 2: len(src) // 2 + 64] = b"\xff" * 64
    (tmp_path / "rank0.json.gz").write_bytes(bytes(src))
    rc, out, err = _run(capsys, tmp_path / "rank0.json.gz")
    assert rc == 2
    one_error_line(err, "rank0.json.gz", out=out)


def test_truncated_json(tmp_path, capsys) -> None:
    text = json.dumps(synth_rank(0, 1, seed=0))
    (tmp_path / "rank0.json").write_text(text[: len(text) // 2])
    rc, out, err = _run(capsys, tmp_path / "rank0.json")
    assert rc == 2
    one_error_line(err, "rank0.json", out=out)


def test_empty_folder(tmp_path, capsys) -> None:
    rc, out, err = _run(capsys, tmp_path)
    assert rc == 2
    one_error_line(err, "no trace files", out=out)


def test_missing_path(tmp_path, capsys) -> None:
    rc, out, err = _run(capsys, tmp_path / "nope")
    assert rc == 2
    one_error_line(err, "no such file", out=out)


def test_ranks_of_two_runs_mixed(tmp_path, capsys) -> None:
    a = next((TRACES / "gloo_ddp_2ranks").glob("rank0*.gz"))
    b = next((TRACES / "gloo_ddp_3ranks").glob("rank0*.gz"))
    rc, out, err = _run(capsys, a, b)
    assert rc == 2
    one_error_line(err, "rank 0 twice", out=out)
    c = next((TRACES / "gloo_ddp_3ranks").glob("rank1*.gz"))
    rc, out, err = _run(capsys, a, c)
    assert rc == 2
    one_error_line(err, "world sizes [2, 3]", out=out)


def test_cpu_only_trace_is_a_partial_report(capsys) -> None:
    rc, out, err = _run(capsys, TRACES / "hta_cpu_only")
    assert rc == 0 and err == ""
    assert "missing: no GPU kernels (a CPU-only trace)" in out
    assert "host" in out and "GPU none (CPU-only trace)" in out


def test_rocm_trace_is_read(capsys) -> None:
    rc, out, err = _run(capsys, TRACES / "hta_rocm_mi250")
    assert rc == 0 and err == ""
    assert "AMD Radeon Graphics" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("   0 gpu"))
    assert float(line.split()[2]) > 0  # a span, not a silent zero
    assert "no collective" in out or "0 calls" in out


def test_trace_without_steps_names_it(tmp_path, capsys) -> None:
    d = synth_rank(0, 1, seed=2)
    d["traceEvents"] = [e for e in d["traceEvents"]
                        if not str(e.get("name", "")).startswith("ProfilerStep")]
    (tmp_path / "rank0.json").write_text(json.dumps(d))
    rc, out, err = _run(capsys, tmp_path / "rank0.json")
    assert rc == 0 and err == ""
    assert "missing: no ProfilerStep#N spans" in out
    rc, out, err = _run(capsys, tmp_path / "rank0.json", "--step", "1")
    assert rc == 2
    one_error_line(err, "--step", "none", out=out)


def test_unknown_rank(capsys) -> None:
    rc, out, err = _run(capsys, TRACES / "gloo_ddp_2ranks", "--rank", "7")
    assert rc == 2
    one_error_line(err, "--rank", "[0, 1]", out=out)


def test_gz_and_json_read_alike(tmp_path, capsys) -> None:
    write_run(tmp_path / "a", 2, seed=4, gz=True)
    write_run(tmp_path / "b", 2, seed=4, gz=False)
    _, out_a, _ = _run(capsys, tmp_path / "a")
    _, out_b, _ = _run(capsys, tmp_path / "b")
    assert out_a == out_b


@pytest.mark.parametrize("blob", [b"", b"[]", b'{"traceEvents": 5}'])
def test_odd_json(tmp_path, capsys, blob) -> None:
    (tmp_path / "t.json").write_bytes(blob)
    rc, out, err = _run(capsys, tmp_path / "t.json")
    assert rc == 2
    one_error_line(err, "t.json", out=out)
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(blob))


def test_ranks_of_two_runs_of_one_size_mixed(tmp_path, capsys) -> None:
    """Same world size, no duplicate rank, but rank 1 was recorded an hour after rank 0 ended."""
    for r, shift in ((0, 0.0), (1, 3.6e9)):
        d = synth_rank(r, 2, seed=1)
        for e in d["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += shift
        (tmp_path / f"rank{r}.json").write_text(json.dumps(d))
    rc, out, err = _run(capsys, tmp_path)
    assert rc == 2
    one_error_line(err, "different runs mixed", "rank 0", "rank 1", out=out)
