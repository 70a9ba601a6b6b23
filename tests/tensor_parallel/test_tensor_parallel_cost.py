"""Tensor-parallel collectives of a layer, their sizes and their prices."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.tensor_parallel.cost import (
    BACKWARD,
    FORWARD,
    TransformerShape,
    layer_collectives,
    layer_input,
    price_layer,
)
from distlab.transformer import PRESETS, ModelSpec
from distlab.vocabulary import COLLECTIVES

GPT3 = TransformerShape(hidden=12288, heads=96, seq_len=2048, micro_batch=1)
NBYTES = 2048 * 1 * 12288 * 2  # s b h in fp16: 48 MiB


def test_shape_defaults_and_checks():
    assert GPT3.ffn_hidden == 4 * 12288 and GPT3.ffn == GPT3.ffn_hidden
    assert GPT3.activation_nbytes == NBYTES
    for field in ("hidden", "heads", "seq_len", "micro_batch", "dtype_bytes"):
        kw = dict(hidden=64, heads=8, seq_len=16, micro_batch=2) | {field: 0}
        with pytest.raises(ValueError, match=field):
            TransformerShape(**kw)
    with pytest.raises(ValueError, match="hidden=60 must be a multiple of heads=8"):
        TransformerShape(60, 8, 16, 1)
    with pytest.raises(ValueError, match="ffn_hidden"):
        TransformerShape(64, 8, 16, 1, ffn_hidden=-1)
    with pytest.raises(TypeError, match="hidden"):
        TransformerShape(64.0, 8, 16, 1)


def test_megatron_without_sequence_parallelism():
    calls = layer_collectives(GPT3, 8)
    assert [(c.collective, c.phase, c.operator) for c in calls] == [
        ("all_reduce", FORWARD, "f_bar"), ("all_reduce", FORWARD, "f_bar"),
        ("all_reduce", BACKWARD, "f"), ("all_reduce", BACKWARD, "f")]
    assert all(c.nbytes == NBYTES and c.world_size == 8 for c in calls)
    assert "attention" in calls[0].where and "MLP" in calls[1].where
    assert calls[0].bytes_per_rank == pytest.approx(2 * 7 / 8 * NBYTES, rel=1e-12)


def test_sequence_parallel_pairs():
    calls = layer_collectives(GPT3, 8, True)
    assert [(c.collective, c.phase) for c in calls] == [
        ("all_gather", FORWARD), ("reduce_scatter", FORWARD),
        ("all_gather", FORWARD), ("reduce_scatter", FORWARD),
        ("all_gather", BACKWARD), ("reduce_scatter", BACKWARD),
        ("all_gather", BACKWARD), ("reduce_scatter", BACKWARD)]
    assert all(c.nbytes == NBYTES for c in calls)
    again = layer_collectives(GPT3, 8, True, regather_inputs=True)
    extra = [c for c in again if c.operator == "regather"]
    assert len(again) == 10 and len(extra) == 2
    assert all(c.collective == "all_gather" and c.phase == BACKWARD for c in extra)


@settings(max_examples=50, deadline=None)
@given(heads=st.sampled_from([8, 16, 32, 96]), head_dim=st.sampled_from([8, 128]),
       s=st.sampled_from([8, 64, 2048]), b=st.integers(1, 8), t=st.sampled_from([1, 2, 4, 8]),
       d=st.sampled_from([2, 4]))
def test_sequence_parallel_moves_what_the_all_reduces_move(heads, head_dim, s, b, t, d):
    shape = TransformerShape(heads * head_dim, heads, s, b, dtype_bytes=d)
    plain, sp = layer_collectives(shape, t), layer_collectives(shape, t, True)
    assert len(sp) == 2 * len(plain) == (0 if t == 1 else 8)
    for phase in (FORWARD, BACKWARD):
        ar = sum(c.bytes_per_rank for c in plain if c.phase == phase)
        pairs = sum(c.bytes_per_rank for c in sp if c.phase == phase)
        assert pairs == pytest.approx(ar, rel=1e-12)
    assert {c.collective for c in plain + sp} <= set(COLLECTIVES)


def test_bad_tp():
    with pytest.raises(ValueError, match="tp=5 must divide heads=96"):
        layer_collectives(GPT3, 5)
    with pytest.raises(ValueError, match="tp=16 must divide heads=8"):
        layer_collectives(TransformerShape(64, 8, 16, 1), 16)
    with pytest.raises(ValueError, match="tp=8 must divide ffn_hidden=100"):
        layer_collectives(TransformerShape(64, 8, 16, 1, ffn_hidden=100), 8)
    with pytest.raises(ValueError, match="tp must be an int >= 1, got 0"):
        layer_collectives(GPT3, 0)
    with pytest.raises(ValueError, match="tp=8 must divide seq_len=100"):
        layer_collectives(TransformerShape(64, 8, 100, 1), 8, True)
    with pytest.raises(TypeError, match="tp"):
        layer_collectives(GPT3, 2.0)


def test_price_on_one_h100_box_is_nccl_per_call():
    plain = price_layer(GPT3, 8, box="h100_sxm8")
    ar = nccl_execution("h100_sxm8", 8, [NBYTES])[0].seconds
    assert [c.seconds for c in plain.calls] == pytest.approx([ar] * 4, rel=1e-12)
    assert plain.seconds == pytest.approx(4 * ar, rel=1e-12)
    assert plain.pass_seconds(FORWARD) == pytest.approx(2 * ar, rel=1e-12)
    sp = price_layer(GPT3, 8, True, box="h100_sxm8")
    ag = nccl_collective("h100_sxm8", 8, [NBYTES], "all_gather")[0].seconds
    rs = nccl_collective("h100_sxm8", 8, [NBYTES], "reduce_scatter")[0].seconds
    assert sp.seconds == pytest.approx(4 * (ag + rs), rel=1e-12)
    assert all("one node" in c.model for c in plain.calls + sp.calls)
    assert sp.bytes_per_rank == pytest.approx(plain.bytes_per_rank, rel=1e-12)


@pytest.mark.parametrize(("network", "at_least"), [("ib_ndr400x8", 1.2), ("efa400", 4.0),
                                                   ("tcp100", 10.0)])
def test_across_two_nodes_costs_more(network, at_least):
    # the all-reduces are NCCL's own models on both sides
    inside = price_layer(GPT3, 8, box="h100_sxm8")
    across = price_layer(GPT3, 8, box="h100_sxm8", nodes=2, network=network)
    assert across.seconds / inside.seconds > at_least
    assert all("multi-node" in c.model for c in across.calls)


@pytest.mark.parametrize("network", ["efa400", "tcp100"])
def test_sequence_parallel_across_two_nodes_costs_more(network):
    inside = price_layer(GPT3, 8, True, box="h100_sxm8")
    across = price_layer(GPT3, 8, True, box="h100_sxm8", nodes=2, network=network)
    assert across.seconds > 3 * inside.seconds
    assert all("half NCCL's multi-node allreduce" in c.model for c in across.calls)


def test_sequence_parallel_over_eight_rails_costs_half_again_in_the_model():
    # what the models say, pinned: NCCL's all-reduce inside an H100 box runs NVLS (the switch
    # reduces), its all-gather and reduce-scatter a ring; across 2 nodes of 4 GPUs over 8 NDR
    # rails each node's 4 GPUs reach 4 of its NICs (one each), so the all-reduce that prices
    # the all-gather + reduce-scatter layer (half of it each) runs slower than the box's ring
    inside = price_layer(GPT3, 8, True, box="h100_sxm8")
    across = price_layer(GPT3, 8, True, box="h100_sxm8", nodes=2, network="ib_ndr400x8")
    assert across.seconds / inside.seconds == pytest.approx(1.5, rel=0.1)
    assert price_layer(GPT3, 8, box="h100_sxm8").seconds < inside.seconds  # NVLS all-reduce


def test_gloo_loopback_prices_all_three_with_one_model():
    small = TransformerShape(256, 8, 128, 2)
    plain = price_layer(small, 4)
    sp = price_layer(small, 4, True)
    assert plain.where.startswith("gloo: loopback") and plain.seconds > 0
    assert all("loopback" in c.model for c in plain.calls + sp.calls)
    # a ring all-reduce is a ring reduce-scatter then a ring all-gather, step for step
    assert sp.seconds == pytest.approx(plain.seconds, rel=0.05)
    assert price_layer(small, 1).calls == ()
    assert price_layer(small, 4, box="nvlink4_h100").seconds < plain.seconds


def test_price_layer_bad_input():
    with pytest.raises(ValueError, match="needs a network"):
        price_layer(GPT3, 8, box="h100_sxm8", nodes=2)
    with pytest.raises(ValueError, match="network must be one of"):
        price_layer(GPT3, 8, box="h100_sxm8", nodes=2, network="carrier pigeon")
    with pytest.raises(ValueError, match="for nodes > 1"):
        price_layer(GPT3, 8, box="h100_sxm8", network="ib_ndr400x8")
    with pytest.raises(ValueError, match="tp=16 must be nodes=1 times at most 8"):
        price_layer(GPT3, 16, box="h100_sxm8")
    with pytest.raises(ValueError, match="tp=8 must be nodes=3"):
        price_layer(GPT3, 8, box="h100_sxm8", nodes=3, network="ib_ndr400x8")
    with pytest.raises(ValueError, match="on a GPU box only"):
        price_layer(GPT3, 8, nodes=2)
    with pytest.raises(ValueError, match="box must be None"):
        price_layer(GPT3, 8, box="H100 SXM")
    with pytest.raises(ValueError, match="phase must be one of"):
        price_layer(GPT3, 8, box="h100_sxm8").pass_seconds("sideways")


@settings(max_examples=40, deadline=None)
@given(heads=st.sampled_from([8, 32, 96]), head_dim=st.sampled_from([8, 128]),
       s=st.sampled_from([8, 2048]), b=st.integers(1, 4), t=st.sampled_from([1, 2, 8]),
       d=st.sampled_from([2, 4]), sp=st.booleans())
def test_a_model_spec_is_the_layer_its_shape_describes(heads, head_dim, s, b, t, d, sp):
    """The functions take distlab's one transformer description, a ModelSpec, with the
    micro-batch and bytes per element beside it; TransformerShape builds the same ModelSpec."""
    spec = ModelSpec("gpt", 2, heads * head_dim, heads, 1000, s)
    shape = TransformerShape(heads * head_dim, heads, s, b, dtype_bytes=d)
    assert (shape.hidden, shape.heads, shape.seq_len, shape.ffn) == \
        (spec.hidden, spec.heads, spec.seq_len, spec.ffn)
    assert layer_collectives(spec, t, sp, micro_batch=b, dtype_bytes=d, regather_inputs=True) \
        == layer_collectives(shape, t, sp, regather_inputs=True)
    assert TransformerShape.of(spec, b, d).activation_nbytes == shape.activation_nbytes


def test_a_model_spec_prices_as_its_shape_and_grouped_query_attention_alike():
    spec = ModelSpec("gpt3-layer", 1, 12288, 96, 51200, 2048)
    assert layer_input(spec).model is spec
    for sp in (False, True):
        ours = price_layer(spec, 8, sp, box="h100_sxm8")
        theirs = price_layer(GPT3, 8, sp, box="h100_sxm8")
        assert ours.seconds == pytest.approx(theirs.seconds, rel=1e-12)
        assert ours.shape.model is spec and ours.shape.micro_batch == 1
    # a layer's collectives are its activation's, whatever its attention and MLP
    llama = PRESETS["llama3-8b"]
    calls = layer_collectives(llama, 8, True, micro_batch=2)
    assert {c.nbytes for c in calls} == {8192 * 2 * 4096 * 2}


def test_a_layer_is_given_once():
    with pytest.raises(ValueError, match="micro_batch and dtype_bytes come with a "
                                         "TransformerShape"):
        layer_collectives(GPT3, 8, micro_batch=2)
    with pytest.raises(TypeError, match="model must be a ModelSpec"):
        layer_collectives((12288, 96), 8)
    with pytest.raises(ValueError, match="micro_batch"):
        layer_collectives(PRESETS["llama3-8b"], 8, micro_batch=0)
