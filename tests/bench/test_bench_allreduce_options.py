"""Every bad option of ``python -m distlab.bench allreduce`` is one line naming it, exit 2.

Checked before any rank starts: each case runs through ``main(argv)`` in-process (fast) and a
few through a real ``python -m distlab.bench`` subprocess.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distlab.bench import allreduce as bench
from distlab.bench.__main__ import main as dispatch
from distlab.report.jsonfile import SCHEMA_VERSION
from helpers.cli_errors import one_error_line

LIB = Path(bench.__file__).resolve().parents[2]


def _bad_files(tmp: Path) -> dict[str, Path]:
    v = SCHEMA_VERSION
    files = {"notjson": "not json at all",
             "noalpha": json.dumps({"schema": v, "beta": 1e-9, "gamma": 1e-10}),
             "negative": json.dumps({"schema": v, "alpha": -1, "beta": 1e-9, "gamma": 1e-10}),
             "nan": f'{{"schema": {v}, "alpha": NaN, "beta": 1e-9, "gamma": 1e-10}}',
             "list": "[1, 2, 3]",
             "duplex": json.dumps({"schema": v, "alpha": 1e-5, "beta": 1e-9, "gamma": 1e-10,
                                   "duplex": "sideways"}),
             "noschema": json.dumps({"alpha": 1e-5, "beta": 1e-9, "gamma": 1e-10})}
    out = {}
    for name, text in files.items():
        out[name] = tmp / f"{name}.json"
        out[name].write_text(text)
    return out


BAD = [  # (argv, option named in the error, text that must appear)
    (["--timeout", "0"], "--timeout", "'0'"),
    (["--timeout", "nan"], "--timeout", "'nan'"),
    (["--timeout", "inf"], "--timeout", "'inf'"),
    (["--group-size", "3", "--world-size", "4", "--algorithms", "hierarchical"], "--group-size",
     "divisor of the world size 4"),
    (["--group-size", "0"], "--group-size", "0"),
    (["--calibration", "/missing.json"], "--calibration", "/missing.json"),
    (["--iters", "0"], "--iters", "0"),
    (["--iters", "two"], "--iters", "two"),
    (["--warmup", "-1"], "--warmup", "-1"),
    (["--world-size", "0"], "--world-size", "0"),
    (["--world-size", "-3"], "--world-size", "-3"),
    (["-b", "1M", "-e", "1K"], "-e/--maxbytes", ">= -b/--minbytes"),
    (["-b", "0"], "-b/--minbytes", "'0'"),
    (["-b", "1"], "-b/--minbytes", "float32"),
    (["-b", "12Q"], "-b/--minbytes", "12Q"),
    (["-f", "1"], "-f/--stepfactor", "1"),
    (["--algorithms", "warp"], "--algorithms", "warp"),
    (["--algorithms", ""], "--algorithms", "''"),
    (["--dtype", "int8"], "--dtype", "int8"),
    (["--op", "xor"], "--op", "xor"),
    (["--op", "avg", "--dtype", "int32"], "--op", "floating dtype"),
    (["--segment-size", "0"], "--segment-size", "0"),
    (["--backend", "mpi"], "--backend", "mpi"),
    (["--json", "/"], "--json", "folder"),
    (["--executor", "fast"], "--executor", "fast"),
    (["--executor", "compiled,jit"], "--executor", "jit"),
    (["--check", "maybe"], "--check", "maybe"),
]


@pytest.mark.parametrize("argv, option, text", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_option_is_one_line_and_exit_2(argv, option, text, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    one_error_line(captured.err, option, text)


@pytest.mark.parametrize("kind, text", [("notjson", "readable JSON"), ("noalpha", "alpha"),
                                        ("negative", "alpha"), ("nan", "alpha"),
                                        ("list", "JSON object"), ("duplex", "sideways"),
                                        ("noschema", "noschema.json has no schema field")])
def test_bad_calibration_file_is_one_line(kind, text, tmp_path, capsys) -> None:
    path = _bad_files(tmp_path)[kind]
    with pytest.raises(SystemExit) as exc:
        bench.main(["--calibration", str(path)])
    assert exc.value.code == 2
    one_error_line(capsys.readouterr().err, "--calibration", text)


def test_nccl_without_cuda_is_one_line(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: --backend nccl is valid here")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--backend", "nccl"])
    assert exc.value.code == 2
    one_error_line(capsys.readouterr().err, "--backend", "no CUDA device")


def test_dispatcher_bad_benchmark_is_one_line(capsys) -> None:
    for argv in ([], ["warp"]):
        assert dispatch(argv) == 2
        captured = capsys.readouterr()
        one_error_line(captured.err, "benchmark", "allreduce")
    assert dispatch(["allreduce", "--iters", "0"]) == 2
    one_error_line(capsys.readouterr().err, "--iters", "0")


def test_dispatcher_help_lists_each_benchmark_with_a_description(capsys) -> None:
    from distlab.bench.__main__ import BENCHMARKS, MODULES

    assert dispatch(["--help"]) == 0
    out = capsys.readouterr().out
    for name in BENCHMARKS:
        about = importlib.import_module(MODULES[name]).BENCHMARK.about
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(name + " "))
        assert about in line and len(about) > 20


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(LIB)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-m", "distlab.bench", *argv], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("argv, option", [
    (["allreduce", "--timeout", "0"], "--timeout"),
    (["allreduce", "--group-size", "3", "--world-size", "4", "--algorithms", "hierarchical"],
     "--group-size"),
    (["allreduce", "--calibration", "/missing.json"], "--calibration"),
    (["nosuch"], "benchmark"),
])
def test_real_subprocess_exits_2_with_one_line(argv, option) -> None:
    proc = _run(*argv)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    one_error_line(proc.stderr, option, "")
