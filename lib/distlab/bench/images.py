"""Real images through the loading pipeline: JPEG decode, crop and flip on every executor.

    python -m distlab.bench images --variant imagenet --images 64 --batch-size 8 --items 16 \\
        --workers 1,2 --step-ms 15 --repeats 3 --json results/images_cpu.json

Workload: ``--images`` seeded synthetic JPEGs (:mod:`distlab.loading.image_data`; ``imagenet``
is 500 x 375 at quality 90, ``large`` 1600 x 1200), read from one tar shard (or the folder of
files), through read -> decode (Pillow) -> random-resized crop + flip -> collate (uint8
N x 3 x crop x crop) -> pin -> h2d -> step (:mod:`distlab.loading.image_stages`). ``step`` is the
training step, ``--step-ms`` per batch (a sleep where there is no GPU: the host waits on the
device). Every executor runs the same batches in this one process run: warm-up runs first (they
also start worker processes), then ``--repeats`` timed runs; the table shows medians. The
``processes`` and ``torch`` executors run once per ``--workers`` count.

Columns: ``start(s)`` worker start-up of the first run, apart; ``img/s`` images per second of the
steady pipeline; ``bound img/s`` the pipeline model's bound with the stage costs measured in the
sync runs; ``model img/s`` the same with the decode stage priced by the decode model (``a + b *
pixels + c * bytes`` per image, fitted on calibration JPEGs of other sizes, never on this dataset);
``err%`` = :func:`distlab.vocabulary.bandwidth_error_pct` of img/s against the model's, (model -
img/s) / img/s in percent (positive: slower than the model); ``bottleneck`` the model's slowest
station (``worker``: the fused worker stages; ``cores``: the cores term). Both model columns cap a
process executor's workers at the cores and include two terms measured before the runs
(:mod:`distlab.loading.image_model`): the hop of each worker's batch into the trainer
(:mod:`distlab.loading.hop_cost`), and how the cores share the CPU stages' work: the worker stages
run in ``k`` worker processes at once, and each in a thread of its own, with nothing else to do (the
``threads`` row's stages are priced with the second, which includes the GIL). The tail gives the
model's error without each term; ``--no-terms`` leaves both out.

Bytes over PCIe per image on each path (:func:`distlab.loading.image_model.pcie_nbytes`) are a
second table. The GPU paths (``torchvision.io.decode_jpeg(device="cuda")``, NVIDIA DALI) run only
where CUDA (and torchvision, DALI) exist; elsewhere each is one ``skipped`` line with the reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from distlab._checks import check_float, check_int
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.bench.loading import stage_costs_lines, wrap_lines
from distlab.cli import options
from distlab.loading.bottleneck import measured_costs, startup_s
from distlab.loading.executors import EXECUTORS, RunResult, make_executor
from distlab.loading.hop_cost import HopCost, measure_hop_cost, worker_output_nbytes
from distlab.loading.image_data import (
    VARIANTS,
    ImageDataset,
    calibration_jpegs,
    write_image_dataset,
)
from distlab.loading.image_model import (
    PCIE_PATHS,
    CoreSharing,
    DecodeModel,
    concurrency,
    decode_costs,
    judge_decode_model,
    measure_core_sharing,
    model_row,
    pcie_nbytes,
    time_decodes,
)
from distlab.loading.image_stages import (
    cpu_image_stages,
    cuda_missing,
    decode_pillow,
    decode_torchvision,
    gpu_image_stages,
    gpu_path_missing,
    torchvision_missing,
)
from distlab.loading.procs import split_stages
from distlab.loading.stage import Stage
from distlab.report.table import Column, Table
from distlab.vocabulary import ErrorSummary, bandwidth_error_pct, error_pct, size_in

__all__ = ["BENCHMARK", "COLUMNS", "DECODE_COLUMNS", "PCIE_COLUMNS", "ImageRun",
           "ImagesBenchmark", "ImagesConfig", "dali_missing", "decode_paths", "image_rows",
           "StepCalibration", "calibrate_step", "main", "pcie_rows", "run_configs", "skipped_lines",
           "worker_configs"]

COLUMNS = (Column("executor", "executor", width=9), Column("decoder", "decoder"),
           Column("workers", "workers"), Column("start(s)", "startup_s", ".2f"),
           Column("img/s", "images_per_s", ".1f"),
           Column("bound img/s", "bound_images_per_s", ".1f"),
           Column("model img/s", "model_images_per_s", ".1f"),
           Column("err%", "model_error_pct", "+.1f"), Column("bottleneck", "bottleneck"))
PCIE_COLUMNS = (Column("path", "path"), Column("B/image", "nbytes", ".0f"),
                Column("x JPEG", "ratio", ".2f"), Column("GB/s", "gbps", ".3f"),
                Column("what crosses PCIe", "what"))
DECODE_COLUMNS = (Column("decoder", "decoder"), Column("device", "device"),
                  Column("ms/image", "seconds", ".3f", 1e3),
                  Column("img/s per core", "images_per_s", ".0f"))


def _nonnegative_ms(text: str) -> float:
    """A finite number >= 0 (milliseconds)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be a finite number >= 0")
    return value


_nonnegative_ms.__name__ = "number>=0"

MAX_CROP = 4096
"""Largest ``--crop`` side, pixels."""
MAX_BATCH_NBYTES = 1 << 30
"""Largest collated batch (``batch * crop * crop * 3`` bytes): several are in flight at once."""


@dataclass(frozen=True)
class ImagesConfig(BenchConfig):
    """Options of ``python -m distlab.bench images``."""

    variant: str = opt("imagenet", "--variant", choices=tuple(VARIANTS),
                       help="image size: imagenet (500x375), large (1600x1200) or tiny (96x72)")
    images: int = opt(64, "--images", type=options.positive_int,
                      help="seeded synthetic JPEGs in the dataset")
    layout: str = opt("shard", "--layout", choices=("shard", "folder"),
                      help="read the JPEGs from one tar shard or from the folder of files")
    batch_size: int = opt(8, "--batch-size", type=options.positive_int, help="images per batch")
    items: int = opt(16, "--items", type=options.positive_int, help="batches per run")
    crop: int = opt(224, "--crop", type=options.positive_int,
                    help="side of the random-resized crop, pixels")
    workers: tuple[int, ...] = opt((1, 2), "--workers", type=options.int_list(1),
                                   help="worker counts of the processes and torch executors")
    step_ms: float = opt(15.0, "--step-ms", type=_nonnegative_ms,
                         help="training step per batch, milliseconds (a sleep without a GPU)")
    queue_depth: int = opt(2, "--queue-depth", type=options.positive_int,
                           help="bounded queue depth between stages (batches)")
    repeats: int = opt(3, "--repeats", type=options.positive_int,
                       help="timed runs per executor (the table shows medians)")
    warmup: int = opt(1, "--warmup", type=options.nonnegative_int,
                      help="untimed runs per executor before the timed ones")
    executors: tuple[str, ...] = opt(tuple(EXECUTORS), "--executors",
                                     type=options.comma_choices(EXECUTORS, all_word="all"),
                                     help=f"comma-separated subset of {','.join(EXECUTORS)} "
                                          "(or all)")
    seed: int = opt(0, "--seed", type=options.nonnegative_int,
                    help="seed of the dataset and of the crops")
    torch_threads: int = opt(1, "--torch-threads", type=options.positive_int,
                             help="torch intra-op threads in this process")
    no_terms: bool = opt(False, "--no-terms", action="store_true",
                         help="leave the measured hop and core-sharing terms out of the models "
                              "(and skip measuring them)")


@dataclass
class ImageRun:
    """One executor setting's runs: its label, the median run and the first run's start-up."""

    executor: str
    workers: int
    decoder: str
    median: RunResult
    startup_s: float
    walls_s: list[float] = field(default_factory=list)


def worker_configs(executors: Sequence[str], workers: Sequence[int]) -> list[tuple[str, int]]:
    """``(executor, workers)`` pairs: sync first (it measures the stage costs), sync and threads
    once (workers 0), the process executors once per worker count."""
    out = []
    for name in dict.fromkeys(["sync", *executors]):
        counts = list(workers) if name in ("processes", "torch") else [0]
        out += [(name, int(w)) for w in counts]
    return out


def run_configs(stages: Sequence[Stage], items: int, configs: Sequence[tuple[str, int]], *,
                decoder: str = "pillow", queue_depth: int = 2, repeats: int = 3,
                warmup: int = 1, on_run: Callable[[], None] | None = None) -> list[ImageRun]:
    """Run ``stages`` on every ``(executor, workers)`` of ``configs``: ``warmup`` untimed runs
    (the first starts any worker process; its start-up is kept apart), then ``repeats`` timed
    runs of ``items`` batches; the run with the median wall time is kept."""
    out = []
    for name, workers in configs:
        runs: list[RunResult] = []
        first = 0.0
        with make_executor(name, queue_depth=queue_depth, workers=workers) as ex:
            for i in range(warmup + repeats):
                res = ex.run(stages, items)
                if i == 0:
                    first = startup_s(res)
                if i >= warmup:
                    runs.append(res)
                if on_run is not None:
                    on_run()
        ordered = sorted(runs, key=lambda r: r.wall_s)
        out.append(ImageRun(name, workers, decoder, ordered[(len(ordered) - 1) // 2], first,
                            [r.wall_s for r in runs]))
    return out


@dataclass(frozen=True)
class StepCalibration:
    """A step set so that the worker stages take ``ratio`` times as long as it, checked on the
    sync run that prices the stages (:func:`calibrate_step`).

    ``step_s``: the step's seconds per batch; ``stages``: the line with that step; ``run``: the
    sync run (its median) whose stage costs met the ratio, or the last one tried; ``ratios``: the
    worker stages' seconds over the step's, as measured in each sync run tried (the last met
    the band unless ``met`` is False)."""

    step_s: float
    stages: list[Stage]
    run: ImageRun
    ratios: list[float]
    met: bool

    def describe(self) -> str:
        """One line: the step, the measured ratio and how many sync runs it took."""
        tried = len(self.ratios)
        runs = "the first sync run" if tried == 1 else f"sync run {tried} of {tried}"
        state = "" if self.met else " (outside the band: the machine's speed kept changing)"
        return (f"step {self.step_s * 1e3:.1f} ms per batch; the worker stages "
                f"{self.ratios[-1]:.2f}x the step in {runs}{state}")


def calibrate_step(make_stages: Callable[[float], list[Stage]], items: int, first_worker_s: float,
                   *, ratio: float = 2 ** 0.5, band: tuple[float, float] = (1.15, 1.75),
                   tries: int = 4, repeats: int = 3, warmup: int = 1) -> StepCalibration:
    """Set the step to ``worker / ratio`` and check it on the sync run that prices the stages.

    ``make_stages(step_s)`` builds the line with a step of ``step_s`` seconds per batch;
    ``first_worker_s`` is a first price of the leading worker stages (seconds per batch, e.g.
    :func:`~distlab.loading.image_model.measure_worker_cpu_s`). Each try sets ``step_s =
    worker / ratio``, runs the line on the sync executor (``warmup`` untimed runs, the median of
    ``repeats`` timed ones, ``items`` batches each) and measures both on its Timeline; when the
    worker stages' seconds over the step's fall inside ``band`` the run is kept, otherwise the
    next try prices the worker stages with this run's cost. A machine whose speed moves by a
    third between one run and the next (a virtual machine's neighbours, another program) thus
    gets a step that fits the speed it runs at; after ``tries`` the last run is returned with
    ``met`` False.
    """
    worker_s = check_float("first_worker_s", first_worker_s, minimum=0.0)
    if worker_s <= 0:
        raise ValueError("first_worker_s must be > 0 seconds per batch")
    ratio = check_float("ratio", ratio, minimum=0.0)
    low, high = (float(b) for b in band)
    if not 0 < low < ratio < high:
        raise ValueError(f"band must hold the ratio: 0 < {low} < {ratio} < {high} is false")
    tries = check_int("tries", tries, minimum=1)
    ratios: list[float] = []
    for _ in range(tries):
        step_s = worker_s / ratio
        stages = make_stages(step_s)
        names = [s.name for s in stages]
        wstages, _, consumer = split_stages(list(stages), 1)
        if not wstages:
            raise ValueError("make_stages built no leading worker stage to price")
        (run,) = run_configs(stages, items, [("sync", 0)], repeats=repeats, warmup=warmup)
        costs = dict(zip(names, measured_costs(run.median.timeline, names), strict=True))
        worker_s = sum(costs[s.name] for s in wstages)
        ratios.append(worker_s / costs[consumer.name] if costs[consumer.name] > 0
                      else float("inf"))
        if low <= ratios[-1] <= high:
            return StepCalibration(step_s, stages, run, ratios, True)
    return StepCalibration(step_s, stages, run, ratios, False)


def image_rows(runs: Sequence[ImageRun], stages: Sequence[Stage], *, batch_size: int,
               decode_model: DecodeModel | None = None, pixels: float = 0.0,
               nbytes: float = 0.0, queue_depth: int = 2, cores: int | None = None,
               sharing: CoreSharing | None = None,
               hop: HopCost | None = None) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The table rows of ``runs`` (the first must be a sync run: it gives the stage costs) and
    the stage costs (stage -> mean seconds per batch over the sync run's batches).

    Each row: ``images_per_s`` measured; ``bound_images_per_s`` and ``bottleneck`` from the
    executor's plan with the measured costs; with a ``decode_model`` also ``model_images_per_s``
    (the decode stage priced by the model for images of ``pixels`` pixels and ``nbytes`` bytes),
    ``model_bottleneck`` and ``model_error_pct``
    (:func:`~distlab.vocabulary.bandwidth_error_pct` of the measured images/s against the
    model's: percent, positive when the run was slower); ``stations``:
    :func:`~distlab.loading.image_model.model_row`'s stations with the measured costs (the
    largest is the bottleneck). ``sharing`` and ``hop`` are the measured terms (None: left out);
    with either, ``model_error_pct_without`` maps ``"cores"``, ``"hop"`` and ``"both"`` to the
    model's error with that term (those terms) left out."""
    if not runs or runs[0].executor != "sync":
        raise ValueError("runs must start with a sync run (it measures the stage costs)")
    names = [s.name for s in stages]
    costs = dict(zip(names, measured_costs(runs[0].median.timeline, names), strict=True))
    rows = []
    for r in runs:
        items = r.median.n_items
        measured = items * batch_size / r.median.wall_s if r.median.wall_s > 0 else 0.0

        def plan(stage_costs: Sequence[float], *, use_sharing: bool = True,
                 use_hop: bool = True, executor: str = r.executor,
                 workers: int = r.workers, items: int = items) -> dict[str, Any]:
            return model_row(stages, stage_costs, executor, workers=workers, items=items,
                             batch_size=batch_size, queue_depth=queue_depth, cores=cores,
                             sharing=sharing if use_sharing else None,
                             hop_s=hop.receive_s if hop and use_hop else 0.0,
                             hop_send_s=hop.send_s if hop and use_hop else 0.0)

        bound = plan(list(costs.values()))
        row: dict[str, Any] = {
            "executor": r.executor, "decoder": r.decoder,
            "workers": r.workers if r.executor in ("processes", "torch") else None,
            "startup_s": r.startup_s if r.executor in ("processes", "torch") else None,
            "wall_s": r.median.wall_s, "images_per_s": measured,
            "bound_images_per_s": bound["images_per_s"], "bottleneck": bound["bottleneck"],
            "stations": bound["stations"],
            "model_images_per_s": None, "model_error_pct": None,
            "stage_costs_s": measured_costs(r.median.timeline, names)}
        if decode_model is not None and r.decoder == "pillow" and measured:
            mc = decode_costs(costs, decode_model, pixels=pixels, nbytes=nbytes,
                              batch_size=batch_size)
            model = plan(mc)
            row["model_images_per_s"] = model["images_per_s"]
            row["model_bottleneck"] = model["bottleneck"]
            row["model_error_pct"] = bandwidth_error_pct(measured, model["images_per_s"])
            if sharing is not None or hop is not None:
                row["model_error_pct_without"] = {
                    name: bandwidth_error_pct(
                        measured, plan(mc, use_sharing=sh, use_hop=hp)["images_per_s"])
                    for name, sh, hp in (("cores", False, True), ("hop", True, False),
                                         ("both", False, False))}
        rows.append(row)
    return rows, costs


def pcie_rows(*, jpeg_nbytes: float, width: int, height: int, crop: int,
              images_per_s: float | None = None) -> list[dict[str, Any]]:
    """Bytes per image over PCIe on every path (:data:`PCIE_PATHS`), the ratio to the GPU-decode
    path's, and the GB/s that ``images_per_s`` images per second would need."""
    rows = []
    gpu = pcie_nbytes("gpu_decode", jpeg_nbytes=round(jpeg_nbytes), width=width, height=height,
                      crop=crop)
    for path, what in PCIE_PATHS.items():
        n = pcie_nbytes(path, jpeg_nbytes=round(jpeg_nbytes), width=width, height=height,
                        crop=crop)
        rows.append({"path": path, "nbytes": n, "ratio": n / gpu, "what": what,
                     "gbps": n * images_per_s / 1e9 if images_per_s else None})
    return rows


def decode_paths(blobs: Sequence[bytes], *, repeats: int = 3) -> list[dict[str, Any]]:
    """Each decoder on ``blobs`` alone (no pipeline): Pillow and ``torchvision.io.decode_jpeg``
    on the CPU, ``decode_jpeg(device="cuda")`` (nvJPEG, timed to the device's end) and NVIDIA
    DALI. Rows: ``decoder``, ``device``, ``seconds`` (median over the images of each one's median
    over ``repeats`` rounds, :func:`~distlab.loading.image_model.time_decodes`: the thread's CPU
    seconds on the CPU, wall seconds to the device's end on the GPU), ``images_per_s`` (one core
    or one GPU), ``skipped`` (None, or why it did not run here)."""
    rows: list[dict[str, Any]] = []

    def row(decoder: str, device: str, skipped: str | None,
            decode: Callable[[bytes], Any] | None) -> None:
        clock = time.perf_counter if device == "cuda" else None   # a device decode's wall time
        sec = statistics.median(time_decodes(blobs, repeats=repeats, decode=decode,
                                             clock=clock)) \
            if decode is not None and skipped is None else None
        rows.append({"decoder": decoder, "device": device, "seconds": sec,
                     "images_per_s": 1.0 / sec if sec else None, "skipped": skipped})

    row("Pillow", "cpu", None, decode_pillow)
    tv = torchvision_missing()
    row("torchvision", "cpu", tv, None if tv else decode_torchvision)

    def on_gpu(data: bytes) -> None:
        decode_torchvision(data, "cuda")
        torch.cuda.synchronize()

    gpu = gpu_path_missing()
    row("torchvision nvJPEG", "cuda", gpu, None if gpu else on_gpu)
    row("NVIDIA DALI", "cuda", dali_missing(), None)
    return rows


def dali_missing() -> str:
    """Why NVIDIA DALI is not run here, in one line."""
    why = cuda_missing()
    if why:
        return f"{why}; DALI decodes with nvJPEG on the GPU"
    if importlib.util.find_spec("nvidia") is None or \
            importlib.util.find_spec("nvidia.dali") is None:
        return ("NVIDIA DALI is absent: pip install nvidia-dali-cuda120 (or the package for "
                "this machine's CUDA), from https://pypi.nvidia.com")
    return "distlab has no DALI reference run: DALI is installed, but no pipeline of it is built"


def skipped_lines() -> list[str]:
    """One line per path this machine cannot run, with the reason (none when all can run)."""
    out = []
    tv = torchvision_missing()
    if tv:
        out.append(f"skipped: torchvision.io.decode_jpeg on the CPU: {tv}")
    gpu = gpu_path_missing()
    if gpu:
        out.append(f"skipped: GPU decode (decode_jpeg(device='cuda'), GPU crop): {gpu}; "
                   "no GPU number is shown")
    out.append(f"skipped: NVIDIA DALI reference: {dali_missing()}")
    return out


class ImagesBenchmark(Benchmark[ImagesConfig]):
    """Real JPEGs through every executor, beside the pipeline model and the decode model."""

    name = "images"
    about = "real JPEGs through every pipeline executor vs the pipeline and decode models"
    config_type = ImagesConfig

    def check(self, parser: argparse.ArgumentParser, config: ImagesConfig) -> ImagesConfig:
        if config.crop > MAX_CROP:
            options.fail(parser, "--crop", config.crop, f"<= {MAX_CROP} pixels")
        nbytes = config.batch_size * config.crop * config.crop * 3
        if nbytes > MAX_BATCH_NBYTES:
            options.fail(parser, "--batch-size", config.batch_size,
                         f"such that batch x crop x crop x 3 <= {MAX_BATCH_NBYTES >> 20} MiB "
                         f"(--crop {config.crop} makes {size_in(nbytes, 'MiB', '.0f')})")
        return config

    def run(self, config: ImagesConfig) -> Report:
        c = config
        torch.set_num_threads(c.torch_threads)
        with tempfile.TemporaryDirectory(prefix="distlab_images_") as tmp, \
                tqdm(total=c.images, desc="writing JPEGs", file=sys.stderr, leave=False) as bar:
            ds = write_image_dataset(tmp, c.images, variant=c.variant, seed=c.seed,
                                     on_image=lambda: bar.update(1))
            return self._measure(c, ds, bar)

    def _measure(self, c: ImagesConfig, ds: ImageDataset, bar: tqdm) -> Report:
        source = ds.shard if c.layout == "shard" else ds.folder
        bar.set_description("decode model")
        judgement = judge_decode_model(calibration_jpegs(seed=c.seed + 1),
                                       {"judged": [source.read(i)
                                                   for i in range(min(16, len(source)))]})
        model, alone = judgement.model, judgement.measured_s["judged"]
        px, nb = ds.size.pixels, ds.mean_nbytes
        paths: list[tuple[str, list[Stage], list[str]]] = [
            ("pillow", cpu_image_stages(source, batch_size=c.batch_size, crop=c.crop,
                                        seed=c.seed, step_s=c.step_ms / 1e3), list(c.executors))]
        if torchvision_missing() is None:
            paths.append(("torchvision", cpu_image_stages(
                source, batch_size=c.batch_size, crop=c.crop, seed=c.seed, decoder="torchvision",
                step_s=c.step_ms / 1e3), ["sync", "threads"]))
        if gpu_path_missing() is None:
            paths.append(("nvjpeg", gpu_image_stages(source, batch_size=c.batch_size,
                                                     crop=c.crop, seed=c.seed,
                                                     step_s=c.step_ms / 1e3),
                          ["sync", "threads"]))
        plans = [(dec, st, worker_configs(execs, c.workers)) for dec, st, execs in paths]
        cores = os.cpu_count() or 1
        sharing, hop = None, None
        if not c.no_terms:
            bar.set_description("hop and cores")
            pillow = paths[0][1]
            if {"processes", "torch"} & set(c.executors):
                hop = measure_hop_cost(worker_output_nbytes(pillow, 0, 1))
            counts = [concurrency(ex, st, workers=w, cores=cores)
                      for _, st, cfg in plans for ex, w in cfg if ex in ("processes", "torch")]
            sharing = measure_core_sharing(pillow, counts, queue_depth=c.queue_depth)
        total = sum(len(cfg) for _, _, cfg in plans) * (c.warmup + c.repeats)
        bar.reset(total=total)
        bar.set_description("images bench")
        rows: list[dict[str, Any]] = []
        costs: dict[str, float] = {}
        notes: set[str] = set()
        for dec, st, cfg in plans:
            runs = run_configs(st, c.items, cfg, decoder=dec, queue_depth=c.queue_depth,
                               repeats=c.repeats, warmup=c.warmup,
                               on_run=lambda: bar.update(1))
            got, cost = image_rows(runs, st, batch_size=c.batch_size,
                                   decode_model=model if dec == "pillow" else None,
                                   pixels=px, nbytes=nb, queue_depth=c.queue_depth,
                                   cores=cores, sharing=sharing, hop=hop)
            rows += got
            costs = costs or cost
            notes.update(n for r in runs for n in r.median.timeline.notes)
        best = max(r["images_per_s"] for r in rows)
        pcie = pcie_rows(jpeg_nbytes=nb, width=ds.size.width, height=ds.size.height,
                         crop=c.crop, images_per_s=best)
        predicted = judgement.predicted_s["judged"]
        errs = ErrorSummary.of(r["model_error_pct"] for r in rows)
        head = [f"images: {len(ds)} synthetic JPEGs {ds.size.width}x{ds.size.height} quality "
                f"{ds.size.quality} (mean {size_in(nb, 'KB', '.1f')}) from the {c.layout}; batch "
                f"{c.batch_size}, crop {c.crop}, {c.items} batches a run, step {c.step_ms:g} ms; "
                f"{os.cpu_count()} cores",
                f"decode model (Pillow, fitted on {model.points} calibration JPEGs of other "
                f"sizes): {model.describe()}",
                f"decode alone on this dataset: {alone * 1e3:.3f} ms/image measured, "
                f"{predicted * 1e3:.3f} ms predicted (measured {error_pct(alone, predicted):+.1f}% "
                f"against it)",
                *stage_costs_lines(costs, "sync runs, per batch")]
        if hop is not None:
            head.append(f"hop per batch into the trainer (in the processes/torch models): "
                        f"{hop.seconds * 1e3:.2f} ms for {size_in(hop.nbytes, 'MB', '.2f')} "
                        f"({hop.path}), "
                        f"{hop.send_s * 1e3:.2f} ms of it in the worker")
        if sharing is not None:
            head.append(f"cores ({cores}), the worker stages at once: {sharing.describe()}")
        tail = [f"model error over {errs.n} rows: median {errs.median:.1f}%, "
                f"max {errs.max:.1f}%" if errs.n else "model error: no Pillow row"]
        without = [r["model_error_pct_without"] for r in rows if "model_error_pct_without" in r]
        if without:
            left_out = {k: ErrorSummary.of(w[k] for w in without).median
                        for k in ("cores", "hop", "both")}
            tail.append(f"median model error without the cores term {left_out['cores']:.1f}%, "
                        f"without the hop {left_out['hop']:.1f}%, without both "
                        f"{left_out['both']:.1f}%")
        tail += skipped_lines()
        tail += [f"note: {n}" for n in sorted(notes)]
        tables = [Table(rows, COLUMNS),
                  Table(pcie, PCIE_COLUMNS, f"bytes per image over PCIe ({ds.size.width}x"
                                            f"{ds.size.height}, mean JPEG {nb:.0f} B, crop "
                                            f"{c.crop}); GB/s at the best measured "
                                            f"{best:.0f} img/s", "pcie")]
        data = {"decode_model": {"per_image_s": model.per_image_s,
                                 "per_pixel_s": model.per_pixel_s,
                                 "per_byte_s": model.per_byte_s, "r2": model.r2,
                                 "points": model.points},
                "decode_alone_s": alone, "decode_predicted_s": predicted,
                "hop": hop.as_dict() if hop else None,
                "core_sharing_s": dict(sharing.seconds) if sharing else None,
                "stage_costs_s_measured_sync": costs, "skipped": skipped_lines(),
                "dataset": {"variant": ds.variant, "images": len(ds), "width": ds.size.width,
                            "height": ds.size.height, "quality": ds.size.quality,
                            "mean_nbytes": nb, "seed": ds.seed}}
        return Report(tables, wrap_lines(head), wrap_lines(tail), data, world_size=1)


BENCHMARK = ImagesBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench images``; see the module docstring."""
    return run_cli(BENCHMARK, argv)


if __name__ == "__main__":
    raise SystemExit(main())
