"""The step-time model: its compute against the FLOP count, its bubble against the schedules'
closed forms, its collectives against the NCCL model they come from."""

from __future__ import annotations

import pytest

from distlab.nccl.execution import nccl_execution
from distlab.pipeline_parallel.cost import bubble_fraction
from distlab.plan.calibration import ComputeRate
from distlab.plan.layout import Layout, hardware
from distlab.plan.model import PRESETS, ModelSpec
from distlab.plan.step import CAUSAL_WORK, model_flops_per_step, step_time
from distlab.tensor_parallel.cost import price_layer

RATE = ComputeRate({"default": 0.5}, width_scale=256.0, attention=0.7, source="test")


def test_one_gpu_is_compute_only_at_the_rate() -> None:
    model, hw = PRESETS["llama3-8b"], hardware("h100", 1)
    est = step_time(model, Layout(global_batch=4), hw, rate=RATE)
    attention = 3 * model.layers * 4 * model.seq_len ** 2 * model.hidden * 4
    flops = 3 * model.forward_flops() * 4 - attention
    assert est.compute_s == pytest.approx(flops / RATE.flops_per_s(hw, model.hidden)
                                          + attention * CAUSAL_WORK
                                          / RATE.attention_flops_per_s(hw),
                                          rel=1e-12)
    assert est.bubble_s == est.tp_s == est.dp_s == 0
    # AdamW's step after the backward: 28 bytes a parameter at 72% of the H100's 3.35 TB/s
    assert est.optimizer_s == pytest.approx(model.params * 28 / (0.72 * 3.35e12), rel=1e-9)
    assert est.step_s == pytest.approx(est.compute_s + est.optimizer_s, rel=1e-12)
    assert est.tokens_per_s_per_gpu * est.step_s == pytest.approx(4 * model.seq_len)
    assert est.mfu == pytest.approx(model_flops_per_step(model, est.layout) / est.step_s
                                    / hw.gpu.peak_flops)


@pytest.mark.parametrize("model_name", ["llama3-8b", "gpt3-1.3b"])
def test_per_op_checkpointing_repeats_every_second_product_not_the_attention(
        model_name: str) -> None:
    """torchtitan's per-op policy recomputes the even-numbered ``mm`` of each layer (Llama:
    wk, wo, w3) and every biased linear (``addmm``: all of GPT-3's), and keeps the attention
    kernel's output: backward adds those products' forward FLOPs, nothing at the attention's
    rate."""
    model, hw = PRESETS[model_name], hardware("h100", 1)
    base = step_time(model, Layout(global_batch=2), hw, rate=RATE).compute_s
    op = step_time(model, Layout(global_batch=2, recompute="op"), hw, rate=RATE).compute_s
    s, h, k, f = model.seq_len, model.hidden, model.kv_width, model.ffn
    again = h * k + h * h + h * f if model.gated_ffn else 2 * h * h + 2 * h * k + 2 * h * f
    added = model.layers * 2 * s * again / RATE.flops_per_s(hw, h)
    assert op - base == pytest.approx(2 * added, rel=1e-9)


@pytest.mark.parametrize(("recompute", "extra"), [("selective", "attention"), ("full", "layers")])
def test_recompute_adds_the_forward_work_it_repeats(recompute: str, extra: str) -> None:
    model, hw = PRESETS["gpt3-1.3b"], hardware("a100", 1)
    base = step_time(model, Layout(global_batch=2), hw, rate=RATE).compute_s
    more = step_time(model, Layout(global_batch=2, recompute=recompute), hw, rate=RATE).compute_s
    s, h = model.seq_len, model.hidden
    if extra == "attention":  # the s^2 products again, at the attention's rate
        added = model.layers * 4 * s * s * h * CAUSAL_WORK / RATE.attention_flops_per_s(hw)
    else:  # every layer's forward again: its attention at the attention's rate
        attention = model.layers * 4 * s * s * h
        layers = model.forward_flops() - 2 * s * h * model.vocab
        added = (layers - attention) / RATE.flops_per_s(hw, h) \
            + attention * CAUSAL_WORK / RATE.attention_flops_per_s(hw)
    assert more - base == pytest.approx(2 * added, rel=1e-9)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (8, 8), (4, 32)])
def test_equal_stages_give_the_closed_form_bubble(pp: int, m: int) -> None:
    # a tiny vocabulary leaves the stages equal; deep, wide stages make their sends (64 MiB
    # over NVLink, 0.15 ms against 0.12 s of compute per stage) a fraction of a percent
    model = ModelSpec("even", 64, 8192, 64, 8, 4096)
    hw = hardware("h100", pp)
    est = step_time(model, Layout(pp=pp, global_batch=m), hw, rate=RATE)
    fraction = est.bubble_s / (est.step_s - est.optimizer_s)   # the pipeline's own time
    assert fraction == pytest.approx(bubble_fraction("1F1B", pp, m), rel=5e-3)
    fast = step_time(model, Layout(pp=pp, global_batch=m), hw, rate=RATE,
                     simulate_pipeline=False)
    assert fast.step_s == pytest.approx(est.step_s, rel=2e-3)


def test_interleaving_shrinks_the_bubble() -> None:
    model, hw = ModelSpec("even", 16, 8192, 64, 8, 4096), hardware("h100", 4)
    plain = step_time(model, Layout(pp=4, global_batch=8), hw, rate=RATE)
    inter = step_time(model, Layout(pp=4, global_batch=8, schedule="Interleaved1F1B",
                                    stages_per_rank=2), hw, rate=RATE)
    assert inter.bubble_s < plain.bubble_s
    assert inter.compute_s == pytest.approx(plain.compute_s, rel=1e-9)


@pytest.mark.parametrize("sp", [False, True])
def test_tensor_parallel_time_is_the_nccl_priced_layer_times_layers(sp: bool) -> None:
    model, hw = PRESETS["llama3-8b"], hardware("h100", 8)
    lay = Layout(tp=8, sequence_parallel=sp, global_batch=2)
    est = step_time(model, lay, hw, rate=RATE)
    layer = price_layer(model, 8, sp, micro_batch=1, dtype_bytes=2, box="h100_sxm8",
                        regather_inputs=sp)
    assert est.tp_s == pytest.approx(layer.seconds * model.layers * 2, rel=1e-9)


def test_data_parallel_exposes_what_the_last_backward_cannot_hide() -> None:
    # short sequences leave little backward to hide a 1.3B-parameter all-reduce behind
    model, hw = PRESETS["gpt3-1.3b"].__class__(**{**vars(PRESETS["gpt3-1.3b"]),
                                                 "seq_len": 64}), hardware("a100", 8)
    est = step_time(model, Layout(dp=8, global_batch=8), hw, rate=RATE)
    grads = model.params * 2  # "mixed": 16-bit gradients
    reduce = nccl_execution("a100_sxm8", 8, [grads])[0].seconds
    backward = est.compute_s * 2 / 3  # one microbatch: backward is two thirds of the compute
    assert est.dp_s == pytest.approx(reduce - backward, rel=1e-9)
    long = step_time(PRESETS["gpt3-1.3b"], Layout(dp=8, global_batch=64), hw, rate=RATE)
    assert long.dp_s == 0.0  # hidden behind the backward of a 2048-token microbatch


def test_fsdp_pays_its_gathers_where_they_outlast_the_layers() -> None:
    model, hw = PRESETS["llama3-8b"], hardware("h100", 64)
    wide = step_time(model, Layout(dp=64, zero=3, global_batch=64), hw, rate=RATE)
    assert wide.fsdp_s > 0 and wide.dp_s == 0


def test_fsdp_gathers_hide_behind_a_layers_tensor_parallel_collectives_too() -> None:
    """FSDP's gathers run on their own stream: the window the next layer's gather hides
    behind is the layer as it runs, compute and the tp collectives the compute stream waits
    for. Llama 3 70B as dp16 tp4 cp2 fsdp on 128 H100s: each layer's gather (about 4.7 ms)
    outlasts the layer's forward compute (about 4.4 ms) but not compute and tp together, so
    only each microbatch's first gather and last reduction are exposed; and the layout's
    tokens/s per GPU moves by under 2% from 32 to 512 GPUs (no dip where the gather crosses
    the compute alone)."""
    from distlab.plan.collectives import collective_seconds
    from distlab.plan.layout import PRECISIONS, group_span
    from distlab.plan.partition import stage_params
    from distlab.plan.step import ACTIVATION_BYTES

    model = PRESETS["llama3-70b"]

    def layout(dp: int) -> Layout:
        return Layout(dp=dp, tp=4, cp=2, zero=3, sequence_parallel=True, global_batch=512)

    hw = hardware("h100", 128)
    lay = layout(16)
    est = step_time(model, lay, hw)
    span = group_span(lay.dp * lay.cp, lay.tp, hw.gpus_per_node)
    unit = stage_params(model, lay, (0,)).total // model.layers
    gather = collective_seconds("all_gather", unit * ACTIVATION_BYTES, span, hw)
    reduce = collective_seconds("reduce_scatter", unit * PRECISIONS[lay.precision][1], span, hw)
    forward_compute = est.compute_s / lay.microbatches / 3 / model.layers
    assert forward_compute < gather < forward_compute * 1.2   # crosses the compute alone
    assert est.fsdp_s == pytest.approx(lay.microbatches * (gather + reduce), rel=1e-9)
    tokens = [step_time(model, layout(g // 8), hardware("h100", g)).tokens_per_s_per_gpu
              for g in (32, 64, 128, 256, 512)]
    assert max(tokens) / min(tokens) < 1.02, tokens


def test_a_layout_for_other_gpus_is_refused() -> None:
    with pytest.raises(ValueError, match="uses dp\\*tp\\*pp\\*cp = 4"):
        step_time(PRESETS["llama3-8b"], Layout(dp=4, global_batch=4), hardware("h100", 8))
