"""Adapters and the sweep: real host copies, honest skips, CUDA arithmetic with fakes."""

from __future__ import annotations

import math

import pytest
import torch

from distlab.transfers import HostAdapter, Unavailable, fit_rows, pin_rows, sweep
from distlab.transfers.adapter import count_wrong, pattern
from distlab.transfers.cuda import burst_seconds, event_to_host_us
from distlab.transfers.paths import ROW_KINDS, drop_reason


def test_host_adapter_copies_and_reports_missing_kinds() -> None:
    a = HostAdapter()
    src, dst = a.allocate("pageable", 1000), a.allocate("pageable", 1000)
    src.data.copy_(pattern(1000, 3))
    a.copy(dst, src)
    assert count_wrong(dst, pattern(1000, 3)) == 0
    assert count_wrong(dst, pattern(1000, 4)) > 0
    assert len(a.time_copies(dst, src, 4)) == 4
    for kind in ("pinned", "device"):  # never the host adapter's, with or without a GPU
        reason = a.unavailable(kind)
        assert reason and (("torch.cuda.is_available() is False" in reason)
                           != torch.cuda.is_available()), reason
        with pytest.raises(Unavailable):
            a.allocate(kind, 10)
    with pytest.raises(ValueError):
        a.allocate("pageable", 0)
    with pytest.raises(ValueError):
        a.copy(a.allocate("pageable", 3), src)


def test_sweep_rows_measured_or_skipped_with_reason(tmp_path) -> None:
    sizes = [4096, 65536, 262144]
    rows = sweep(HostAdapter(), sizes, ROW_KINDS, repeats=2, warmup=1, iters=2, workdir=tmp_path)
    assert len(rows) == len(sizes) * len(ROW_KINDS)
    for r in rows:
        if r.skipped:
            assert r.time_us is None and r.gbps is None and r.wrong is None
        else:
            assert r.wrong == 0 and r.time_us > 0 and math.isfinite(r.gbps)
            assert r.gbps == pytest.approx(r.nbytes / (r.time_us / 1e6) / 1e9)
            assert r.model_gbps is None or math.isfinite(r.model_gbps)
    # a path has a model at every size or (its times did not grow with size: fit refused) none
    for kind in {(r.path, r.memory) for r in rows}:
        models = {r.model_gbps is None for r in rows if (r.path, r.memory) == kind}
        assert len(models) == 1
    measured = {(r.path, r.memory) for r in rows if not r.skipped}
    assert {("h2h", "pageable"), ("numpy_copyto", "pageable"), ("disk_read_warm", "pageable")} \
        <= measured
    if drop_reason(tmp_path) is None:
        assert ("disk_read_cold", "pageable") in measured
    # the host adapter moves no byte to a GPU on either machine
    assert all(r.skipped for r in rows if r.path in ("h2d", "d2h", "d2d"))
    if not torch.cuda.is_available():
        assert all(r.skipped for r in pin_rows(HostAdapter(), [4096]))
    with pytest.raises(ValueError):
        sweep(HostAdapter(), [4096], [("h2x", "pageable")])


def test_fit_rows_uses_large_sizes() -> None:
    from distlab.transfers.sweep import Row
    rows = [Row("x", "pageable", n, (1e-6 + n / 1e10) * 1e6) for n in (1024, 65536, 1 << 20)]
    fits = fit_rows(rows)
    assert fits[("x", "pageable")].bandwidth_Bps == pytest.approx(1e10, rel=1e-6)
    assert all(r.model_gbps == pytest.approx(r.nbytes / (r.time_us / 1e6) / 1e9) for r in rows)


class _FakeEvent:
    def __init__(self, t_ms: float) -> None:
        self.t_ms = t_ms

    def elapsed_time(self, end: _FakeEvent) -> float:
        return end.t_ms - self.t_ms


def test_cuda_arithmetic_with_fake_events() -> None:
    assert burst_seconds(10.0, 4) == pytest.approx(2.5e-3)
    with pytest.raises(ValueError):
        burst_seconds(1.0, 0)
    anchor, later = _FakeEvent(5.0), _FakeEvent(7.5)
    assert event_to_host_us(1000.0, anchor, later) == pytest.approx(1000.0 + 2500.0)


@pytest.mark.cuda
def test_cuda_adapter_burst_and_pinned_copy() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    from distlab.transfers.cuda import CudaAdapter
    a = CudaAdapter()
    src, dst = a.allocate("pinned", 1 << 20), a.allocate("device", 1 << 20)
    src.data.copy_(pattern(1 << 20))
    secs = a.time_copies(dst, src, 5)
    a.synchronize()
    assert secs[0] > 0 and count_wrong(dst, pattern(1 << 20)) == 0


def test_transfer_keeps_shape_dtype_and_values() -> None:
    a = HostAdapter()
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()   # non-contiguous
    out = a.transfer(t, "pageable")
    assert out.shape == t.shape and out.dtype == t.dtype and torch.equal(out, t)
    assert a.transfer(torch.empty(0, 3), "pageable").shape == (0, 3)
    # the host adapter has no pinned memory on either machine, and says why
    with pytest.raises(Unavailable, match="accelerator" if not torch.cuda.is_available()
                       else "CUDA adapter|CudaAdapter"):
        a.transfer(t, "pinned")


@pytest.mark.parametrize("cuda", [False, True])
def test_host_adapter_says_the_right_reason_with_and_without_a_gpu(cuda: bool) -> None:
    """On a GPU machine the host adapter must not claim there is no CUDA device:
    it says the GPU is the CUDA adapter's; without one it says there is no CUDA device."""
    from distlab.transfers.host import host_unavailable

    assert host_unavailable("pageable", cuda) is None
    for kind in ("pinned", "device"):
        why = host_unavailable(kind, cuda)
        assert why is not None and why.startswith("host adapter:")
        assert ("is False" in why) == (not cuda)
        assert ("CUDA adapter" in why) == cuda
