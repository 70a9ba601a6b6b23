"""Synthetic JPEG datasets: seeded and reproducible, photograph-sized, the same bytes as files and
as a tar shard."""

from __future__ import annotations

import io
import pickle
import tarfile

import numpy as np
import pytest
from PIL import Image

from distlab.loading.image_data import (
    VARIANTS,
    JpegFiles,
    JpegShard,
    calibration_jpegs,
    encode_jpeg,
    jpeg_size,
    synthetic_image,
    write_image_dataset,
    write_jpegs,
    write_tar_shard,
)

pytestmark = pytest.mark.timeout(60)


def test_an_image_depends_only_on_seed_index_and_size() -> None:
    a = synthetic_image(64, 48, seed=3, index=5)
    assert a.shape == (48, 64, 3) and a.dtype == np.uint8
    assert np.array_equal(a, synthetic_image(64, 48, seed=3, index=5))
    assert not np.array_equal(a, synthetic_image(64, 48, seed=3, index=6))
    assert not np.array_equal(a, synthetic_image(64, 48, seed=4, index=5))


def test_imagenet_sized_jpeg_is_photograph_sized() -> None:
    v = VARIANTS["imagenet"]
    data = encode_jpeg(synthetic_image(v.width, v.height, seed=0), v.quality)
    assert data[:2] == b"\xff\xd8" and jpeg_size(data) == (500, 375)
    assert 50e3 < len(data) < 200e3          # ImageNet's files average about 110 KB
    noisier = encode_jpeg(synthetic_image(v.width, v.height, seed=0, detail=30.0), v.quality)
    assert len(noisier) > len(data)          # more detail, more bytes at the same size


def test_files_and_tar_shard_hold_the_same_bytes(tmp_path) -> None:
    ds = write_image_dataset(tmp_path, 5, variant="tiny", seed=1)
    assert len(ds) == len(ds.shard) == 5
    assert ds.shard.names == ds.folder.names == [f"img_{k:05d}.jpg" for k in range(5)]
    for i in range(5):
        assert ds.shard.read(i) == ds.folder.read(i) == (tmp_path / "tiny" / ds.folder.names[i]
                                                           ).read_bytes()
    assert ds.shard.read(7) == ds.folder.read(2)               # indices wrap around
    with tarfile.open(ds.shard.path) as tar:                    # a plain tar any tool reads
        assert tar.extractfile("img_00003.jpg").read() == ds.folder.read(3)
    shard = pickle.loads(pickle.dumps(ds.shard))                # worker processes get a copy
    assert shard.read(4) == ds.folder.read(4)
    assert ds.mean_nbytes == pytest.approx(sum(ds.folder.nbytes) / 5, rel=1e-12)


def test_the_same_arguments_write_the_same_files_and_shard(tmp_path) -> None:
    a = write_image_dataset(tmp_path / "a", 3, variant="tiny", seed=2)
    b = write_image_dataset(tmp_path / "b", 3, variant="tiny", seed=2)
    assert a.shard.path.read_bytes() == b.shard.path.read_bytes()
    c = write_image_dataset(tmp_path / "c", 3, variant="tiny", seed=3)
    assert c.folder.read(0) != a.folder.read(0)


def test_jitter_varies_sizes_and_decodes_back(tmp_path) -> None:
    paths = write_jpegs(tmp_path, 6, width=80, height=60, jitter=0.5, seed=0)
    sizes = {jpeg_size(p.read_bytes()) for p in paths}
    assert len(sizes) > 1 and all(40 <= w <= 120 and 30 <= h <= 90 for w, h in sizes)
    px = np.asarray(Image.open(io.BytesIO(paths[0].read_bytes())).convert("RGB"))
    assert px.shape[2] == 3


def test_calibration_jpegs_vary_pixels_and_bytes_apart() -> None:
    blobs = calibration_jpegs(sizes=((64, 48), (128, 96)), details=(2.0, 30.0))
    sizes = [jpeg_size(b) for b in blobs]
    assert sizes == [(64, 48), (64, 48), (128, 96), (128, 96)]
    assert len(blobs[1]) > len(blobs[0]) and len(blobs[3]) > len(blobs[2])


def test_bad_arguments_name_themselves(tmp_path) -> None:
    with pytest.raises(ValueError, match="variant"):
        write_image_dataset(tmp_path, 2, variant="huge")
    with pytest.raises(ValueError, match="n must be"):
        write_jpegs(tmp_path, 0)
    with pytest.raises(ValueError, match="quality"):
        encode_jpeg(synthetic_image(8, 8), 0)
    with pytest.raises(TypeError, match="pixels"):
        encode_jpeg(np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match="paths"):
        JpegFiles([])
    with pytest.raises(ValueError, match="paths"):
        write_tar_shard([], tmp_path / "x.tar")
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(ValueError, match="no file"):
        JpegShard(empty)


def test_the_written_jpeg_decodes_to_its_image_within_jpeg_error(tmp_path) -> None:
    calls: list[int] = []
    ds = write_image_dataset(tmp_path, 3, variant="tiny", seed=4, on_image=lambda: calls.append(1))
    assert len(calls) == 3                                     # progress: one call per image
    v = VARIANTS["tiny"]
    for k in range(3):
        source = synthetic_image(v.width, v.height, seed=4, index=k).astype(int)
        decoded = np.asarray(Image.open(io.BytesIO(ds.shard.read(k))).convert("RGB")).astype(int)
        diff = np.abs(decoded - source)
        assert diff.mean() < 12.0       # below the pixel noise (sd 12 levels) JPEG smooths away
        per_channel = [np.corrcoef(decoded[..., c].ravel(), source[..., c].ravel())[0, 1]
                       for c in range(3)]
        assert min(per_channel) > 0.9   # the right image, its channels in RGB order
