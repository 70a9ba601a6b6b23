"""What a set of Hogwild runs shows, in words computed from the runs themselves.

A notebook's prose may only say what its numbers show; with Hogwild the numbers change from run
to run (whether any update was lost, whether the lock cost anything depends on how the processes
happened to be scheduled), so the sentences are made here from
:class:`~distlab.hogwild.run.HogwildResult` s:

    for line in findings(runs):
        print(line)

- one line per lock-free run of several processes: how many witness increments were overwritten
  and how many parameter elements provably miss an update, or that none was lost;
- per process count run both with and without the lock: the two step rates and the change the
  lock made, and the share of the processes' time spent in the update (what a lock
  serializes) and waiting for the lock;
- the evaluation losses after the same number of samples, against the single process's.

:data:`COLUMNS` is the table of the runs (:meth:`HogwildResult.row` keys) for
:func:`distlab.report.table.format_table`, well under 110 characters wide: the counts without
their totals (the lines of :func:`findings` give those), the lock wait ``-`` without a lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distlab.report.table import Column

__all__ = ["COLUMNS", "eval_spread", "findings", "lock_change", "lost_line"]

COLUMNS = (Column("run", "run"), Column("start-up s", "startup_s", ".2f"),
           Column("wall s", "wall_s", ".3f"), Column("steps/s", "steps_per_s", ".0f"),
           Column("eval loss", "eval_loss", ".4f"), Column("witness lost", "lost"),
           Column("params missing", "missed"),
           Column("lock wait %", "lock_wait_share", ".1f", 100.0))


def lost_line(result: Any) -> str:
    """What ``result`` (a HogwildResult) lost, in one line: counts, never an adjective."""
    lost = result.lost
    if lost.lost == 0 and lost.missed == 0:
        return (f"{result.label}: no update was lost (0 of {lost.total:,} witness increments, "
                f"0 of {lost.elements:,} parameters)")
    return (f"{result.label}: {lost.lost:,} of {lost.total:,} updates lost ({lost.fraction:.2g});"
            f" {lost.missed:,} of {lost.elements:,} parameters miss one")


def lock_change(locked: Any, free: Any) -> float:
    """The lock's change of the step rate: ``locked.steps_per_s / free.steps_per_s - 1``
    (-0.4: the locked run made 40% fewer steps per second)."""
    return locked.steps_per_s / free.steps_per_s - 1.0


def _change_words(change: float) -> str:
    if abs(change) < 0.005:
        return "the same step rate"
    return f"{abs(change):.0%} {'fewer' if change < 0 else 'more'} steps per second"


def eval_spread(results: Sequence[Any]) -> float:
    """The largest evaluation loss of ``results`` over the smallest (1.0: all equal)."""
    losses = [r.eval_loss for r in results]
    return max(losses) / min(losses)


def findings(results: Sequence[Any]) -> list[str]:
    """The lines that say what ``results`` show (see the module docstring); each under 110
    characters."""
    out = [lost_line(r) for r in results if r.processes > 1 and not r.lock]
    by = {(r.processes, r.lock): r for r in results}
    for n in sorted({r.processes for r in results if r.processes > 1}):
        locked, free = by.get((n, True)), by.get((n, False))
        if locked is None or free is None:
            continue
        out.append(f"{n} processes: {locked.steps_per_s:,.0f} steps/s with the lock, "
                   f"{free.steps_per_s:,.0f} without: with the lock "
                   f"{_change_words(lock_change(locked, free))}")
        out.append(f"{n} processes, with the lock: {locked.update_share:.1%} of their time in "
                   f"the update it serializes, {locked.lock_wait_share:.1%} waiting for it")
    single = next((r for r in results if r.processes == 1), None)
    if single is not None and len(results) > 1:
        worst = max(results, key=lambda r: r.eval_loss / single.eval_loss)
        best = min(results, key=lambda r: r.eval_loss / single.eval_loss)
        out.append(f"evaluation loss after {single.samples:,} samples: {single.eval_loss:.4f} "
                   f"for 1 process; the others {best.eval_loss / single.eval_loss:.2f}x to "
                   f"{worst.eval_loss / single.eval_loss:.2f}x that")
    return out
