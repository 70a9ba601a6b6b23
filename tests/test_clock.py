"""distlab.clock: one clock, the timeline's, read after the device's queued work."""

from __future__ import annotations

import pytest
import torch

from distlab.clock import synced_seconds
from distlab.timeline import now_us


@pytest.mark.parametrize("device", [None, torch.device("cpu")])
def test_synced_seconds_is_the_timeline_clock_in_seconds(device: torch.device | None) -> None:
    before = now_us()
    t = synced_seconds(device)
    after = now_us()
    assert before <= t * 1e6 <= after
    assert synced_seconds(device) >= t


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU: torch.cuda.is_available() is False")
def test_on_cuda_the_reading_comes_after_the_queued_work() -> None:
    device = torch.device("cuda", 0)
    x = torch.randn(4096, 4096, device=device)
    torch.cuda.synchronize(device)
    for _ in range(20):
        x = x @ x / 64.0
    synced_seconds(device)
    assert torch.cuda.current_stream(device).query()


def test_sync_device_waits_only_on_a_cuda_device(monkeypatch) -> None:
    from distlab import clock

    calls: list[object] = []
    monkeypatch.setattr(clock.torch.cuda, "synchronize", calls.append)
    clock.sync_device(None)
    clock.sync_device(torch.device("cpu"))
    assert calls == []
    cuda = torch.device("cuda", 1)
    clock.sync_device(cuda)
    clock.synced_seconds(cuda)
    assert calls == [cuda, cuda]
