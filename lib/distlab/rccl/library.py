"""RCCL's model through the one collective-library interface
(:class:`distlab.collective_library.CollectiveLibrary`): :data:`RCCL`.

Each method calls this package's own functions (:func:`~.tuning.rccl_allreduce_choices`,
:func:`~.execution.rccl_allreduce_times`, :func:`~.tables.resolve_release`) on a box of
:data:`~.boxes.AMD_BOXES` (its architecture picks the tables) and a NIC of
:data:`~.boxes.AMD_NICS`, and returns the interface's types in seconds. Not priced, each with
the reason: collectives other than allreduce; a group that does not fill whole 8-GPU nodes
(RCCL's model is of whole nodes, one NIC per GPU); what the execution model itself leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence

from distlab._checks import check_int, check_sizes
from distlab.collective_library import (
    CollectiveLibrary,
    LibraryNetwork,
    LibraryRelease,
    SizeChoice,
    SizeTime,
)
from distlab.rccl.boxes import AMD_BOXES, AMD_NICS, AmdBox
from distlab.rccl.execution import NIC_GBPS, rccl_allreduce_times
from distlab.rccl.tables import DEFAULT_ARCH, resolve_release
from distlab.rccl.tuning import GPUS_PER_NODE, RcclChoice, rccl_allreduce_choices
from distlab.vocabulary import collective_name

__all__ = ["RCCL", "RcclLibrary"]

ALL_REDUCE = collective_name("all_reduce")
_BOXES = {b.key: b for b in AMD_BOXES}
_NICS = {n.key: n for n in AMD_NICS}


def _box(box: str) -> AmdBox:
    if box not in _BOXES:
        raise ValueError(f"box must be one of {', '.join(_BOXES)}, got {box!r}")
    return _BOXES[box]


def _choice(c: RcclChoice) -> SizeChoice:
    est = None if c.estimate_us is None else c.estimate_us * 1e-6
    return SizeChoice(c.nbytes, c.algorithm, c.protocol, est)


def whole_nodes_why(world_size: int, nodes: int) -> str:
    """Why a group of ``world_size`` GPUs on ``nodes`` nodes is not priced (``""`` where it
    fills whole 8-GPU nodes, the only groups RCCL's model holds)."""
    if world_size == nodes * GPUS_PER_NODE:
        return ""
    return (f"a group of {world_size} GPUs on {nodes} node{'s' if nodes > 1 else ''} (RCCL's "
            f"model holds whole {GPUS_PER_NODE}-GPU nodes only)")


class RcclLibrary:
    """RCCL's model as a :class:`~distlab.collective_library.CollectiveLibrary`."""

    name = "rccl"

    def resolve_release(self, release: str | None = None) -> LibraryRelease:
        r = resolve_release(release, DEFAULT_ARCH)
        return LibraryRelease(self.name, r.asked, r.tables.release, r.note)

    def gpus_per_node(self, box: str) -> int:
        _box(box)
        return GPUS_PER_NODE

    def link_gbps(self, box: str) -> float:
        return _box(box).link_gbps

    def network(self, key: str) -> LibraryNetwork:
        if key not in _NICS:
            raise ValueError(f"network must be one of {', '.join(_NICS)}, got {key!r}")
        return LibraryNetwork(key, NIC_GBPS, GPUS_PER_NODE)

    def networks(self) -> tuple[str, ...]:
        return tuple(_NICS)

    def choices(self, box: str, world_size: int, sizes_bytes: Sequence[int], *,
                nodes: int = 1, network: str | None = None,
                release: str | None = None) -> list[SizeChoice]:
        arch = _box(box).arch
        check_int("world_size", world_size, minimum=1)
        if why := whole_nodes_why(world_size, nodes):
            raise ValueError(why)
        rows, _ = rccl_allreduce_choices(nodes, sizes_bytes, release=release, arch=arch)
        return [_choice(c) for c in rows]

    def times(self, box: str, world_size: int, sizes_bytes: Sequence[int], *,
              collective: str = "all_reduce", nodes: int = 1, network: str | None = None,
              release: str | None = None) -> list[SizeTime]:
        arch = _box(box).arch
        collective = collective_name(collective)
        world_size = check_int("world_size", world_size, minimum=1)
        nodes = check_int("nodes", nodes, minimum=1)
        sizes = check_sizes(sizes_bytes)
        nic = NIC_GBPS if network is None else self.network(network).nic_gbps
        why = (whole_nodes_why(world_size, nodes) if collective == ALL_REDUCE else
               f"{collective}: not priced, RCCL's model holds allreduce only")
        if why:
            return [SizeTime(SizeChoice(s, "", "", None), None, why) for s in sizes]
        rows, _ = rccl_allreduce_times(nodes, sizes, release=release, arch=arch, nic_gbps=nic)
        return [SizeTime(_choice(r.choice), r.seconds, r.why) for r in rows]


RCCL: CollectiveLibrary = RcclLibrary()
"""RCCL's model behind the one interface."""
