"""The one leave-one-out judge NCCL's and RCCL's evidence share: constants that judge a group of
published points out of sample are fitted on every other group only.

NCCL leaves out one source at a time
(:func:`distlab.evidence.nccl.fit_execution.leave_one_source_out`), RCCL one table of the tree
across nodes at a time (:func:`distlab.evidence.rccl.judged.judge`); both ask
:func:`leave_one_out` for the constants each group is judged with.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

__all__ = ["leave_one_out"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
C = TypeVar("C")


def leave_one_out(items: Iterable[T], group: Callable[[T], K],
                  fit: Callable[[list[T]], C]) -> dict[K, C]:
    """For each group of ``items`` (``group(item)``, in sorted order), what ``fit`` gives on the
    items of every *other* group: the constants that judge that group out of sample. A group
    with no other group beside it is left out of the answer (nothing to fit on).

    Args:
        items: the published points (or tables) a model's constants are fitted on.
        group: the unit left out, e.g. a point's source or a table's id.
        fit: constants from a list of items.
    """
    pts = list(items)
    keys = sorted({group(p) for p in pts})  # type: ignore[type-var]
    out: dict[K, C] = {}
    for key in keys:
        rest = [p for p in pts if group(p) != key]
        if rest:
            out[key] = fit(rest)
    return out
