"""Activation memory per layer: Korthikanti et al. 2022's Table 2 against the term count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.recompute import RECOMPUTES
from distlab.tensor_parallel.cost import TransformerShape
from distlab.tensor_parallel.memory import (
    RECOMPUTE,
    activation_terms,
    layer_activation_bytes,
    table2_bytes,
)
from distlab.transformer import PRESETS, ModelSpec

GPT3 = TransformerShape(hidden=12288, heads=96, seq_len=2048, micro_batch=1)
SBH = 2048 * 12288  # 25_165_824; 5 a s / h = 5 * 96 * 2048 / 12288 = 80


@pytest.mark.parametrize(("tp", "sp", "recompute", "by_hand"), [
    (1, False, "none", 114 * SBH),            # 34 + 80
    (8, False, "none", 23 * SBH),             # 10 + 24/8 + 80/8
    (8, True, "none", 114 * SBH // 8),        # (34 + 80) / 8
    (8, False, "selective", 13 * SBH),        # 10 + 24/8
    (8, True, "selective", 34 * SBH // 8),    # 34 / 8
    (8, False, "full", 2 * SBH),
    (8, True, "full", 2 * SBH // 8),
])
def test_gpt3_175b_by_hand(tp, sp, recompute, by_hand):
    assert by_hand == int(by_hand)
    assert layer_activation_bytes(GPT3, tp, sequence_parallel=sp, recompute=recompute) == by_hand
    assert table2_bytes(GPT3, tp, sequence_parallel=sp, recompute=recompute) == \
        pytest.approx(by_hand, rel=1e-12)


def test_gpt3_175b_paper_headlines():
    # 2.67 GiB per layer without parallelism; sequence parallelism + selective recomputation
    # cuts tensor parallelism's baseline by more than the paper's "5x" (23 / 4.25 = 5.4)
    assert layer_activation_bytes(GPT3) == 2_868_903_936
    base = layer_activation_bytes(GPT3, 8)
    both = layer_activation_bytes(GPT3, 8, sequence_parallel=True, recompute="selective")
    assert base / both == pytest.approx(23 / 4.25, rel=1e-12)
    assert base / both > 5


def test_terms_sum_to_34_sbh_and_5_as2b():
    terms = activation_terms(GPT3)
    linear = sum(t.nbytes for t in terms if not t.quadratic)
    quad = sum(t.nbytes for t in terms if t.quadratic)
    assert linear == 34 * SBH
    assert quad == 5 * 96 * 2048 * 2048
    assert sum(t.nbytes for t in terms if not t.tensor_parallel) == 10 * SBH
    assert {t.block for t in terms} == {"attention", "mlp", "layer_norm"}


shapes = st.builds(
    lambda heads, head_dim, s_mult, b, ffn_mult, d: TransformerShape(
        heads * head_dim, heads, 8 * s_mult, b, ffn_hidden=4 * heads * head_dim * ffn_mult // 4,
        dtype_bytes=d),
    heads=st.sampled_from([8, 16, 32]), head_dim=st.sampled_from([8, 64]),
    s_mult=st.integers(1, 64), b=st.integers(1, 4), ffn_mult=st.sampled_from([4, 8]),
    d=st.sampled_from([2, 4]))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, recompute=st.sampled_from(RECOMPUTE), sp=st.booleans())
def test_more_tp_less_memory_per_rank(shape, recompute, sp):
    got = [layer_activation_bytes(shape, t, sequence_parallel=sp, recompute=recompute)
           for t in (1, 2, 4, 8)]
    strict = sp or recompute != "full"
    for a, b in zip(got, got[1:], strict=False):
        assert b < a if strict else b <= a


@settings(max_examples=60, deadline=None)
@given(shape=shapes, t=st.sampled_from([2, 4, 8]),
       recompute=st.sampled_from(("none", "selective")))
def test_sequence_parallel_saves_the_replicated_part(shape, t, recompute):
    # what tensor parallelism leaves replicated (10 s b h for 2-byte activations) is divided by t
    replicated = sum(x.nbytes for x in activation_terms(shape) if not x.tensor_parallel)
    tp_only = layer_activation_bytes(shape, t, recompute=recompute)
    with_sp = layer_activation_bytes(shape, t, sequence_parallel=True, recompute=recompute)
    assert tp_only - with_sp == replicated - replicated // t
    if shape.dtype_bytes == 2:
        assert replicated == 10 * shape.activation_elements
    assert with_sp * t == layer_activation_bytes(shape, 1, recompute=recompute)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, t=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(),
       recompute=st.sampled_from(RECOMPUTE))
def test_closed_forms_match_the_terms(shape, t, sp, recompute):
    if shape.dtype_bytes != 2 or shape.ffn != 4 * shape.hidden:
        with pytest.raises(ValueError, match="Table 2 assumes"):
            table2_bytes(shape, t, sequence_parallel=sp, recompute=recompute)
        return
    assert table2_bytes(shape, t, sequence_parallel=sp, recompute=recompute) == pytest.approx(
        layer_activation_bytes(shape, t, sequence_parallel=sp, recompute=recompute), rel=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="tp=5 must divide heads=96"):
        layer_activation_bytes(GPT3, 5)
    with pytest.raises(ValueError, match="tp must be an int >= 1, got 0"):
        layer_activation_bytes(GPT3, 0)
    with pytest.raises(ValueError, match="seq_len=100"):
        layer_activation_bytes(TransformerShape(64, 8, 100, 1), 8, sequence_parallel=True)
    assert layer_activation_bytes(TransformerShape(64, 8, 100, 1), 8) > 0  # no SP: any seq_len
    with pytest.raises(ValueError, match="recompute must be one of"):
        layer_activation_bytes(GPT3, 8, recompute="some")
    with pytest.raises(TypeError, match="sequence_parallel"):
        layer_activation_bytes(GPT3, 8, sequence_parallel="yes")
    with pytest.raises(TypeError, match="model must be a ModelSpec .or a TransformerShape."):
        activation_terms((12288, 96))


@settings(max_examples=40, deadline=None)
@given(shape=shapes, t=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(),
       recompute=st.sampled_from(RECOMPUTE))
def test_a_model_spec_keeps_what_its_shape_keeps(shape, t, sp, recompute):
    """The paper's terms read distlab's one transformer description, a ModelSpec, with the
    micro-batch and bytes per element beside it, and the recompute policy as a name or itself."""
    spec = ModelSpec("gpt", 1, shape.hidden, shape.heads, 1000, shape.seq_len,
                     ffn_hidden=shape.ffn)
    mine = layer_activation_bytes(spec, t, sequence_parallel=sp, recompute=RECOMPUTES[recompute],
                                  micro_batch=shape.micro_batch, dtype_bytes=shape.dtype_bytes)
    assert mine == layer_activation_bytes(shape, t, sequence_parallel=sp, recompute=recompute)
    assert activation_terms(spec, micro_batch=shape.micro_batch,
                            dtype_bytes=shape.dtype_bytes) == activation_terms(shape)


def test_the_papers_terms_refuse_what_they_do_not_describe():
    with pytest.raises(ValueError, match="gated_ffn=True"):
        layer_activation_bytes(PRESETS["llama3-8b"], 8)
    with pytest.raises(ValueError, match="kv_heads=8"):
        activation_terms(ModelSpec("gqa", 1, 1024, 16, 100, 64, kv_heads=8))
    with pytest.raises(ValueError, match="got 'op' .the paper's terms do not count it"):
        table2_bytes(GPT3, 8, recompute="op")
