"""The collectives and point-to-point transfers of a layout, priced on the hardware.

Every collective of a parallel group is priced by the model of the GPU's collective library
(:func:`~distlab.plan.libraries.library_of`, through the one interface
:class:`~distlab.collective_library.CollectiveLibrary`) for the GPU's box: NCCL's
(:mod:`distlab.nccl`) on NVIDIA GPUs, RCCL's (:mod:`distlab.rccl`) on AMD ones. Where the
library's model holds the collective (NCCL: an allreduce on one node or across nodes, an
all-gather, reduce-scatter or broadcast on one node; RCCL: an allreduce over whole 8-GPU
nodes) it prices it; an all-gather or reduce-scatter it does not hold (NCCL's across nodes,
RCCL's anywhere) is half the allreduce of the same bytes (a reduce-scatter plus an all-gather
is an allreduce, and both libraries run them as rings). A group the model does not price at
all raises :class:`~distlab.collective_library.NotPriced` with the reason. Where a group sits
follows :func:`~distlab.plan.layout.group_span`.

Point-to-point transfers (pipeline stages' activations, context parallelism's key/value
blocks) cost ``P2P_ALPHA_S + bytes / bandwidth``: in one node the GPU's link bandwidth per
direction from its box (NVLink, xGMI: ``link_gbps`` of the library), across nodes one network
port's (each GPU has its rail; fewer ports than GPUs share them).
"""

from __future__ import annotations

from functools import lru_cache

from distlab._checks import check_choice, check_int
from distlab.collective_library import NotPriced
from distlab.plan.layout import GroupSpan, Hardware
from distlab.plan.libraries import COLLECTIVE_LIBRARIES, library_of
from distlab.vocabulary import collective_name

__all__ = ["HALF_ALLREDUCE", "P2P_ALPHA_S", "collective_seconds", "p2p_seconds"]

ALL_REDUCE = collective_name("all_reduce")
ALL_GATHER = collective_name("all_gather")
REDUCE_SCATTER = collective_name("reduce_scatter")
PRICED = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)

HALF_ALLREDUCE = ("an all-gather or reduce-scatter its model does not hold is priced as half "
                  "the allreduce of the same bytes")
"""What the planner does where the library's model holds no all-gather or reduce-scatter."""

P2P_ALPHA_S = 10e-6
"""Fixed seconds of one point-to-point transfer (a send/receive kernel's launch and
handshake): the order of NCCL's one-hop latency over NVLink and InfiniBand, not fitted."""


def collective_seconds(collective: str, nbytes: int, span: GroupSpan, hw: Hardware) -> float:
    """Seconds of one ``collective`` of ``nbytes`` (NCCL's ``nBytes``: the whole buffer,
    gathered or scattered) over a group laid out as ``span`` on ``hw``; 0 for a group of one
    or no bytes.

    Raises:
        NotPriced: the library's model does not price the group (RCCL: a group that does not
            fill whole 8-GPU nodes), the message saying why.
    """
    collective = check_choice("collective", collective_name(collective), PRICED)
    nbytes = check_int("nbytes", int(nbytes), minimum=0)
    if span.size == 1 or nbytes == 0:
        return 0.0
    network = hw.network if span.nodes > 1 else None
    seconds, why = _priced(hw.gpu.library, collective, nbytes, span.size, span.nodes,
                           hw.gpu.box, network)
    if seconds is None:
        raise NotPriced(why)
    return seconds


@lru_cache(maxsize=65536)
def _priced(library: str, collective: str, nbytes: int, size: int, nodes: int, box: str,
            network: str | None) -> tuple[float | None, str]:
    lib = COLLECTIVE_LIBRARIES[library]
    row = lib.times(box, size, [nbytes], collective=collective, nodes=nodes,
                    network=network)[0]
    if row.seconds is not None or collective == ALL_REDUCE:
        return row.seconds, row.why
    whole = lib.times(box, size, [nbytes], nodes=nodes, network=network)[0]
    return (None if whole.seconds is None else whole.seconds / 2), whole.why


def p2p_seconds(nbytes: int, *, cross_node: bool, hw: Hardware) -> float:
    """Seconds to send ``nbytes`` from one GPU to another, in one node or across nodes."""
    nbytes = check_int("nbytes", int(nbytes), minimum=0)
    lib = library_of(hw.gpu)
    if cross_node:
        if hw.network is None:
            raise ValueError("a transfer across nodes needs the hardware's network")
        net = lib.network(hw.network)
        gbps = net.nic_gbps * min(1.0, net.rails / hw.gpus_per_node)
    else:
        gbps = lib.link_gbps(hw.gpu.box)
    return P2P_ALPHA_S + nbytes / (gbps * 1e9)
