"""What "every GPU fed at once" measures on a box (pure): which GPUs copy together and which NUMA
node each one's pinned host buffer is bound to.

Host-to-all is every GPU copying pinned host memory at the same time; the bound on feeding eight
GPUs from the host shows only when each buffer sits on the GPU's own NUMA node (``local``) and then
on another node (``remote``: the copy crosses the CPUs' interconnect). :func:`numa_bindings` lists
the (GPU, node, local) runs a box allows, read from its :class:`~.gpu_topology.Topology`, or says
in one line why a run cannot be made: no GPU, one GPU (host-to-all is then the h2d row the
transfer lab already measures), a single NUMA node (no remote run), a GPU whose node
``nvidia-smi`` reports as N/A (no binding can be chosen for it).
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.transfers.gpu_topology import Topology

__all__ = ["Binding", "numa_bindings"]


@dataclass(frozen=True)
class Binding:
    """GPU ``gpu``'s host buffer bound to NUMA node ``node``; ``local`` when it is the GPU's own."""

    gpu: int
    node: int
    local: bool


def numa_bindings(topo: Topology | None,
                  n_gpus: int) -> tuple[dict[str, list[Binding]], list[str]]:
    """The runs host-to-all makes (``"local"`` and ``"remote"``: one binding per GPU each) and
    one ``skipped: why`` line per run it cannot make.

    Raises:
        ValueError: ``n_gpus`` is not a whole number >= 0.
    """
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"n_gpus must be a whole number >= 0, got {n_gpus!r}")
    if n_gpus == 0:
        return {}, ["skipped: host-to-all needs a GPU, this box has none"]
    if n_gpus == 1:
        return {}, ["skipped: host-to-all on one GPU is the h2d row (transfers part)"]
    if topo is None or len(topo.gpus) != n_gpus:
        named = "no nvidia-smi topo -m" if topo is None else \
            f"nvidia-smi topo -m names {len(topo.gpus)} GPUs, torch sees {n_gpus}"
        return {}, [f"skipped: NUMA binding: {named}; the GPUs' nodes are unknown"]
    nodes = [topo.numa.get(f"GPU{g}") for g in range(n_gpus)]
    unknown = [g for g, n in enumerate(nodes) if n is None]
    if unknown:
        return {}, [f"skipped: NUMA binding: nvidia-smi reports no NUMA node (N/A) for GPU "
                    f"{', '.join(map(str, unknown))}"]
    known = sorted({n for n in nodes if n is not None})
    runs = {"local": [Binding(g, n, True) for g, n in enumerate(nodes) if n is not None]}
    if len(known) < 2:
        return runs, [f"skipped: remote binding: every GPU is on NUMA node {known[0]}, there is "
                      "no other node to bind to"]
    runs["remote"] = [Binding(g, known[(known.index(n) + 1) % len(known)], False)
                      for g, n in enumerate(nodes) if n is not None]
    return runs, []
