"""Image stages: JPEG bytes -> decoded pixels -> random-resized crop and flip -> a uint8 batch.

The CPU path (every stage but the last three may run in worker processes)::

    read -> decode (Pillow, or torchvision.io.decode_jpeg on the CPU) -> crop (random-resized
    crop + horizontal flip) -> collate (uint8 N x 3 x S x S) -> pin -> h2d -> step

The GPU path: ``read -> pack (bytes as 1-D uint8 tensors) -> gpu_decode
(torchvision.io.decode_jpeg(..., device="cuda"): the compressed bytes cross to the GPU and nvJPEG
decodes them there) -> gpu_crop (the same crop and flip on the GPU) -> step``.

Items are batch numbers; batch ``b`` holds samples ``b * batch_size ... (b + 1) * batch_size - 1``
(read modulo the dataset, so a second pass is a new epoch). A sample's crop and flip depend only on
``(seed, sample)``: every executor, worker count and run makes the same batch. ``step`` is the
training step as the host sees it (:class:`~.device_stages.ComputeStage` in ``wait`` mode: without
a GPU a sleep of its cost stands for the host waiting on the device).

torchvision is optional: where it cannot be imported, :func:`torchvision_missing` says so in one
line with the ``pip install`` of the release built for the installed torch, the torchvision
stages raise :class:`TorchvisionMissingError` with that line, and everything else works. Without
CUDA the GPU stages are ``skipped`` (the reason in one line) and :func:`gpu_image_stages` refuses
with it: no GPU number is ever made up.
"""

from __future__ import annotations

import importlib
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from distlab._checks import check_choice, check_float, check_instance, check_int
from distlab.loading.device_stages import ComputeStage, H2DStage, PinStage
from distlab.loading.image_data import JpegFiles, JpegShard
from distlab.loading.stage import Stage, accelerator_available

__all__ = ["DECODERS", "CollateImagesStage", "CropFlipStage", "GpuCropFlipStage",
           "GpuDecodeStage", "ImageBatch", "ImagePathUnavailable", "PackBytesStage",
           "PillowDecodeStage", "ReadImagesStage", "TorchvisionDecodeStage",
           "TorchvisionMissingError", "cpu_image_stages", "crop_flip", "cuda_missing",
           "decode_pillow", "decode_torchvision", "gpu_image_stages", "gpu_path_missing",
           "matching_torchvision", "random_resized_box", "sample_crop", "torchvision_missing"]

DECODERS = ("pillow", "torchvision")
"""CPU decoders of :func:`cpu_image_stages`."""


# --- what this machine has ------------------------------------------------------------------

def matching_torchvision(torch_version: str) -> str:
    """The torchvision release built for ``torch_version`` (``"2.13.0+cpu"`` -> ``"0.28.0"``):
    torch 2.m.p pairs with torchvision 0.(m + 15).p, as every 2.x release has."""
    base = str(torch_version).split("+")[0]
    parts = base.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
        patch = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
    except (ValueError, IndexError):
        raise ValueError(f"torch_version must look like '2.13.0', got {torch_version!r}") from None
    if major != 2:
        raise ValueError(f"matching_torchvision knows torch 2.x only, got {torch_version!r}")
    return f"0.{minor + 15}.{patch}"


def _install_hint() -> str:
    version = torch.__version__
    index = " --index-url https://download.pytorch.org/whl/cpu" if "+cpu" in version else ""
    return (f"pip install torchvision=={matching_torchvision(version)}{index} "
            f"(the release built for torch {version})")


def torchvision_missing() -> str | None:
    """None when ``torchvision.io`` imports here, else one line: why not and how to install it."""
    try:
        importlib.import_module("torchvision.io")
    except ModuleNotFoundError:
        return f"torchvision is absent: {_install_hint()}"
    except Exception as exc:  # noqa: BLE001 - a torchvision built for another torch
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
        return (f"torchvision does not import here ({type(exc).__name__}: {first}): "
                f"{_install_hint()}")
    return None


def cuda_missing() -> str | None:
    """None when torch sees a CUDA device, else the reason in one line."""
    if accelerator_available():
        return None
    return "no CUDA device (torch.cuda.is_available() is False)"


def gpu_path_missing() -> str | None:
    """None when the GPU-decode path can run here (CUDA and torchvision), else why not."""
    why = [w for w in (cuda_missing(), torchvision_missing()) if w]
    return "; ".join(why) if why else None


class TorchvisionMissingError(ImportError):
    """A torchvision stage was made where torchvision cannot be imported; the message is
    :func:`torchvision_missing`'s line."""


class ImagePathUnavailable(RuntimeError):
    """A path of image stages cannot run on this machine; the message says why."""


def _torchvision_io() -> Any:
    why = torchvision_missing()
    if why:
        raise TorchvisionMissingError(why)
    return importlib.import_module("torchvision.io")


# --- pure pieces ----------------------------------------------------------------------------

@dataclass
class ImageBatch:
    """Samples in flight between image stages: their sample numbers and one value each (bytes,
    pixels or tensors)."""

    indices: tuple[int, ...]
    data: list[Any]


def decode_pillow(data: bytes) -> np.ndarray:
    """JPEG bytes -> ``(height, width, 3)`` uint8 RGB pixels, decoded by Pillow."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def decode_torchvision(data: bytes, device: str = "cpu") -> torch.Tensor:
    """JPEG bytes -> ``(3, height, width)`` uint8 RGB tensor on ``device``, decoded by
    ``torchvision.io.decode_jpeg`` (libjpeg on the CPU, nvJPEG on a CUDA device; the input stays
    on the CPU either way, as torchvision requires). Raises :class:`TorchvisionMissingError`
    where torchvision cannot be imported."""
    tvio = _torchvision_io()
    blob = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return tvio.decode_jpeg(blob, mode=tvio.ImageReadMode.RGB, device=device)


def random_resized_box(width: int, height: int, rng: np.random.Generator, *,
                       scale: tuple[float, float] = (0.08, 1.0),
                       ratio: tuple[float, float] = (3 / 4, 4 / 3),
                       attempts: int = 10) -> tuple[int, int, int, int]:
    """``(left, top, box_width, box_height)`` of a random-resized crop, in pixels.

    Up to ``attempts`` draws of an area fraction uniform in ``scale`` and an aspect ratio
    log-uniform in ``ratio``; the first box that fits inside the image is placed uniformly at
    random. If none fits, the largest centred box whose aspect lies within ``ratio``.
    """
    lo_s, hi_s = scale
    lo_r, hi_r = ratio
    if not (0 < lo_s <= hi_s <= 1 and 0 < lo_r <= hi_r):
        raise ValueError(f"scale must satisfy 0 < lo <= hi <= 1 and ratio 0 < lo <= hi, got "
                         f"scale={scale}, ratio={ratio}")
    area = width * height
    for _ in range(attempts):
        target = area * rng.uniform(lo_s, hi_s)
        aspect = math.exp(rng.uniform(math.log(lo_r), math.log(hi_r)))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            left = int(rng.integers(0, width - w + 1))
            top = int(rng.integers(0, height - h + 1))
            return left, top, w, h
    aspect = width / height
    if aspect < lo_r:
        w, h = width, min(height, max(1, round(width / lo_r)))
    elif aspect > hi_r:
        w, h = min(width, max(1, round(height * hi_r))), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def sample_crop(width: int, height: int, sample: int, seed: int,
                **box_options: Any) -> tuple[tuple[int, int, int, int], bool]:
    """The crop box and the flip of sample ``sample``: a function of ``(seed, sample)`` and the
    image's size only."""
    rng = np.random.default_rng([seed, sample])
    box = random_resized_box(width, height, rng, **box_options)
    return box, bool(rng.random() < 0.5)


def crop_flip(pixels: np.ndarray, box: tuple[int, int, int, int], size: int,
              flip: bool) -> np.ndarray:
    """The ``box`` of ``pixels`` resized to ``size x size`` (Pillow, bilinear), mirrored
    left-right when ``flip``; ``(size, size, 3)`` uint8."""
    left, top, w, h = box
    im = Image.fromarray(pixels).resize((size, size), Image.Resampling.BILINEAR,
                                        box=(left, top, left + w, top + h))
    out = np.asarray(im)
    return np.ascontiguousarray(out[:, ::-1]) if flip else out


# --- CPU stages -----------------------------------------------------------------------------

class ReadImagesStage(Stage):
    """Reads the JPEG bytes of batch ``item`` from a :class:`~.image_data.JpegFiles` folder or a
    :class:`~.image_data.JpegShard`. Output: an :class:`ImageBatch` of bytes."""

    category = "io"

    def __init__(self, source: JpegFiles | JpegShard, batch_size: int = 8,
                 name: str = "read") -> None:
        self.source = check_instance("source", source, (JpegFiles, JpegShard))
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.name = name

    def process(self, item: Any) -> ImageBatch:
        first = int(item) * self.batch_size
        indices = tuple(range(first, first + self.batch_size))
        return ImageBatch(indices, [self.source.read(i) for i in indices])


class PillowDecodeStage(Stage):
    """Decodes every JPEG of the batch with Pillow. Output: (H, W, 3) uint8 arrays."""

    category = "cpu"

    def __init__(self, name: str = "decode") -> None:
        self.name = name

    def process(self, item: ImageBatch) -> ImageBatch:
        return ImageBatch(item.indices, [decode_pillow(b) for b in item.data])


class TorchvisionDecodeStage(Stage):
    """Decodes every JPEG of the batch with ``torchvision.io.decode_jpeg`` on the CPU (libjpeg).
    Output: (H, W, 3) uint8 arrays. Raises :class:`TorchvisionMissingError` when made where
    torchvision cannot be imported."""

    category = "cpu"

    def __init__(self, name: str = "decode") -> None:
        _torchvision_io()
        self.name = name

    def process(self, item: ImageBatch) -> ImageBatch:
        return ImageBatch(item.indices, [decode_torchvision(b).permute(1, 2, 0).numpy()
                                         for b in item.data])


class CropFlipStage(Stage):
    """Random-resized crop to ``size x size`` and a horizontal flip with probability 1/2, per
    sample from ``(seed, sample)`` (:func:`sample_crop`). Output: (size, size, 3) uint8 arrays.

    Args:
        size: output side in pixels, >= 1.
        seed: the augmentation seed.
        scale, ratio: area fraction and aspect range, as :func:`random_resized_box`.
    """

    category = "cpu"

    def __init__(self, size: int = 224, seed: int = 0, *,
                 scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), name: str = "crop") -> None:
        self.size = check_int("size", size, minimum=1)
        self.seed = check_int("seed", seed, minimum=0)
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        random_resized_box(2, 2, np.random.default_rng(0), scale=self.scale, ratio=self.ratio)
        self.name = name

    def process(self, item: ImageBatch) -> ImageBatch:
        out = []
        for sample, px in zip(item.indices, item.data, strict=True):
            box, flip = sample_crop(px.shape[1], px.shape[0], sample, self.seed,
                                    scale=self.scale, ratio=self.ratio)
            out.append(crop_flip(px, box, self.size, flip))
        return ImageBatch(item.indices, out)


class CollateImagesStage(Stage):
    """Stacks equal-size (S, S, 3) uint8 arrays into one uint8 tensor (N, 3, S, S)."""

    category = "cpu"

    def __init__(self, name: str = "collate") -> None:
        self.name = name

    def process(self, item: ImageBatch) -> torch.Tensor:
        return torch.from_numpy(np.stack(item.data)).permute(0, 3, 1, 2).contiguous()


def cpu_image_stages(source: JpegFiles | JpegShard, *, batch_size: int = 8, crop: int = 224,
                     seed: int = 0, decoder: str = "pillow",
                     step_s: float = 0.0) -> list[Stage]:
    """read -> decode -> crop -> collate -> pin -> h2d -> step (see the module docstring).

    Args:
        source: the JPEGs (a folder or a tar shard).
        batch_size: images per item, >= 1.
        crop: output side in pixels.
        seed: the augmentation seed.
        decoder: ``"pillow"`` or ``"torchvision"`` (raises :class:`TorchvisionMissingError`
            where torchvision cannot be imported).
        step_s: seconds of the training step per batch (a sleep where there is no GPU).
    """
    check_choice("decoder", decoder, DECODERS)
    step_s = check_float("step_s", step_s, minimum=0.0)
    decode: Stage = PillowDecodeStage() if decoder == "pillow" else TorchvisionDecodeStage()
    return [ReadImagesStage(source, batch_size), decode, CropFlipStage(crop, seed),
            CollateImagesStage(), PinStage(), H2DStage(),
            ComputeStage(step_s, mode="wait", name="step")]


# --- GPU stages -----------------------------------------------------------------------------

class PackBytesStage(Stage):
    """The batch's JPEG bytes as 1-D uint8 CPU tensors (what ``decode_jpeg`` takes)."""

    category = "cpu"

    def __init__(self, name: str = "pack") -> None:
        self.name = name

    def process(self, item: ImageBatch) -> ImageBatch:
        return ImageBatch(item.indices, [torch.frombuffer(bytearray(b), dtype=torch.uint8)
                                         for b in item.data])


class GpuDecodeStage(Stage):
    """``torchvision.io.decode_jpeg(blobs, mode=RGB, device=device)``: the compressed bytes cross
    to the GPU and nvJPEG decodes them there. Output: (3, H, W) uint8 CUDA tensors.

    Raises :class:`TorchvisionMissingError` when made without torchvision; without CUDA it is
    ``skipped`` and raises :class:`ImagePathUnavailable` if asked to run."""

    category = "copy"
    placement = "host"

    def __init__(self, device: str = "cuda", name: str = "gpu_decode") -> None:
        _torchvision_io()
        self.device, self.name = device, name
        why = cuda_missing()
        self.skipped = f"{name} skipped: {why}" if why else None

    def process(self, item: ImageBatch) -> ImageBatch:
        if self.skipped:
            raise ImagePathUnavailable(self.skipped)
        tvio = _torchvision_io()
        images = tvio.decode_jpeg(list(item.data), mode=tvio.ImageReadMode.RGB,
                                  device=self.device)
        return ImageBatch(item.indices, list(images))


class GpuCropFlipStage(Stage):
    """The crop and flip of :class:`CropFlipStage` (same boxes, same flips) on (3, H, W) uint8
    CUDA tensors, resized bilinear (antialiased) on the GPU and stacked to (N, 3, S, S) uint8.
    Without CUDA it is ``skipped`` and raises :class:`ImagePathUnavailable` if asked to run."""

    category = "compute"
    placement = "host"

    def __init__(self, size: int = 224, seed: int = 0, name: str = "gpu_crop") -> None:
        self.size = check_int("size", size, minimum=1)
        self.seed = check_int("seed", seed, minimum=0)
        self.name = name
        why = cuda_missing()
        self.skipped = f"{name} skipped: {why}" if why else None

    def process(self, item: ImageBatch) -> torch.Tensor:
        if self.skipped:
            raise ImagePathUnavailable(self.skipped)
        out = []
        for sample, im in zip(item.indices, item.data, strict=True):
            (left, top, w, h), flip = sample_crop(int(im.shape[2]), int(im.shape[1]), sample,
                                                  self.seed)
            x = im[:, top:top + h, left:left + w].unsqueeze(0).float()
            x = torch.nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear",
                                                align_corners=False, antialias=True)
            x = x.round_().clamp_(0, 255).to(torch.uint8)[0]
            out.append(torch.flip(x, dims=[-1]) if flip else x)
        return torch.stack(out)


def gpu_image_stages(source: JpegFiles | JpegShard, *, batch_size: int = 8, crop: int = 224,
                     seed: int = 0, step_s: float = 0.0,
                     device: str = "cuda") -> list[Stage]:
    """read -> pack -> gpu_decode -> gpu_crop -> step; raises :class:`ImagePathUnavailable`
    (why, in one line) where there is no CUDA device or no torchvision."""
    why = gpu_path_missing()
    if why:
        raise ImagePathUnavailable(f"GPU decode path skipped: {why}")
    return [ReadImagesStage(source, batch_size), PackBytesStage(), GpuDecodeStage(device),
            GpuCropFlipStage(crop, seed), ComputeStage(check_float("step_s", step_s, minimum=0.0),
                                                       mode="wait", name="step")]
