"""distlab.trace.record: torch.profiler set up so that a few lines of a training loop leave a
trace per rank that read_run reads with its steps, its rank and its ops."""

from __future__ import annotations

import importlib

import pytest
import torch

from distlab.trace import read_run, record
from distlab.trace.breakdown import analyze_run, step_windows


def test_record_writes_a_trace_read_run_reads(tmp_path) -> None:
    x = torch.randn(64, 64)
    with record(tmp_path, steps=2, wait=1, warmup=1, rank=3) as prof:
        for _ in range(4):
            (x @ x).sum()
            prof.step()
    (f,) = list(tmp_path.iterdir())
    assert f.name.startswith("rank3.") and f.name.endswith(".pt.trace.json.gz")
    run = read_run(tmp_path)
    rt = run.ranks[3]
    assert rt.gpu is None and rt.base_time_ns is not None
    assert sorted(step_windows(rt)) == [2, 3]   # wait + warmup skipped steps 0 and 1
    assert "aten::mm" in rt.names
    a = analyze_run(run)[3]
    assert a.whole.basis == "host" and a.whole.span_us > 0 and a.whole.compute_us > 0


@pytest.mark.parametrize("bad", [{"steps": 0}, {"wait": -1}, {"rank": -2}])
def test_record_checks_its_arguments(tmp_path, bad) -> None:
    with pytest.raises(ValueError):
        record(tmp_path, **bad)


@pytest.mark.parametrize("calls, written", [(0, False), (1, False), (2, True), (3, True),
                                            (5, True)])
def test_a_loop_that_ends_early_writes_what_the_docstring_says(tmp_path, calls: int,
                                                               written: bool) -> None:
    """wait=1, warmup=1, steps=3: no trace before 2 calls of prof.step(); from there on, one."""
    doc = importlib.import_module("distlab.trace.record").__doc__ or ""
    assert "no trace if\nthe loop ends before ``wait + warmup`` calls" in doc
    with record(tmp_path, steps=3, wait=1, warmup=1) as prof:
        for _ in range(calls):
            torch.ones(8).sum()
            prof.step()
    assert bool(list(tmp_path.iterdir())) == written
