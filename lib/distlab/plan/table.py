"""The planner's table as the command prints it: its columns (one per registered step
dimension) and one row per priced layout; and one priced layout as JSON. Shared by
``python -m distlab.plan`` (:mod:`distlab.plan.__main__`) and its figures
(:mod:`distlab.viz.plan`), so both show the same numbers under the same headers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from distlab.report.table import Column

if TYPE_CHECKING:
    from distlab.plan.planner import LayoutPrice
    from distlab.transformer import ModelSpec

__all__ = ["TIGHT", "columns", "plan_rows", "price_json", "tight_note"]

GiB = 2**30

TIGHT = "tight"
"""The word the ``fits`` column adds to a layout that fits with less to spare than the memory
model's error (:attr:`distlab.plan.planner.LayoutPrice.tight`), explained by
:func:`tight_note`."""

_HEAD = (
    Column("#", "rank"),
    Column("layout", "layout", align="<"),
    Column("mem GiB", "memory", ".1f"),
    Column("states", "states", ".1f"),
    Column("act", "activations", ".1f"),
    Column("other", "other", ".1f"),
    Column("fits", "fits"),
    Column("step s", "step", ".3f"),
)
_TAIL = (
    Column("tok/s/GPU", "tokens", ".0f"),
    Column("MFU %", "mfu", ".1f", scale=100),
)


def columns(model: ModelSpec | None = None) -> tuple[Column, ...]:
    """The table's columns: memory, then the step and one column of seconds for each step
    column of the dimensions registered for ``model`` (:func:`distlab.plan.dimensions.
    column_parts`: compute, ``tp+cp``, ``dp+fsdp``, bubble, ``ep a2a`` for a model with experts,
    and any a registered dimension adds), tokens/s per GPU, MFU; every model's where ``model``
    is None."""
    from distlab.plan.dimensions import column_parts

    return (*_HEAD, *(Column(header, key, ".3f") for header, key in column_parts(model)),
            *_TAIL)


def plan_rows(prices: Sequence[LayoutPrice], *, start: int = 1) -> list[dict[str, Any]]:
    """One table row per priced layout (GiB, seconds, tokens/s per GPU, MFU); a step column's
    value sums its parts (:func:`distlab.plan.dimensions.column_parts`)."""
    from distlab.plan.dimensions import column_parts

    groups = column_parts(prices[0].step.model if prices else None)
    rows = []
    for i, p in enumerate(prices, start):
        m, s = p.memory, p.step
        states = (m.params + m.grads + m.optimizer) / GiB
        row = {
            "rank": i, "layout": p.layout.label, "memory": m.total / GiB, "states": states,
            "activations": m.activations / GiB,
            "other": m.total / GiB - states - m.activations / GiB,
            # the margin: GiB to spare where it fits, GiB short where it does not; tight where
            # what is spare is within the memory model's error (tight_note)
            "fits": f"{p.headroom_bytes / GiB:+.1f}" + (f" {TIGHT}" if p.tight else ""),
            "step": s.step_s}
        seconds = s.parts()
        for (_, key), names in groups.items():
            first, *rest = (seconds.get(n, 0.0) for n in names)
            for value in rest:
                first += value
            row[key] = first
        row |= {"tokens": s.tokens_per_s_per_gpu, "mfu": s.mfu}
        rows.append(row)
    return rows


def tight_note(prices: Sequence[LayoutPrice]) -> str | None:
    """The lines under a table of ``prices`` that say what ``tight`` means, with the memory
    model's error it rests on (:data:`~distlab.plan.calibration.RESERVED_ERROR_P90`) in GiB of
    the GPU's memory; ``None`` where no layout of ``prices`` is tight."""
    from distlab.plan.calibration import RESERVED_ERROR_P90
    from distlab.plan.planner import tight_margin_bytes
    from distlab.vocabulary import size_in

    tight = [p for p in prices if p.tight]
    if not tight:
        return None
    hw = tight[0].step.hardware
    return (f"{TIGHT}: fits with less than {size_in(tight_margin_bytes(hw), 'GiB')} to spare, "
            "within the memory model's own error\n"
            f"({RESERVED_ERROR_P90:.1f}% of the GPU's memory, its held-out p90 on measured runs: "
            "python -m distlab.judge fit);\nranked after every layout with more to spare")


def price_json(p: LayoutPrice) -> dict[str, Any]:
    """One priced layout as JSON: the layout's fields, memory parts (bytes), step parts
    (seconds), tokens/s per GPU and MFU."""
    fields = vars(p.layout) | {}
    if not p.step.model.moe:
        for name in ("ep", "ep_overlap", "etp", "expert_capacity"):
            del fields[name]
    return {"layout": p.layout.label, "fields": fields,
            "memory_bytes": p.memory.parts() | {"total": p.memory.total},
            "fits": p.fits, "tight": p.tight, "headroom_bytes": p.headroom_bytes,
            "step_seconds": p.step.parts() | {"step": p.step.step_s},
            "tokens_per_s_per_gpu": p.step.tokens_per_s_per_gpu, "mfu": p.step.mfu}
