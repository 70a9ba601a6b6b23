"""NCCL's measured-time model: NCCL's channel and chunk rules as its source states them, the time
as the max of host and GPU terms (their sum where the harness waits for each call), and constants
that are what the fit on published tables gives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives import predict_builtin
from distlab.evidence.nccl import fit_execution as fit
from distlab.nccl.execution import (
    BUFFER_BYTES,
    HARNESSES,
    MAX_THREADS,
    THREAD_THRESHOLD,
    TORCH_CALL_OVERHEAD_US,
    ExecutionConstants,
    chunk_bytes,
    exposed_steps,
    launched_channels,
    nccl_execution,
    predict_nccl_measured,
)
from distlab.nccl.tuning import nccl_allreduce
from distlab.vocabulary import error_pct

ZERO = ExecutionConstants(0.0, 0.0, 0.0, 0.0)


def test_buffers_and_chunks_are_nccls() -> None:
    assert BUFFER_BYTES == {"Simple": 4 << 20, "LL": 512 << 10, "LL128": 4_915_200}
    assert chunk_bytes("ring", "Simple", 1 << 30, 24, 8) == 2 << 20  # 4 steps of 512 KiB
    assert chunk_bytes("ring", "LL", 1 << 30, 24, 8) == 32 << 10     # a 64 KiB step, halved
    assert chunk_bytes("ring", "LL128", 1 << 30, 24, 8) == 614_400 // 16 * 15
    assert chunk_bytes("tree", "Simple", 1 << 30, 24, 8) == 512 << 10


@pytest.mark.parametrize(("nbytes", "chunk"), [
    (2 * 128 * (32 << 10) - 1, 16 << 10), (2 * 128 * (32 << 10), 32 << 10),
    (8 * 128 * (64 << 10) - 1, 32 << 10), (8 * 128 * (64 << 10), 64 << 10),
    (64 * 128 * (128 << 10) - 1, 64 << 10), (64 * 128 * (128 << 10), 128 << 10)])
def test_nvls_chunk_shrinks_with_the_concurrent_operations(nbytes: int, chunk: int) -> None:
    # 16 channels x 8 heads = 128 concurrent operations (calcCollChunking's thresholds)
    assert chunk_bytes("nvls", "Simple", nbytes, 16, 8) == chunk


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["LL", "LL128", "Simple"]), st.integers(1, 1 << 28), st.integers(1, 64))
def test_channel_tuning_keeps_the_most_channels_the_bytes_fill(proto: str, nbytes: int,
                                                              total: int) -> None:
    nc, nt = launched_channels("ring", proto, nbytes, total)
    thr = THREAD_THRESHOLD[proto]
    assert 1 <= nc <= total
    if nc > 1:  # stopped dropping channels because the bytes fill them
        assert nbytes >= nc * MAX_THREADS[proto] * thr and nt == MAX_THREADS[proto]
    if nc < total:  # one more channel would not be filled
        assert nbytes < (nc + 1) * MAX_THREADS[proto] * thr
    assert nt >= 64 and (nt == MAX_THREADS[proto] or nbytes < nc * 2 * nt * thr)


def test_nvls_keeps_its_channels() -> None:
    assert launched_channels("nvls", "Simple", 1, 16) == (16, 512)


@pytest.mark.parametrize("box", ["h100_sxm8", "a100_sxm8", "pcie5_8"])
def test_with_zero_constants_the_choice_is_nccls_and_large_sizes_its_estimate(box: str) -> None:
    sizes = [1 << 16, 1 << 24, 1 << 33]
    ex = nccl_execution(box, 8, sizes, constants=ZERO)
    est = nccl_allreduce(box, 8, sizes)
    for e, c in zip(ex, est, strict=True):
        assert (e.algorithm, e.protocol) == (c.algorithm, c.protocol)
        assert e.estimate_us == pytest.approx(c.seconds * 1e6, rel=1e-9)
        assert e.sync_us == 0 and e.host_us == 0
    # at 8 GiB every channel runs and the ring's hops hide under its copies: the estimate's
    # bandwidth term, within its 2(n-1) hops of latency
    assert ex[-1].seconds == pytest.approx(est[-1].seconds, rel=1e-3)


def test_a_ring_pays_only_the_hop_latency_its_copy_does_not_hide() -> None:
    small, big = nccl_execution("pcie5_8", 8, [1 << 16, 1 << 30], constants=ZERO)
    assert (small.algorithm, small.protocol) == ("ring", "LL")
    # 64 KiB on 2 channels: a step copies 0.69 us, under PCI's 1.0 us LL hop
    per_step = small.transfer_us / small.steps
    assert per_step < 1.0
    assert small.latency_us == pytest.approx(6.6 + small.steps * (1.0 - per_step))
    assert big.latency_us == pytest.approx(8.4)  # Simple's base only: every hop hidden


def test_only_the_pipeline_fill_exposes_its_flag_waits() -> None:
    assert [exposed_steps(k) for k in (1, 7, 8, 9, 616)] == [1, 7, 8, 8, 8]
    c = ExecutionConstants(0.0, 2.0, 0.0, 0.0)
    e = nccl_execution("a100_sxm8", 8, [1 << 33], constants=c)[0]
    assert e.steps > 8 and e.sync_us == pytest.approx(16.0)


def test_a_ring_ll_threshold_grows_with_the_ranks() -> None:
    # tuning.cc: threadThresholds[RING][LL] *= nRanks -> 64 KiB fills 2 channels on 8 ranks
    assert launched_channels("ring", "LL", 1 << 16, 24, world_size=8) == (2, 512)
    assert launched_channels("ring", "LL", 1 << 16, 24, world_size=1) == (16, 512)
    assert launched_channels("tree", "LL", 1 << 16, 24, world_size=8) == (16, 512)


def test_time_is_the_slower_of_host_and_gpus() -> None:
    c = ExecutionConstants(5.0, 1.0, 0.5, 6.0)
    small, big = nccl_execution("h100_sxm8", 8, [1 << 16, 1 << 30], harness="nccl-tests",
                                constants=c)
    assert small.host_us == pytest.approx(40.0) and small.bound == "host"
    assert small.seconds == pytest.approx(40e-6, rel=1e-12)
    assert big.bound == "gpu"
    assert big.seconds * 1e6 == pytest.approx(big.latency_us + big.transfer_us
                                              + min(big.steps, 8) * 6.0)
    torch_small = nccl_execution("h100_sxm8", 8, [1 << 16], harness="torch", constants=c)[0]
    assert torch_small.host_us == pytest.approx(5.0) and torch_small.bound == "gpu"


def test_ring_steps_count_loops_and_slices() -> None:
    e = nccl_execution("a100_sxm8", 8, [1 << 30], algorithms=["ring"], protocols=["Simple"],
                       constants=ZERO)[0]
    loops = math.ceil((1 << 30) / (e.channels * 8 * (2 << 20)))
    assert e.steps == 2 * 7 * loops * 2


def test_predict_builtin_measured_and_its_checks() -> None:
    sizes = [1 << 20, 1 << 30]
    assert predict_builtin("h100_sxm8", 8, sizes, nccl_model="measured") == \
        predict_nccl_measured("h100_sxm8", 8, sizes)
    assert predict_builtin("h100_sxm8", 8, sizes) == [c.seconds for c in
                                                      nccl_allreduce("h100_sxm8", 8, sizes)]
    assert predict_nccl_measured("h100_sxm8", 1, sizes) == [0.0, 0.0]
    with pytest.raises(ValueError, match="nccl_model"):
        predict_builtin("h100_sxm8", 8, sizes, nccl_model="guess")
    with pytest.raises(ValueError, match="harness"):
        predict_builtin("h100_sxm8", 8, sizes, nccl_model="measured", harness="mpi")
    with pytest.raises(ValueError, match="world_size"):
        nccl_execution("h100_sxm8", 9, sizes)


def test_leave_one_source_out_never_fits_on_the_source_it_judges(monkeypatch) -> None:
    seen: list[set[str]] = []
    real = fit.refit

    def spy(points):
        pts = list(points)
        seen.append({p["source"] for p in pts})
        return real(pts)

    monkeypatch.setattr(fit, "refit", spy)
    points = fit.calibration_points()
    judged = fit.leave_one_source_out(points)
    sources = sorted({p["source"] for p in points})
    assert len(seen) == len(sources) and len(judged) == len(points)
    for held, fitted_on in zip(sources, seen, strict=True):
        assert held not in fitted_on and fitted_on == set(sources) - {held}


def test_the_model_beats_ncclss_estimate_on_the_published_tables() -> None:
    points = fit.calibration_points()
    judged = fit.judge(points, fit.shipped_constants())
    errors = sorted(abs(j.error_pct) for j in judged)
    est = sorted(abs(error_pct(fit.published_seconds(c.point), c.choice.seconds))
                 for c in _estimate_comparison(points))
    assert errors[len(errors) // 2] < 0.7 * est[len(est) // 2]  # 3.9% against 20.1%
    overall = fit.summarize(judged)[-1]
    assert overall.label == "all" and overall.n == len(points) == 132


def _estimate_comparison(points):
    from distlab.nccl.tuning import compare_published
    return compare_published(points)


@pytest.mark.parametrize("box", ["h100_sxm8", "a100_sxm8", "pcie5_8"])
def test_a_harness_that_waits_for_each_call_adds_torchs_overhead_to_the_gpus(box: str) -> None:
    """torch-isolated: the same choice and GPU terms as back-to-back torch calls, the stated host
    overhead per call added to them (not the slower of the two), and nothing fitted to it."""
    sizes = [1 << 16, 1 << 22, 1 << 30]
    b2b = nccl_execution(box, 8, sizes, harness="torch")
    one = nccl_execution(box, 8, sizes, harness="torch-isolated")
    for a, b in zip(b2b, one, strict=True):
        assert (a.algorithm, a.protocol, a.channels, a.steps) == (b.algorithm, b.protocol,
                                                                  b.channels, b.steps)
        assert b.gpu_us == pytest.approx(a.gpu_us, rel=1e-12) and not a.serial and b.serial
        assert b.host_us == TORCH_CALL_OVERHEAD_US == 25.0
        assert b.seconds * 1e6 == pytest.approx(b.gpu_us + TORCH_CALL_OVERHEAD_US, rel=1e-12)
        assert a.seconds * 1e6 == pytest.approx(max(a.host_us, a.gpu_us), rel=1e-12)
    # the overhead does not move with the fitted host constant
    heavy = ExecutionConstants(20.0, 0.0, 0.0, 0.0)
    assert nccl_execution(box, 8, sizes[:1], harness="torch-isolated",
                          constants=heavy)[0].host_us == 25.0
    assert HARNESSES["torch-isolated"].waits_each_call
    assert not any(HARNESSES[k].waits_each_call for k in ("torch", "nccl-tests"))


def test_the_fit_prices_an_isolated_table_as_the_model_does() -> None:
    """The fit's linearised prices equal the model's own for every point, the torch-isolated
    table's among them (host added, not compared)."""
    points = fit.calibration_points()
    assert any(fit.harness_of(p) == "torch-isolated" for p in points)
    c = fit.shipped_constants()
    theta = [getattr(c, k) for k in fit.CONSTANT_NAMES]
    feats = [fit._features(p) for p in points]
    priced = fit._predict_us(feats, np.array(theta))
    model = [j.execution.seconds * 1e6 for j in fit.judge(points, c)]
    assert priced == pytest.approx(model, rel=1e-6)
