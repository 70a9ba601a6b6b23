"""The kernels of one transformer layer on one of tp GPUs (distlab.plan.kernels): shapes and
FLOPs against the planner's own count, and the planner's seconds for each."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlab.plan.calibration import KERNEL_SPEED, SHIPPED
from distlab.plan.kernels import (
    PASSES,
    attention_shape,
    attention_speedup,
    gpu_kind_for_device,
    layer_matmuls,
    model_attention_s,
    model_matmul_s,
)
from distlab.plan.layout import GPU_KINDS, Hardware, Layout, parse_layout
from distlab.plan.model import PRESETS, layer_matmul_flops
from distlab.plan.step import CAUSAL_WORK, step_time


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
    whole = layer_matmul_flops(spec, tokens) - 4 * tokens * tokens * spec.q_width
    assert sum(p.forward_flops for p in products) * tp == whole
    assert all(p.m == tokens and p.step_flops == PASSES * p.forward_flops for p in products)
    assert [p.name for p in products] == (["wq", "wk", "wv", "wo", "w1"]
                                          + (["w3"] if spec.gated_ffn else []) + ["w2"])


@given(_case(), st.integers(1, 16))
def test_the_attention_is_the_planners_s2_products_split_by_heads(case, batch) -> None:
    name, tp, seq = case
    spec = PRESETS[name]
    shape = attention_shape(spec, tp, seq, batch)
    assert shape.heads * tp == spec.heads and shape.head_dim == spec.head_width
    assert shape.counted_flops * tp == 4 * seq * seq * spec.q_width * batch
    assert shape.step_causal_flops == PASSES * shape.counted_flops * CAUSAL_WORK


def test_the_planners_seconds_are_its_rates() -> None:
    gpu = GPU_KINDS["H200-141GB-SXM"]
    hw = Hardware(gpu, 1, gpus_per_node=1)
    assert model_matmul_s(SHIPPED, gpu, 4096, 1e15) == pytest.approx(
        1e15 / SHIPPED.flops_per_s(hw, 4096), rel=1e-12)
    # the Hopper efficiency of 989.4 TFLOP/s x 4096 / (4096 + width scale)
    assert SHIPPED.flops_per_s(hw, 4096) == pytest.approx(
        989.4e12 * SHIPPED.efficiency["hopper/bf16"] * 4096 / (4096 + SHIPPED.width_scale))
    shape = attention_shape(PRESETS["llama3-8b"], 1, 8192, 1)
    # the attention's rate has no width term: the peak, the 16-bit efficiency, the attention
    assert model_attention_s(SHIPPED, gpu, shape) == pytest.approx(
        shape.step_causal_flops / (989.4e12 * SHIPPED.efficiency["hopper/bf16"]
                                   * SHIPPED.attention))


@pytest.mark.parametrize(("name", "kind"), [
    ("NVIDIA H200", "H200-141GB-SXM"), ("NVIDIA H100 80GB HBM3", "H100-80GB-SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"), ("NVIDIA A100-SXM4-40GB", "A100-40GB-SXM"),
    ("NVIDIA B200", "B200"), ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None),
    ("NVIDIA A100 80GB PCIe", None), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA TITAN RTX", None), ("x86_64", None)])
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


RESULT = Path(__file__).resolve().parents[2] / "results" / "gpu-h200-2026-11-27" / "kernels.json"


@pytest.mark.parametrize(("folder", "device"), [("gpu-h200-2026-11-27", "NVIDIA H200"),
                                                ("gpu-h100-2026-11-27", "NVIDIA H100 80GB HBM3")])
def test_the_shipped_cudnn_speed_is_the_hopper_measurement(folder: str, device: str) -> None:
    """KERNEL_SPEED is measured, not fitted: the median of the committed H200 run, and the
    H100's run gives the same."""
    doc = json.loads((RESULT.parents[1] / folder / "kernels.json").read_text())
    assert doc["provenance"]["cuda"]["available"] and doc["device"] == device
    speed = attention_speedup(doc, "cudnn")
    assert round(speed, 2) == KERNEL_SPEED["hopper/cudnn"]
    with pytest.raises(ValueError, match="no row measured both 'math'"):
        attention_speedup(doc, "math")


@pytest.mark.parametrize(("gpu", "folder"), [("H200", "gpu-h200-2026-11-27"),
                                             ("H100", "gpu-h100-2026-11-27")])
def test_the_shipped_runs_are_the_committed_results(gpu: str, folder: str) -> None:
    """measured_kernels reads the package's copies of the committed runs, whatever the working
    directory, and KERNEL_SPEED is their measurement."""
    from distlab.plan.kernels import MEASURED, measured_kernels

    shipped = Path(__file__).resolve().parents[2] / "lib" / "distlab" / "plan" / MEASURED[gpu]
    assert shipped.read_bytes() == (RESULT.parents[1] / folder / "kernels.json").read_bytes()
    (doc,) = measured_kernels((gpu,)).values()
    assert round(attention_speedup(doc, "cudnn"), 2) == KERNEL_SPEED["hopper/cudnn"]
    with pytest.raises(ValueError, match="no shipped kernel run for 'A100'"):
        measured_kernels(("A100",))


def test_the_results_readme_quotes_the_run() -> None:
    """The numbers results/gpu-h200-2026-11-27/README.md states, from the JSON."""
    doc = json.loads(RESULT.read_text())
    layers = [r for r in doc["rows"] if r["product"] == "layer"]
    wide = [r["efficiency"] for r in layers if r["width"] >= 1536]
    assert (round(min(wide), 2), round(max(wide), 2)) == (0.70, 0.76)
    ratio = {r["width"]: r["efficiency"] / (r["model_tflops"] * 1e12 / 989.4e12)
             for r in layers}
    assert min(ratio.values()) > 1.0      # every layer's kernels faster than the whole-step rate
    attention = [r for r in doc["attention"] if r["measured_s"]]

    def med(backend: str, s: int) -> float:
        return round(statistics.median(r["vs_matmul"] for r in attention
                                       if r["backend"] == backend and r["seq_len"] == s), 2)

    assert [med("flash", s) for s in (4096, 8192, 32768)] == [0.27, 0.30, 0.38]
    assert [med("cudnn", s) for s in (4096, 8192, 32768)] == [0.49, 0.57, 0.65]


def test_the_attention_kernel_prices_only_the_attention() -> None:
    gpu = GPU_KINDS["H100-80GB-SXM"]
    hw = Hardware(gpu, 8)
    assert SHIPPED.kernel_factor(hw, "flash") == 1.0
    assert SHIPPED.kernel_factor(hw, "cudnn") == KERNEL_SPEED["hopper/cudnn"]
    assert SHIPPED.kernel_factor(Hardware(GPU_KINDS["A100-80GB-SXM"], 8), "cudnn") is None
    assert SHIPPED.attention_flops_per_s(hw, "cudnn") == pytest.approx(
        KERNEL_SPEED["hopper/cudnn"] * SHIPPED.attention_flops_per_s(hw))
    model = PRESETS["llama3-8b"]
    flash = step_time(model, Layout(dp=8, global_batch=8), hw)
    cudnn = step_time(model, Layout(dp=8, global_batch=8, attention_kernel="cudnn"), hw)
    attention_s = 3 * 4 * 8192**2 * 4096 * CAUSAL_WORK * model.layers / \
        SHIPPED.attention_flops_per_s(hw)
    saved = attention_s * (1 - 1 / KERNEL_SPEED["hopper/cudnn"])
    assert flash.compute_s - cudnn.compute_s == pytest.approx(saved, rel=1e-9)
    assert parse_layout("dp=8,attention=cudnn", global_batch=8).attention_kernel == "cudnn"
    assert "cudnn-attn" in Layout(attention_kernel="cudnn").label
    with pytest.raises(ValueError, match="attention_kernel"):
        Layout(attention_kernel="triton")


def test_transformer_engine_runs_on_hopper_run_cudnn_attention() -> None:
    from distlab.evidence.plan.published import load_published
    from distlab.evidence.plan.runs import CUDNN_FROM_SM, TRANSFORMER_ENGINE_SOURCES, run_inputs
    from distlab.nccl.boxes import GPU_BOXES
    kernels: dict[tuple[str, bool], set[str]] = {}
    for run in load_published().all_runs:
        inputs = run_inputs(run)
        hopper = GPU_BOXES[inputs.hardware.gpu.box].sm >= CUDNN_FROM_SM
        te = run.source in TRANSFORMER_ENGINE_SOURCES
        kernels.setdefault((run.source, hopper), set()).add(inputs.layout.attention_kernel)
        assert inputs.layout.attention_kernel == ("cudnn" if te and hopper else "flash")
        assert any("cudnn attention" in a for a in inputs.assumed) == (te and hopper)
    assert kernels[("nemo_long_sequence_2024", True)] == {"cudnn"}
    assert kernels[("torchtitan_bench_2024_12", True)] == {"flash"}
