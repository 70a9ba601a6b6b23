"""Expert parallelism on real gloo ranks beside one process running the same MoE.

Per case (4 or 8 experts; top-1 and top-2; softmax and sigmoid; dropless and a capacity factor
with either drop policy; with and without shared experts and a balance loss; the grouped-matmul
and the loop path; applied by torch's and by distlab's ``parallelize_module``), on 2 and 4
ranks: this rank's output, the gradient of every parameter (an expert's: this rank's slice) and
every weight after one SGD step equal the one-process reference's to float32 rounding (the
reference sums the same products in another order; ``helpers.float_tolerance``: sums of at
most 48 terms, 10 deep, so ``|a - b| <= 5.7e-5 max|b|`` per tensor). Each forward runs three
all-to-alls (counts, dispatch, combine) and each backward two. The checks can fail: reversing
this rank's experts moves the output by more than 100 times the tolerance.

Compositions (4 ranks): FSDP2 (``fully_shard``) over the non-expert parameters on all ranks and
over the experts on the ranks holding the same experts, and distlab's tensor parallelism
splitting the shared experts over ``tp`` beside the experts over ``ep``.
"""

from __future__ import annotations

import pytest
import torch

from distlab import launch
from distlab.moe import ExpertParallel, ep_group
from helpers.leaks import no_leaks
from helpers.moe_targets import (
    CASES,
    all_to_all_checks,
    ep_vs_one_process,
    fsdp_ep,
    misuse_and_sources,
    tp_ep,
)

A2A_PER_STEP = {"counts": 1, "dispatch": 1, "combine": 1, "dispatch backward": 1,
                "combine backward": 1}


def _failures(checks: dict) -> dict:
    return {k: v for k, v in checks.items() if not v["ok"]}


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"{w}ranks")
def runs(request):
    world = request.param
    with no_leaks():
        out = launch.run(ep_vs_one_process, world, args=(list(CASES),), timeout=240)
    return world, out


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", list(CASES))
def test_expert_parallel_equals_one_process(runs, case):
    world, out = runs
    config = CASES[case].config
    for rank in range(world):
        r = out[rank][case]
        assert _failures(r["checks"]) == {}, f"rank {rank}"
        names = set(r["checks"])
        assert {"out", "grad moe.experts.w1", "weight moe.experts.w2",
                "grad moe.router.gate.weight", "grad proj.weight"} <= names
        assert r["local_experts"] == config.num_experts // world
        assert r["a2a"] == A2A_PER_STEP
        assert r["path"] == ("loop" if config.grouped_mm is False else "grouped_mm")
        if r["sensitivity"] is not None:
            assert r["sensitivity"] > 100, r["sensitivity"]
    if config.capacity_factor is not None:   # the capacity cases do drop tokens
        assert sum(out[rank][case]["dropped"] for rank in range(world)) > 0
    else:
        assert all(out[rank][case]["dropped"] == 0 for rank in range(world))


@pytest.fixture(scope="module", params=[(2, [3]), (4, [1, 2])],
                ids=lambda p: f"{p[0]}ranks")
def a2a_runs(request):
    world, locals_ = request.param
    with no_leaks():
        out = launch.run(all_to_all_checks, world, args=(locals_,), timeout=180)
    return world, out


@pytest.mark.multiprocess
def test_all_to_all_equals_torch_autograd_all_to_all(a2a_runs):
    _, out = a2a_runs
    for rank, r in enumerate(out):
        for seed, d in r["vs_torch"].items():
            ours, theirs = d["rows"]
            assert d["shape"][0] == d["expected_rows"]
            # an all-to-all copies rows: no arithmetic, so no rounding (tolerance 0)
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0, msg=f"{rank} {seed}")
            torch.testing.assert_close(d["grads"][0], d["grads"][1], rtol=0, atol=0)
            assert d["counts"] == {"dispatch": 1, "dispatch backward": 1}


@pytest.mark.multiprocess
def test_dispatch_sends_each_row_to_its_expert_and_combine_brings_it_back(a2a_runs):
    _, out = a2a_runs
    for rank, by_local in enumerate(out):
        for local, r in by_local["dispatch"].items():
            # rows of local expert l from source 0, then source 1, ...: exact integers
            assert r["routed"] == r["expected"], f"rank {rank}, {local} local experts"
            assert sum(r["per_local_expert"]) == len(r["expected"]) > 0
            torch.testing.assert_close(r["back"], 2.0 * r["x"], rtol=0, atol=0)
            torch.testing.assert_close(r["grad"], torch.full_like(r["x"], 2.0), rtol=0,
                                       atol=0)
            assert r["counts"] == A2A_PER_STEP


@pytest.mark.multiprocess
def test_expert_parallel_composes_with_fsdp2():
    with no_leaks():
        out = launch.run(fsdp_ep, 4, timeout=240)
    for rank, r in enumerate(out):
        assert _failures(r["checks"]) == {}, f"rank {rank}"
        assert set(r["sharded"].values()) == {"DTensor"}   # FSDP2 holds every parameter
        assert r["ep_rank"] == rank % 2
        assert r["a2a"] == A2A_PER_STEP


@pytest.mark.multiprocess
def test_expert_parallel_composes_with_tensor_parallel_shared_experts():
    with no_leaks():
        out = launch.run(tp_ep, 4, timeout=240)
    for rank, r in enumerate(out):
        assert _failures(r["checks"]) == {}, f"rank {rank}"
        assert r["shapes"]["moe.experts.w1"] == (2, 16, 8)            # 4 experts over ep=2
        assert r["shapes"]["moe.shared_experts.w1.weight"] == (8, 8)  # 16 over tp=2
        assert r["shapes"]["moe.shared_experts.w2.weight"] == (8, 8)
        # Megatron's f on w1 and w3 (backward) and g after w2 (forward)
        assert r["tp_counts"] == {"all_reduce": 3}
        assert r["a2a"] == A2A_PER_STEP


@pytest.fixture(scope="module")
def misuse_runs():
    with no_leaks():
        return launch.run(misuse_and_sources, 2, timeout=120)


@pytest.mark.multiprocess
def test_bad_plans_raise_before_any_collective(misuse_runs):
    for r in (r["bad"] for r in misuse_runs):
        assert r["in_step"] == "2.0"
        assert r["not_divisible"].startswith("ValueError: parallelize_plan['moe.experts']")
        assert "num_experts = 3 is not divisible by the expert-parallel size 2" \
            in r["not_divisible"]
        assert "applies to distlab.moe.GroupedExperts, got TokenChoiceRouter" \
            in r["wrong_module"]
        assert "must be one-dimensional" in r["two_dim_mesh"] and "mesh['ep']" \
            in r["two_dim_mesh"]
        assert r["bad_mesh"].startswith("TypeError: device_mesh must be")
        assert "already sharded" in r["twice"]
        assert "counts must hold one count per global expert (4)" in r["bad_counts"]


@pytest.mark.multiprocess
def test_torch_src_data_rank_and_the_timeline(misuse_runs):
    for rank, r in enumerate(r["sources"] for r in misuse_runs):
        # torch's default broadcasts rank 0's experts; src_data_rank=None keeps the rank's own
        assert r["src0"]["rank0"]["ok"] and r["src_none"]["mine"]["ok"]
        if rank:
            assert not r["src0"]["mine"]["ok"] and not r["src_none"]["rank0"]["ok"]
        phases = [p for name, lane, p, _ in r["spans"]
                  if name == "all_to_all" and lane == f"rank{rank}/ep"]
        assert phases == ["counts", "dispatch", "combine", "combine backward",
                          "dispatch backward"]
        # the counts carry one int64 per global expert; dispatch sends this rank's rows
        nbytes = {p: n for _, _, p, n in r["spans"]}
        assert nbytes["counts"] == 4 * 8
        assert nbytes["dispatch"] == sum(r["splits"]) * 8 * 4


def test_style_arguments_are_checked():
    with pytest.raises(TypeError, match="timeline must be a Timeline"):
        ExpertParallel(timeline="lane")
    with pytest.raises(TypeError, match="device_mesh must be a torch or distlab DeviceMesh"):
        ep_group(3)
    assert ep_group(None) is None
    assert repr(ExpertParallel()) == "ExpertParallel()"
