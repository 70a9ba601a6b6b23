"""The hop between processes: pure decisions (0/1/2/8 GPUs), the pattern, the model, and real
hops on every host path with every byte checked."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.transfers.adapter import pattern
from distlab.transfers.copy_model import Fit
from distlab.transfers.hop import HopLink, count_wrong_bytes
from distlab.transfers.hop_model import crossover_bytes, fixed_share, regime
from distlab.transfers.hop_paths import (
    HOP_KINDS,
    HOP_PATHS,
    cuda_ipc_device,
    cuda_ipc_problem,
    hop_unavailable,
    strategy_problem,
)
from distlab.transfers.hop_sweep import hop_sweep, local_facts
from distlab.transfers.hop_worker import fill_pattern

BOTH = frozenset({"file_descriptor", "file_system"})
HOST_PATHS = [p for p, m in HOP_KINDS if m == "pageable"]


@pytest.mark.parametrize("gpus", [0, 1, 2, 8])
def test_cuda_ipc_decision_for_0_1_2_8_gpus(gpus) -> None:
    why = hop_unavailable("hop_cuda_ipc", gpus=gpus, strategies=BOTH, platform="linux")
    assert (why == "no CUDA device visible to torch") if gpus == 0 else why is None
    assert cuda_ipc_device(gpus) == (None if gpus == 0 else 0)
    # every rank of a host needs a GPU of its own
    for local_world in (1, 2, 8):
        for rank in range(local_world):
            problem = cuda_ipc_problem(gpus, local_world, rank)
            device = cuda_ipc_device(gpus, local_world, rank)
            owns = gpus >= local_world
            assert (problem == "") == owns and (device == rank if owns else device is None)
            if gpus and not owns:
                assert f"{local_world} ranks on this host but {gpus} GPU" in problem
    if gpus:
        assert "Linux" in cuda_ipc_problem(gpus, platform="darwin")
        assert "EXCLUSIVE_PROCESS" in cuda_ipc_problem(gpus, exclusive_process=True)


def test_host_paths_need_only_their_strategy() -> None:
    for path in HOST_PATHS:
        assert hop_unavailable(path, gpus=0, strategies=BOTH) is None
    only_fs = frozenset({"file_system"})   # macOS
    assert "'file_descriptor'" in hop_unavailable("hop_shm_fd", gpus=0, strategies=only_fs)
    for path in ("hop_shm_fs", "hop_pickle", "hop_ring"):
        assert hop_unavailable(path, gpus=0, strategies=only_fs) is None
    assert strategy_problem("file_system", BOTH) == ""
    with pytest.raises(ValueError, match="path"):
        hop_unavailable("hop_carrier_pigeon", gpus=0, strategies=BOTH)
    with pytest.raises(ValueError, match="gpus"):
        cuda_ipc_problem(-1)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 500))
def test_fill_pattern_is_the_adapter_pattern(n, seed) -> None:
    out = fill_pattern(np.empty(n, dtype=np.uint8), seed)
    assert np.array_equal(out, pattern(n, seed).numpy())


def test_count_wrong_bytes() -> None:
    a = fill_pattern(np.empty(1000, dtype=np.uint8), 3)
    b = a.copy()
    assert count_wrong_bytes(b, a) == 0
    b[[0, 10, 999]] += 1
    assert count_wrong_bytes(b, a) == 3
    assert count_wrong_bytes(b[:10], a) == 1000          # a short buffer: every byte wrong
    assert count_wrong_bytes(fill_pattern(b, 4), a) == 1000   # a stale seed: all differ


def test_fixed_cost_or_copy() -> None:
    f = Fit(latency_s=100e-6, bandwidth_Bps=1e9, r2=1.0)
    assert crossover_bytes(f) == pytest.approx(1e5)
    assert fixed_share(f, 1e5) == pytest.approx(0.5)
    assert regime(f, 1e4) == "fixed cost" and regime(f, 1e6) == "copy"
    assert crossover_bytes(Fit(0.0, 1e9, 1.0)) == 0 and regime(Fit(0.0, 1e9, 1.0), 1) == "copy"
    with pytest.raises(ValueError, match="nbytes"):
        fixed_share(f, -1)


def test_every_host_path_delivers_every_byte() -> None:
    """Real hops, idle and busy worker, odd sizes: every byte arrives; the parts add up."""
    with HopLink(timeout_s=60) as link:
        assert link.startup_s > 0 and link.worker_pid
        for path in HOST_PATHS:
            for nbytes, busy in ((1, False), (4096 + 3, True), (300_001, False)):
                s = link.hop(path, nbytes, seed=nbytes % 97, busy=busy)
                assert s.wrong == 0 and s.nbytes == nbytes and s.path == path
                parts = [v for v in s.parts().values() if v is not None]
                assert all(v >= 0 for v in parts)
                assert sum(parts) == pytest.approx(s.seconds, rel=1e-6, abs=1e-9)
                assert (s.ready_s is None) == (path == "hop_pickle")
        for strategy in ("file_descriptor", "file_system"):
            secs = link.segment_create_seconds(strategy, 65536, repeats=2)
            assert len(secs) == 2 and all(x > 0 for x in secs)
        assert link.ring_setup_seconds(8192) > 0
        with pytest.raises(ValueError, match="hop_cuda_ipc"):
            link.hop("hop_cuda_ipc", 16)
        with pytest.raises(ValueError, match="die_at"):
            link.hop("hop_pickle", 16, die_at="sometime")


def test_sweep_rows_fits_and_the_gpu_row_with_or_without_a_gpu() -> None:
    """The same checks on any machine: the CUDA row is measured exactly when the pure decision
    says it can be, and skipped with that decision's reason otherwise."""
    sizes = [4096, 65536, 262144]
    sw = hop_sweep(sizes, list(HOP_PATHS), repeats=2, warmup=1)
    assert len(sw.rows) == len(sizes) * len(HOP_PATHS)
    expected_skip = hop_unavailable("hop_cuda_ipc", **local_facts())
    for r in sw.rows:
        skip = expected_skip if r.path == "hop_cuda_ipc" else None
        assert r.skipped == skip
        if skip is None:
            assert r.wrong == 0 and r.time_us > 0
            assert r.gbps == pytest.approx(r.nbytes / (r.time_us / 1e6) / 1e9)
        else:
            assert r.time_us is None and r.wrong is None
    assert sw.startup_s > 0
    measured = {r.path for r in sw.rows if r.skipped is None}
    assert set(sw.first_hop_us) == measured
    assert {(p["path"], p["nbytes"]) for p in sw.parts} == \
        {(r.path, r.nbytes) for r in sw.rows if r.skipped is None}
    for p in sw.parts:
        assert (p["setup_us"] is not None) == (p["path"] == "hop_ring")
        assert (p["segment_us"] is not None) == (p["path"] in ("hop_shm_fd", "hop_shm_fs"))
    for path, f in sw.fits.items():
        assert f.latency_s >= 0 and f.bandwidth_Bps > 0 and math.isfinite(sw.crossovers()[path])
    busy = hop_sweep([4096], ["hop_ring"], repeats=1, warmup=0, busy=True)
    assert [r.path for r in busy.rows] == ["hop_ring_busy"] and busy.rows[0].wrong == 0


def test_sweep_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="hop paths"):
        hop_sweep([4096], ["h2h"])
    with pytest.raises(ValueError, match="repeats"):
        hop_sweep([4096], ["hop_pickle"], repeats=0)
    with pytest.raises(ValueError, match="sizes"):
        hop_sweep([0], ["hop_pickle"])


@pytest.mark.cuda
def test_cuda_ipc_hop_on_a_gpu() -> None:
    """A CUDA tensor made in the worker is read here by IPC handle, every byte right."""
    gpus = torch.cuda.device_count()
    with HopLink(device=cuda_ipc_device(gpus)) as link:
        for nbytes in (4096, 1 << 20):
            assert link.hop("hop_cuda_ipc", nbytes, seed=5).wrong == 0
