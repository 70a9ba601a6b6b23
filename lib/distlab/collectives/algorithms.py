"""The registry of allreduce algorithms and :func:`build`, the validated way to call one.

Every entry is a pure function ``(world_size, count, **options) -> Schedule``. :data:`ALGORITHMS`
are distlab's own (what the benchmark sweeps and the figures compare);
:data:`BACKEND_ALGORITHMS` are the schedules a backend runs inside its own allreduce, written
down from its source so they can be drawn, simulated, costed and run like the others, but left
out of the sweeps (``torch.distributed.all_reduce`` itself is the benchmark's ``builtin``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from distlab._checks import check_str

from .allreduce.double_binary_tree import double_binary_tree
from .allreduce.gloo_ring import gloo_ring
from .allreduce.hierarchical import hierarchical
from .allreduce.naive import naive
from .allreduce.rabenseifner import rabenseifner
from .allreduce.recursive_doubling import recursive_doubling
from .allreduce.ring import ring
from .allreduce.segmented_ring import segmented_ring
from .allreduce.tree import tree
from .schedule import Schedule

__all__ = ["ALGORITHMS", "BACKEND_ALGORITHMS", "build", "check_algorithm", "options_of"]

ALGORITHMS: dict[str, Callable[..., Schedule]] = {
    "naive": naive,
    "tree": tree,
    "recursive_doubling": recursive_doubling,
    "rabenseifner": rabenseifner,
    "ring": ring,
    "segmented_ring": segmented_ring,
    "hierarchical": hierarchical,
    "double_binary_tree": double_binary_tree,
}

BACKEND_ALGORITHMS: dict[str, Callable[..., Schedule]] = {
    "gloo_ring": gloo_ring,  # gloo's allreduce of a CPU tensor (torch.distributed, gloo backend)
}


def _builder(name: str) -> Callable[..., Schedule]:
    return ALGORITHMS[name] if name in ALGORITHMS else BACKEND_ALGORITHMS[name]


def check_algorithm(algorithm: Any) -> str:
    """Return ``algorithm`` if it names a registered algorithm (distlab's or a backend's), else
    raise listing distlab's names."""
    check_str("algorithm", algorithm, example=" | ".join(sorted(ALGORITHMS)))
    if algorithm not in ALGORITHMS and algorithm not in BACKEND_ALGORITHMS:
        # the list form, which error messages elsewhere quote
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)} (or a backend's: "
                         f"{sorted(BACKEND_ALGORITHMS)}), got {algorithm!r}")
    return algorithm


def options_of(algorithm: str) -> list[str]:
    """The option names (keyword arguments beyond world_size and count) an algorithm takes."""
    params = list(inspect.signature(_builder(check_algorithm(algorithm))).parameters)
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
    return _builder(name)(world_size, count, **given)
