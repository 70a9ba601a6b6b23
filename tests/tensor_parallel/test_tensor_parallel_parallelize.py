"""distlab's tensor and sequence parallelism on real gloo ranks, beside torch's
``parallelize_module`` with the same plan and a one-process run of the unsplit model.

Per case (torch's test MLPModule; LayerNorm + MLP with sequence parallelism; a vocabulary-split
embedding and output head, with and without loss parallelism), on 2 and 4 ranks: the output,
every gradient and every weight after one SGD step equal torch's and the unsplit model's to
float32 rounding (``helpers.float_tolerance``: sums of at most 16 terms, 6 deep, so
``|a - b| <= 1.1e-5 max|b|``; a sharded tensor is compared with its chunk of the full one), and
the collectives equal torch's ``CommDebugMode`` counts in kind and number.
"""

from __future__ import annotations

from collections import Counter

import pytest
from torch import nn

from distlab import launch
from distlab.tensor_parallel import (
    ColwiseParallel,
    Replicate,
    RowwiseParallel,
    SequenceParallel,
    Shard,
    init_mesh,
    resolve_plan,
)
from helpers.tensor_parallel_targets import (
    MLPModule,
    NormMLP,
    bad_plans,
    compare_cases,
    mesh_and_timeline,
    plans_vs_builtin,
)

CASES = ["mlp", "sp", "embed", "embed_loss_parallel"]


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"{w}ranks")
def runs(request):
    world = request.param
    return world, launch.run(compare_cases, world, args=(CASES,), timeout=120)


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", CASES)
def test_outputs_gradients_and_step_equal_torch_and_one_process(runs, case):
    world, out = runs
    for rank in range(world):
        checks = out[rank][case]["checks"]
        assert {k: r for k, r in checks.items() if not r <= 1} == {}, f"rank {rank}"
        assert any(k.startswith("grad") for k in checks)


EXPECTED = {  # per forward + backward (+ torch's optimizer step, see below)
    "mlp": {"all_reduce": 1},
    # torch leaves the LayerNorm's replicated gradients partial and all-reduces them in the
    # optimizer step; distlab all-reduces them in backward: the same two all-reduces per step
    "sp": {"all_gather": 2, "reduce_scatter": 2, "all_reduce": 2},
    "embed": {"all_reduce": 2, "all_gather": 1},
    "embed_loss_parallel": {"all_reduce": 5},
}


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", CASES)
def test_collectives_equal_torch_comm_debug_mode(runs, case):
    world, out = runs
    for rank in range(world):
        r = out[rank][case]
        assert r["ours"] == EXPECTED[case]
        assert Counter(r["torch"]) + Counter(r["torch_step"]) == Counter(r["ours"])
    if case == "sp":
        assert out[0][case]["torch"] == {"all_gather": 2, "reduce_scatter": 2}


@pytest.mark.multiprocess
def test_mesh_groups_and_timeline():
    out = launch.run(mesh_and_timeline, 4, timeout=60)
    for rank, r in enumerate(out):
        dp_index, tp_index = divmod(rank, 2)
        assert r["coordinate"] == (dp_index, tp_index) and r["mesh"] == [[0, 1], [2, 3]]
        tp_ranks = (2 * dp_index, 2 * dp_index + 1)
        dp_ranks = (tp_index, tp_index + 2)
        assert r["sums"]["tp"] == (float(sum(tp_ranks)), tp_ranks, tp_index, 2)
        assert r["sums"]["dp"] == (float(sum(dp_ranks)), dp_ranks, dp_index, 2)
        # the input requires grad: f's backward all-reduce runs too
        assert r["counts"] == {"all_reduce": 2}
        assert [(name, lane) for name, lane, _ in r["spans"]] == [
            ("all_reduce", f"rank{rank}/tp")] * 2
        assert [nbytes for *_, nbytes in r["spans"]] == [4 * 10 * 4, 4 * 10 * 4]


@pytest.mark.multiprocess
def test_bad_plans_raise_one_value_error_before_any_collective():
    out = launch.run(bad_plans, 2, timeout=60)
    for r in out:
        assert r["in_step"] == "2.0"
        assert "'net3'" in r["missing"] and "names no submodule" in r["missing"]
        assert "ColwiseParallel applies to nn.Linear, nn.Embedding" in r["wrong_type"]
        assert "is ReLU" in r["wrong_type"]
        assert "SequenceParallel applies to" in r["sp_on_linear"]
        assert "out_features = 7 is not divisible by the tensor-parallel size 2" \
            in r["col_not_divisible"]
        assert "in_features = 7 is not divisible" in r["row_not_divisible"]
        assert "'net9'" in r["late_bad_entry"]
        assert all(v.endswith("unchanged=True") for k, v in r.items() if k != "in_step")


def test_plan_keys_match_like_torch():
    model = NormMLP()
    got = [(path, type(style).__name__) for path, _, style in resolve_plan(
        model, {"norm": SequenceParallel(), "mlp.net*": ColwiseParallel()})]
    assert got == [("norm", "SequenceParallel"), ("mlp.net1", "ColwiseParallel"),
                   ("mlp.net2", "ColwiseParallel")]
    with pytest.raises(ValueError, match="already named by"):
        resolve_plan(model, {"mlp.net1": ColwiseParallel(), "mlp.*1": RowwiseParallel()})
    with pytest.raises(TypeError, match="parallelize_plan must be"):
        resolve_plan(model, ["net1"])
    with pytest.raises(TypeError, match=r"parallelize_plan\['norm'\] must be a ParallelStyle"):
        resolve_plan(model, {"norm": "colwise"})


def test_style_arguments_are_checked():
    with pytest.raises(ValueError, match=r"output_layouts must be one of Replicate, Shard\(-1\)"):
        ColwiseParallel(output_layouts=Shard(0))
    with pytest.raises(ValueError, match="input_layouts must be one of Replicate, Shard"):
        RowwiseParallel(input_layouts=Shard(1))
    with pytest.raises(TypeError, match="input_layouts must be Replicate"):
        ColwiseParallel(input_layouts="replicate")
    with pytest.raises(ValueError, match="use_local_output must be True"):
        RowwiseParallel(use_local_output=False)
    assert ColwiseParallel(input_layouts=Shard(1)).input_layout == Shard(1)
    assert RowwiseParallel().output_layout == Replicate()
    with pytest.raises(ValueError, match="is not divisible by the tensor-parallel size 3"):
        RowwiseParallel().check("net2", MLPModule().net2, 3)
    with pytest.raises(ValueError, match="applies to nn.LayerNorm"):
        SequenceParallel().check("x", nn.Linear(2, 2), 2)


def test_init_mesh_needs_a_process_group_and_a_fitting_shape():
    with pytest.raises(ValueError, match="dim_names must be 2 distinct names"):
        init_mesh((1, 1), ("tp", "tp"))
    with pytest.raises(ValueError, match=r"shape\[0\] must be an int >= 1"):
        init_mesh((0, 2))
    with pytest.raises(RuntimeError, match="initialized default process group"):
        init_mesh((1,), ("tp",))


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 4])
def test_collectives_on_distlabs_plans_equal_the_builtins(world):
    """``algorithm="ring"`` and ``None`` (each collective's default plan) run the same
    collectives as torch's builtins, with the same outputs and gradients: bitwise on 2 ranks
    (a sum of two has one order), on 4 within the rounding of 4-term sums, 6 deep."""
    out = launch.run(plans_vs_builtin, world, args=(CASES,), timeout=120)
    for rank in range(world):
        for case in CASES:
            for algorithm, d in out[rank][case].items():
                assert d["counts_equal"], (rank, case, algorithm)
                assert d["max_abs"] == 0.0 if world == 2 else d["ratio"] <= 1, \
                    (rank, case, algorithm, d)


def test_an_algorithm_a_collective_does_not_have_is_one_value_error():
    from distlab.tensor_parallel import TPComm

    with pytest.raises(ValueError, match="algorithm for all_reduce must be one of"):
        TPComm(algorithm="bruck")
    with pytest.raises(ValueError, match="algorithm keys"):
        TPComm(algorithm={"broadcast": "ring"})
