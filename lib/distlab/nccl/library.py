"""NCCL's model through the one collective-library interface
(:class:`distlab.collective_library.CollectiveLibrary`): :data:`NCCL`.

Each method calls this package's own functions (:func:`~.execution.nccl_execution` for an
allreduce on one node or across nodes, :func:`~.family.nccl_collective` for all-gather,
reduce-scatter and broadcast on one node, :func:`~.alltoall.alltoall_times` for an all-to-all
on one node or across nodes, :func:`~.versions.resolve_nccl_version`) and returns the
interface's types in seconds. An all-to-all's size is the bytes each rank sends in all
(nccl-tests' ``size``); across nodes each GPU's messages to other nodes cross on the network's
NIC rate per GPU (:meth:`~.multinode.Network.gbps_per_gpu`, the group's GPUs per node sending
at once), and its choice names the protocol NCCL's p2p runs (``algorithm`` ``"p2p"``: grouped
sends and receives, no cost model to choose by, so no estimate). Not priced, with the reason:
all-gather, reduce-scatter and broadcast across nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from distlab._checks import check_int
from distlab.collective_library import (
    CollectiveLibrary,
    LibraryNetwork,
    LibraryRelease,
    SizeChoice,
    SizeTime,
)
from distlab.nccl.alltoall import alltoall_times, fabric
from distlab.nccl.boxes import gpu_box
from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.nccl.multinode import NETWORKS
from distlab.nccl.per_size import Execution
from distlab.nccl.versions import resolve_nccl_version
from distlab.vocabulary import collective_name

__all__ = ["NCCL", "NcclLibrary"]

ALL_REDUCE = collective_name("all_reduce")
ALL_TO_ALL = collective_name("all_to_all")
P2P = "p2p"
"""The ``algorithm`` of an all-to-all's choice: NCCL runs it as grouped sends and receives."""


def _choice(e: Execution) -> SizeChoice:
    return SizeChoice(e.nbytes, e.algorithm, e.protocol, e.estimate_us * 1e-6)


class NcclLibrary:
    """NCCL's model as a :class:`~distlab.collective_library.CollectiveLibrary`."""

    name = "nccl"

    def resolve_release(self, release: str | None = None) -> LibraryRelease:
        r = resolve_nccl_version(release)
        return LibraryRelease(self.name, r.asked, r.priced_as, r.note)

    def gpus_per_node(self, box: str) -> int:
        return gpu_box(box).gpus

    def link_gbps(self, box: str) -> float:
        return gpu_box(box).link_gbps

    def network(self, key: str) -> LibraryNetwork:
        if key not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {key!r}")
        net = NETWORKS[key]
        return LibraryNetwork(key, net.nic_gbps, net.rails)

    def networks(self) -> tuple[str, ...]:
        return tuple(NETWORKS)

    def choices(self, box: str, world_size: int, sizes_bytes: Sequence[int], *,
                nodes: int = 1, network: str | None = None,
                release: str | None = None) -> list[SizeChoice]:
        return [t.choice for t in self.times(box, world_size, sizes_bytes, nodes=nodes,
                                             network=network, release=release)]

    def times(self, box: str, world_size: int, sizes_bytes: Sequence[int], *,
              collective: str = "all_reduce", nodes: int = 1, network: str | None = None,
              release: str | None = None) -> list[SizeTime]:
        collective = collective_name(collective)
        nodes = check_int("nodes", nodes, minimum=1)
        if collective == ALL_REDUCE:
            rows = nccl_execution(box, world_size, sizes_bytes, nccl_version=release,
                                  nodes=nodes, network=network if nodes > 1 else None)
            return [SizeTime(_choice(e), e.seconds) for e in rows]
        if collective == ALL_TO_ALL:
            return self._all_to_all(box, world_size, sizes_bytes, nodes, network)
        if nodes > 1:
            why = f"{collective} across nodes: not priced (NCCL's model holds allreduce there)"
            return [SizeTime(SizeChoice(int(s), "", "", None), None, why)
                    for s in sizes_bytes]
        return [SizeTime(_choice(e), e.seconds)
                for e in nccl_collective(box, world_size, sizes_bytes, collective)]


    def _all_to_all(self, box: str, world_size: int, sizes_bytes: Sequence[int], nodes: int,
                    network: str | None) -> list[SizeTime]:
        """NCCL's all-to-all of each size (bytes each rank sends in all) over ``world_size``
        GPUs on ``nodes`` nodes of ``box`` (:mod:`~.alltoall`)."""
        nic = 0.0
        if nodes > 1:
            if network is None:
                raise ValueError(f"an all-to-all across nodes={nodes} needs a network, one of "
                                 f"{', '.join(NETWORKS)}")
            world_size = check_int("world_size", world_size, minimum=nodes)
            self.network(network)                     # a key of NETWORKS, or ValueError
            nic = NETWORKS[network].gbps_per_gpu(world_size // nodes)
        f = fabric(box, world_size, nodes=nodes, nic_gbps=nic)
        return [SizeTime(SizeChoice(r.nbytes, P2P, r.layout.protocol, None), r.seconds)
                for r in alltoall_times(f, sizes_bytes)]


NCCL: CollectiveLibrary = NcclLibrary()
"""NCCL's model behind the one interface."""
