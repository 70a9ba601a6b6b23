"""Sizes x hop paths -> rows like the copy sweep's, the fixed costs apart, one fit per path.

Every hop row is a :class:`~distlab.transfers.sweep.Row` (``path``, ``memory``, ``nbytes``,
median ``time_us`` of ``repeats`` hops after ``warmup`` ones, ``gbps`` = bytes / time,
``model_gbps`` from the path's latency + bandwidth fit over every size (the fixed part shows at
the small ones), ``wrong`` = received bytes that differ,
summed over every hop, ``skipped`` = why a path cannot run here). With ``busy=True`` the worker
keeps computing after its hand-over (see :meth:`~distlab.transfers.hop.HopLink.hop`) and the
rows are named ``<path>_busy`` so they get their own fit.

Costs are *times*, never bandwidths. :attr:`HopSweep.parts` has one dict per measured (path,
size): the medians of the hop's parts in microseconds (``ready_us``: the worker's storage moved
into shared memory, or its ring slot written; ``handle_us``: from then until the trainer's
``get`` returned: pickling, the pipe, fetching the descriptor or opening the named file, mapping
it; ``map_us``: touching every page here), ``segment_us`` (making an empty segment of that size
with the path's strategy, in the worker: the part of ``ready`` that is not the copy) and
``setup_us`` (``hop_ring`` only: making the slots, sharing them and sending them to the worker,
once per size). :attr:`HopSweep.first_hop_us` is each path's first hop (it starts the path's
helpers: the worker's resource-sharer thread, ``torch_shm_manager``, a CUDA context). The
worker's start-up is ``startup_s``.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.multiprocessing as tmp

from distlab._checks import check_int
from distlab.transfers.copy_model import Fit
from distlab.transfers.hop import HopLink
from distlab.transfers.hop_model import crossover_bytes
from distlab.transfers.hop_paths import (
    HOP_KINDS,
    HOP_PATHS,
    HOP_STRATEGY,
    cuda_ipc_device,
    hop_unavailable,
)
from distlab.transfers.sweep import Row, fit_rows
from distlab.vocabulary import gb_per_s

__all__ = ["BUSY_SUFFIX", "HopSweep", "hop_rows_kinds", "hop_sweep", "local_facts"]

BUSY_SUFFIX = "_busy"


@dataclass
class HopSweep:
    """What :func:`hop_sweep` measured; see the module docstring."""

    rows: list[Row]
    parts: list[dict[str, Any]]
    first_hop_us: dict[str, float]
    startup_s: float | None
    fits: dict[str, Fit] = field(default_factory=dict)

    def crossovers(self) -> dict[str, float]:
        """Per path: the size (bytes) at which its fixed part equals its per-byte part."""
        return {path: crossover_bytes(f) for path, f in self.fits.items()}


def local_facts() -> dict[str, Any]:
    """The facts :func:`~distlab.transfers.hop_paths.hop_unavailable` needs, read here."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"gpus": gpus, "strategies": frozenset(tmp.get_all_sharing_strategies()),
            "platform": sys.platform}


def hop_rows_kinds(paths: Iterable[str]) -> list[tuple[str, str]]:
    """The (path, memory) rows of the selected hop paths, in table order."""
    chosen = set(paths)
    bad = sorted(chosen - set(HOP_PATHS))
    if bad:
        raise ValueError(f"unknown hop paths {bad}; allowed {list(HOP_PATHS)}")
    return [(p, m) for p, m in HOP_KINDS if p in chosen]


def hop_sweep(sizes: Sequence[int], paths: Iterable[str] = tuple(HOP_PATHS), *,
              repeats: int = 5, warmup: int = 1, busy: bool = False, seed: int = 0,
              timeout_s: float = 60.0, facts: dict[str, Any] | None = None,
              progress: Callable[[], None] | None = None) -> HopSweep:
    """Measure every selected hop path at every size with one spawned worker.

    Args:
        sizes: bytes per hop, each >= 1.
        paths: names from :data:`~distlab.transfers.hop_paths.HOP_PATHS`.
        repeats, warmup: timed and untimed hops per (path, size).
        busy: the worker computes after each hand-over (rows ``<path>_busy``).
        seed: base of the patterns' seeds (hop k of a size uses ``seed + k``).
        facts: ``gpus``, ``strategies``, ``platform`` (default: :func:`local_facts`).
        progress: called once per (path, size).
    """
    sizes = [check_int("sizes[...]", n, minimum=1) for n in sizes]
    kinds = hop_rows_kinds(paths)
    repeats = check_int("repeats", repeats, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    seed = check_int("seed", seed, minimum=0)
    facts = local_facts() if facts is None else facts
    suffix = BUSY_SUFFIX if busy else ""
    why = {p: hop_unavailable(p, gpus=facts["gpus"], strategies=facts["strategies"],
                              platform=facts["platform"]) for p, _ in kinds}
    runnable = [p for p, _ in kinds if not why[p]]
    rows: list[Row] = []
    parts: list[dict[str, Any]] = []
    first: dict[str, float] = {}
    link = HopLink(timeout_s=timeout_s,
                   device=cuda_ipc_device(facts["gpus"]) if "hop_cuda_ipc" in runnable else None)
    try:
        startup = link.start() if runnable else None
        for path in runnable:
            first[path + suffix] = link.hop(path, min(sizes), seed=seed, busy=busy).seconds * 1e6
        for nbytes in sizes:
            for path, memory in kinds:
                if why[path]:
                    rows.append(Row(path + suffix, memory, nbytes, skipped=why[path]))
                else:
                    row, part = _measure(link, path, memory, nbytes, repeats, warmup, busy, seed)
                    rows.append(row)
                    parts.append(part)
                if progress:
                    progress()
    finally:
        link.close()
    # every size counts: the fixed part a hop pays is what the small sizes show
    fits = {p: f for (p, _), f in fit_rows(rows, min_bytes=1).items()}
    return HopSweep(rows, parts, first, startup, fits)


def _measure(link: HopLink, path: str, memory: str, nbytes: int, repeats: int, warmup: int,
             busy: bool, seed: int) -> tuple[Row, dict[str, Any]]:
    """One (path, size): the row and its parts (medians, us; see the module docstring)."""
    name = path + (BUSY_SUFFIX if busy else "")
    part: dict[str, Any] = {"path": name, "nbytes": nbytes, "segment_us": None,
                            "setup_us": None}
    if path in HOP_STRATEGY and not busy:
        part["segment_us"] = statistics.median(
            link.segment_create_seconds(HOP_STRATEGY[path], nbytes, repeats)) * 1e6
    if path == "hop_ring" and not busy:
        part["setup_us"] = link.ring_setup_seconds(nbytes) * 1e6
    done = [link.hop(path, nbytes, seed=seed + k, busy=busy) for k in range(warmup + repeats)]
    timed = done[warmup:]
    for key in ("ready", "handle", "map"):
        vals = [v for x in timed if (v := x.parts()[key]) is not None]
        part[f"{key}_us"] = statistics.median(vals) * 1e6 if vals else None
    s = statistics.median(x.seconds for x in timed)
    row = Row(name, memory, nbytes, s * 1e6, gb_per_s(nbytes, s), None, sum(x.wrong for x in done))
    return row, part
