"""ZeRO stage 3 on live gloo ranks: parameters equal torch FSDP2's (``fully_shard`` on the same
units, then the root) and stages 0-2 after several Adam steps; the peak bytes each rank holds,
counted from every live tensor, equal the model's shards plus units in flight; the timeline shows
each prefetched all-gather under the compute before it.

Equality: on 2 ranks stage 3 is bitwise equal to FSDP2 (a + b has one order). On 3 ranks (odd:
shards padded; a ring of more than two, as 4 would be, on the same code path) the sums run in
other orders (distlab's ring reduce-scatter, gloo's), so gradients differ in the last bits and
Adam carries that into the parameters: 1e-6 absolute (observed ~1e-7; parameters are O(0.1)).
"""

from __future__ import annotations

import pytest

from distlab import launch
from distlab.zero.measure import measure_stage3_peak
from distlab.zero.prefetch_model import measured_step, unit_times_from_spans
from helpers.leaks import no_leaks
from helpers.zero3_targets import compare_with_fsdp2, misuse, peer_leaves, traced_steps

TOL = 1e-6


@pytest.mark.parametrize("world", [2, 3])
def test_stage3_equals_fsdp2_and_stages_0_to_2(world):
    with no_leaks():
        out = launch.run(compare_with_fsdp2, world, timeout=300)
    for r in out:
        for kind in ("mlp", "net"):
            for name, d in r[kind].items():
                assert d["names"], (kind, name, "full_state_dict: the module's names, in order")
                assert d["max_abs"] <= TOL, (kind, name, d)
                if world == 2 and name.startswith("stage3"):
                    assert d["equal"], (kind, name, d)


@pytest.mark.parametrize(("world", "precision", "prefetch", "algorithm"),
                         [(3, "fp32", 0, None), (2, "fp32", 1, "builtin"),
                          (2, "mixed", 2, None)])
def test_peak_bytes_match_the_model(world, precision, prefetch, algorithm):
    with no_leaks():
        rows = measure_stage3_peak(world, layers=4, width=128, precision=precision,
                                   prefetch=prefetch, algorithm=algorithm)
    for r in rows:
        model = r["model"]
        assert abs(r["peak_bytes"] / model["total"] - 1) <= 0.05, r
        # the peak is in backward: a unit's parameters and two units' gradients are whole
        assert r["peak_at"].startswith("backward"), r["peak_at"]
        assert model["backward"] > model["forward"]
        # after a step a rank holds its shards only
        assert abs(r["held_after_step"]["total"] / model["states"] - 1) <= 0.01
        if algorithm is None:
            assert r["workspace_bytes"] > 0, "distlab's plans keep a workspace, reported apart"


def _by_name(spans):
    return {s["name"]: s for s in spans}


@pytest.mark.parametrize("prefetch", [0, 1])
def test_prefetched_gather_runs_under_the_compute_before_it(prefetch):
    with no_leaks():
        out = launch.run(traced_steps, 2, args=(prefetch,), timeout=120)
    for r in out:
        spans = r["spans"]
        s = _by_name(spans)
        lanes = {x["lane"].split("/")[1] for x in spans}
        assert {"forward", "backward", "all_gather", "reduce_scatter", "wait", "step"} <= lanes
        gathers = [x for x in spans if x["category"] == "all_gather"]
        assert len(gathers) == 8 and len([x for x in spans
                                          if x["category"] == "reduce_scatter"]) == 4
        for k in range(3):
            ag = s[f"all-gather unit {k + 1} (forward)"]
            fwd = s[f"forward unit {k}"]
            # when it was issued is deterministic (when the thread ran it is not): with
            # prefetch before unit k computes, without it only once unit k is done
            if prefetch:
                assert ag["args"]["issued_us"] <= fwd["start_us"], (k, ag, fwd)
                assert ag["args"]["prefetched"]
            else:
                assert ag["args"]["issued_us"] >= fwd["start_us"] + fwd["duration_us"], (k, ag)
                assert not ag["args"]["prefetched"]
        for k in (2, 1, 0):
            ag = s[f"all-gather unit {k} (backward)"]
            assert ag["args"]["prefetched"] == bool(prefetch and k != 3)
        # the model reads the same trace: per-unit seconds, and the step's length
        units, adam = unit_times_from_spans(spans)
        assert len(units) == 4 and adam == s["Adam step"]["duration_us"] * 1e-6
        assert units[1].forward == s["forward unit 1"]["duration_us"] * 1e-6
        assert units[3].all_gather == s["all-gather unit 3 (backward)"]["duration_us"] * 1e-6
        assert measured_step(spans) >= sum(u.forward + u.backward for u in units) + adam
    with pytest.raises(ValueError, match="missing"):
        unit_times_from_spans([x for x in out[0]["spans"] if x["name"] != "forward unit 2"])


def test_misuse_is_one_clear_error():
    errors = launch.run(misuse, 1, timeout=60)[0]
    assert errors["units at stage 1"].startswith("ValueError: units= is for stage 3")
    assert errors["prefetch -1"].startswith("ValueError") and "prefetch" in errors["prefetch -1"]
    assert "not a submodule" in errors["foreign unit"]
    assert "shared by two units" in errors["shared parameter"]
    assert errors["join"].startswith("ValueError: Join is not supported at stage 3")


def test_a_peer_that_leaves_is_an_error_not_a_hang():
    with no_leaks():
        out = launch.run(peer_leaves, 2, timeout=120)
    assert out[1] == "left"
    assert out[0].startswith("UnevenInputsError") and "all-gather unit 0 (forward)" in out[0]
