"""all_reduce on real gloo ranks equals torch.distributed.all_reduce; failures never hang."""

from __future__ import annotations

import pytest
import torch

from distlab import launch
from distlab.collectives import ALGORITHMS, PLANS, all_reduce, plan_options
from distlab.collectives.runtime.execute import traced_allreduce_rank
from helpers.collectives_targets import (
    compare_all_worker,
    compare_and_subgroup_worker,
    group_errors_worker,
    peer_death_worker,
)

pytestmark = pytest.mark.multiprocess
ALL = sorted(ALGORITHMS)
FLOATS = ("float16", "bfloat16", "float32", "float64")
REL_TOL = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-12}


def _cases(p: int) -> list[dict]:
    """Full dtype x op matrix at world size 3; a few combos elsewhere (keeps the run short)."""
    counts = sorted({0, 1, p + 1, 37} | ({1000} if p <= 4 else set()))
    if p == 3:
        combos = [(dt, op) for dt in ("float16", "bfloat16", "float32", "float64", "int32", "int64")
                  for op in ("sum", "prod", "max", "min", "avg") if op != "avg" or dt in FLOATS]
    elif p <= 4:
        combos = [("int32", "sum"), ("int64", "max"), ("float32", "sum"), ("float32", "min"),
                  ("float64", "avg"), ("int64", "prod"), ("bfloat16", "sum")]
    else:
        combos = [("int32", "sum"), ("float32", "sum"), ("int64", "min")]
    cases = []
    for algo in ALL:
        opts = [{}]
        if algo == "ring":  # {}: the pieces the cost model picks
            opts = [{}, {"pieces": 3}]
        if algo == "segmented_ring":
            opts = [{"segment_size": 3, "pieces": 2}, {}]
        if algo == "hierarchical":
            opts = [{"group_size": d, "pieces": 1 + d % 3} for d in range(1, p + 1) if p % d == 0]
        for o in opts:
            for dt, op in combos:
                for n in counts:
                    cases.append({"algorithm": algo, "dtype": dt, "op": op, "count": n,
                                  "options": o})
    # the NCCL code path (one batch_isend_irecv per step), exercised on gloo
    for algo in ALL:
        for n in (1, 37):
            cases.append({"algorithm": algo, "dtype": "int64", "op": "sum", "count": n,
                          "options": {"pieces": 2} if algo == "ring" else {},
                          "batched": True})
    # a deliberately corrupted result, which the comparison must flag
    cases.append({"algorithm": "ring", "dtype": "int32", "op": "sum", "count": 5, "options": {},
                  "corrupt": True})
    return cases


def _collective_cases(p: int) -> list[dict]:
    """Every (collective, algorithm) but allreduce's, an odd block size and a root that is not
    rank 0; at world size 3 the reductions take allreduce's full dtype x op matrix and the
    others every dtype (elsewhere a few pairs keep the run short)."""
    dtypes = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
    if p == 3:
        reducing = [(dt, op) for dt in dtypes for op in ("sum", "prod", "max", "min", "avg")
                    if op != "avg" or dt in FLOATS]
        moving = [(dt, "sum") for dt in dtypes]
    else:
        reducing, moving = [("int64", "sum"), ("float32", "max")], [("int64", "sum")]
    cases = []
    for c, algos in PLANS.items():
        if c in ("all_reduce", "barrier"):
            continue
        for algo in algos:
            opts = plan_options(c, algo)
            for i, (dt, op) in enumerate(reducing if c in ("reduce", "reduce_scatter")
                                         else moving):
                for m in ((1, 7) if i < 2 else (5,)):
                    case = {"collective": c, "algorithm": algo, "dtype": dt, "op": op, "m": m,
                            "root": (p - 1 - i) % p if "root" in opts else 0, "options": {}}
                    if "pieces" in opts and m == 7:
                        case["options"] = {"pieces": 3}
                    cases.append(case)
    return cases


# Real ranks at 1-5 (every small shape: one rank, powers of two, odd counts that fold) and 8 (three
# butterfly levels, two hierarchical groups of 4); 6 and 7 are left to the simulator tests, which
# check every plan at every world size up to 64 against the same semantics (2 x 30 s saved).
@pytest.mark.parametrize("world_size", (1, 2, 3, 4, 5, 8))
def test_matches_builtin_all_reduce(world_size: int) -> None:
    """Every allreduce case, and every other collective's (:func:`_collective_cases`), equal to
    torch.distributed's built-in on every rank, in one launch per world size."""
    cases, coll_cases = _cases(world_size), _collective_cases(world_size)
    if world_size == 3:  # also: a subgroup {0, 2} whose group ranks differ from global ranks
        both = launch.run(compare_and_subgroup_worker, 3, args=(cases, coll_cases),
                          timeout=240)
        assert [b["subgroup_value"] for b in both] == [4.0, 2.0, 4.0]
        assert [b["subgroup_broadcast"] for b in both] == [2.0, 1.0, 2.0]
        per_rank = [b["results"] for b in both]
        coll = [b["collectives"] for b in both]
    else:
        both = launch.run(compare_all_worker, world_size, args=(cases, coll_cases), timeout=240)
        per_rank = [b["allreduce"] for b in both]
        coll = [b["collectives"] for b in both]
    _check_collectives(world_size, coll_cases, coll)
    failures = []
    for rank, results in enumerate(per_rank):
        assert len(results) == len(cases)
        *results, corrupt = results
        assert not corrupt["equal"], "the comparison cannot see a wrong result"
        for r in results:
            exact = r["dtype"] not in FLOATS or r["op"] in ("max", "min")
            if exact:
                ok = r["equal"]
            else:
                ok = r["max_abs_diff"] <= REL_TOL[r["dtype"]] * world_size * max(r["max_ref"], 1.0)
            if not ok:
                failures.append((rank, r))
    assert not failures, f"{len(failures)} mismatches, first: {failures[:3]}"


def _check_collectives(p: int, cases: list[dict], per_rank: list[list[dict]]) -> None:
    failures = []
    for rank, results in enumerate(per_rank):
        *results, barrier = results
        assert barrier == {"collective": "barrier", "arrived": p}, barrier
        assert len(results) == len(cases)
        for r in results:
            exact = r["dtype"] not in FLOATS or r["op"] in ("max", "min") or \
                r["collective"] not in ("reduce", "reduce_scatter")
            ok = r["equal"] if exact else \
                r["max_abs_diff"] <= REL_TOL[r["dtype"]] * p * max(r["max_ref"], 1.0)
            if not ok:
                failures.append((rank, r))
    assert not failures, f"{len(failures)} mismatches, first: {failures[:3]}"


def test_timeline_gets_one_span_per_step() -> None:
    spans = launch.run(traced_allreduce_rank, 2, args=("ring", 1000), timeout=120)
    for rank, rank_spans in enumerate(spans):
        assert [s["name"] for s in rank_spans] == ["step 0", "step 1"]
        assert {s["lane"] for s in rank_spans} == {f"rank{rank}/allreduce"}
        assert all(s["category"] == "allreduce" and s["duration_us"] >= 0 for s in rank_spans)
        assert rank_spans[0]["args"]["sent_bytes"] == 500 * 4
        assert rank_spans[0]["start_us"] + rank_spans[0]["duration_us"] <= rank_spans[1]["start_us"]


@pytest.mark.parametrize("mode", ["leave", "hang"])
def test_dead_peer_makes_the_others_fail_fast(mode: str) -> None:
    timeout = 1.0
    out = launch.run(peer_death_worker, 3, args=(mode, timeout), timeout=60)
    for rank in (0, 2):
        assert out[rank]["raised"] is True, out[rank]
        assert out[rank]["seconds"] < timeout + 10.0
        assert "all_reduce (ring) failed on rank" in out[rank]["error"]


def test_errors_inside_a_group() -> None:
    errors = launch.run(group_errors_worker, 1, timeout=60)[0]
    assert errors[0].startswith("ValueError: schedule is for world_size=2 but the group has 1")
    assert errors[1].startswith("ValueError: schedule is for count=5 elements but tensor has 4")
    assert "device meta is not supported" in errors[2]
    assert "group_size must divide world_size=1" in errors[3]
    assert "timeout must be a positive number of seconds" in errors[4]


def test_errors_before_any_group() -> None:
    with pytest.raises(TypeError, match="tensor must be a torch.Tensor, got list"):
        all_reduce([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"tensor must be contiguous"):
        all_reduce(torch.ones(4, 4).t())
    with pytest.raises(ValueError, match="op='avg' needs a floating dtype"):
        all_reduce(torch.ones(4, dtype=torch.int32), op="avg")
    with pytest.raises(ValueError,
                       match=r"algorithm must be one of \['double_binary_tree', 'hierarchical'"):
        all_reduce(torch.ones(4), algorithm="bucket")
    with pytest.raises(ValueError, match="op must be one of"):
        all_reduce(torch.ones(4), op="xor")
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        all_reduce(torch.ones(4))


def test_device_and_backend_must_agree() -> None:
    from distlab.collectives.runtime.group import check_tensor_backend as _check_tensor

    with pytest.raises(ValueError,
                       match="tensor is on cpu but the process group backend is 'nccl'"):
        _check_tensor(torch.ones(2), "nccl")
    _check_tensor(torch.ones(2), "gloo")
    _check_tensor(torch.ones(2), "cpu:gloo,cuda:nccl")
    with pytest.raises(ValueError, match="device meta is not supported"):
        _check_tensor(torch.ones(2, device="meta"), "gloo")
