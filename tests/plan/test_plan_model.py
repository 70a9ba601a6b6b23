"""The planner's model description: parameter counts against real modules, presets against
their published sizes, FLOPs against the closed forms, and bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.plan.model import PRESETS, ModelSpec, layer_matmul_flops, model_spec, spec_from_module


@pytest.mark.parametrize(("name", "billions"), [
    ("llama3-8b", 8.03), ("llama3-70b", 70.55), ("llama3-405b", 405.85),
    ("llama2-7b", 6.74), ("llama2-70b", 68.98), ("gpt3-175b", 174.6), ("gpt3-13b", 12.85)])
def test_presets_have_their_published_parameter_counts(name: str, billions: float) -> None:
    # Llama: Meta's model cards (8.03B, 70.6B, 405.9B; Llama 2 6.74B, 69.0B); GPT-3 175B and
    # 13B (Brown et al. 2020, table 2.1, with Megatron's padded vocabulary).
    assert PRESETS[name].params / 1e9 == pytest.approx(billions, rel=2e-3)


# (total, active) billions as published: Qwen's model cards (Qwen3-30B-A3B: 30.5B total, 3.3B
# activated; Qwen3-235B-A22B: 235B, 22B), both counting every parameter. OpenAI's gpt-oss
# model card (table 1): 116.83B total, 5.13B active; its active count leaves the embedding out
# (a lookup, no product: 4.55B of transformer blocks plus 0.58B of unembedding), so the
# comparison is active_params - embedding_params. Expert biases and attention sinks (about
# 40M) are not modelled.
MOE_PUBLISHED = {"qwen3-30b-a3b": (30.5, 3.3), "qwen3-235b-a22b": (235.0, 22.0),
                 "gpt-oss-120b": (116.83, 5.13)}


def _published_active(spec: ModelSpec) -> float:
    """Active parameters as the model's card counts them (billions)."""
    left_out = spec.embedding_params if spec.name == "gpt-oss-120b" else 0
    return (spec.active_params - left_out) / 1e9


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_moe_presets_with_their_head_dim_have_their_published_counts(name: str) -> None:
    total, active = MOE_PUBLISHED[name]
    spec = PRESETS[name]
    assert spec.params / 1e9 == pytest.approx(total, rel=0.02)
    assert _published_active(spec) == pytest.approx(active, rel=0.02)
    # hidden / heads-wide heads (what the presets assumed before head_dim) undercount the
    # attention: the active count falls outside 2% of the published one for each of them
    narrow = replace(spec, head_dim=None)
    assert narrow.q_width == spec.hidden < spec.q_width
    assert abs(_published_active(narrow) / active - 1) > 0.02
    assert narrow.params < spec.params


def test_head_dim_sets_the_query_width_of_params_and_flops() -> None:
    spec = ModelSpec("m", 2, 48, 4, 100, 16, kv_heads=2, head_dim=16, attention_bias=True)
    h, q, k, s = 48, 64, 32, 16
    assert (spec.head_width, spec.q_width, spec.kv_width) == (16, q, k)
    assert spec.attention_params == h * q + 2 * h * k + q * h + (q + 2 * k + h)
    assert layer_matmul_flops(spec, s) == (2 * s * h * (2 * q + 2 * k) + 4 * s * s * q
                                           + 2 * 2 * s * h * spec.ffn)
    # head_dim equal to hidden / heads is the default, stated: the same spec
    same = ModelSpec("m", 2, 48, 4, 100, 16, kv_heads=2, head_dim=12, attention_bias=True)
    assert same == replace(spec, head_dim=None) and same.head_dim is None
    assert "head_dim" not in same.to_dict() and spec.to_dict()["head_dim"] == 16
    # hidden need not be a multiple of heads when head_dim is given
    odd = ModelSpec("odd", 1, 50, 4, 100, 16, head_dim=16)
    for one in (spec, same, odd, PRESETS["qwen3-30b-a3b"], PRESETS["gpt-oss-120b"]):
        assert model_spec(one.to_dict()) == one


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (-8, ValueError),
                                              (2.5, TypeError), (True, TypeError),
                                              ("64", TypeError)])
def test_a_bad_head_dim_is_refused_in_one_line(value, error) -> None:
    with pytest.raises(error, match="head_dim") as info:
        model_spec({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 8,
                    "head_dim": value})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="multiple of heads.*or give head_dim"):
        ModelSpec("m", 2, 50, 4, 100, 8)


@settings(max_examples=25, deadline=None)
@given(layers=st.integers(1, 3), heads=st.sampled_from([2, 4]), head_dim=st.sampled_from([4, 8]),
       vocab=st.integers(5, 40), tied=st.booleans())
def test_spec_from_torchs_test_transformer_counts_every_parameter(
        layers: int, heads: int, head_dim: int, vocab: int, tied: bool) -> None:
    pytest.importorskip("expecttest", reason="torch's test Transformer imports expecttest "
                        "(distlab[test] installs it)")
    from torch.testing._internal.distributed._tensor.common_dtensor import ModelArgs, Transformer

    module = Transformer(ModelArgs(n_layers=layers, vocab_size=vocab, max_seq_len=16,
                                   dim=heads * head_dim, n_heads=heads, weight_tying=tied))
    spec = spec_from_module(module, seq_len=8)
    assert spec.params == sum(p.numel() for p in module.parameters())
    assert (spec.layers, spec.hidden, spec.heads, spec.vocab) == (layers, heads * head_dim,
                                                                 heads, vocab)
    assert spec.tied_embeddings is tied and spec.norm == "layernorm" and spec.positions == 16


class _Config:
    num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads = 2, 16, 4, 2
    intermediate_size, vocab_size, tie_word_embeddings, hidden_act = 24, 50, False, "silu"
    rms_norm_eps, model_type = 1e-5, "llama"


class _LlamaLike(torch.nn.Module):
    """A module shaped like Hugging Face's Llama (only its parameter shapes matter)."""

    def __init__(self) -> None:
        super().__init__()
        c = self.config = _Config()
        h, f, kv = c.hidden_size, c.intermediate_size, 2 * (c.hidden_size // 4)
        self.embed = torch.nn.Embedding(c.vocab_size, h)
        self.layers = torch.nn.ModuleList(torch.nn.ModuleDict({
            "q": torch.nn.Linear(h, h, bias=False), "k": torch.nn.Linear(h, kv, bias=False),
            "v": torch.nn.Linear(h, kv, bias=False), "o": torch.nn.Linear(h, h, bias=False),
            "gate": torch.nn.Linear(h, f, bias=False), "up": torch.nn.Linear(h, f, bias=False),
            "down": torch.nn.Linear(f, h, bias=False), "n1": torch.nn.RMSNorm(h),
            "n2": torch.nn.RMSNorm(h)}) for _ in range(c.num_hidden_layers))
        self.norm = torch.nn.RMSNorm(h)
        self.lm_head = torch.nn.Linear(h, c.vocab_size, bias=False)


def test_spec_from_a_hugging_face_shaped_module_reads_gqa_and_the_gated_mlp() -> None:
    spec = spec_from_module(_LlamaLike(), seq_len=32)
    assert (spec.kv, spec.ffn, spec.gated_ffn, spec.norm) == (2, 24, True, "rmsnorm")
    assert spec.params == sum(p.numel() for p in _LlamaLike().parameters())


def test_a_module_read_wrongly_is_refused_not_planned() -> None:
    module = _LlamaLike()
    module.extra = torch.nn.Linear(3, 3)  # parameters no transformer field explains
    with pytest.raises(ValueError, match="parameters but the shape"):
        spec_from_module(module, seq_len=32)
    with pytest.raises(ValueError, match="cannot read a transformer"):
        spec_from_module(torch.nn.Linear(2, 2), seq_len=4)


def test_flops_follow_the_megatron_closed_form() -> None:
    # Narayanan et al. 2021 (eq. 3) count a GPT layer's forward as 24 b s h^2 (1 + s / (6 h))
    # for ffn = 4 h with full attention: the same sum of matrix products.
    spec = PRESETS["gpt3-175b"]
    s, h = spec.seq_len, spec.hidden
    assert layer_matmul_flops(spec, s) == pytest.approx(24 * s * h * h * (1 + s / (6 * h)),
                                                        rel=1e-12)
    assert layer_matmul_flops(spec, s, causal=True) < layer_matmul_flops(spec, s)
    assert spec.forward_flops() == pytest.approx(
        spec.layers * 24 * s * h * h * (1 + s / (6 * h)) + 2 * s * h * spec.vocab, rel=1e-12)


def test_model_spec_resolves_presets_dicts_and_refuses_bad_fields() -> None:
    assert model_spec("llama3-8b", seq_len=4096).seq_len == 4096
    spec = model_spec({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 128})
    assert spec.name == "custom" and spec.ffn == 256 and spec.kv == 4
    with pytest.raises(ValueError, match="llama3-8b"):
        model_spec("llama9")
    with pytest.raises(ValueError, match="unknown field"):
        model_spec({"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 8, "x": 1})
    with pytest.raises(ValueError, match="missing field"):
        model_spec({"layers": 2})
    with pytest.raises(ValueError, match="multiple of heads"):
        ModelSpec("m", 2, 10, 3, 100, 8)
    with pytest.raises(ValueError, match="kv_heads"):
        ModelSpec("m", 2, 12, 6, 100, 8, kv_heads=4)
    with pytest.raises(TypeError):
        model_spec(3)  # type: ignore[arg-type]


def test_a_sliding_window_layer_counts_the_pairs_in_its_band() -> None:
    """A windowed layer's attention products, counted by hand: causal, query ``i`` meets the
    keys ``i - w + 1 .. i``, the band ``0 <= i - j < w`` of the causal half, ``s w - w^2 / 2``
    pairs in the continuous count the full layer's ``s^2 / 2`` uses, ``2 q`` FLOPs per pair
    for ``Q K^T`` and as many for the product with V; counted whole, twice that."""
    from distlab.transformer import attention_score_flops

    spec = ModelSpec("w", 4, 48, 4, 100, 64, head_dim=16, sliding_window=8, sliding_layers=2)
    s, w, q = 64, 8, 64
    pairs = s * w - w * w // 2
    assert attention_score_flops(spec, s, causal=True, sliding=True) == 2 * 2 * q * pairs
    assert attention_score_flops(spec, s, sliding=True) == 2 * 2 * 2 * q * pairs
    # a full layer of the same model, and a layer whose window covers the sequence, are the
    # whole causal attention
    full = attention_score_flops(spec, s, causal=True)
    assert full == 2 * 2 * q * s * s // 2
    for wide in (s, s + 1, 10 * s):
        covered = replace(spec, sliding_window=wide)
        assert attention_score_flops(covered, s, causal=True, sliding=True) == full
        assert attention_score_flops(covered, s, sliding=True) == attention_score_flops(covered, s)
    # the layer and the model: only the windowed layers' attention changes
    saved = attention_score_flops(spec, s) - attention_score_flops(spec, s, sliding=True)
    assert layer_matmul_flops(spec, s) - layer_matmul_flops(spec, s, sliding=True) == saved
    assert replace(spec, sliding_window=None, sliding_layers=0).forward_flops() \
        - spec.forward_flops() == 2 * saved
    assert [i for i in range(4) if spec.is_sliding_layer(i)] == [0, 2]
    assert spec.sliding_layers_in(1, 4) == 1 and spec.sliding_layers_in(0, 4) == 2
    assert model_spec(spec.to_dict()) == spec
    dense = PRESETS["llama3-8b"]
    assert "sliding_window" not in dense.to_dict() and dense.sliding_layers_in(0, 32) == 0


def test_gpt_oss_windows_every_other_layer_as_its_config_says() -> None:
    """config.json: ``sliding_window`` 128, ``layer_types`` sliding, full, ... over 36 layers;
    its windowed layers' attention is ``s * 128`` pairs, not ``s^2 / 2``."""
    spec = PRESETS["gpt-oss-120b"]
    assert (spec.sliding_window, spec.sliding_layers) == (128, 18)
    assert [i for i in range(36) if spec.is_sliding_layer(i)] == list(range(0, 36, 2))
    windowless = replace(spec, sliding_window=None, sliding_layers=0)
    assert spec.forward_flops() < windowless.forward_flops()
    assert spec.params == windowless.params


@pytest.mark.parametrize(("fields", "match"), [
    ({"sliding_layers": 1}, "needs a sliding_window"),
    ({"sliding_window": 0, "sliding_layers": 1}, "sliding_window"),
    ({"sliding_window": 8, "sliding_layers": 0}, "sliding_layers"),
    ({"sliding_window": 8, "sliding_layers": 3}, "sliding_layers")])
def test_a_bad_window_is_refused_in_one_line(fields, match) -> None:
    with pytest.raises(ValueError, match=match) as info:
        model_spec({"layers": 3, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 8, **fields})
    assert "\n" not in str(info.value)
