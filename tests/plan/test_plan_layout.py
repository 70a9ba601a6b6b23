"""Layouts, hardware, where groups sit, and how a model is cut over pipeline and tensor ranks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.plan.layout import GPU_KINDS, Layout, group_span, hardware, parse_layout
from distlab.plan.model import PRESETS, ModelSpec
from distlab.plan.partition import layers_per_stage, rank_params, rank_stages


def test_layout_counts_and_label() -> None:
    lay = Layout(dp=8, tp=8, pp=4, zero=1, sequence_parallel=True, schedule="interleaved1f1b",
                 stages_per_rank=2, global_batch=64, recompute="selective")
    assert (lay.gpus, lay.microbatches, lay.stages) == (256, 8, 8)
    assert lay.label == "dp8 tp8 pp4 zero1 sp Interleaved1F1Bx2 mb1 sel"
    assert (lay.stride("tp"), lay.stride("cp"), lay.stride("dp"), lay.stride("pp")) == \
        (1, 8, 8, 64)
    assert Layout(tp=1, sequence_parallel=True).sequence_parallel is False


@pytest.mark.parametrize(("changes", "match"), [
    ({"dp": 0}, "dp"), ({"zero": 4}, "zero"), ({"recompute": "some"}, "recompute"),
    ({"precision": "fp8"}, "precision"), ({"schedule": "nope"}, "schedule"),
    ({"dp": 4, "global_batch": 6}, "multiple of dp"),
])
def test_bad_layouts_name_what_is_wrong(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Layout(**changes)


def test_parse_layout_reads_what_a_published_run_states() -> None:
    lay = parse_layout("dp=12,tp=8,pp=16,schedule=Interleaved1F1B,v=2,recompute=full",
                       global_batch=1536)
    assert (lay.dp, lay.tp, lay.pp, lay.stages_per_rank, lay.sequence_parallel) == \
        (12, 8, 16, 2, True)
    assert parse_layout("dp=8 fsdp", global_batch=8).zero == 3
    assert parse_layout("dp=2,tp=2,sp=0", global_batch=2).sequence_parallel is False
    for bad, match in [("dp", "KEY=VALUE"), ("dq=2", "unknown key .dq."), ("dp=x", "integer"),
                       ("tp=2,sp=2", "sp"), ("dp=8,ep=8,capacity=x", "number"),
                       ("dp=8,ep=8,capacity=0", "capacity factor")]:
        with pytest.raises(ValueError, match=match):
            parse_layout(bad, global_batch=8)


def test_expert_capacity_is_dropless_unless_a_capacity_factor_is_given() -> None:
    """``None`` is dropless (no mark in the label); a capacity factor is token drop padded to
    capacity, stored as a float and shown as ``cap<c>``; what is not a positive number is
    refused."""
    dropless = parse_layout("dp=8,ep=8", global_batch=8)
    assert dropless.expert_capacity is None and "cap" not in dropless.label
    drop = parse_layout("dp=8,ep=8,capacity=1.25", global_batch=8)
    assert drop.expert_capacity == 1.25 and "cap1.25" in drop.label.split()
    assert Layout(dp=8, ep=8, global_batch=8, expert_capacity=1).expert_capacity == 1.0
    for bad in (0, -1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match="expert_capacity"):
            Layout(dp=8, ep=8, global_batch=8, expert_capacity=bad)


def test_hardware_needs_a_network_across_nodes_and_whole_nodes() -> None:
    hw = hardware("h100", 64)
    assert (hw.nodes, hw.network, hw.gpu.name) == (8, "ib_ndr400x8", "H100-80GB-SXM")
    assert hardware("a100", 16).network == "ib_hdr200x8"
    assert hardware("H200", 4).nodes == 1 and hardware("h200", 4).gpus_per_node == 4
    with pytest.raises(ValueError, match="whole nodes"):
        hardware("h100", 12)
    with pytest.raises(ValueError, match="gpu must be"):
        hardware("p100", 8)
    assert set(GPU_KINDS) >= {"A100-80GB-SXM", "H100-80GB-SXM"}


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 64), stride=st.sampled_from([1, 2, 4, 8, 16, 32]),
       per_node=st.sampled_from([1, 2, 4, 8]))
def test_group_span_matches_placing_the_ranks_node_by_node(size: int, stride: int,
                                                           per_node: int) -> None:
    ranks = [i * stride for i in range(size)]
    nodes = {r // per_node for r in ranks}
    span = group_span(size, stride, per_node)
    assert span.nodes == len(nodes)
    assert span.per_node == max(sum(1 for r in ranks if r // per_node == n) for n in nodes)


@settings(max_examples=100, deadline=None)
@given(layers=st.integers(1, 40), stages=st.integers(1, 40))
def test_layers_per_stage_is_even_and_complete(layers: int, stages: int) -> None:
    if stages > layers:
        with pytest.raises(ValueError, match="no layer"):
            layers_per_stage(layers, stages)
        return
    split = layers_per_stage(layers, stages)
    assert sum(split) == layers and max(split) - min(split) <= 1
    assert list(split) == sorted(split, reverse=True)


@pytest.mark.parametrize(("schedule", "v"), [("1F1B", 1), ("Interleaved1F1B", 2),
                                             ("ZBVZeroBubble", 2), ("LoopedBFS", 3)])
def test_every_stage_sits_on_exactly_one_rank(schedule: str, v: int) -> None:
    lay = Layout(pp=4, stages_per_rank=v, schedule=schedule, global_batch=8)
    held = [s for r in range(4) for s in rank_stages(lay, r)]
    assert sorted(held) == list(range(4 * v))
    if schedule == "ZBVZeroBubble":
        assert rank_stages(lay, 0) == (0, 7)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(PRESETS)), pp=st.sampled_from([1, 2, 4, 8]),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_every_parameter_sits_on_some_gpu_once(name: str, pp: int, tp: int) -> None:
    model = PRESETS[name]
    if model.heads % tp or model.kv % tp:
        return
    ranks = rank_params(model, Layout(pp=pp, tp=tp, global_batch=8))
    split = sum(r.split + r.expert for r in ranks) * tp   # experts split as the MLP (etp = tp)
    replicated = sum(r.replicated for r in ranks)
    copies = sum(r.tied_copy for r in ranks) * tp
    pad = (-(-model.vocab // tp) * tp - model.vocab) * model.hidden  # whole rows per rank
    vocab_tables = 1 if model.tied_embeddings else 2
    assert split + replicated == model.params + vocab_tables * pad
    assert copies == (model.vocab * model.hidden + pad if model.tied_embeddings and pp > 1
                      else 0)


def test_one_gpu_holds_the_whole_model() -> None:
    m = ModelSpec("m", 4, 64, 4, 100, 16)
    (only,) = rank_params(m, Layout(global_batch=1))
    assert only.total == m.params and only.tied_copy == 0
