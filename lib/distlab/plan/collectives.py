"""The collectives and point-to-point transfers of a layout, priced on the hardware.

Every collective of a parallel group is priced by distlab's NCCL model for the GPU's box
(:mod:`distlab.nccl`): on one node its execution model (allreduce) or its
all-gather / reduce-scatter / broadcast model; across nodes its multi-node allreduce model
over the hardware's network, an all-gather or reduce-scatter there as half the allreduce of the
same bytes (the model holds no multi-node all-gather; a reduce-scatter plus an all-gather is an
allreduce, and NCCL runs both as rings). Where a group sits follows
:func:`~distlab.plan.layout.group_span`.

Point-to-point transfers (pipeline stages' activations, context parallelism's key/value
blocks) cost ``P2P_ALPHA_S + bytes / bandwidth``: in one node the GPU's NVLink bandwidth per
direction from its box (``GpuBox.link_gbps``), across nodes one network port's (each GPU
has its rail; fewer ports than GPUs share them).
"""

from __future__ import annotations

from functools import lru_cache

from distlab._checks import check_choice, check_int
from distlab.nccl.boxes import GPU_BOXES
from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.nccl.multinode import NETWORKS
from distlab.plan.layout import GroupSpan, Hardware
from distlab.vocabulary import collective_name

__all__ = ["P2P_ALPHA_S", "collective_seconds", "p2p_seconds"]

ALL_REDUCE = collective_name("all_reduce")
ALL_GATHER = collective_name("all_gather")
REDUCE_SCATTER = collective_name("reduce_scatter")
PRICED = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER)

P2P_ALPHA_S = 10e-6
"""Fixed seconds of one point-to-point transfer (a send/receive kernel's launch and
handshake): the order of NCCL's one-hop latency over NVLink and InfiniBand, not fitted."""


def collective_seconds(collective: str, nbytes: int, span: GroupSpan, hw: Hardware) -> float:
    """Seconds of one ``collective`` of ``nbytes`` (NCCL's ``nBytes``: the whole buffer,
    gathered or scattered) over a group laid out as ``span`` on ``hw``; 0 for a group of one
    or no bytes."""
    collective = check_choice("collective", collective_name(collective), PRICED)
    nbytes = check_int("nbytes", int(nbytes), minimum=0)
    if span.size == 1 or nbytes == 0:
        return 0.0
    network = hw.network if span.nodes > 1 else None
    return _priced(collective, nbytes, span.size, span.nodes, hw.gpu.box, network)


@lru_cache(maxsize=65536)
def _priced(collective: str, nbytes: int, size: int, nodes: int, box: str,
            network: str | None) -> float:
    if nodes == 1:
        if collective == ALL_REDUCE:
            return nccl_execution(box, size, [nbytes])[0].seconds
        return nccl_collective(box, size, [nbytes], collective)[0].seconds
    seconds = nccl_execution(box, size, [nbytes], nodes=nodes, network=network)[0].seconds
    return seconds if collective == ALL_REDUCE else seconds / 2


def p2p_seconds(nbytes: int, *, cross_node: bool, hw: Hardware) -> float:
    """Seconds to send ``nbytes`` from one GPU to another, in one node or across nodes."""
    nbytes = check_int("nbytes", int(nbytes), minimum=0)
    if cross_node:
        if hw.network is None:
            raise ValueError("a transfer across nodes needs the hardware's network")
        net = NETWORKS[hw.network]
        gbps = net.nic_gbps * min(1.0, net.rails / hw.gpus_per_node)
    else:
        gbps = GPU_BOXES[hw.gpu.box].link_gbps
    return P2P_ALPHA_S + nbytes / (gbps * 1e9)
