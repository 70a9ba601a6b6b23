"""The profile measures all-gather, reduce-scatter, all-to-all and broadcast too, on gloo and
where NCCL runs: which sweeps a machine gets, and how
the summary reports them."""

from __future__ import annotations

import pytest

from distlab.profile.collectives_part import (
    MORE_OPS,
    CollectiveFacts,
    plan_collective_runs,
    plan_runs,
)
from distlab.profile.summary import headlines


def test_every_machine_with_gloo_sweeps_the_collectives_fsdp_zero_and_moe_use() -> None:
    assert MORE_OPS == ("all_gather", "reduce_scatter", "all_to_all", "broadcast")
    facts = CollectiveFacts(gloo=True, nccl=False, gpus=0)
    quick = plan_collective_runs(facts, quick=True)
    assert [(c.op, c.world_size) for c in quick] == [(op, 2) for op in MORE_OPS]
    assert all(c.names[-1] == "builtin" and len(c.names) >= 3 for c in quick)  # 2+ plans each
    full = plan_collective_runs(facts, quick=False)
    assert {(c.op, c.world_size) for c in full} == {(op, ws) for op in MORE_OPS for ws in (2, 4)}
    assert all(c.maxbytes == 64 << 20 for c in full)
    torchrun = CollectiveFacts(gloo=True, nccl=True, gpus=8, torchrun=True, world_size=8)
    assert {c.world_size for c in plan_collective_runs(torchrun, quick=True)} == {8}
    assert {c.backend for c in plan_collective_runs(torchrun, quick=True)} == {"gloo", "nccl"}


@pytest.mark.parametrize("gpus, nccl_runs", [(0, 0), (1, 0), (2, 4), (8, 4)])
def test_nccl_runs_the_family_where_it_runs_the_allreduce(gpus, nccl_runs) -> None:
    facts = CollectiveFacts(gloo=True, nccl=True, gpus=gpus)
    nccl = [c for c in plan_collective_runs(facts, quick=False) if c.backend == "nccl"]
    assert len(nccl) == nccl_runs
    assert all(c.world_size == gpus and c.maxbytes == 2**30 for c in nccl)
    assert [c.op for c in nccl] == list(MORE_OPS)[:nccl_runs]
    allreduce = [c for c in plan_runs(facts, quick=False)[0] if c.backend == "nccl"]
    assert bool(allreduce) == bool(nccl)
    quick = [c for c in plan_collective_runs(facts, quick=True) if c.backend == "nccl"]
    assert all(c.maxbytes == 16 * 2**20 for c in quick)
    no_gloo = plan_collective_runs(CollectiveFacts(gloo=False, nccl=True, gpus=gpus), True)
    assert {c.backend for c in no_gloo} <= {"nccl"} and len(no_gloo) == nccl_runs


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
