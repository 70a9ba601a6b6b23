"""Host-to-all's NUMA bindings on the fake boxes: local and remote on two nodes, one line for
what a box cannot run (no GPU, one GPU, one node, a node reported N/A)."""

from __future__ import annotations

import pytest

from distlab.transfers.gpu_topology import (
    dgx_h100_like,
    parse_topology,
    pcie_two_switches,
    single_gpu,
)
from distlab.transfers.host_to_all_plan import Binding, numa_bindings


def test_dgx_like_box_binds_local_and_across() -> None:
    runs, skipped = numa_bindings(parse_topology(dgx_h100_like()), 8)
    assert skipped == []
    assert [b.node for b in runs["local"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [b.node for b in runs["remote"]] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert all(b.local for b in runs["local"]) and not any(b.local for b in runs["remote"])


def test_pcie_box_with_two_switches() -> None:
    runs, skipped = numa_bindings(parse_topology(pcie_two_switches()), 4)
    assert runs["remote"][0] == Binding(0, 1, False) and skipped == []


@pytest.mark.parametrize("topo, n, why", [
    (None, 0, "needs a GPU"),
    (parse_topology(single_gpu()), 1, "is the h2d row"),
    (None, 2, "no nvidia-smi topo -m"),
    (parse_topology(dgx_h100_like()), 2, "names 8 GPUs, torch sees 2"),
])
def test_what_cannot_run_is_one_skipped_line(topo, n, why) -> None:
    runs, skipped = numa_bindings(topo, n)
    assert runs == {} and len(skipped) == 1
    assert skipped[0].startswith("skipped: ") and why in skipped[0]


def _with_nodes(nodes: list[str]) -> str:
    names = [f"GPU{i}" for i in range(len(nodes))]
    head = "\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [f"{a}\t" + "\t".join(" X " if a == b else "NV4" for b in names)
            + f"\t0-7\t{nodes[i]}\t\tN/A" for i, a in enumerate(names)]
    return "\n".join([head, *rows])


def test_one_node_has_no_remote_run_and_an_unknown_node_no_binding() -> None:
    runs, skipped = numa_bindings(parse_topology(_with_nodes(["0", "0"])), 2)
    assert len(runs["local"]) == 2 and "remote" not in runs
    assert skipped == ["skipped: remote binding: every GPU is on NUMA node 0, there is no other "
                       "node to bind to"]
    runs, skipped = numa_bindings(parse_topology(_with_nodes(["0", "N/A"])), 2)
    assert runs == {} and "(N/A) for GPU 1" in skipped[0]
    with pytest.raises(ValueError):
        numa_bindings(None, True)
