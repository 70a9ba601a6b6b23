"""The registry of allreduce algorithms and :func:`build`, the validated way to call one.

Every entry is a pure function ``(world_size, count, **options) -> Schedule``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from distlab._checks import check_str

from .hierarchical import hierarchical
from .naive import naive
from .rabenseifner import rabenseifner
from .recursive_doubling import recursive_doubling
from .ring import ring
from .schedule import Schedule
from .segmented_ring import segmented_ring
from .tree import tree

__all__ = ["ALGORITHMS", "build", "check_algorithm", "options_of"]

ALGORITHMS: dict[str, Callable[..., Schedule]] = {
    "naive": naive,
    "tree": tree,
    "recursive_doubling": recursive_doubling,
    "rabenseifner": rabenseifner,
    "ring": ring,
    "segmented_ring": segmented_ring,
    "hierarchical": hierarchical,
}


def check_algorithm(algorithm: Any) -> str:
    """Return ``algorithm`` if it names a registered algorithm, else raise listing the names."""
    check_str("algorithm", algorithm, example=" | ".join(sorted(ALGORITHMS)))
    if algorithm not in ALGORITHMS:  # the list form, which error messages elsewhere quote
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    return algorithm


def options_of(algorithm: str) -> list[str]:
    """The option names (keyword arguments beyond world_size and count) an algorithm takes."""
    params = list(inspect.signature(ALGORITHMS[check_algorithm(algorithm)]).parameters)
    return params[2:]


def build(algorithm: str, world_size: int, count: int, **options: Any) -> Schedule:
    """Build the schedule of ``algorithm`` for ``world_size`` ranks and ``count`` elements.

    Options an algorithm does not take raise ``TypeError`` naming the ones it does; options set
    to ``None`` are ignored (so callers can pass e.g. ``segment_size=None`` to every algorithm).
    """
    name = check_algorithm(algorithm)
    allowed = options_of(name)
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise TypeError(f"algorithm {name!r} takes options {allowed}, got unknown {unknown}")
    return ALGORITHMS[name](world_size, count, **given)
