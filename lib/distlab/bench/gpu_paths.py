"""The multi-GPU rows of ``bench transfers``: ``--paths peer`` and ``--paths host-to-all``.

- ``peer``: every ordered GPU pair copies device to device, one way and both ways at once, at
  ``-b`` (latency) and ``-e`` (bandwidth) bytes (:mod:`distlab.transfers.peer_matrix`), printed as
  rows and as ``src x dst`` matrices with each pair's ``nvidia-smi topo -m`` path.
- ``host-to-all``: every GPU copies ``-e`` bytes of pinned host memory at once, to the GPUs and
  back, with each host buffer on its GPU's NUMA node and then on the other
  (:mod:`distlab.transfers.host_to_all`), per GPU and aggregate.

Without a GPU each path is one ``skipped: why`` line, and so is a box the path cannot run on
(one GPU: no pair; host-to-all is then the h2d row). ``--rehearse BOX`` runs both on a fake box
(:data:`distlab.transfers.gpu_box.REHEARSAL_BOXES`): host memory stands in for each GPU, and
every row, matrix and JSON entry says ``rehearsal``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from distlab.report.table import Column, Table
from distlab.transfers.gpu_box import GpuHost, box_here
from distlab.transfers.host_to_all import HOST_DIRECTIONS, host_to_all_rows
from distlab.transfers.host_to_all_plan import numa_bindings
from distlab.transfers.peer_matrix import matrix_lines, peer_rows

__all__ = ["GPU_PATHS", "H2A_COLUMNS", "PEER_COLUMNS", "GpuPathsResult", "measure_gpu_paths"]

GPU_PATHS = ("peer", "host-to-all")

PEER_COLUMNS = (Column("size(B)", "nbytes", width=12), Column("src", "src", width=4),
                Column("dst", "dst", width=4), Column("direction", "direction", width=9),
                Column("time(us)", "time_us", ".2f", width=10),
                Column("GB/s", "gbps", ".2f", width=8), Column("#wrong", "wrong", width=6),
                Column("route", "route", missing=""))
H2A_COLUMNS = (Column("size(B)", "nbytes", width=12), Column("run", "run", width=7),
               Column("dir", "direction", width=4), Column("gpu", "gpu", width=4),
               Column("node", "node", missing="-", width=5),
               Column("time(us)", "time_us", ".2f", width=10),
               Column("GB/s", "gbps", ".2f", width=8), Column("#wrong", "wrong", width=6),
               Column("bound", "bound", missing=""))


@dataclass
class GpuPathsResult:
    """What the GPU paths measured: tables, comment lines (matrices, skipped lines), the JSON
    payload (``box``, ``peer``, ``host_to_all``, ``skipped``) and the bytes copied wrong."""

    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    payload: dict[str, Any] = field(default_factory=dict)
    wrong: int = 0


def _progress_total(box: GpuHost, paths: tuple[str, ...]) -> int:
    pairs = box.n_gpus * (box.n_gpus - 1) if box.n_gpus >= 2 else 0
    runs = len(numa_bindings(box.topology, box.n_gpus)[0]) or (1 if box.n_gpus >= 2 else 0)
    return (2 * pairs if "peer" in paths else 0) + \
        (runs * len(HOST_DIRECTIONS) if "host-to-all" in paths else 0)


def measure_gpu_paths(paths: tuple[str, ...], *, minbytes: int, maxbytes: int, repeats: int,
                      iters: int, warmup: int, rehearse: str | None = None,
                      progress: bool = True, box: GpuHost | None = None) -> GpuPathsResult:
    """Measure the selected :data:`GPU_PATHS` on this box (``box``, else the rehearsal
    ``rehearse`` names, else the CUDA GPUs); see the module docstring."""
    out = GpuPathsResult()
    paths = tuple(p for p in GPU_PATHS if p in paths)
    if not paths:
        return out
    why = ""
    if box is None:
        box, why = box_here(rehearse)
    if box is None:
        out.lines = [f"skipped {p}: {why}" for p in paths]
        out.payload = {"box": None, "skipped": [{"what": p, "why": why} for p in paths]}
        return out
    skipped: list[dict[str, str]] = []
    out.payload = {"box": box.describe()}
    if box.rehearsal:
        out.lines.append(f"{box.name}: host memory stands in for each of the box's "
                         f"{box.n_gpus} GPUs; no row is a GPU measurement")
    sizes = sorted({minbytes, maxbytes})
    with tqdm(total=_progress_total(box, paths), desc="gpu paths", file=sys.stderr,
              leave=False, disable=not progress) as bar:
        if "peer" in paths:
            rows, line = peer_rows(box, sizes, repeats=repeats, iters=iters, warmup=warmup,
                                   progress=lambda: bar.update(1))
            if line:
                skipped.append({"what": "peer", "why": line.removeprefix("skipped: ")})
            peer = [r.as_dict() for r in rows]
            out.payload["peer"] = peer
            if peer:
                out.tables.append(Table(peer, PEER_COLUMNS, "GPU-to-GPU copies", "peer"))
                out.lines += matrix_lines(peer, box.n_gpus)
                out.wrong += sum(r["wrong"] for r in peer)
        if "host-to-all" in paths:
            h2a, lines = host_to_all_rows(box, maxbytes, repeats=repeats, iters=iters,
                                          warmup=warmup, progress=lambda: bar.update(1))
            skipped += [{"what": "host-to-all", "why": ln.removeprefix("skipped: ")}
                        for ln in lines]
            rows_d = [r.as_dict() for r in h2a]
            out.payload["host_to_all"] = rows_d
            if rows_d:
                out.tables.append(Table(rows_d, H2A_COLUMNS, "every GPU fed at once "
                                        "(gpu 'all': every GPU's bytes / the slowest GPU's time)",
                                        "host_to_all"))
                out.wrong += sum(r["wrong"] for r in rows_d if r["gpu"] != "all")
                out.lines += [f"unbound host buffer of GPU {r['gpu']} ({r['run']} run): "
                              f"{r['why']}" for r in rows_d
                              if r["why"] and r["direction"] == HOST_DIRECTIONS[0]]
    out.payload["skipped"] = skipped
    out.lines += [f"skipped {s['what']}: {s['why']}" for s in skipped]
    return out
