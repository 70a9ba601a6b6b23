"""The verify table: each layout's measurement beside the planner's prediction, and its JSON.

Columns: the layout, what happened, the step (predicted, measured, error), tokens/s per GPU
measured, the peak allocated and reserved bytes per GPU (the most loaded rank; predicted,
measured, error) and the verdict the planner gave (``fits`` on the predicted total) beside the
run's (``ran`` or ``out of memory``). Errors are :func:`~distlab.vocabulary.error_pct`:
positive, the run took more than predicted. Predictions are for the model as it ran (its
layers); with ``layers=`` the full model's step is the run's times :attr:`VerifyRow.scale`.
Bytes are in GiB; the table gives them in MiB where every one is under a GiB (a small model on
a host), so they do not all read 0.00.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distlab.plan.verify.run import VerifyRow
from distlab.report.table import Column, format_table
from distlab.vocabulary import error_pct

__all__ = ["COLUMNS", "UNITS", "columns", "verify_json", "verify_rows", "verify_table"]

GiB = 2**30

UNITS = {"GiB": GiB, "MiB": 2**20}
"""The units the table can give bytes in, and their bytes."""


def columns(unit: str = "GiB") -> tuple[Column, ...]:
    """The table's columns with bytes in ``unit`` (a key of :data:`UNITS`)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    return (
        Column("#", "rank"),
        Column("layout", "layout", align="<"),
        Column("outcome", "outcome", align="<"),
        Column("step s", "step_pred", ".3f"),
        Column("meas", "step_meas", ".3f"),
        Column("err%", "step_err", "+.1f"),
        Column("tok/s/GPU", "tokens", ".0f"),
        Column(f"alloc {unit}", "alloc_pred", ".2f"),
        Column("meas", "alloc_meas", ".2f"),
        Column("err%", "alloc_err", "+.1f"),
        Column("reserved", "res_pred", ".2f"),
        Column("meas", "res_meas", ".2f"),
        Column("err%", "res_err", "+.1f"),
        Column("verdict", "verdict", align="<"),
    )


COLUMNS = columns("GiB")
"""The table's columns, bytes in GiB."""


def _err(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or not predicted:
        return None
    return error_pct(measured, predicted)


def verify_rows(rows: Sequence[VerifyRow], *, start: int = 1, unit: str = "GiB"
                ) -> list[dict[str, Any]]:
    """One table row per :class:`VerifyRow` (bytes in ``unit``, a key of :data:`UNITS`;
    seconds)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    per = UNITS[unit]
    out = []
    for i, r in enumerate(rows, start):
        p = r.predicted
        step_pred = p.step.step_s if p is not None else None
        res_pred = p.memory.reserved if p is not None else None
        verdict = ""
        if p is not None:
            verdict = ("fits" if p.fits else "does not fit") + " / "
        verdict += {"ran": "ran", "out of memory": "out of memory (measured)"}.get(
            r.outcome, r.outcome)
        alloc_meas, res_meas = r.peak_allocated, r.peak_reserved
        out.append({
            "rank": i, "layout": r.layout.label, "outcome": r.outcome,
            "step_pred": step_pred, "step_meas": r.step_s, "step_err": _err(r.step_s, step_pred),
            "tokens": r.tokens_per_s_per_gpu,
            "alloc_pred": r.predicted_allocated / per if r.predicted_allocated else None,
            "alloc_meas": None if alloc_meas is None else alloc_meas / per,
            "alloc_err": _err(alloc_meas, r.predicted_allocated),
            "res_pred": None if res_pred is None else res_pred / per,
            "res_meas": None if res_meas is None else res_meas / per,
            "res_err": _err(res_meas, res_pred), "verdict": verdict})
    return out


def _unit(rows: Sequence[VerifyRow]) -> str:
    """``"MiB"`` where every byte count of ``rows`` is under a GiB, else ``"GiB"``."""
    counts = [n for r in rows for n in (r.predicted_allocated, r.peak_allocated, r.peak_reserved,
                                        r.predicted.memory.reserved if r.predicted else None)
              if n]
    return "MiB" if counts and max(counts) < GiB else "GiB"


def verify_table(rows: Sequence[VerifyRow]) -> str:
    """The table (bytes in GiB, or MiB where every one is under a GiB) and, under it, one line
    per layout that did not run, saying why."""
    unit = _unit(rows)
    text = format_table(verify_rows(rows, unit=unit), columns(unit))
    notes = [f"{i}. {r.layout.label}: {r.outcome}: {r.detail}"
             for i, r in enumerate(rows, 1) if r.detail]
    scaled = [f"{i}. {r.layout.label}: the full model's step is predicted {r.scale:.2f}x the "
              "run's" for i, r in enumerate(rows, 1) if r.scale != 1.0]
    return "\n".join([text, *notes, *scaled])


def verify_json(rows: Sequence[VerifyRow]) -> list[dict[str, Any]]:
    """Every row as JSON: the table's fields, each rank's measurement and the details."""
    out = []
    for row, r in zip(verify_rows(rows), rows, strict=True):
        row = dict(row)
        row["detail"] = r.detail
        row["scale"] = r.scale
        row["model"] = r.spec.to_dict()
        row["ranks"] = [m.to_dict() for m in r.measured] if r.measured else None
        if r.predicted is not None:
            row["predicted_memory_bytes"] = r.predicted.memory.parts()
            row["predicted_step_seconds"] = r.predicted.step.parts()
        out.append(row)
    return out
