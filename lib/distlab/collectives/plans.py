"""The registry of every collective's algorithms and :func:`build_plan`, the validated way to
call one.

Every entry is a pure function ``(world_size, count, **options) -> Schedule`` whose schedule's
``collective`` is its key here; ``count`` is the call's count as :mod:`.semantics` defines it.
The allreduce algorithms are :data:`distlab.collectives.algorithms.ALGORITHMS`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from distlab._checks import check_str

from .algorithms import ALGORITHMS
from .allgather.bruck import bruck as allgather_bruck
from .allgather.recursive_doubling import recursive_doubling as allgather_recursive_doubling
from .allgather.ring import ring as allgather_ring
from .alltoall.bruck import bruck as alltoall_bruck
from .alltoall.pairwise import pairwise as alltoall_pairwise
from .barrier.dissemination import dissemination
from .broadcast.binomial import binomial as broadcast_binomial
from .broadcast.scatter_allgather import scatter_allgather
from .gather.binomial import binomial as gather_binomial
from .gather.linear import linear as gather_linear
from .reduce.binomial import binomial as reduce_binomial
from .reduce.rabenseifner import rabenseifner as reduce_rabenseifner
from .reducescatter.pairwise import pairwise as reduce_scatter_pairwise
from .reducescatter.recursive_halving import recursive_halving
from .reducescatter.ring import ring as reduce_scatter_ring
from .scatter.binomial import binomial as scatter_binomial
from .scatter.linear import linear as scatter_linear
from .schedule import Schedule
from .semantics import COLLECTIVES, check_collective

__all__ = ["DEFAULT_ALGORITHM", "PLANS", "build_plan", "check_plan_algorithm", "plan_options"]

PLANS: dict[str, dict[str, Callable[..., Schedule]]] = {
    "all_reduce": ALGORITHMS,
    "broadcast": {"binomial": broadcast_binomial, "scatter_allgather": scatter_allgather},
    "reduce": {"binomial": reduce_binomial, "rabenseifner": reduce_rabenseifner},
    "gather": {"binomial": gather_binomial, "linear": gather_linear},
    "scatter": {"binomial": scatter_binomial, "linear": scatter_linear},
    "all_gather": {"ring": allgather_ring, "recursive_doubling": allgather_recursive_doubling,
                   "bruck": allgather_bruck},
    "reduce_scatter": {"ring": reduce_scatter_ring, "pairwise": reduce_scatter_pairwise,
                       "recursive_halving": recursive_halving},
    "all_to_all": {"pairwise": alltoall_pairwise, "bruck": alltoall_bruck},
    "barrier": {"dissemination": dissemination},
}
assert tuple(PLANS) == COLLECTIVES

# what a call that names no algorithm runs: the bandwidth-optimal plan for large messages
DEFAULT_ALGORITHM = {"all_reduce": "ring", "broadcast": "scatter_allgather",
                     "reduce": "rabenseifner", "gather": "binomial", "scatter": "binomial",
                     "all_gather": "ring", "reduce_scatter": "ring", "all_to_all": "pairwise",
                     "barrier": "dissemination"}


def check_plan_algorithm(collective: Any, algorithm: Any) -> tuple[str, str]:
    """``(collective, algorithm)`` if both are registered, else ``ValueError`` listing them."""
    c = check_collective(collective)
    names = sorted(PLANS[c])
    check_str("algorithm", algorithm, example=" | ".join(names))
    if algorithm not in PLANS[c]:
        raise ValueError(f"algorithm for {c} must be one of {names}, got {algorithm!r}")
    return c, algorithm


def plan_options(collective: str, algorithm: str) -> list[str]:
    """The option names (keyword arguments beyond world_size and count) an algorithm takes."""
    c, a = check_plan_algorithm(collective, algorithm)
    return list(inspect.signature(PLANS[c][a]).parameters)[2:]


def build_plan(collective: str, algorithm: str, world_size: int, count: int,
               **options: Any) -> Schedule:
    """The schedule of ``collective`` by ``algorithm`` for ``world_size`` ranks and the call's
    ``count`` elements. Options an algorithm does not take raise ``TypeError`` naming the ones
    it does; options set to ``None`` are ignored."""
    c, a = check_plan_algorithm(collective, algorithm)
    allowed = plan_options(c, a)
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise TypeError(f"algorithm {a!r} of {c} takes options {allowed}, got unknown {unknown}")
    return PLANS[c][a](world_size, count, **given)
