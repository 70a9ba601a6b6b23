"""distlab.trace.record: torch.profiler set up so that a few lines of a training loop leave a
trace per rank that read_run reads with its steps, its rank and its ops."""

from __future__ import annotations

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
