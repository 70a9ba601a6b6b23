"""Synthetic JPEG datasets, made here from a seed: as files in a folder and as one tar shard.

    from distlab.loading.image_data import write_image_dataset
    ds = write_image_dataset(scratch_dir("distlab12_"), 64, variant="imagenet", seed=0)
    ds.folder.read(3) == ds.shard.read(3)     # the same JPEG bytes, two layouts

Nothing is downloaded. An image is smooth colour fields at four scales (seeded random grids,
upsampled bicubic) plus luma and chroma noise, so its JPEG is as large as a photograph's: a
500 x 375 image at quality 90 is about 90 KB (ImageNet's average file is about 110 KB). Every
image depends only on ``(seed, index)`` and its size, so a dataset is the same bytes on every
run with the same Pillow. Units: pixels, bytes.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from distlab._checks import check_choice, check_float, check_int

__all__ = ["VARIANTS", "ImageDataset", "ImageVariant", "JpegFiles", "JpegShard",
           "calibration_jpegs", "encode_jpeg", "jpeg_size", "synthetic_image",
           "write_image_dataset", "write_jpegs", "write_tar_shard"]

#: (grid cells across, amplitude in grey levels) of the smooth layers, coarse to fine.
_LAYERS = ((4, 80.0), (16, 40.0), (64, 25.0), (160, 15.0))


@dataclass(frozen=True)
class ImageVariant:
    """A dataset's image size (pixels) and JPEG quality (1-95)."""

    width: int
    height: int
    quality: int = 90

    @property
    def pixels(self) -> int:
        """Pixels per image."""
        return self.width * self.height


VARIANTS: dict[str, ImageVariant] = {
    "imagenet": ImageVariant(500, 375, 90),
    "large": ImageVariant(1600, 1200, 90),
    "tiny": ImageVariant(96, 72, 90),
}
"""Named image sizes: ImageNet's typical 500 x 375, a 1600 x 1200 camera-like image, and a tiny
one for quick tests."""


def synthetic_image(width: int, height: int, *, seed: int = 0, index: int = 0,
                    detail: float = 12.0) -> np.ndarray:
    """An RGB image, ``(height, width, 3)`` uint8, that depends only on its arguments.

    Args:
        width, height: size in pixels, >= 1.
        seed, index: the dataset's seed and the image's index (seeded with ``[seed, index]``).
        detail: standard deviation of the per-pixel noise in grey levels (>= 0); more detail
            makes a larger JPEG at the same size.
    """
    width = check_int("width", width, minimum=1)
    height = check_int("height", height, minimum=1)
    detail = check_float("detail", detail, minimum=0.0)
    rng = np.random.default_rng([check_int("seed", seed, minimum=0),
                                 check_int("index", index, minimum=0)])
    out = np.full((height, width, 3), 128.0, dtype=np.float32)
    for cells, amp in _LAYERS:
        gw, gh = max(2, cells), max(2, round(cells * height / width))
        grid = rng.uniform(-amp, amp, (gh, gw, 3)).astype(np.float32)
        for c in range(3):
            layer = Image.fromarray(grid[:, :, c], mode="F").resize((width, height),
                                                                     Image.Resampling.BICUBIC)
            out[:, :, c] += np.asarray(layer)
    out += rng.normal(0.0, detail, (height, width, 1)).astype(np.float32)
    out += rng.normal(0.0, detail / 3.0, (height, width, 3)).astype(np.float32)
    return np.clip(out, 0, 255).astype(np.uint8)


def encode_jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    """``pixels`` (``(H, W, 3)`` uint8) as JPEG bytes (Pillow, baseline, 4:2:0 chroma)."""
    quality = check_int("quality", quality, minimum=1, maximum=95)
    if not (isinstance(pixels, np.ndarray) and pixels.dtype == np.uint8 and pixels.ndim == 3
            and pixels.shape[2] == 3):
        raise TypeError(f"pixels must be a (height, width, 3) uint8 array, got "
                        f"{getattr(pixels, 'dtype', type(pixels).__name__)} "
                        f"{getattr(pixels, 'shape', '')}")
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def jpeg_size(data: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels from a JPEG's header (nothing is decoded)."""
    with Image.open(io.BytesIO(data)) as im:
        return im.size


def _jittered(width: int, height: int, jitter: float, seed: int, index: int) -> tuple[int, int]:
    if not jitter:
        return width, height
    f = np.random.default_rng([seed, index, 1]).uniform(1.0 - jitter, 1.0 + jitter)
    return max(8, round(width * f)), max(8, round(height * f))


def write_jpegs(directory: str | os.PathLike[str], n: int, *, width: int = 500,
                height: int = 375, quality: int = 90, seed: int = 0, detail: float = 12.0,
                jitter: float = 0.0, on_image: Callable[[], None] | None = None) -> list[Path]:
    """Write ``n`` JPEGs ``img_00000.jpg ...`` into ``directory`` (created if missing).

    Args:
        n: images, >= 1.
        width, height, quality, detail: as :func:`synthetic_image` and :func:`encode_jpeg`.
        seed: dataset seed; same arguments, same bytes.
        jitter: each image's sides scaled by a seeded factor in ``[1 - jitter, 1 + jitter]``
            (0: every image ``width x height``), 0 <= jitter < 1.
        on_image: called after each image is written (progress bars).

    Returns: the paths, in index order.
    """
    n = check_int("n", n, minimum=1)
    jitter = check_float("jitter", jitter, minimum=0.0, maximum=0.9)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        w, h = _jittered(width, height, jitter, seed, k)
        p = d / f"img_{k:05d}.jpg"
        p.write_bytes(encode_jpeg(synthetic_image(w, h, seed=seed, index=k, detail=detail),
                                  quality))
        paths.append(p)
        if on_image is not None:
            on_image()
    return paths


def write_tar_shard(paths: Sequence[str | os.PathLike[str]],
                    tar_path: str | os.PathLike[str]) -> Path:
    """Write the files ``paths`` into one uncompressed tar (WebDataset-style shard), in the given
    order, with fixed metadata (mtime 0, uid/gid 0, mode 0644) so the shard's bytes depend only
    on the files' names and contents."""
    if isinstance(paths, (str, os.PathLike)) or not paths:
        raise ValueError(f"paths must be a non-empty sequence of files, got {paths!r}")
    out = Path(tar_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w", format=tarfile.USTAR_FORMAT) as tar:
        for p in map(Path, paths):
            data = p.read_bytes()
            info = tarfile.TarInfo(p.name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return out


class JpegFiles:
    """JPEG files in a folder, read whole by index. Picklable (it holds paths).

    Args:
        paths: the files, in index order.
    """

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        if isinstance(paths, (str, os.PathLike)) or not paths:
            raise ValueError(f"paths must be a non-empty sequence of files, got {paths!r}")
        self.paths = [Path(p) for p in paths]
        self.names = [p.name for p in self.paths]
        self.nbytes = [p.stat().st_size for p in self.paths]

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, index: int) -> bytes:
        """Image ``index`` (modulo the count) as its file's bytes."""
        return self.paths[index % len(self.paths)].read_bytes()


class JpegShard:
    """The members of one tar shard, read by index with ``os.pread`` at their data offsets (the
    member table is read once). Picklable (it holds the path and the table).

    Args:
        tar_path: an uncompressed tar such as :func:`write_tar_shard` writes.
    """

    def __init__(self, tar_path: str | os.PathLike[str]) -> None:
        self.path = Path(tar_path)
        with tarfile.open(self.path, "r:") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
        if not members:
            raise ValueError(f"{self.path}: the tar holds no file")
        self.names = [m.name for m in members]
        self.offsets = [m.offset_data for m in members]
        self.nbytes = [m.size for m in members]

    def __len__(self) -> int:
        return len(self.names)

    def read(self, index: int) -> bytes:
        """Member ``index`` (modulo the count) as bytes: one ``pread``."""
        i = index % len(self.names)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, self.nbytes[i], self.offsets[i])
        finally:
            os.close(fd)


@dataclass(frozen=True)
class ImageDataset:
    """One synthetic dataset in both layouts: ``folder`` (files) and ``shard`` (a tar of them)."""

    variant: str
    size: ImageVariant
    seed: int
    folder: JpegFiles
    shard: JpegShard

    def __len__(self) -> int:
        return len(self.folder)

    @property
    def mean_nbytes(self) -> float:
        """Mean compressed bytes per image."""
        return sum(self.folder.nbytes) / len(self.folder)


def write_image_dataset(directory: str | os.PathLike[str], n: int, *, variant: str = "imagenet",
                        seed: int = 0, detail: float = 12.0,
                        on_image: Callable[[], None] | None = None) -> ImageDataset:
    """Write ``n`` JPEGs of a named :data:`VARIANTS` size into ``directory/<variant>/`` and the
    tar shard ``directory/<variant>.tar`` of them; returns both layouts. ``on_image`` is called
    after each image is written."""
    check_choice("variant", variant, VARIANTS)
    v = VARIANTS[variant]
    base = Path(directory)
    paths = write_jpegs(base / variant, n, width=v.width, height=v.height, quality=v.quality,
                        seed=seed, detail=detail, on_image=on_image)
    shard = write_tar_shard(paths, base / f"{variant}.tar")
    return ImageDataset(variant, v, seed, JpegFiles(paths), JpegShard(shard))


CALIBRATION_SIZES = ((128, 96), (256, 192), (400, 300), (640, 480), (800, 600))
CALIBRATION_DETAILS = (3.0, 12.0, 30.0)


def calibration_jpegs(*, seed: int = 1, sizes: Sequence[tuple[int, int]] = CALIBRATION_SIZES,
                      details: Sequence[float] = CALIBRATION_DETAILS,
                      quality: int = 90) -> list[bytes]:
    """JPEGs for fitting a decode model, in memory: every size of ``sizes`` at every noise level
    of ``details``, so pixels and compressed bytes vary apart (one image each, seeded)."""
    out = []
    for i, (w, h) in enumerate(sizes):
        for j, d in enumerate(details):
            px = synthetic_image(w, h, seed=seed, index=i * len(details) + j, detail=d)
            out.append(encode_jpeg(px, quality))
    return out
