"""GPU-to-GPU copies for every ordered pair of a box: bandwidth and latency, one way and both.

For each size and each ordered pair ``(src, dst)`` that
:func:`~distlab.transfers.gpu_topology.peer_pairs` lists, two rows (CUDA's
p2pBandwidthLatencyTest and nvbandwidth measure the same things):

- ``one-way``: ``src`` copies into ``dst`` (driven by ``src``), nothing else running;
- ``both``: ``src -> dst`` and ``dst -> src`` at the same time; its GB/s counts both directions'
  bytes over the slower direction's time.

Each row: the median over ``repeats`` of seconds per copy (a burst of ``iters`` copies after
``warmup`` untimed ones), GB/s = bytes / time / 1e9, ``#wrong`` = destination bytes that differ from
the source's pattern after the last copy, and the route: ``peer over NV18`` or ``staged through
host memory (peer access off)`` (:func:`~distlab.transfers.gpu_topology.copy_route`). The
smallest size's ``time_us`` is the pair's latency; the largest size's GB/s its bandwidth.
:func:`matrix_lines` prints those as ``src x dst`` matrices, the way both tools print them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from distlab._checks import check_int
from distlab.transfers.adapter import pattern
from distlab.transfers.gpu_box import Copy, GpuHost
from distlab.transfers.gpu_topology import copy_route, peer_pairs
from distlab.vocabulary import gb_per_s

__all__ = ["DIRECTIONS", "PeerRow", "matrix_lines", "peer_rows"]

DIRECTIONS = ("one-way", "both")


@dataclass
class PeerRow:
    """One measured GPU pair at one size (see the module docstring); ``path`` is the pair's
    ``nvidia-smi topo -m`` cell ("" where the box has no topology)."""

    src: int
    dst: int
    direction: str
    nbytes: int
    time_us: float
    gbps: float
    route: str
    path: str
    wrong: int
    rehearsal: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _wrong(dst: torch.Tensor, expected: torch.Tensor) -> int:
    got = dst.cpu()
    return int((got != expected).sum()) if not torch.equal(got, expected) else 0


def peer_rows(box: GpuHost, sizes: Sequence[int], *, repeats: int = 5, iters: int = 10,
              warmup: int = 2, progress: Callable[[], None] | None = None
              ) -> tuple[list[PeerRow], str | None]:
    """Measure every ordered pair at every size; returns the rows and None, or no rows and the
    one ``skipped: why`` line (fewer than two GPUs, a topology that names another count).
    ``progress`` is called once per (size, pair)."""
    repeats = check_int("repeats", repeats, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    sizes = [check_int("size (bytes)", n, minimum=1) for n in sizes]
    pairs, why = peer_pairs(box.topology, box.n_gpus)
    if why:
        return [], why
    rows: list[PeerRow] = []
    for nbytes in sizes:
        bufs = [box.device_buffer(g, nbytes) for g in range(box.n_gpus)]
        recv = [box.device_buffer(g, nbytes) for g in range(box.n_gpus)]
        expected = [pattern(nbytes, seed=g) for g in range(box.n_gpus)]
        for g, buf in enumerate(bufs):
            buf.copy_(expected[g])
        done: set[tuple[int, int]] = set()
        for src, dst in pairs:
            route = copy_route(box.topology, src, dst, peer_access=box.peer_access(src, dst))
            path = box.topology.path(src, dst) if box.topology is not None else ""
            one = Copy(recv[dst], bufs[src], src)
            back = Copy(recv[src], bufs[dst], dst)
            for direction, copies in (("one-way", [one]), ("both", [one, back])):
                if direction == "both" and (dst, src) in done:
                    continue   # the same two copies as (dst, src) both: measured once
                if warmup:
                    box.time_together(copies, warmup)
                times = [box.time_together(copies, iters) for _ in range(repeats)]
                seconds = statistics.median(max(t) for t in times)
                moved = nbytes * len(copies)
                wrong = _wrong(recv[dst], expected[src]) + \
                    (_wrong(recv[src], expected[dst]) if direction == "both" else 0)
                rows.append(PeerRow(src, dst, direction, nbytes, seconds * 1e6,
                                    gb_per_s(moved, seconds), route, path, wrong, box.rehearsal))
            done.add((src, dst))
            if progress is not None:
                progress()
    return rows, None


def matrix_lines(rows: Sequence[dict[str, Any]], n_gpus: int) -> list[str]:
    """The rows as matrices (rows ``src``, columns ``dst``): one-way GB/s and both-ways GB/s at
    the largest size, latency (us) at the smallest, and each pair's path. Empty without rows."""
    if not rows:
        return []
    sizes = sorted({r["nbytes"] for r in rows})
    cell = {(r["src"], r["dst"], r["direction"], r["nbytes"]): r for r in rows}
    tag = " (rehearsal: host memory stands in for each GPU)" if rows[0].get("rehearsal") else ""

    def grid(title: str, value: Callable[[int, int], str]) -> list[str]:
        head = "src\\dst " + "".join(f"{d:>8}" for d in range(n_gpus))
        return [title + tag, head] + [f"{s:>7} " + "".join(
            f"{'-' if s == d else value(s, d):>8}" for d in range(n_gpus)) for s in range(n_gpus)]

    def num(key: tuple[int, int, str, int], field: str, fmt: str) -> str:
        r = cell.get(key)
        return format(r[field], fmt) if r else "?"

    big, small = sizes[-1], sizes[0]
    both = {(min(s, d), max(s, d)): r for (s, d, w, n), r in cell.items()
            if w == "both" and n == big}
    lines = grid(f"GPU-to-GPU GB/s, one way, {big} B",
                 lambda s, d: num((s, d, "one-way", big), "gbps", ".1f"))
    lines += grid(f"GPU-to-GPU GB/s, both ways at once (sum of both), {big} B",
                  lambda s, d: format(both[(min(s, d), max(s, d))]["gbps"], ".1f")
                  if (min(s, d), max(s, d)) in both else "?")
    lines += grid(f"GPU-to-GPU latency, us per {small} B copy",
                  lambda s, d: num((s, d, "one-way", small), "time_us", ".1f"))
    lines += grid("path (nvidia-smi topo -m)",
                  lambda s, d: (cell.get((s, d, "one-way", big)) or {}).get("path") or "?")
    return lines
