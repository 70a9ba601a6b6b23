"""Image stages: decoded pixels equal Pillow's (and torchvision's within JPEG rounding, where
torchvision is installed), crops of the asked size inside the image, the same batch for the same
seed on every executor, and one clear line where torchvision or CUDA is absent."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from distlab.loading import image_stages as istages
from distlab.loading.executors import run_pipeline
from distlab.loading.image_data import write_image_dataset
from distlab.loading.image_stages import (
    CollateImagesStage,
    CropFlipStage,
    ImageBatch,
    ImagePathUnavailable,
    PillowDecodeStage,
    ReadImagesStage,
    TorchvisionDecodeStage,
    TorchvisionMissingError,
    cpu_image_stages,
    crop_flip,
    decode_pillow,
    gpu_image_stages,
    gpu_path_missing,
    matching_torchvision,
    random_resized_box,
    sample_crop,
    torchvision_missing,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_image_dataset(tmp_path_factory.mktemp("images"), 6, variant="tiny", seed=0)


def test_decode_stage_gives_pillows_pixels(dataset) -> None:
    batch = ReadImagesStage(dataset.shard, batch_size=3).process(1)
    assert batch.indices == (3, 4, 5)
    decoded = PillowDecodeStage().process(batch)
    for i, px in zip(batch.indices, decoded.data, strict=True):
        ref = np.array(Image.open(io.BytesIO(dataset.folder.read(i))).convert("RGB"))
        assert px.dtype == np.uint8 and np.array_equal(px, ref)


@pytest.mark.skipif(torchvision_missing() is not None,
                    reason=f"needs torchvision: {torchvision_missing()}")
def test_torchvision_decode_matches_pillow_within_jpeg_rounding(dataset) -> None:
    batch = ReadImagesStage(dataset.folder, batch_size=6).process(0)
    tv = TorchvisionDecodeStage().process(batch).data
    for data, px in zip(batch.data, tv, strict=True):
        diff = np.abs(px.astype(int) - decode_pillow(data).astype(int))
        assert diff.mean() < 1.0 and diff.max() <= 8   # two IDCT and upsampling implementations


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 900), height=st.integers(1, 900), seed=st.integers(0, 2**31),
       sample=st.integers(0, 10**6))
def test_crop_box_lies_inside_the_image(width, height, seed, sample) -> None:
    (left, top, w, h), flip = sample_crop(width, height, sample, seed)
    assert 0 <= left and 0 <= top and 1 <= w and 1 <= h
    assert left + w <= width and top + h <= height
    assert isinstance(flip, bool)
    assert sample_crop(width, height, sample, seed) == ((left, top, w, h), flip)   # seeded


@settings(max_examples=25, deadline=None)
@given(size=st.integers(1, 64), flip=st.booleans(), seed=st.integers(0, 1000))
def test_crop_has_the_asked_size_and_flip_mirrors(size, flip, seed) -> None:
    px = np.random.default_rng(seed).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    box = random_resized_box(40, 30, np.random.default_rng(seed))
    out = crop_flip(px, box, size, flip)
    assert out.shape == (size, size, 3) and out.dtype == np.uint8
    assert np.array_equal(out, crop_flip(px, box, size, not flip)[:, ::-1])


def test_whole_image_crop_is_a_plain_resize() -> None:
    px = np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    assert np.array_equal(crop_flip(px, (0, 0, 20, 20), 20, False), px)


def test_box_falls_back_to_the_centre_when_no_draw_fits() -> None:
    rng = np.random.default_rng(0)
    assert random_resized_box(1000, 10, rng, attempts=0) == (493, 0, 13, 10)   # 4:3 at most
    assert random_resized_box(30, 30, rng, attempts=0) == (0, 0, 30, 30)
    with pytest.raises(ValueError, match="scale"):
        random_resized_box(10, 10, rng, scale=(0.5, 0.1))


def test_crops_cover_the_scale_range_and_flip_half_the_time() -> None:
    boxes = [sample_crop(500, 375, k, 0) for k in range(400)]
    fractions = [w * h / (500 * 375) for (_, _, w, h), _ in boxes]
    assert min(fractions) < 0.2 and max(fractions) > 0.8
    assert 0.4 < sum(flip for _, flip in boxes) / len(boxes) < 0.6
    assert all(3 / 4 - 0.05 < w / h < 4 / 3 + 0.05 for (_, _, w, h), _ in boxes)


def test_a_seed_fixes_the_batch_on_every_executor(dataset) -> None:
    stages = cpu_image_stages(dataset.shard, batch_size=2, crop=16, seed=5)
    sync = run_pipeline(stages, 3, "sync", collect=True).outputs
    threads = run_pipeline(stages, 3, "threads", collect=True).outputs
    assert all(torch.equal(a, b) for a, b in zip(sync, threads, strict=True))
    assert sync[0].shape == (2, 3, 16, 16) and sync[0].dtype == torch.uint8
    other = run_pipeline(cpu_image_stages(dataset.folder, batch_size=2, crop=16, seed=6), 1,
                         "sync", collect=True).outputs[0]
    assert not torch.equal(other, sync[0])


@pytest.mark.timeout(180)
def test_worker_processes_make_the_same_batches(dataset) -> None:
    stages = cpu_image_stages(dataset.shard, batch_size=2, crop=16, seed=5)
    sync = run_pipeline(stages, 3, "sync", collect=True)
    procs = run_pipeline(stages, 3, "processes", workers=1, collect=True)
    assert all(torch.equal(a, b) for a, b in zip(sync.outputs, procs.outputs, strict=True))
    in_worker = {s.name for s in procs.timeline.spans if s.lane.endswith("/worker0")}
    assert in_worker == {"read", "decode", "crop", "collate"}


def test_collate_is_uint8_nchw() -> None:
    arrays = [np.full((4, 4, 3), k, np.uint8) for k in range(3)]
    out = CollateImagesStage().process(ImageBatch((0, 1, 2), arrays))
    assert out.shape == (3, 3, 4, 4) and out.dtype == torch.uint8 and out.is_contiguous()
    assert int(out[2, 1, 0, 0]) == 2


def test_crop_stage_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="size"):
        CropFlipStage(0)
    with pytest.raises(ValueError, match="ratio"):
        CropFlipStage(8, ratio=(2.0, 1.0))
    with pytest.raises(ValueError, match="decoder"):
        cpu_image_stages(object(), decoder="opencv")   # type: ignore[arg-type]
    with pytest.raises(TypeError, match="source"):
        ReadImagesStage(object())                      # type: ignore[arg-type]


@pytest.mark.parametrize("torch_version, expected", [
    ("2.13.0+cpu", "0.28.0"), ("2.5.1", "0.20.1"), ("2.1.0+cu121", "0.16.0"), ("2.7", "0.22.0")])
def test_matching_torchvision(torch_version, expected) -> None:
    assert matching_torchvision(torch_version) == expected


def test_matching_torchvision_refuses_what_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="2.x"):
        matching_torchvision("1.13.1")
    with pytest.raises(ValueError, match="torch_version"):
        matching_torchvision("nightly")


def _no_torchvision(monkeypatch) -> None:
    real = istages.importlib.import_module

    def fake(name, *args, **kwargs):
        if name.startswith("torchvision"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(istages.importlib, "import_module", fake)


def test_without_torchvision_one_line_says_how_to_install_it(monkeypatch) -> None:
    _no_torchvision(monkeypatch)
    why = torchvision_missing()
    assert why is not None and "\n" not in why and why.startswith("torchvision is absent")
    assert f"pip install torchvision=={matching_torchvision(torch.__version__)}" in why
    with pytest.raises(TorchvisionMissingError) as info:
        TorchvisionDecodeStage()
    assert str(info.value) == why
    with pytest.raises(TorchvisionMissingError):
        cpu_image_stages(object(), decoder="torchvision")   # type: ignore[arg-type]
    with pytest.raises(ImagePathUnavailable, match="torchvision is absent"):
        gpu_image_stages(object())                         # type: ignore[arg-type]


def test_a_broken_torchvision_is_named_too(monkeypatch) -> None:
    def broken(name, *args, **kwargs):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(istages.importlib, "import_module", broken)
    why = torchvision_missing()
    assert why is not None and "does not import here (RuntimeError" in why and "\n" not in why


def test_gpu_path_runs_exactly_where_cuda_and_torchvision_exist(dataset) -> None:
    """Checked the same way with and without a GPU: the path either builds or says why not."""
    why = gpu_path_missing()
    expect = [w for w in (None if torch.cuda.is_available() else "no CUDA device",
                          torchvision_missing()) if w]
    assert (why is None) == (not expect)
    if why is not None:
        assert all(part.split(" (")[0] in why for part in expect)
        with pytest.raises(ImagePathUnavailable, match="GPU decode path skipped"):
            gpu_image_stages(dataset.shard)
    else:
        stages = gpu_image_stages(dataset.shard, batch_size=2, crop=16, seed=5)
        out = run_pipeline(stages, 1, "sync", collect=True).outputs[0]
        cpu = run_pipeline(cpu_image_stages(dataset.shard, batch_size=2, crop=16, seed=5), 1,
                           "sync", collect=True).outputs[0]
        assert out.shape == cpu.shape and out.is_cuda
        diff = (out.cpu().float() - cpu.float()).abs().mean()
        assert math.isfinite(float(diff)) and float(diff) < 16   # same crops, other resampler


def test_a_box_of_the_crop_size_is_cut_out_unresampled() -> None:
    px = np.random.default_rng(3).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    out = crop_flip(px, (7, 5, 16, 16), 16, False)
    assert np.array_equal(out, px[5:21, 7:23])                 # the box, not another region
    assert np.array_equal(crop_flip(px, (7, 5, 16, 16), 16, True), px[5:21, 7:23][:, ::-1])
