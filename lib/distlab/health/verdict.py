"""One run judged row by row: measured against expected, inside or outside its band.

:func:`judge_run` prices every size of one column of a run (:mod:`.expected`), compares the
measured time with the model's (:func:`distlab.vocabulary.error_pct`: positive, the run was
slower) and gives each row the verdict of its size class's band (:mod:`.bands`), then asks
:mod:`.diagnose` what the rows outside their band point to.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.health.bands import band
from distlab.health.diagnose import Cause, diagnose
from distlab.health.expected import NotPriced, expected
from distlab.health.rows import RowVerdict
from distlab.health.setup import Setup
from distlab.logs.nccl_tests import NcclTestsRun, Row
from distlab.vocabulary import error_pct

__all__ = ["RowVerdict", "RunVerdict", "judge_run"]


@dataclass(frozen=True)
class RunVerdict:
    """A run's rows judged, and the causes its shortfall points to (best first)."""

    run: NcclTestsRun
    setup: Setup
    column: str
    rows: tuple[RowVerdict, ...]
    causes: tuple[Cause, ...]
    not_priced: str = ""

    @property
    def verdict(self) -> str:
        """``"low"`` if any row is slower than its band, else ``"high"`` if any is faster,
        else ``"ok"`` (``"not priced"`` where the model prices none)."""
        if self.not_priced:
            return "not priced"
        kinds = {r.verdict for r in self.rows}
        return "low" if "low" in kinds else "high" if "high" in kinds else "ok"


def rows_of(run: NcclTestsRun, column: str) -> list[Row]:
    """The rows of ``column``, or of the other column where ``column`` has none."""
    rows = run.column(column)
    return rows or run.column("in-place" if column == "out-of-place" else "out-of-place")


def priced_rows(setup: Setup, collective: str, rows: list[Row]) -> list[RowVerdict]:
    """Each of ``rows`` beside the model's price under ``setup`` (raises
    :class:`~distlab.health.expected.NotPriced`)."""
    priced = expected(setup, collective, [r.nbytes for r in rows])
    out = []
    for r, p in zip(rows, priced, strict=True):
        model_us = p.seconds * 1e6
        err = error_pct(r.time_us, model_us)
        b = band(r.nbytes, setup.scope)
        out.append(RowVerdict(r.nbytes, r.time_us, model_us, err, b, b.verdict(err),
                              p.algorithm, p.protocol))
    return out


def judge_run(run: NcclTestsRun, setup: Setup, column: str = "out-of-place") -> RunVerdict:
    """``run``'s ``column`` judged under ``setup``, with the diagnosis of its shortfall."""
    rows = rows_of(run, column)
    try:
        verdicts = priced_rows(setup, run.collective, rows)
    except NotPriced as exc:
        return RunVerdict(run, setup, column, (), (), str(exc))
    return RunVerdict(run, setup, column, tuple(verdicts),
                      tuple(diagnose(setup, run.collective, rows, verdicts)))
