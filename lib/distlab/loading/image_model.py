"""The image pipeline's models: decode cost per image, the pipeline's images/s for a number of
workers and cores, and the bytes per image that cross PCIe on each path.

**Decode cost.** Seconds to decode one JPEG = ``a + b * pixels + c * compressed_bytes``: ``a`` the
fixed cost of a call (header parsing, allocation), ``b`` the per-pixel work (inverse DCT, colour
conversion, upsampling of chroma), ``c`` the entropy decoding of the compressed stream. It is
fitted by :func:`distlab.fit.fit_terms` (the one least-squares fit: relative error, coefficients
>= 0) on timed decodes of calibration JPEGs whose sizes and noise levels vary apart, and judged on
another dataset's images. Each image is timed as a pipeline decodes it: once per round, the
images in turn, the median of the rounds (the fastest of back-to-back decodes of one image, warm
in the caches, prices decode below what a pipeline pays), on the decoding thread's CPU clock
(:data:`DECODE_CLOCK`): a decode is one thread's CPU work, and a time slice lost to another
process would cost a short decode several times its work but a long one only its share.
:func:`judge_decode_model` times the calibration images and the judged ones in the same rounds,
mixed in one fixed order, so a machine whose speed moves (a virtual machine's neighbours, a
browser drawing) slows both alike.

**Images per second.** The executors' plans (:func:`~.bottleneck.plan_for_stages`) with each
stage's seconds per batch, the decode stage's from the decode model; a process executor's worker
station gets ``min(workers, cores)`` servers, since more workers than cores share the cores. The
bound's rate times the batch size is the model's images/s, the slowest station its bottleneck.
Two measured terms join it where given:

- the **hop** of each worker's batch into the trainer (:mod:`~.hop_cost`, as in the pipeline
  benchmark): its send part on the worker station, its receive part on the thread that takes it;
- the **cores** (:class:`CoreSharing`), measured with the worker stages and nothing else to do:
  ``k`` worker processes doing the CPU stages' work (categories ``cpu`` and ``io``) at once get
  ``speedup(k)`` times one's work done (``k`` on free cores; less where the cores are shared:
  hyperthreads, a virtual machine's vCPUs, other work on the machine). For ``processes`` and
  ``torch`` with ``k = min(workers, cores)``, ``items * cpu_s / speedup(k)`` bounds the run;
  when it exceeds the plan's bound, ``cores`` is the bottleneck. For ``threads`` each CPU
  stage's cost is multiplied by ``threads_factor``: how much slower the stages run when each has
  a thread of its own at once, the cores and the GIL together.

**Bytes over PCIe** (:func:`pcie_nbytes`, a pure function): decoding on the CPU sends pixels
(the crop's ``crop * crop * 3`` bytes, or the whole image's ``width * height * 3`` if the GPU
crops); decoding on the GPU (nvJPEG) sends the compressed file. Units: seconds, pixels, bytes.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distlab._checks import check_choice, check_float, check_int
from distlab.fit import fit_terms
from distlab.loading.bottleneck import bottleneck, bound_s, measured_costs, plan_for_stages
from distlab.loading.executors import make_executor
from distlab.loading.image_data import jpeg_size
from distlab.loading.image_stages import decode_pillow
from distlab.loading.procs import split_stages
from distlab.loading.stage import Stage
from distlab.loading.synthetic_stages import SleepStage

__all__ = ["CPU_CATEGORIES", "PCIE_PATHS", "CoreSharing", "DecodeModel", "concurrency",
           "DecodeJudgement", "decode_costs", "fit_decode_model", "judge_decode_model",
           "measure_core_sharing", "measure_decode_model", "measure_worker_cpu_s", "model_row",
           "pcie_nbytes", "time_decode_sets", "time_decodes", "DECODE_CLOCK"]

def _decode_clock() -> Callable[[], float]:
    fine = time.get_clock_info("thread_time").resolution <= 1e-6
    return time.thread_time if fine else time.perf_counter


DECODE_CLOCK: Callable[[], float] = _decode_clock()
"""The clock a CPU decode is timed on (seconds): the calling thread's CPU time
(``time.thread_time``), or wall time where that clock is coarser than a microsecond (Windows
counts it in timer ticks). A decode is one thread's CPU work, so its cost is what one free core
pays; on wall time another process holding the core meanwhile is charged to it, and more to a
short decode than a long one (a lost time slice is several short decodes' work). Measured here,
2 cores beside five busy loops, four tries: the decode model judged on wall time came to
0.36-1.29 of the measured seconds on its two sets (median 0.58; CI's loaded browser run: 0.27
and 0.29), on this clock 0.86-1.05."""


CPU_CATEGORIES = ("cpu", "io")
"""Stage categories whose time is CPU work that the cores must do (read, decode, crop, collate);
pinning, copies to the device and the step are not counted."""


@dataclass(frozen=True)
class DecodeModel:
    """Seconds per decoded image = ``per_image_s + per_pixel_s * pixels + per_byte_s * nbytes``.

    Attributes:
        per_image_s: fixed seconds per image.
        per_pixel_s: seconds per pixel.
        per_byte_s: seconds per compressed byte.
        r2, max_rel_residual: the fit's quality on its own points.
        points: images the fit was made on.
    """

    per_image_s: float
    per_pixel_s: float
    per_byte_s: float
    r2: float = 1.0
    max_rel_residual: float = 0.0
    points: int = 0

    def seconds(self, pixels: float, nbytes: float) -> float:
        """Predicted seconds to decode one image of ``pixels`` pixels and ``nbytes`` bytes."""
        return self.per_image_s + self.per_pixel_s * pixels + self.per_byte_s * nbytes

    def images_per_s(self, pixels: float, nbytes: float, cores: int = 1) -> float:
        """Images decoded per second by ``cores`` cores decoding apart (decode alone)."""
        return check_int("cores", cores, minimum=1) / self.seconds(pixels, nbytes)

    def describe(self) -> str:
        """``0.10 ms + 3.1 ns/pixel + 1.2 ns/B`` and the fit's quality, in one line."""
        return (f"{self.per_image_s * 1e3:.3f} ms + {self.per_pixel_s * 1e9:.2f} ns/pixel + "
                f"{self.per_byte_s * 1e9:.2f} ns/B (r2 {self.r2:.3f} on {self.points} images)")


def fit_decode_model(pixels: Sequence[float], nbytes: Sequence[float],
                     seconds: Sequence[float]) -> DecodeModel:
    """Fit :class:`DecodeModel` to decode times (seconds, > 0) of images of ``pixels`` pixels
    and ``nbytes`` compressed bytes (all three of one length >= 3)."""
    px, nb = np.asarray(pixels, dtype=float), np.asarray(nbytes, dtype=float)
    if px.ndim != 1 or px.size < 3 or px.shape != nb.shape or px.size != len(seconds):
        raise ValueError(f"pixels, nbytes and seconds must be of one length >= 3, got "
                         f"{px.size}, {nb.size}, {len(seconds)}")
    f = fit_terms({"image": np.ones_like(px), "pixel": px, "byte": nb}, seconds)
    return DecodeModel(f.coef["image"], f.coef["pixel"], f.coef["byte"], f.r2,
                       f.max_rel_residual, int(px.size))


def time_decodes(blobs: Sequence[bytes], *, repeats: int = 3,
                 decode: Callable[[bytes], Any] = decode_pillow,
                 clock: Callable[[], float] | None = None) -> list[float]:
    """Seconds to decode each JPEG of ``blobs`` with ``decode``, as a pipeline decodes them:
    ``repeats`` rounds, each decoding every image once in turn (so an image is never decoded
    twice in a row, warm in the caches); each image's median over the rounds. ``clock``: what
    is read around each decode, :data:`DECODE_CLOCK` (the thread's CPU seconds) unless given; a
    decode that waits on a device must pass a wall clock (``time.perf_counter``)."""
    repeats = check_int("repeats", repeats, minimum=1)
    now = DECODE_CLOCK if clock is None else clock
    rounds: list[list[float]] = [[] for _ in blobs]
    for _ in range(repeats):
        for i, blob in enumerate(blobs):
            t = now()
            decode(blob)
            rounds[i].append(now() - t)
    return [statistics.median(r) for r in rounds]


def measure_decode_model(blobs: Sequence[bytes], *, repeats: int = 3,
                         decode: Callable[[bytes], Any] = decode_pillow) -> DecodeModel:
    """Time ``blobs`` (:func:`time_decodes`) and fit the decode model to them."""
    sizes = [jpeg_size(b) for b in blobs]
    return fit_decode_model([w * h for w, h in sizes], [len(b) for b in blobs],
                            time_decodes(blobs, repeats=repeats, decode=decode))


def time_decode_sets(sets: Mapping[str, Sequence[bytes]], *, repeats: int = 3,
                     decode: Callable[[bytes], Any] = decode_pillow, seed: int = 0,
                     clock: Callable[[], float] | None = None) -> dict[str, list[float]]:
    """Seconds to decode each JPEG of every set of ``sets`` (name -> blobs), all timed in the
    same rounds (:func:`time_decodes`): each round decodes every image of every set once, in one
    order that mixes the sets (shuffled with ``seed``, the same each round), so a stretch of a
    slower machine falls on every set alike; ``clock`` as there. Returns each set's per-image
    medians, in its order."""
    flat = [(name, i) for name, blobs in sets.items() for i in range(len(blobs))]
    random.Random(seed).shuffle(flat)
    seconds = time_decodes([sets[name][i] for name, i in flat], repeats=repeats, decode=decode,
                           clock=clock)
    out: dict[str, list[float]] = {name: [0.0] * len(blobs) for name, blobs in sets.items()}
    for (name, i), sec in zip(flat, seconds, strict=True):
        out[name][i] = sec
    return out


@dataclass(frozen=True)
class DecodeJudgement:
    """The decode model fitted on calibration images and judged on other sets, all timed in the
    same rounds (:func:`judge_decode_model`). ``measured_s``: each judged set's median seconds per
    image; ``predicted_s``: the model's seconds for that set's mean pixels and compressed bytes."""

    model: DecodeModel
    measured_s: Mapping[str, float]
    predicted_s: Mapping[str, float]


def judge_decode_model(calibration: Sequence[bytes], judged: Mapping[str, Sequence[bytes]], *,
                       repeats: int = 3, decode: Callable[[bytes], Any] = decode_pillow,
                       ) -> DecodeJudgement:
    """Fit the decode model on ``calibration`` (>= 3 JPEGs) and judge it on each set of
    ``judged`` (name -> non-empty JPEGs, not fitted on), every image timed in the same rounds
    (:func:`time_decode_sets`)."""
    if "calibration" in judged:
        raise ValueError("a judged set may not be named 'calibration'")
    empty = [name for name, blobs in judged.items() if not blobs]
    if empty:
        raise ValueError(f"judged sets need at least one JPEG each; empty: {empty}")
    times = time_decode_sets({"calibration": calibration, **judged}, repeats=repeats,
                             decode=decode)
    sizes = [jpeg_size(b) for b in calibration]
    model = fit_decode_model([w * h for w, h in sizes], [len(b) for b in calibration],
                             times["calibration"])
    measured: dict[str, float] = {}
    predicted: dict[str, float] = {}
    for name, blobs in judged.items():
        measured[name] = statistics.median(times[name])
        pixels = [w * h for w, h in map(jpeg_size, blobs)]     # the model is linear: its mean
        predicted[name] = model.seconds(statistics.fmean(pixels),
                                        statistics.fmean(len(b) for b in blobs))
    return DecodeJudgement(model, measured, predicted)


PCIE_PATHS: dict[str, str] = {
    "cpu_decode": "the uint8 crop (CPU decodes and crops)",
    "cpu_decode_gpu_crop": "the whole decoded image (CPU decodes, GPU crops)",
    "gpu_decode": "the JPEG file (GPU decodes with nvJPEG and crops)",
}
"""What crosses PCIe for each image, by where decode and crop run."""


def pcie_nbytes(path: str, *, jpeg_nbytes: int, width: int, height: int, crop: int = 224,
                channels: int = 3) -> int:
    """Bytes one image puts on PCIe on ``path`` (one of :data:`PCIE_PATHS`): uint8 pixels for
    the CPU paths (``crop * crop * channels``, or ``width * height * channels``), the compressed
    file (``jpeg_nbytes``) for GPU decode."""
    check_choice("path", path, PCIE_PATHS)
    jpeg_nbytes = check_int("jpeg_nbytes", jpeg_nbytes, minimum=1)
    width = check_int("width", width, minimum=1)
    height = check_int("height", height, minimum=1)
    crop = check_int("crop", crop, minimum=1)
    channels = check_int("channels", channels, minimum=1)
    if path == "cpu_decode":
        return crop * crop * channels
    if path == "cpu_decode_gpu_crop":
        return width * height * channels
    return jpeg_nbytes


@dataclass(frozen=True)
class CoreSharing:
    """How the CPU stages' work is shared when several processes or threads do it at once.

    ``seconds[k]``: mean seconds per batch of the worker stages while ``k`` worker processes do
    them at once (``seconds[1]``: one alone). ``speedup(k) = k * seconds[1] / seconds[k]``: the
    work ``k`` processes get done per second over one's; ``k`` on ``k`` free cores, less where
    the cores are shared (hyperthreads, a virtual machine's vCPUs, other work on the machine).
    ``threads_factor``: the CPU stages' seconds per batch when each runs in a thread of its own
    at once (the ``threads`` executor) over the same stages run one after another in one thread:
    the cores and the GIL together. Measured by :func:`measure_core_sharing`; :meth:`ideal` is
    free cores and no GIL.
    """

    seconds: Mapping[int, float]
    threads_factor: float = 1.0

    @classmethod
    def ideal(cls, cores: int) -> CoreSharing:
        """``cores`` free cores: ``speedup(k) == k`` for ``k <= cores``; threads never wait."""
        return cls({k: 1.0 for k in range(1, check_int("cores", cores, minimum=1) + 1)})

    def speedup(self, k: int) -> float:
        """Work per second of ``k`` processes at once over one's (``k`` must be measured)."""
        k = check_int("k", k, minimum=1)
        if k not in self.seconds or 1 not in self.seconds:
            raise ValueError(f"k={k} processes at once was not measured (measured: "
                             f"{sorted(self.seconds)}); measure it with measure_core_sharing")
        return k * self.seconds[1] / self.seconds[k]

    def describe(self) -> str:
        """``processes: 2 at once 1.84x one; threads: each stage 1.70x slower``, one line."""
        procs = ", ".join(f"{k} at once {self.speedup(k):.2f}x one"
                          for k in sorted(self.seconds) if k > 1) or "one alone only"
        return (f"processes: {procs}; threads: the CPU stages each {self.threads_factor:.2f}x "
                "as slow as alone")


def measure_core_sharing(stages: Sequence[Stage], counts: Iterable[int], *,
                         items_per_worker: int = 4, queue_depth: int = 2) -> CoreSharing:
    """Measure :class:`CoreSharing` for the worker stages of ``stages`` (the leading ``worker``
    ones, as the process executors split them), followed by a consumer that does nothing:

    - for every ``k`` of ``counts`` (and 1): ``k`` worker processes run them, all at once;
      ``seconds[k]`` is their mean seconds per batch on the Timeline of a timed run of
      ``k * items_per_worker`` batches (after an untimed one that starts the workers);
    - ``threads_factor``: the CPU stages' (:data:`CPU_CATEGORIES`) seconds per batch on the
      ``threads`` executor over those of a ``sync`` run in this process, ``2 *
      items_per_worker`` batches each.
    """
    wstages, _, _ = split_stages(list(stages), 1)
    if not wstages:
        raise ValueError("stages has no leading worker stage to measure")
    items_per_worker = check_int("items_per_worker", items_per_worker, minimum=1)
    ks = sorted({1, *(check_int("counts", k, minimum=1) for k in counts)})
    line = [*wstages, SleepStage(0.0, name="consume")]
    names = [s.name for s in wstages]
    seconds = {}
    for k in ks:
        with make_executor("processes", workers=k, queue_depth=queue_depth) as ex:
            ex.run(line, k)
            res = ex.run(line, k * items_per_worker)
        seconds[k] = float(sum(measured_costs(res.timeline, names)))
    cpu = [s.name for s in wstages if s.category in CPU_CATEGORIES]
    per_run = {}
    for name in ("sync", "threads"):
        with make_executor(name, queue_depth=queue_depth) as ex:
            ex.run(line, 1)
            res = ex.run(line, 2 * items_per_worker)
        per_run[name] = float(sum(measured_costs(res.timeline, cpu)))
    factor = per_run["threads"] / per_run["sync"] if per_run["sync"] > 0 else 1.0
    return CoreSharing(seconds, factor)


def measure_worker_cpu_s(stages: Sequence[Stage], items: int, *, warmup: int = 1) -> float:
    """CPU seconds per batch of the leading ``worker`` stages of ``stages`` (a line ending with
    its consumer, split as the process executors split it), run by the ``sync`` executor in this
    process: this process's CPU time over ``items`` batches (after ``warmup`` untimed ones),
    divided by ``items``.

    CPU time, not wall time: another program busy on the cores (a browser drawing a notebook's
    figures, a test suite) lengthens the stages' wall time while it lasts, not their CPU time, so
    a cost priced from it does not depend on what else ran at that moment. Stages that wait
    (sleep, I/O not in the page cache) cost their wall time and only part of it here.
    """
    wstages, _, _ = split_stages(list(stages), 1)
    if not wstages:
        raise ValueError("stages has no leading worker stage to measure")
    items = check_int("items", items, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    line = [*wstages, SleepStage(0.0, name="consume")]
    with make_executor("sync") as ex:
        if warmup:
            ex.run(line, warmup)
        start = time.process_time()
        ex.run(line, items)
        return (time.process_time() - start) / items


def concurrency(executor: str, stages: Sequence[Any], *, workers: int,
                cores: int | None = None) -> int:
    """How many threads or processes of ``executor`` do the CPU stages' work at once: 1 for
    ``sync``, ``min(CPU stages, cores)`` for ``threads`` (one thread per stage),
    ``min(workers, cores)`` (at least 1) for ``processes`` and ``torch`` (the ``k`` of the cores
    term)."""
    cores = check_int("cores", cores if cores is not None else (os.cpu_count() or 1), minimum=1)
    if executor == "sync":
        return 1
    if executor == "threads":
        return min(max(1, sum(st.category in CPU_CATEGORIES for st in stages)), cores)
    return max(1, min(check_int("workers", workers, minimum=0), cores))


def model_row(stages: Sequence[Any], costs_s: Sequence[float], executor: str, *, workers: int,
              items: int, batch_size: int, queue_depth: int = 2, cores: int | None = None,
              sharing: CoreSharing | None = None, hop_s: float = 0.0,
              hop_send_s: float = 0.0) -> dict[str, Any]:
    """The model of one executor on the image stages.

    Args:
        stages: the stage list (names, placements, categories).
        costs_s: seconds per batch of each stage (e.g. measured, with the decode stage's from
            :class:`DecodeModel`).
        executor: one of the plan executors (``sync``, ``threads``, ``processes``, ``torch``).
        workers: worker processes; a process executor's worker station gets
            ``min(workers, cores)`` servers.
        items, batch_size: batches in the run and images per batch.
        cores: CPU cores (default: ``os.cpu_count()``).
        sharing: the cores term (module docstring); None leaves it out.
        hop_s, hop_send_s: seconds per batch of the hop into the trainer (receive part, worker's
            part), as :func:`~.bottleneck.plan_for` takes them; 0 leaves it out.

    Returns: ``plan`` (stations), ``servers``, ``bound_s`` (seconds for ``items`` batches),
    ``images_per_s`` (``items * batch_size / bound_s``), ``bottleneck`` (the slowest station's
    name: ``worker`` for the fused worker stages; ``all (one thread)`` for a one-station plan;
    ``cores`` when the cores term bounds), ``stations`` (``(name, seconds per batch per
    server)`` of the plan, and ``("cores", cpu_s / speedup)`` with the cores term: the largest is
    the bottleneck), ``concurrency`` (``c``) and ``cores_s`` (``cpu_s / speedup(c)`` per batch,
    0.0 without the term).
    """
    cores = check_int("cores", cores if cores is not None else (os.cpu_count() or 1), minimum=1)
    items = check_int("items", items, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    servers = min(check_int("workers", workers, minimum=0), cores)
    costs = [float(c) for c in costs_s]
    if len(costs) != len(stages):
        raise ValueError(f"costs_s must give one cost per stage ({len(stages)}), got "
                         f"{len(costs)}")
    cpu = [st.category in CPU_CATEGORIES for st in stages]
    if sharing is not None and executor == "threads":
        costs = [c * sharing.threads_factor if is_cpu else c
                 for c, is_cpu in zip(costs, cpu, strict=True)]
    plan = plan_for_stages(executor, stages, workers=servers, queue_depth=queue_depth,
                           costs_s=costs, hop_s=check_float("hop_s", hop_s, minimum=0.0),
                           hop_send_s=check_float("hop_send_s", hop_send_s, minimum=0.0))
    b = bound_s(plan, items)
    neck = bottleneck(plan).name if len(plan) > 1 else "all (one thread)"
    stations = [(st.name, float(st.cost_s) / st.workers) for st in plan]
    c = concurrency(executor, stages, workers=workers, cores=cores)
    cores_s = 0.0
    if sharing is not None and executor in ("processes", "torch"):
        cores_s = sum(x for x, is_cpu in zip(costs, cpu, strict=True) if is_cpu) \
            / sharing.speedup(c)
        stations.append(("cores", cores_s))
        if items * cores_s > b:
            b, neck = items * cores_s, "cores"
    return {"plan": plan, "servers": servers, "bound_s": b,
            "images_per_s": items * batch_size / b if b > 0 else float("inf"),
            "bottleneck": neck, "stations": stations, "concurrency": c,
            "cores_s": cores_s}


def decode_costs(costs_s: Mapping[str, float], model: DecodeModel, *, pixels: float,
                 nbytes: float, batch_size: int, decode_stage: str = "decode",
                 base_pixels: float | None = None,
                 per_pixel_stages: Sequence[str] = ("crop",)) -> list[float]:
    """``costs_s`` (stage -> seconds per batch) as a list, the decode stage's replaced by the
    model's ``batch_size * model.seconds(pixels, nbytes)``.

    With ``base_pixels`` (the pixels of the images ``costs_s`` were measured on), the stages in
    ``per_pixel_stages`` are scaled by ``pixels / base_pixels``: a random-resized crop reads a
    box that is on average a fixed fraction of the image, so its cost grows with the image.
    """
    if decode_stage not in costs_s:
        raise ValueError(f"costs_s has no stage {decode_stage!r}: {list(costs_s)}")
    scale = pixels / base_pixels if base_pixels else 1.0
    return [batch_size * model.seconds(pixels, nbytes) if name == decode_stage
            else float(c) * (scale if name in per_pixel_stages else 1.0)
            for name, c in costs_s.items()]
