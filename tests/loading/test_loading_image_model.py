"""The image pipeline's models: the decode fit recovers known coefficients, the bytes over PCIe on
each path, the plan's bottleneck moving from the workers to the step as workers are added, and
the measured terms (the hop, the cores shared by processes and threads) where they bind."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distlab.loading.image_model as image_model
from distlab.loading.bottleneck import Station, bottleneck
from distlab.loading.image_data import calibration_jpegs
from distlab.loading.image_model import (
    PCIE_PATHS,
    CoreSharing,
    DecodeModel,
    concurrency,
    decode_costs,
    fit_decode_model,
    judge_decode_model,
    measure_core_sharing,
    measure_decode_model,
    measure_worker_cpu_s,
    model_row,
    pcie_nbytes,
    time_decode_sets,
    time_decodes,
)
from distlab.loading.stage import Stage
from distlab.loading.synthetic_stages import SleepStage

pytestmark = pytest.mark.timeout(60)

REL = 1e-6   # exact synthetic data: only floating-point rounding separates fit and truth


@settings(max_examples=40, deadline=None)
@given(a=st.floats(1e-6, 1e-3), b=st.floats(1e-10, 1e-8), c=st.floats(1e-10, 1e-8),
       seed=st.integers(0, 1000))
def test_fit_recovers_known_coefficients(a, b, c, seed) -> None:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(10_000, 5_000_000, 12).astype(float)
    nbytes = pixels * rng.uniform(0.05, 1.0, 12)          # bytes per pixel varies apart
    seconds = a + b * pixels + c * nbytes
    m = fit_decode_model(pixels, nbytes, seconds)
    assert m.per_image_s == pytest.approx(a, rel=REL)
    assert m.per_pixel_s == pytest.approx(b, rel=REL)
    assert m.per_byte_s == pytest.approx(c, rel=REL)
    assert m.r2 == pytest.approx(1.0, abs=1e-9) and m.points == 12
    assert m.seconds(1e6, 2e5) == pytest.approx(a + b * 1e6 + c * 2e5, rel=REL)


def test_noisy_fit_stays_close_and_non_negative() -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(10_000, 2_000_000, 40).astype(float)
    nbytes = pixels * rng.uniform(0.1, 0.8, 40)
    truth = 1e-4 + 2e-9 * pixels + 8e-9 * nbytes
    m = fit_decode_model(pixels, nbytes, truth * rng.normal(1.0, 0.02, 40))
    assert min(m.per_image_s, m.per_pixel_s, m.per_byte_s) >= 0
    assert m.per_pixel_s == pytest.approx(2e-9, rel=0.2)
    assert m.per_byte_s == pytest.approx(8e-9, rel=0.2)


def test_fit_refuses_too_few_points() -> None:
    with pytest.raises(ValueError, match="length >= 3"):
        fit_decode_model([1, 2], [1, 2], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="seconds"):
        fit_decode_model([1, 2, 3], [1, 2, 3], [1e-3, -1.0, 2e-3])


def test_a_real_decode_model_grows_with_pixels() -> None:
    blobs = calibration_jpegs(sizes=((64, 48), (192, 144), (320, 240)), details=(3.0, 30.0))
    m = measure_decode_model(blobs, repeats=2)
    assert m.points == 6 and m.seconds(320 * 240, 30e3) > m.seconds(64 * 48, 3e3) > 0
    assert len(time_decodes(blobs[:2], repeats=1)) == 2
    assert "ns/pixel" in m.describe()


def test_images_per_s_scales_with_cores() -> None:
    m = DecodeModel(1e-3, 0.0, 0.0)
    assert m.images_per_s(1, 1) == pytest.approx(1000.0, rel=REL)
    assert m.images_per_s(1, 1, cores=4) == pytest.approx(4000.0, rel=REL)
    with pytest.raises(ValueError, match="cores"):
        m.images_per_s(1, 1, cores=0)


def test_bytes_over_pcie_on_each_path() -> None:
    kw = dict(jpeg_nbytes=110_000, width=500, height=375, crop=224)
    assert pcie_nbytes("cpu_decode", **kw) == 224 * 224 * 3
    assert pcie_nbytes("cpu_decode_gpu_crop", **kw) == 500 * 375 * 3
    assert pcie_nbytes("gpu_decode", **kw) == 110_000
    assert set(PCIE_PATHS) == {"cpu_decode", "cpu_decode_gpu_crop", "gpu_decode"}
    assert pcie_nbytes("cpu_decode", **kw, channels=1) == 224 * 224
    with pytest.raises(ValueError, match="path"):
        pcie_nbytes("nvlink", **kw)
    with pytest.raises(ValueError, match="jpeg_nbytes"):
        pcie_nbytes("gpu_decode", jpeg_nbytes=0, width=1, height=1)


@settings(max_examples=50, deadline=None)
@given(w=st.integers(1, 8000), h=st.integers(1, 8000), crop=st.integers(1, 512),
       jpeg=st.integers(1, 10**7))
def test_gpu_decode_sends_the_file_and_cpu_paths_send_pixels(w, h, crop, jpeg) -> None:
    got = {p: pcie_nbytes(p, jpeg_nbytes=jpeg, width=w, height=h, crop=crop) for p in PCIE_PATHS}
    assert got == {"cpu_decode": 3 * crop * crop, "cpu_decode_gpu_crop": 3 * w * h,
                   "gpu_decode": jpeg}


def _stages() -> list:
    """Stand-ins with the image stages' names, placements and categories."""
    names = ["read", "decode", "crop", "collate", "pin", "h2d", "step"]
    categories = ["io", "cpu", "cpu", "cpu", "copy", "copy", "compute"]
    stages = [SleepStage(0.0, name=n) for n in names]
    for s, cat in zip(stages, categories, strict=True):
        s.category = cat
    for s in stages[4:]:
        s.placement = "host"
    return stages


def test_the_bottleneck_moves_from_workers_to_the_step() -> None:
    costs = [0.001, 0.012, 0.006, 0.001, 0.0, 0.0, 0.015]   # workers 20 ms, step 15 ms per batch
    one = model_row(_stages(), costs, "processes", workers=1, items=100, batch_size=8, cores=4)
    two = model_row(_stages(), costs, "processes", workers=2, items=100, batch_size=8, cores=4)
    assert one["bottleneck"] == "worker" and two["bottleneck"] == "step"
    assert one["images_per_s"] < two["images_per_s"]
    capped = model_row(_stages(), costs, "processes", workers=8, items=100, batch_size=8, cores=1)
    assert capped["servers"] == 1 and capped["bottleneck"] == "worker"   # one core, one server
    sync = model_row(_stages(), costs, "sync", workers=0, items=100, batch_size=8, cores=4)
    assert sync["bottleneck"] == "all (one thread)"
    assert sync["images_per_s"] == pytest.approx(800 / sync["bound_s"], rel=REL)


def test_bottleneck_is_the_slowest_station_per_server() -> None:
    plan = [Station("a", 0.010, 2), Station("b", 0.006, 1), Station("c", 0.0, 1)]
    assert bottleneck(plan).name == "b"
    assert bottleneck([Station("z", 0.0), Station("y", 0.0)]).name == "z"
    with pytest.raises(ValueError):
        bottleneck([])


def test_decode_costs_price_the_decode_stage_and_scale_the_crop() -> None:
    costs = {"read": 0.001, "decode": 0.5, "crop": 0.004, "step": 0.01}
    m = DecodeModel(1e-4, 1e-9, 0.0)
    got = decode_costs(costs, m, pixels=4e6, nbytes=1e6, batch_size=8, base_pixels=1e6)
    assert got == pytest.approx([0.001, 8 * (1e-4 + 4e-3), 0.016, 0.01], rel=REL)
    assert decode_costs(costs, m, pixels=4e6, nbytes=0, batch_size=1)[2] == 0.004   # unscaled
    with pytest.raises(ValueError, match="decode"):
        decode_costs({"read": 1.0}, m, pixels=1, nbytes=1, batch_size=1)


def test_decodes_are_timed_in_turn_and_each_image_gets_its_median() -> None:
    order: list[bytes] = []
    blobs = [b"a", b"b", b"c"]
    seconds = time_decodes(blobs, repeats=3, decode=order.append)
    assert order == blobs * 3            # never the same image twice in a row, as a pipeline
    assert len(seconds) == 3 and all(s >= 0 for s in seconds)


def test_decodes_are_timed_on_the_threads_cpu_clock_unless_a_clock_is_given() -> None:
    # a decode that waits (here: sleeps) does no CPU work: the CPU clock does not charge the wait,
    # so another process holding the core meanwhile is not charged either; a wall clock does
    assert image_model.DECODE_CLOCK is time.thread_time      # Linux: a nanosecond CPU clock
    def wait(_: bytes) -> None:
        time.sleep(0.02)
    assert max(time_decodes([b"a", b"b"], repeats=2, decode=wait)) < 0.01
    assert min(time_decodes([b"a", b"b"], repeats=2, decode=wait, clock=time.perf_counter)) >= 0.02
    with pytest.raises(ValueError, match="repeats"):
        time_decodes([b"a"], repeats=0, decode=wait)


class _FakeClock:
    """A clock that a fake decode advances by the blob's length in seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.order: list[bytes] = []

    def __call__(self) -> float:
        return self.now

    def decode(self, blob: bytes) -> None:
        self.order.append(blob)
        self.now += len(blob)


@settings(max_examples=60, deadline=None)
@given(lengths=st.dictionaries(st.sampled_from("abcde"), st.lists(st.integers(1, 50), min_size=1,
                                                                  max_size=8), min_size=1),
       repeats=st.integers(1, 4), seed=st.integers(0, 100))
def test_decode_sets_are_timed_in_one_mixed_order_and_each_time_goes_back_to_its_image(
        lengths: dict[str, list[int]], repeats: int, seed: int) -> None:
    clock = _FakeClock()
    sets = {name: [name.encode() * n for n in ns] for name, ns in lengths.items()}
    seconds = time_decode_sets(sets, repeats=repeats, decode=clock.decode, seed=seed,
                               clock=clock)
    assert seconds == {name: [float(n) for n in ns] for name, ns in lengths.items()}
    everything = sorted(b for blobs in sets.values() for b in blobs)
    rounds = [clock.order[k * len(everything):(k + 1) * len(everything)] for k in range(repeats)]
    assert all(sorted(r) == everything and r == rounds[0] for r in rounds)   # one order a round


def test_decode_sets_mix_the_sets_within_a_round() -> None:
    order: list[bytes] = []
    time_decode_sets({"a": [b"a"] * 20, "b": [b"b"] * 20}, repeats=1, decode=order.append)
    first_half = order[:20]
    assert 0 < first_half.count(b"a") < 20      # not one set after the other


def test_judging_the_decode_model_fits_calibration_and_prices_each_judged_set() -> None:
    blobs = calibration_jpegs(sizes=((64, 48), (192, 144), (320, 240)), details=(3.0, 30.0))
    j = judge_decode_model(blobs, {"small": blobs[:2], "large": blobs[-2:]}, repeats=2)
    assert j.model.points == 6 and set(j.measured_s) == set(j.predicted_s) == {"small", "large"}
    assert j.predicted_s["large"] > j.predicted_s["small"] > 0
    with pytest.raises(ValueError, match="empty"):
        judge_decode_model(blobs, {"none": []})
    with pytest.raises(ValueError, match="calibration"):
        judge_decode_model(blobs, {"calibration": blobs[:1]})


def test_core_sharing_speedup_and_ideal() -> None:
    s = CoreSharing({1: 0.010, 2: 0.016}, threads_factor=1.5)
    assert s.speedup(1) == pytest.approx(1.0, rel=REL)
    assert s.speedup(2) == pytest.approx(2 * 0.010 / 0.016, rel=REL)
    assert "2 at once 1.25x one" in s.describe() and "1.50x" in s.describe()
    with pytest.raises(ValueError, match="k=3 processes at once was not measured"):
        s.speedup(3)
    ideal = CoreSharing.ideal(4)
    assert [ideal.speedup(k) for k in (1, 2, 4)] == pytest.approx([1.0, 2.0, 4.0], rel=REL)
    assert ideal.threads_factor == 1.0


def test_shared_cores_bound_the_workers_and_free_cores_do_not() -> None:
    costs = [0.001, 0.012, 0.006, 0.001, 0.0, 0.0, 0.015]    # CPU 20 ms, step 15 ms per batch
    kw = dict(items=100, batch_size=8, cores=2)
    free = model_row(_stages(), costs, "processes", workers=2, sharing=CoreSharing.ideal(2), **kw)
    assert free["bottleneck"] == "step" and free["cores_s"] == pytest.approx(0.010, rel=REL)
    one_core = CoreSharing({1: 0.020, 2: 0.040})               # two at once: no faster than one
    shared = model_row(_stages(), costs, "processes", workers=2, sharing=one_core, **kw)
    assert shared["bottleneck"] == "cores" and shared["cores_s"] == pytest.approx(0.020, rel=REL)
    assert shared["bound_s"] == pytest.approx(100 * 0.020, rel=REL)
    assert shared["images_per_s"] == pytest.approx(800 / 2.0, rel=REL)
    assert ("cores", pytest.approx(0.020, rel=REL)) in shared["stations"]
    alone = model_row(_stages(), costs, "processes", workers=1, sharing=one_core, **kw)
    assert alone["bottleneck"] == "worker"                    # one worker: the term never binds


def test_threads_factor_slows_the_cpu_stages_only() -> None:
    costs = [0.001, 0.012, 0.006, 0.001, 0.0, 0.0, 0.015]
    kw = dict(workers=0, items=100, batch_size=8, cores=2)
    plain = model_row(_stages(), costs, "threads", **kw)
    slowed = model_row(_stages(), costs, "threads", sharing=CoreSharing({1: 1.0}, 1.5), **kw)
    assert plain["bottleneck"] == "step" and slowed["bottleneck"] == "decode"
    by = dict(slowed["stations"])
    assert by["decode"] == pytest.approx(0.018, rel=REL) and by["step"] == pytest.approx(0.015)
    assert slowed["concurrency"] == 2 and concurrency("sync", _stages(), workers=0) == 1


def test_hop_lands_on_the_worker_and_the_host_thread() -> None:
    costs = [0.001, 0.012, 0.006, 0.001, 0.0, 0.0, 0.015]
    row = model_row(_stages(), costs, "processes", workers=1, items=10, batch_size=8, cores=2,
                    hop_s=0.002, hop_send_s=0.001)
    by = dict(row["stations"])
    assert by["worker"] == pytest.approx(0.021, rel=REL) and by["pin+h2d"] == pytest.approx(0.002)


def test_measured_core_sharing_times_every_count(tmp_path) -> None:
    from distlab.loading.image_data import write_image_dataset
    from distlab.loading.image_stages import cpu_image_stages

    ds = write_image_dataset(tmp_path, 4, variant="tiny", seed=0)
    stages = cpu_image_stages(ds.shard, batch_size=2, crop=16)
    s = measure_core_sharing(stages, [2], items_per_worker=2)
    assert sorted(s.seconds) == [1, 2] and all(v > 0 for v in s.seconds.values())
    assert s.speedup(2) > 0 and s.threads_factor > 0
    with pytest.raises(ValueError, match="no leading worker stage"):
        measure_core_sharing(stages[4:], [1])


class _SpendsCpu(Stage):
    """Spends ``cost_s`` of this process's CPU time per item, however much wall time that takes
    on a shared machine (BurnStage burns wall time: on a loaded machine it gets less CPU)."""

    category = "cpu"

    def __init__(self, cost_s: float, name: str = "spend") -> None:
        self.cost_s, self.name = cost_s, name

    def process(self, item):
        end = time.process_time() + self.cost_s
        while time.process_time() < end:
            pass
        return item


def test_worker_cpu_seconds_count_work_and_not_waiting() -> None:
    """A stage that sleeps costs almost no CPU; one that spends 20 ms of CPU per batch costs at
    least that: CPU time is what is counted, so neither depends on how loaded the machine is."""
    step = SleepStage(0.0, name="step")                 # the line's consumer: not measured
    waiting = measure_worker_cpu_s([SleepStage(0.02, name="wait"), step], 5)
    working = measure_worker_cpu_s([_SpendsCpu(0.02, name="work"), step], 5)
    assert 0 <= waiting < 0.005                # 20 ms asleep per batch costs almost no CPU
    assert working >= 0.02                     # 20 ms of CPU per batch, all of it counted
    with pytest.raises(ValueError, match="no leading worker stage"):
        measure_worker_cpu_s([step], 1)
    with pytest.raises(ValueError, match="items"):
        measure_worker_cpu_s([SleepStage(0.0), step], 0)
