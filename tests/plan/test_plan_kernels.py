"""The kernels of one transformer layer on one of tp GPUs (distlab.plan.kernels): shapes and
FLOPs against the planner's own count, and the planner's seconds for each."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlab.plan.calibration import SHIPPED
from distlab.plan.kernels import (
    PASSES,
    attention_shape,
    gpu_kind_for_device,
    layer_matmuls,
    model_attention_s,
    model_matmul_s,
)
from distlab.plan.layout import GPU_KINDS, Hardware
from distlab.plan.model import PRESETS, layer_matmul_flops
from distlab.plan.step import CAUSAL_WORK


def _divisors(n: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16) if n % d == 0]


@st.composite
def _case(draw: st.DrawFn) -> tuple[str, int, int]:
    name = draw(st.sampled_from(sorted(PRESETS)))
    spec = PRESETS[name]
    tps = [t for t in _divisors(spec.heads) if spec.kv_width % t == 0 and spec.ffn % t == 0]
    return name, draw(st.sampled_from(tps)), draw(st.integers(1, 70000))


@given(_case())
def test_the_products_are_the_planners_layer_flops_split_over_tp(case) -> None:
    name, tp, tokens = case
    spec = PRESETS[name]
    products = layer_matmuls(spec, tp, tokens)
    whole = layer_matmul_flops(spec, tokens) - 4 * tokens * tokens * spec.hidden
    assert sum(p.forward_flops for p in products) * tp == whole
    assert all(p.m == tokens and p.step_flops == PASSES * p.forward_flops for p in products)
    assert [p.name for p in products] == (["wq", "wk", "wv", "wo", "w1"]
                                          + (["w3"] if spec.gated_ffn else []) + ["w2"])


@given(_case(), st.integers(1, 16))
def test_the_attention_is_the_planners_s2_products_split_by_heads(case, batch) -> None:
    name, tp, seq = case
    spec = PRESETS[name]
    shape = attention_shape(spec, tp, seq, batch)
    assert shape.heads * tp == spec.heads and shape.head_dim == spec.head_dim
    assert shape.counted_flops * tp == 4 * seq * seq * spec.hidden * batch
    assert shape.step_causal_flops == PASSES * shape.counted_flops * CAUSAL_WORK


def test_the_planners_seconds_are_its_rates() -> None:
    gpu = GPU_KINDS["H200-141GB-SXM"]
    hw = Hardware(gpu, 1, gpus_per_node=1)
    assert model_matmul_s(SHIPPED, gpu, 4096, 1e15) == 1e15 / SHIPPED.flops_per_s(hw, 4096)
    # 0.63 of 989.4 TFLOP/s x 4096 / (4096 + 512)
    assert SHIPPED.flops_per_s(hw, 4096) == pytest.approx(989.4e12 * 0.63 * 4096 / 4608)
    shape = attention_shape(PRESETS["llama3-8b"], 1, 8192, 1)
    assert model_attention_s(SHIPPED, gpu, 4096, shape) == pytest.approx(
        shape.step_causal_flops / (SHIPPED.flops_per_s(hw, 4096) * SHIPPED.attention))


@pytest.mark.parametrize(("name", "kind"), [
    ("NVIDIA H200", "H200-141GB-SXM"), ("NVIDIA H100 80GB HBM3", "H100-80GB-SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"), ("NVIDIA A100-SXM4-40GB", "A100-40GB-SXM"),
    ("NVIDIA B200", "B200"), ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None),
    ("NVIDIA A100 80GB PCIe", None), ("NVIDIA GeForce RTX 4090", None), ("x86_64", None)])
def test_device_names_map_to_the_planners_gpu_kinds(name: str, kind: str | None) -> None:
    got = gpu_kind_for_device(name)
    assert (got.name if got else None) == kind


@pytest.mark.parametrize(("call", "message"), [
    (lambda: layer_matmuls(PRESETS["llama3-8b"], 3, 8), "not divisible by tp=3"),
    (lambda: layer_matmuls(PRESETS["llama3-8b"], 4096, 8), "key/value width 1024"),
    (lambda: layer_matmuls(PRESETS["llama3-8b"], 1, 0), "tokens"),
    (lambda: attention_shape(PRESETS["gpt3-175b"], 64, 8, 1), "heads 96"),
    (lambda: attention_shape(PRESETS["gpt3-175b"], 8, 0, 1), "seq_len")])
def test_bad_sizes_are_refused(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
