"""The allreduce benchmark's targets for distlab's plans beside gloo's builtin, as lines that say
the number and whether it is met.

Two kinds, by whether the ranks have a core each:

- **Speed** (a core per rank, and always at 2 ranks): busbw over the builtin's at the same size
  in the same run. The ring at 16 MiB >= :data:`RING_16M_MIN`; the best plan at every size from
  1 to 16 MiB >= :data:`BEST_MIN` (2 ranks) or :data:`BEST_MIN_4` (4 ranks and more).
- **CPU time** (more ranks than cores: 4 ranks on a 2-core machine). The ranks then saturate
  every core, nothing can overlap, and a wall-clock ratio moves +-15% between identical runs;
  what a plan can be held to is the work it costs. Per call, the CPU seconds of every rank's
  process (user + system, every thread: ``getrusage``) summed over the ranks, median over
  rounds, over the builtin's at the same size in the same run: every plan <=
  :data:`CPU_MAX` from 1 to 16 MiB.

Pure: benchmark rows (``nbytes``, ``algorithm``, ``busbw_gbps``, ``cpu_us``) in, lines out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distlab.collectives.algorithms.registry import BUILTIN
from distlab.vocabulary import size_label

__all__ = ["BAND", "BEST_MIN", "BEST_MIN_4", "CPU_MAX", "RING_16M_MIN", "cpu_ratios",
           "target_lines", "uses_cpu_target"]

BAND = (1 << 20, 16 << 20)
"""The sizes the targets cover, bytes (inclusive)."""
RING_16M_MIN = 0.95
"""Ring's busbw over the builtin's at 16 MiB, at least."""
BEST_MIN = 0.95
"""The best plan's busbw over the builtin's at each size of :data:`BAND`, 2 ranks, at least."""
BEST_MIN_4 = 1.0
"""The same with a core per rank at 4 ranks and more, at least."""
CPU_MAX = 1.05
"""Each plan's CPU seconds per call summed over the ranks over the builtin's, at most, at each
size of :data:`BAND` where the ranks outnumber the cores."""


def uses_cpu_target(world_size: int, cores: int) -> bool:
    """Whether the CPU-time target replaces the speed one: more ranks than cores (and more
    than 2 ranks: 2 ranks keep the speed targets)."""
    return world_size > 2 and world_size > cores


def _by_size(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, dict[int, float]]:
    """Per plan, per size of :data:`BAND`: its ``key`` over the builtin's (rows without one left
    out)."""
    lo, hi = BAND
    builtin = {r["nbytes"]: r.get(key) for r in rows if r["algorithm"] == BUILTIN}
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        b, v = builtin.get(r["nbytes"]), r.get(key)
        if r["algorithm"] != BUILTIN and lo <= r["nbytes"] <= hi and b and v is not None:
            out.setdefault(r["algorithm"], {})[r["nbytes"]] = v / b
    return out


def cpu_ratios(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """Per plan, per size of :data:`BAND`: CPU per call (``cpu_us``) over the builtin's."""
    return _by_size(rows, "cpu_us")


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def target_lines(rows: Sequence[Mapping[str, Any]], world_size: int, cores: int) -> list[str]:
    """The target lines of one run's rows (module docstring); none when the rows hold no
    builtin or no size of :data:`BAND`."""
    if uses_cpu_target(world_size, cores):
        curves = cpu_ratios(rows)
        if not curves:
            return []
        lines = [f"target ({world_size} ranks on {cores} cores: CPU time per call summed over "
                 f"the ranks, getrusage): every plan <= {CPU_MAX:.2f}x the builtin's at "
                 f"{size_label(BAND[0], 'compact')}-{size_label(BAND[1], 'compact')}"]
        for algo, by_size in curves.items():
            worst = max(by_size, key=by_size.__getitem__)
            lines.append(f"  {algo}: worst {by_size[worst]:.2f}x at "
                         f"{size_label(worst, 'compact')} {_met(by_size[worst] <= CPU_MAX)}")
        return lines
    curves = _by_size(rows, "busbw_gbps")
    if not curves:
        return []
    lines = []
    ring = curves.get("ring", {}).get(BAND[1])
    if ring is not None:
        lines.append(f"target ring >= {RING_16M_MIN:.2f}x builtin busbw at "
                     f"{size_label(BAND[1], 'compact')}: {ring:.2f}x {_met(ring >= RING_16M_MIN)}")
    floor = BEST_MIN if world_size <= 2 else BEST_MIN_4
    best = {n: max(c[n] for c in curves.values() if n in c)
            for n in sorted({n for c in curves.values() for n in c})}
    low = min(best, key=best.__getitem__)
    lines.append(f"target best plan >= {floor:.2f}x builtin busbw at every size "
                 f"{size_label(BAND[0], 'compact')}-{size_label(BAND[1], 'compact')}: lowest "
                 f"{best[low]:.2f}x at {size_label(low, 'compact')} {_met(best[low] >= floor)}")
    return lines
