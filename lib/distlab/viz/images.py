"""Figures and the explorer of real images through the loading pipeline (notebook 12).

Every number drawn comes from :mod:`distlab.bench.images` rows or from the models of
:mod:`distlab.loading.image_model`; nothing here models anything itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as w
import numpy as np

from distlab.loading.image_model import (
    PCIE_PATHS,
    CoreSharing,
    DecodeModel,
    decode_costs,
    model_row,
    pcie_nbytes,
)
from distlab.loading.stage import Stage
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import new_figure
from distlab.viz.palette import colour
from distlab.vocabulary import size_in

__all__ = ["BOTTLENECK_COLORS", "IMAGE_SIZES", "ImagesExplorer", "crops_figure",
           "pcie_figure", "workers_figure"]

BOTTLENECK_COLORS = {k: colour(k) for k in ("worker", "step", "cores")}
"""Colour of each bottleneck station (others: grey)."""
EXECUTOR_MARKERS = {"processes": "o", "torch": "s"}
IMAGE_SIZES: dict[str, tuple[int, int]] = {"256x192": (256, 192), "500x375": (500, 375),
                                           "1024x768": (1024, 768), "1600x1200": (1600, 1200),
                                           "3000x2000": (3000, 2000)}
"""Image sizes the explorer offers (width, height in pixels)."""


def _color(name: str) -> str:
    return BOTTLENECK_COLORS.get(name, "tab:gray")


def workers_figure(rows: Sequence[Mapping[str, Any]], *, title: str = "") -> Any:
    """Left: images/s against worker processes, measured (``processes`` circles, ``torch``
    squares), the bound with measured stage costs (dashed) and the model with the decode model
    (solid, each point coloured by its bottleneck); sync and threads as horizontal lines.
    Right: each station's seconds per batch per server in the ``processes`` plan at each worker
    count (with the cores term, ``cores``: the CPU stages' seconds per batch over the measured
    speedup); the tallest bounds the pipeline (outlined in black)."""
    fig = new_figure(figsize=(9.4, 5.0))
    ax, bx = fig.subplots(1, 2, width_ratios=[1.3, 1])
    flat = {r["executor"]: r for r in rows if r.get("workers") is None}
    for name, style in (("sync", ":"), ("threads", "-.")):
        if name in flat:
            ax.axhline(flat[name]["images_per_s"], color="black", lw=1, ls=style,
                       label=f"{name} (measured)")
    procs = sorted((r for r in rows if r["executor"] == "processes"), key=lambda r: r["workers"])
    for ex, marker in EXECUTOR_MARKERS.items():
        got = sorted((r for r in rows if r["executor"] == ex), key=lambda r: r["workers"])
        if got:
            ax.plot([r["workers"] for r in got], [r["images_per_s"] for r in got], marker,
                    ms=8, mfc="none", color="tab:blue", label=f"{ex} (measured)")
    if procs:
        xs = [r["workers"] for r in procs]
        ax.plot(xs, [r["bound_images_per_s"] for r in procs], "--", color="tab:purple",
                label="bound (measured stage costs)")
        if all(r.get("model_images_per_s") for r in procs):
            ax.plot(xs, [r["model_images_per_s"] for r in procs], "-", color="black", lw=1,
                    label="model (decode model)")
            for r in procs:
                ax.plot(r["workers"], r["model_images_per_s"], "o", ms=6,
                        color=_color(r.get("model_bottleneck", r["bottleneck"])))
        ax.set_xticks(xs)
    ax.set_xlabel("worker processes")
    ax.set_ylabel("images / s")
    ax.set_ylim(bottom=0)
    # below the axes, as the stations' legend: the measured points fall anywhere inside (a busy
    # machine's processes at two workers sat under a legend in the lower right)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2,
              frameon=False)
    ax.set_title(title or "images/s as workers are added", loc="left", fontsize="medium")
    if procs:
        names = [n for n, _ in procs[0]["stations"]]
        width = 0.8 / max(1, len(names))
        for k, name in enumerate(names):
            for i, r in enumerate(procs):
                sec = dict(r["stations"])[name]
                bar = bx.bar(i + (k - (len(names) - 1) / 2) * width, sec * 1e3, width,
                             color=_color(name))
                if name == r["bottleneck"]:
                    bar[0].set_edgecolor("black")
                    bar[0].set_linewidth(2)
        for name in names:   # legend entries without the bottleneck's outline
            bx.bar([0], [0], 0, color=_color(name), label=name)
        bx.set_xticks(range(len(procs)), [str(r["workers"]) for r in procs])
        # below the axes, under the x label: inside, a legend of one column per station could
        # reach past the left spine over a tick label, as the measured times set the ticks
        bx.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2),
                  ncols=len(names), frameon=False)
    bx.set_xlabel("worker processes")
    bx.set_ylabel("ms per batch per server")
    bx.set_title("stations (outlined: bottleneck)", loc="left", fontsize="medium")
    return fig


def pcie_figure(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> Any:
    """Bytes per image over PCIe on each path (:data:`PCIE_PATHS`), one group of bars per image
    size; ``tables`` maps a size's label to its :func:`distlab.bench.images.pcie_rows`."""
    fig = new_figure(figsize=(9, 1.2 + 0.9 * len(PCIE_PATHS)))
    ax = fig.subplots()
    labels = list(tables)
    height = 0.8 / max(1, len(labels))
    for k, label in enumerate(labels):
        by = {r["path"]: r["nbytes"] for r in tables[label]}
        ys = [i + (k - (len(labels) - 1) / 2) * height for i in range(len(PCIE_PATHS))]
        ax.barh(ys, [by[p] / 1e3 for p in PCIE_PATHS], height, label=label)
    ax.set_yticks(range(len(PCIE_PATHS)), list(PCIE_PATHS))
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(left=10)
    ax.set_xlabel("KB per image over PCIe (log scale)")
    ax.legend(fontsize="small", loc="lower right")
    ax.set_title("bytes per image that cross PCIe", loc="left", fontsize="medium")
    return fig


def crops_figure(images: Sequence[np.ndarray], crops: Sequence[np.ndarray],
                 flips: Sequence[bool]) -> Any:
    """Decoded images (top row) and their random-resized crops (bottom row)."""
    n = len(images)
    fig = new_figure(figsize=(min(9.4, 2.6 * n), 4.6))
    axes = fig.subplots(2, n, squeeze=False)
    for i in range(n):
        axes[0, i].imshow(images[i])
        axes[0, i].set_title(f"{images[i].shape[1]}x{images[i].shape[0]}", fontsize="small")
        axes[1, i].imshow(crops[i])
        axes[1, i].set_title(f"crop{' flipped' if flips[i] else ''}", fontsize="small")
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
    return fig


class ImagesExplorer(Explorer):
    """Worker processes and image size -> the ``processes`` plan's images/s and bottleneck at
    every worker count, and the bytes over PCIe per image on each path.

    The decode stage is priced by ``decode_model``; the other stages are ``costs_s`` (measured at
    ``base_size``), the crop's scaled with the image's pixels; the JPEG's size is
    ``bytes_per_pixel`` times the pixels. ``sharing`` (measured for 1 .. ``min(cores,
    max_workers)`` processes) and ``hop`` (``(receive_s, send_s)`` per batch) are the model's
    measured terms (None: left out). State after each change: ``rows`` (one model row per worker
    count), ``summary``, ``figure``, ``png``; display ``widget``.
    """

    def __init__(self, stages: Sequence[Stage], costs_s: Mapping[str, float],
                 decode_model: DecodeModel, *, bytes_per_pixel: float, batch_size: int,
                 base_size: tuple[int, int] = (500, 375), crop: int = 224,
                 cores: int | None = None, max_workers: int = 8, workers: int = 2,
                 size: str = "500x375", sharing: CoreSharing | None = None,
                 hop: tuple[float, float] = (0.0, 0.0)) -> None:
        self.stages, self.costs_s, self.model = list(stages), dict(costs_s), decode_model
        self.sharing, self.hop = sharing, hop
        self.bytes_per_pixel, self.batch_size, self.crop = bytes_per_pixel, batch_size, crop
        self.base_pixels = base_size[0] * base_size[1]
        self.cores = cores or os.cpu_count() or 1
        style = {"description_width": "90px"}
        self.workers = w.IntSlider(value=workers, min=1, max=max_workers, description="workers",
                                   continuous_update=False, style=style)
        self.size = w.Dropdown(options=list(IMAGE_SIZES), value=size, description="image size",
                               style=style)
        self.rows: list[dict[str, Any]] = []
        super().__init__([self.workers, self.size])

    def draw(self) -> Drawing:
        """The model at every worker count for the chosen size, and the PCIe bytes."""
        width, height = IMAGE_SIZES[self.size.value]
        pixels = width * height
        nbytes = self.bytes_per_pixel * pixels
        costs = decode_costs(self.costs_s, self.model, pixels=pixels, nbytes=nbytes,
                             batch_size=self.batch_size, base_pixels=self.base_pixels)
        counts = range(1, self.workers.max + 1)
        self.rows = [model_row(self.stages, costs, "processes", workers=k, items=1000,
                               batch_size=self.batch_size, cores=self.cores,
                               sharing=self.sharing, hop_s=self.hop[0], hop_send_s=self.hop[1])
                     for k in counts]
        fig = new_figure(figsize=(9.4, 3.8))
        ax, bx = fig.subplots(1, 2, width_ratios=[1.3, 1])
        ax.plot(list(counts), [r["images_per_s"] for r in self.rows], "-", color="black", lw=1)
        for k, r in zip(counts, self.rows, strict=True):
            ax.plot(k, r["images_per_s"], "o", color=_color(r["bottleneck"]),
                    ms=12 if k == self.workers.value else 6, clip_on=False)  # whole at the top
        for name, color in BOTTLENECK_COLORS.items():
            if name != "cores" or self.sharing is not None:
                ax.plot([], [], "o", color=color, label=f"bottleneck: {name}")
        ax.axvline(self.cores, color="grey", lw=1, ls=":", label=f"{self.cores} cores")
        ax.set_xlabel("worker processes")
        ax.set_ylabel("images / s (model)")
        ax.set_ylim(0, 1.15 * max(r["images_per_s"] for r in self.rows))   # room for the dots
        # below the axes: the curve is measured costs through the model and can pass anywhere
        # inside (a loaded machine's put 30 points under a legend in the lower right)
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2)
        ax.set_title(f"{self.size.value}: processes executor", loc="left", fontsize="medium")
        sizes = [pcie_nbytes(p, jpeg_nbytes=max(1, round(nbytes)), width=width, height=height,
                             crop=self.crop) for p in PCIE_PATHS]
        bx.barh(range(len(sizes)), [s / 1e3 for s in sizes], color="tab:blue")
        bx.set_yticks(range(len(sizes)), list(PCIE_PATHS))
        bx.invert_yaxis()
        bx.set_xscale("log")
        bx.set_xlim(left=10)
        bx.set_xlabel("KB per image over PCIe")
        bx.set_title("bytes over PCIe", loc="left", fontsize="medium")
        r = self.rows[self.workers.value - 1]
        text = (f"{self.size.value}, {self.workers.value} workers ({r['servers']} busy on "
                f"{self.cores} cores): {r['images_per_s']:.0f} images/s, bottleneck "
                f"{r['bottleneck']}; decode {self.model.seconds(pixels, nbytes) * 1e3:.2f} "
                f"ms/image; PCIe per image: JPEG {size_in(sizes[-1], 'KB', '.0f')}, crop "
                f"{size_in(sizes[0], 'KB', '.0f')}, decoded {size_in(sizes[1], 'KB', '.0f')}")
        return Drawing(fig, text)
