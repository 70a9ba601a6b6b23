"""The one registry of collective algorithms, and the validated way to build one's plan.

Every algorithm any part of distlab can name is one :class:`Entry` ``(collective, name, builder,
tags)``; every list of names (a benchmark's ``--algorithms``, a figure's colours, the model's
judged rows) is derived from :data:`ENTRIES` with :func:`names`. A builder is a pure function
``(world_size, count, **options) -> Schedule`` whose schedule's ``collective`` is the entry's;
``count`` is the call's count as :mod:`distlab.collectives.plan.semantics` defines it, and the
options are the builder's keyword arguments after those two.

Tags:

- ``"plan"``: distlab's own algorithms (what benchmarks sweep and figures compare);
- ``"default"``: the one plan a call that names no algorithm runs (the bandwidth-optimal plan for
  large messages), one per collective;
- ``"backend"``: a schedule a backend runs inside its own call, written down from its source so
  it can be drawn, simulated, costed and run like the others, but left out of sweeps (gloo's
  allreduce ring);
- ``"builtin"``: the backend's own call (``torch.distributed.<collective>``), registered for every
  collective under the name :data:`BUILTIN`; it has no builder (there is no plan to draw).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_str
from distlab.collectives.algorithms.allgather.bruck import bruck as allgather_bruck
from distlab.collectives.algorithms.allgather.recursive_doubling import (
    recursive_doubling as allgather_recursive_doubling,
)
from distlab.collectives.algorithms.allgather.ring import ring as allgather_ring
from distlab.collectives.algorithms.allreduce.double_binary_tree import double_binary_tree
from distlab.collectives.algorithms.allreduce.gloo_ring import gloo_ring
from distlab.collectives.algorithms.allreduce.hierarchical import hierarchical
from distlab.collectives.algorithms.allreduce.naive import naive
from distlab.collectives.algorithms.allreduce.rabenseifner import rabenseifner
from distlab.collectives.algorithms.allreduce.recursive_doubling import recursive_doubling
from distlab.collectives.algorithms.allreduce.ring import ring
from distlab.collectives.algorithms.allreduce.segmented_ring import segmented_ring
from distlab.collectives.algorithms.allreduce.tree import tree
from distlab.collectives.algorithms.alltoall.bruck import bruck as alltoall_bruck
from distlab.collectives.algorithms.alltoall.pairwise import pairwise as alltoall_pairwise
from distlab.collectives.algorithms.barrier.dissemination import dissemination
from distlab.collectives.algorithms.broadcast.binomial import binomial as broadcast_binomial
from distlab.collectives.algorithms.broadcast.scatter_allgather import scatter_allgather
from distlab.collectives.algorithms.gather.binomial import binomial as gather_binomial
from distlab.collectives.algorithms.gather.linear import linear as gather_linear
from distlab.collectives.algorithms.reduce.binomial import binomial as reduce_binomial
from distlab.collectives.algorithms.reduce.rabenseifner import rabenseifner as reduce_rabenseifner
from distlab.collectives.algorithms.reducescatter.pairwise import (
    pairwise as reduce_scatter_pairwise,
)
from distlab.collectives.algorithms.reducescatter.recursive_halving import recursive_halving
from distlab.collectives.algorithms.reducescatter.ring import ring as reduce_scatter_ring
from distlab.collectives.algorithms.scatter.binomial import binomial as scatter_binomial
from distlab.collectives.algorithms.scatter.linear import linear as scatter_linear
from distlab.collectives.plan.schedule import Schedule
from distlab.collectives.plan.semantics import check_collective
from distlab.vocabulary import COLLECTIVES

__all__ = ["ALGORITHMS", "BACKEND_ALGORITHMS", "BUILTIN", "DEFAULT_ALGORITHM", "ENTRIES", "PLANS",
           "TAGS", "Entry", "build", "build_plan", "check_algorithm", "check_plan_algorithm",
           "entries", "entry", "is_builtin", "names", "options_of", "plan_options"]

BUILTIN = "builtin"
"""The name of every collective's builtin entry: the backend's own call."""

TAGS: tuple[str, ...] = ("plan", "default", "backend", "builtin")

Builder = Callable[..., Schedule]


@dataclass(frozen=True)
class Entry:
    """One registered algorithm (see the module docstring).

    Attributes:
        collective: the collective it computes (one of
            :data:`distlab.vocabulary.COLLECTIVES`).
        name: its name, unique within the collective.
        builder: ``(world_size, count, **options) -> Schedule``; None for the builtin.
        tags: a subset of :data:`TAGS`.
    """

    collective: str
    name: str
    builder: Builder | None
    tags: frozenset[str]

    @property
    def is_builtin(self) -> bool:
        """True for the backend's own call (no plan)."""
        return "builtin" in self.tags

    @property
    def options(self) -> tuple[str, ...]:
        """The option names (keyword arguments beyond world_size and count) it takes."""
        if self.builder is None:
            return ()
        return _option_names(self.builder)


@functools.cache
def _option_names(builder: Builder) -> tuple[str, ...]:
    """A builder's keyword options (read once: every collective call asks)."""
    return tuple(inspect.signature(builder).parameters)[2:]


def _plan(collective: str, name: str, builder: Builder, *tags: str) -> Entry:
    return Entry(collective, name, builder, frozenset(("plan", *tags)))


ENTRIES: tuple[Entry, ...] = (
    _plan("all_reduce", "naive", naive),
    _plan("all_reduce", "tree", tree),
    _plan("all_reduce", "recursive_doubling", recursive_doubling),
    _plan("all_reduce", "rabenseifner", rabenseifner),
    _plan("all_reduce", "ring", ring, "default"),
    _plan("all_reduce", "segmented_ring", segmented_ring),
    _plan("all_reduce", "hierarchical", hierarchical),
    _plan("all_reduce", "double_binary_tree", double_binary_tree),
    Entry("all_reduce", "gloo_ring", gloo_ring, frozenset({"backend"})),
    _plan("broadcast", "binomial", broadcast_binomial),
    _plan("broadcast", "scatter_allgather", scatter_allgather, "default"),
    _plan("reduce", "binomial", reduce_binomial),
    _plan("reduce", "rabenseifner", reduce_rabenseifner, "default"),
    _plan("gather", "binomial", gather_binomial, "default"),
    _plan("gather", "linear", gather_linear),
    _plan("scatter", "binomial", scatter_binomial, "default"),
    _plan("scatter", "linear", scatter_linear),
    _plan("all_gather", "ring", allgather_ring, "default"),
    _plan("all_gather", "recursive_doubling", allgather_recursive_doubling),
    _plan("all_gather", "bruck", allgather_bruck),
    _plan("reduce_scatter", "ring", reduce_scatter_ring, "default"),
    _plan("reduce_scatter", "pairwise", reduce_scatter_pairwise),
    _plan("reduce_scatter", "recursive_halving", recursive_halving),
    _plan("all_to_all", "pairwise", alltoall_pairwise, "default"),
    _plan("all_to_all", "bruck", alltoall_bruck),
    _plan("barrier", "dissemination", dissemination, "default"),
    *(Entry(c, BUILTIN, None, frozenset({"builtin"})) for c in COLLECTIVES),
)

_BY_KEY = {(e.collective, e.name): e for e in ENTRIES}
assert len(_BY_KEY) == len(ENTRIES), "duplicate (collective, name) in the registry"


def entries(collective: str | None = None, *, tag: str | None = None) -> tuple[Entry, ...]:
    """The registered entries (in registry order) of ``collective`` (None: all) carrying
    ``tag`` (None: any)."""
    if collective is not None:
        check_collective(collective)
    if tag is not None and tag not in TAGS:
        raise ValueError(f"tag must be one of {list(TAGS)}, got {tag!r}")
    return tuple(e for e in ENTRIES if (collective is None or e.collective == collective)
                 and (tag is None or tag in e.tags))


def names(collective: str, *tags: str) -> tuple[str, ...]:
    """The names of ``collective``'s entries that carry any of ``tags`` (default: ``"plan"``),
    in registry order: ``names("all_reduce", "plan", "builtin")`` is what a benchmark sweeps."""
    wanted = tags or ("plan",)
    return tuple(dict.fromkeys(e.name for t in wanted for e in entries(collective, tag=t)))


def entry(collective: str, name: Any) -> Entry:
    """The entry ``(collective, name)``; ``ValueError`` listing the collective's names."""
    c = check_collective(collective)
    known = [e.name for e in entries(c)]
    check_str("algorithm", name, example=" | ".join(known))
    if (c, name) not in _BY_KEY:
        raise ValueError(f"algorithm for {c} must be one of {known}, got {name!r}")
    return _BY_KEY[(c, name)]


def is_builtin(collective: str, name: str) -> bool:
    """Whether ``name`` is ``collective``'s builtin entry (the backend's own call)."""
    return entry(collective, name).is_builtin


PLANS: dict[str, dict[str, Builder]] = {
    c: {e.name: e.builder for e in entries(c, tag="plan") if e.builder is not None}
    for c in COLLECTIVES}
"""Every collective's distlab plans: ``PLANS[collective][name] -> builder``."""

ALGORITHMS: dict[str, Builder] = PLANS["all_reduce"]
"""distlab's allreduce plans (what the benchmark sweeps and the figures compare)."""

BACKEND_ALGORITHMS: dict[str, Builder] = {
    e.name: e.builder for e in entries("all_reduce", tag="backend") if e.builder is not None}
"""The allreduce schedules backends run inside their own call (gloo's ring)."""

DEFAULT_ALGORITHM: dict[str, str] = {c: entries(c, tag="default")[0].name for c in COLLECTIVES}
"""What a call that names no algorithm runs."""


def check_algorithm(algorithm: Any) -> str:
    """Return ``algorithm`` if it names an allreduce plan or a backend's schedule, else raise
    listing them."""
    check_str("algorithm", algorithm, example=" | ".join(sorted(ALGORITHMS)))
    if algorithm not in ALGORITHMS and algorithm not in BACKEND_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)} (or a backend's: "
                         f"{sorted(BACKEND_ALGORITHMS)}), got {algorithm!r}")
    return algorithm


def check_plan_algorithm(collective: Any, algorithm: Any) -> tuple[str, str]:
    """``(collective, algorithm)`` if ``algorithm`` is one of the collective's plans, else
    ``ValueError`` listing them."""
    c = check_collective(collective)
    plans = sorted(PLANS[c])
    check_str("algorithm", algorithm, example=" | ".join(plans))
    if algorithm not in PLANS[c]:
        raise ValueError(f"algorithm for {c} must be one of {plans}, got {algorithm!r}")
    return c, algorithm


def options_of(algorithm: str) -> list[str]:
    """The option names an allreduce plan or backend schedule takes."""
    return list(entry("all_reduce", check_algorithm(algorithm)).options)


def plan_options(collective: str, algorithm: str) -> list[str]:
    """The option names a collective's plan takes."""
    c, a = check_plan_algorithm(collective, algorithm)
    return list(entry(c, a).options)


def _build(e: Entry, world_size: int, count: int, options: dict[str, Any]) -> Schedule:
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(e.options))
    if unknown:
        where = "" if e.collective == "all_reduce" else f" of {e.collective}"
        raise TypeError(f"algorithm {e.name!r}{where} takes options {list(e.options)}, got "
                        f"unknown {unknown}")
    assert e.builder is not None
    return e.builder(world_size, count, **given)


def build(algorithm: str, world_size: int, count: int, **options: Any) -> Schedule:
    """The allreduce schedule of ``algorithm`` (a plan or a backend's) for ``world_size`` ranks
    and ``count`` elements. Options it does not take raise ``TypeError`` naming the ones it
    does; options set to ``None`` are ignored (so callers can pass ``segment_size=None`` to
    every algorithm)."""
    return _build(entry("all_reduce", check_algorithm(algorithm)), world_size, count, options)


def build_plan(collective: str, algorithm: str, world_size: int, count: int,
               **options: Any) -> Schedule:
    """The schedule of ``collective`` by its plan ``algorithm`` for ``world_size`` ranks and the
    call's ``count`` elements (options as :func:`build`)."""
    c, a = check_plan_algorithm(collective, algorithm)
    return _build(entry(c, a), world_size, count, options)
