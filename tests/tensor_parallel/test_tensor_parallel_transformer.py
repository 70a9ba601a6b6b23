"""distlab's tensor parallelism on torch's small test Transformer (attention split by heads),
beside torch's own ``Transformer.parallelize`` and a one-process run, and composed with
distlab's DDP on a (dp, tp) mesh.

On 2 and 4 gloo ranks (one launch each), with and without sequence parallelism: the output,
every gradient and every weight after one SGD step equal torch's and the unsplit model's to
float32 rounding (``helpers.float_tolerance``: sums of at most 64 terms, 42 reductions deep, so
``|a - b| <= 3.2e-4 max|b|``; a sharded tensor against its chunk of the full one), and the
collectives per training step equal torch's ``CommDebugMode`` in kind and number. A head count
the group size does not divide is one ``ValueError`` before anything is split. On 4 ranks,
(dp=2, tp=2): TP inside each replica, DDP across replicas on different batches, gradients equal
a one-process step on the concatenated batch. ``PrepareModuleInput``'s four ways into three
column splits (an input's gradient reduced once upstream, or by each consumer).
"""

from __future__ import annotations

from collections import Counter

import pytest
from torch import nn

from distlab import launch
from distlab.tensor_parallel import PrepareModuleInput, Replicate, Shard, resolve_head_counts

pytest.importorskip("expecttest", reason="torch's test Transformer imports expecttest "
                    "(distlab[test] installs it)")

from helpers.tensor_parallel_transformer_targets import (  # noqa: E402
    build,
    transformer_checks,
)

# per forward + backward (+ torch's optimizer step), 2 layers; independent of the group size.
# Without SP: wq, wk, wv each all-reduce their input's gradient (3), wo and w2 all-reduce their
# output (2), w1 its input's gradient (1) per layer; the two embeddings all-reduce their output,
# the output head all-reduces its input's gradient and all-gathers the logits.
# With SP: per layer one all-gather (and, backward, one reduce-scatter) before the attention,
# shared by wq/wk/wv, and before w1; a reduce-scatter (backward: all-gather) after wo and w2;
# the embeddings reduce-scatter their output; the head all-gathers its input and its output.
# Each LayerNorm's weight and bias gradients are all-reduced: in backward by distlab, in the
# optimizer step by torch (5 norms x 2).
EXPECTED = {
    "tp": {"all_reduce": 15, "all_gather": 1},
    "sp": {"all_gather": 12, "reduce_scatter": 11, "all_reduce": 10},
}


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"{w}ranks")
def runs(request):
    world = request.param
    return world, launch.run(transformer_checks, world, args=(world == 4,), timeout=180)


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", ["tp", "sp"])
def test_transformer_equals_torch_and_one_process(runs, case):
    world, out = runs
    for rank in range(world):
        r = out[rank][case]
        assert {k: x for k, x in r["checks"].items() if not x <= 1} == {}, f"rank {rank}"
        assert sum(k.startswith("grad layers.1.attention.wq") for k in r["checks"]) == 2
        assert r["heads"] == [4 // world] * 2
        assert r["tied"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", ["tp", "sp"])
def test_transformer_collectives_equal_torch_comm_debug_mode(runs, case):
    world, out = runs
    for rank in range(world):
        r = out[rank][case]
        assert r["ours"] == EXPECTED[case]
        assert Counter(r["torch"]) + Counter(r["torch_step"]) == Counter(r["ours"])
    assert out[0]["sp"]["torch_step"] == {"all_reduce": 10}


@pytest.mark.multiprocess
def test_heads_not_divisible_raise_before_any_split_or_collective(runs):
    world, out = runs
    for r in out:
        assert (f"layers.0.attention.n_heads = {world + 1} heads is not divisible by the "
                f"tensor-parallel size {world}") in r["heads"]
        assert r["heads"].endswith(f"unchanged=True | in_step={float(world)}")


@pytest.mark.multiprocess
@pytest.mark.parametrize("runs", [4], indirect=True, ids=["4ranks"])  # the 4-rank launch
def test_tp_inside_ddp_replicas_equals_one_process_on_the_whole_batch(runs):
    world, out = runs
    assert world == 4
    for rank, r in enumerate(out):
        checks = r["tp_by_dp"]
        assert {k: x for k, x in checks.items() if not x <= 1} == {}, f"rank {rank}"
        assert "grad layers.0.ffn_norm.weight" in checks and "step output.weight" not in checks


def test_head_counts_are_checked_without_a_process_group():
    model = build()
    got = resolve_head_counts(model, {"layers.*.attention": "n_heads"}, 2)
    assert [(attr, n) for _, attr, n in got] == [("n_heads", 2), ("n_heads", 2)]
    with pytest.raises(ValueError, match="n_heads = 4 heads is not divisible by the "
                                         "tensor-parallel size 3"):
        resolve_head_counts(model, {"layers.*.attention": "n_heads"}, 3)
    with pytest.raises(ValueError, match=r"head_counts\['layers.\*.attn'\] names no submodule"):
        resolve_head_counts(model, {"layers.*.attn": "n_heads"}, 2)
    with pytest.raises(ValueError, match="n_kv_heads must be a positive int head count"):
        resolve_head_counts(model, {"layers.0.attention": ("n_heads", "n_kv_heads")}, 2)
    with pytest.raises(TypeError, match="head_counts must be a dict"):
        resolve_head_counts(model, ["layers.*.attention"], 2)
    assert all(layer.attention.n_heads == 4 for layer in model.layers)


def test_prepare_module_input_arguments_are_checked():
    style = PrepareModuleInput(input_layouts=(Shard(1), None),
                               desired_input_layouts=(Replicate(), None))
    assert style.layouts == ((Shard(1), Replicate()), None) and not style.use_local_output
    with pytest.raises(ValueError, match="must have the same length"):
        PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=(Replicate(), None))
    with pytest.raises(ValueError, match=r"Shard\(1\) -> Shard\(0\) \(an all-to-all\)"):
        PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Shard(0))
    with pytest.raises(ValueError, match="both be None or both a layout"):
        PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(None,))
    with pytest.raises(ValueError, match="input_kwarg_layouts"):
        PrepareModuleInput(input_kwarg_layouts={"x": Shard(1)},
                           desired_input_kwarg_layouts={"x": Replicate()})
    PrepareModuleInput().check("attention", nn.Identity(), 2)  # any module


@pytest.mark.multiprocess
def test_prepare_module_input_reduces_the_shared_gradient_once(runs):
    world, out = runs
    for r in out:
        p = r["prepare"]
        assert all(ratio <= 1 for ratio, _ in (v for k, v in p.items() if k != "refused"))
        # three column splits share one reduction upstream, or reduce each their own
        assert p["replicate local=False"][1] == {"all_reduce": 2}
        assert p["replicate local=True"][1] == {"all_reduce": 4}
        assert p["shard local=False"][1] == {"all_gather": 1, "reduce_scatter": 1,
                                             "all_reduce": 1}
        assert p["shard local=True"][1] == {"all_gather": 1, "all_reduce": 4}
        assert "must feed ColwiseParallel layers" in p["refused"]
