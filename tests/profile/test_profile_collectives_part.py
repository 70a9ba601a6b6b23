"""The profile measures all-gather and reduce-scatter too: which sweeps a machine gets, and how
the summary reports them."""

from __future__ import annotations

from distlab.profile.collectives_part import MORE_OPS, CollectiveFacts, plan_collective_runs
from distlab.profile.summary import headlines


def test_every_machine_with_gloo_sweeps_all_gather_and_reduce_scatter() -> None:
    facts = CollectiveFacts(gloo=True, nccl=False, gpus=0)
    quick = plan_collective_runs(facts, quick=True)
    assert [(c.op, c.world_size) for c in quick] == [("all_gather", 2), ("reduce_scatter", 2)]
    assert all(c.names[-1] == "builtin" and "ring" in c.names for c in quick)
    full = plan_collective_runs(facts, quick=False)
    assert {(c.op, c.world_size) for c in full} == {(op, ws) for op in MORE_OPS for ws in (2, 4)}
    assert all(c.maxbytes == 64 << 20 for c in full)
    torchrun = CollectiveFacts(gloo=True, nccl=True, gpus=8, torchrun=True, world_size=8)
    assert {c.world_size for c in plan_collective_runs(torchrun, quick=True)} == {8}
    assert plan_collective_runs(CollectiveFacts(gloo=False, nccl=True, gpus=2), True) == []


def test_the_summary_reports_each_sweep_against_the_builtin() -> None:
    rows = [{"nbytes": n, "algorithm": a, "busbw_gbps": bw, "wrong": 0}
            for n, a, bw in [(1024, "ring", 0.5), (1024, "builtin", 1.0), (4096, "ring", 0.9),
                             (4096, "builtin", 1.0)]]
    part = {"status": "ok", "runs": [], "collective_runs": [
        {"op": "all_gather", "backend": "gloo", "world_size": 2, "rows": rows}]}
    lines = headlines("collectives", part)
    assert lines == [
        "- gloo ws2 all_gather busbw (GB/s) at 4096 B: ring 0.900, builtin 1.000",
        "- gloo ws2 all_gather ring busbw / builtin over 2 sizes (1K-4K): lowest 0.50x at 1K, "
        "median 0.70x, highest 0.90x at 4K",
        "- gloo ws2 all_gather #wrong: 0"]
