"""The one interface of a collective library's model (NCCL's, RCCL's): resolve a release, the
library's choice per size, the time per size, its boxes and networks, its published tables.

:class:`CollectiveLibrary` is what a caller above the labs (the planner, the trace judge) asks;
``distlab.nccl.library.NCCL`` and ``distlab.rccl.library.RCCL`` fill it, each over its own
internals (NCCL's topology search and NVLS, RCCL's tables and MSCCL stay in their packages).
The results are the same types in the same units for both: bytes, seconds, GB/s (1e9 bytes
per second). A size a model does not price comes back with ``seconds=None`` and the reason;
:class:`NotPriced` is what a caller that needs a number raises then.

Core (floor 0): types and one data loader, no model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol, runtime_checkable

__all__ = ["CollectiveLibrary", "LibraryNetwork", "LibraryRelease", "NotPriced", "SizeChoice",
           "SizeTime", "load_published"]


class NotPriced(ValueError):
    """A collective the library's model does not price (the message says why)."""


@dataclass(frozen=True)
class LibraryRelease:
    """A release as the library resolved it.

    Attributes:
        library: ``"nccl"`` or ``"rccl"``.
        asked: the release as given, or the default's.
        priced_as: the release whose constants or tables price it.
        note: one line saying it is priced as another release (``""`` when it is its own).
    """

    library: str
    asked: str
    priced_as: str
    note: str


@dataclass(frozen=True)
class SizeChoice:
    """What the library runs for one size: algorithm and protocol, and its own estimate of
    their time (what it minimized to choose them), seconds; ``None`` where its cost model did
    not price the pair (RCCL's MSCCL path)."""

    nbytes: int
    algorithm: str
    protocol: str
    estimate_seconds: float | None


@dataclass(frozen=True)
class SizeTime:
    """One size: the library's choice and the time the execution model gives it, seconds
    (``None`` where not priced, ``why`` saying so; ``""`` otherwise)."""

    choice: SizeChoice
    seconds: float | None
    why: str = ""


@dataclass(frozen=True)
class LibraryNetwork:
    """A network between nodes as a library's model knows it: one NIC's rate (GB/s) and the
    NICs (rails) per node."""

    key: str
    nic_gbps: float
    rails: int


@runtime_checkable
class CollectiveLibrary(Protocol):
    """A collective library's model. Boxes and networks are the keys its package holds;
    every method checks its arguments and raises ``ValueError`` naming the one refused."""

    name: str
    """``"nccl"`` or ``"rccl"`` (:data:`distlab.gpus.LIBRARIES`)."""

    def resolve_release(self, release: str | None = None) -> LibraryRelease:
        """The release that prices ``release`` (``None``: the model's default)."""
        ...

    def gpus_per_node(self, box: str) -> int:
        """GPUs in one node of ``box``."""
        ...

    def link_gbps(self, box: str) -> float:
        """One GPU's link bandwidth to a peer in ``box``, each way, GB/s."""
        ...

    def network(self, key: str) -> LibraryNetwork:
        """The network ``key`` (one of :meth:`networks`)."""
        ...

    def networks(self) -> tuple[str, ...]:
        """The keys of the networks between nodes the model prices."""
        ...

    def choices(self, box: str, world_size: int, sizes_bytes: Sequence[int], *,
                nodes: int = 1, network: str | None = None,
                release: str | None = None) -> list[SizeChoice]:
        """The library's choice for an allreduce of each size over ``world_size`` GPUs on
        ``nodes`` nodes of ``box``."""
        ...

    def times(self, box: str, world_size: int, sizes_bytes: Sequence[int], *,
              collective: str = "all_reduce", nodes: int = 1, network: str | None = None,
              release: str | None = None) -> list[SizeTime]:
        """The choice and the modelled time of ``collective`` (torch's spelling) at each size
        (NCCL's ``nBytes``; an all-to-all's, the bytes each rank sends in all, nccl-tests'
        ``size``); a collective or placement the model does not price comes back with
        ``seconds=None`` and why."""
        ...


def load_published(package: str, name: str = "published.json") -> dict[str, Any]:
    """The published tables a model package ships in its ``data/`` folder, read through
    :mod:`importlib.resources` (an installed wheel or zip finds them too); a fresh dict on
    every call."""
    text = resources.files(package).joinpath("data").joinpath(name).read_text()
    data: dict[str, Any] = json.loads(text)
    return data
