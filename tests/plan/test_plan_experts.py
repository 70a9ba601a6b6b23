"""The planner's expert dimension: a mixture-of-experts model described, laid out over ``ep``
ranks, its memory and step priced, enumerated by the planner, refused where ``ep`` cannot divide
its experts, and judged on published MoE runs with numbers computed here, not copied."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.evidence.plan import judged_moe as plan_moe
from distlab.evidence.plan.published_moe import load_moe_runs, moe_run_inputs
from distlab.judge.plan_command import main as judge_main
from distlab.plan.__main__ import columns
from distlab.plan.__main__ import main as plan_main
from distlab.plan.calibration import shipped_rate
from distlab.plan.experts import (
    A2A_BYTES,
    A2A_LINK_SHARE,
    GROUPED_GEMM_EFFICIENCY,
    IMBALANCE,
    all_to_all_seconds,
    check_experts,
    moe_layer_a2a_seconds,
    routed_rows,
    row_factor,
)
from distlab.plan.layout import Layout, hardware, parse_layout
from distlab.plan.memory import FRAMEWORKS, memory_lower_bound, memory_per_gpu, memory_per_rank
from distlab.plan.partition import rank_params
from distlab.plan.planner import enumerate_layouts, plan, price
from distlab.plan.step import step_time
from distlab.transformer import MOE_SOURCES, PRESETS, ModelSpec
from distlab.vocabulary import error_pct

HW = hardware("h100", 8)
TOY = ModelSpec("toy-moe", layers=4, hidden=256, heads=4, vocab=1024, seq_len=512,
                ffn_hidden=512, gated_ffn=True, experts=8, top_k=2, expert_ffn=128,
                shared_experts=1, dense_layers=1)
"""A toy MoE: one dense layer, then three layers of 8 experts (top-2) and a shared one."""


def test_a_toy_moe_is_described_counted_and_priced_end_to_end() -> None:
    h, e, f, v = 256, 128, 512, 1024
    attention = 4 * h * h
    moe_mlp = (8 + 1) * 3 * h * e + h * 8
    assert TOY.moe_layers == 3 and TOY.expert_params == 3 * h * e
    assert TOY.params == (attention + 3 * h * f + 2 * h) + 3 * (attention + moe_mlp + 2 * h) \
        + 2 * v * h + h
    assert TOY.active_params == TOY.params - 3 * (8 - 2) * 3 * h * e
    s = 512
    dense_layer = 2 * s * h * 4 * h + 4 * s * s * h + 2 * s * h * f * 3
    moe_layer = 2 * s * h * 4 * h + 4 * s * s * h + 2 * s * h * 8 + (2 + 1) * 2 * s * h * e * 3
    assert TOY.forward_flops() == dense_layer + 3 * moe_layer + 2 * s * h * v

    layout = parse_layout("dp=8,ep=4,zero=1", global_batch=8)
    p = price(TOY, layout, HW)
    assert p.fits and p.step.part_s("ep") > 0
    assert p.step.step_s == pytest.approx(sum(p.step.parts().values()), rel=1e-12)
    # the ep part: 3 MoE layers x (dispatch + combine) x (forward + backward), one microbatch
    rows = s * 2 * IMBALANCE
    one = all_to_all_seconds(int(rows * h * A2A_BYTES), 4, 1, HW, link_share=A2A_LINK_SHARE)
    assert p.step.part_s("ep") == pytest.approx(3 * 4 * one, rel=1e-12)
    # memory: the experts on this GPU are 8 / ep of each MoE layer's
    (rp,) = rank_params(TOY, layout)
    assert rp.expert == 3 * (8 // 4) * 3 * h * e
    assert p.memory.states_held[0] == rp.total * 2


def test_ep1_moe_equals_the_dense_model_with_its_experts_counted() -> None:
    """Every token through all 8 experts of an eighth of the width is the dense MLP plus the
    router: parameters, FLOPs, step (at a grouped-GEMM efficiency of 1) and states alike."""
    dense = PRESETS["llama3.2-1b"]
    moe = replace(dense, name="all-experts", experts=8, top_k=8, expert_ffn=dense.ffn // 8)
    router = dense.layers * dense.hidden * 8
    assert moe.params == dense.params + router == moe.active_params
    s = dense.seq_len
    assert moe.forward_flops() == dense.forward_flops() + dense.layers * 2 * s * dense.hidden * 8

    layout = parse_layout("dp=8,zero=1", global_batch=8)
    rate = replace(shipped_rate(), grouped_gemm=1.0)
    d = step_time(dense, layout, HW, rate=rate, simulate_pipeline=False)
    m = step_time(moe, layout, HW, rate=rate, simulate_pipeline=False)
    per_s = rate.flops_per_s_dtype(HW, dense.hidden, "bf16")
    expert_per_s = rate.flops_per_s_dtype(HW, moe.expert_width, "bf16")
    routed = dense.layers * 2 * s * dense.hidden * dense.ffn * 3
    router_s = 3 * dense.layers * 2 * s * dense.hidden * 8 / per_s
    narrower_s = 3 * routed * (1 / expert_per_s - 1 / per_s)   # experts at their own width
    assert m.part_s("ep") == 0.0
    assert m.compute_s - d.compute_s == pytest.approx(router_s + narrower_s, rel=1e-6)
    dm, mm = memory_per_gpu(dense, layout, HW), memory_per_gpu(moe, layout, HW)
    assert mm.states_held[0] - dm.states_held[0] == router * 2


@settings(max_examples=25, deadline=None)
@given(experts=st.sampled_from([4, 8, 16, 32, 64]), dp=st.sampled_from([4, 8, 16]),
       tp=st.sampled_from([1, 2]), zero=st.sampled_from([0, 1, 2, 3]),
       data=st.data())
def test_expert_memory_shards_by_ep(experts: int, dp: int, tp: int, zero: int,
                                    data: st.DataObject) -> None:
    spec = replace(TOY, experts=experts, top_k=min(4, experts))
    ep = data.draw(st.sampled_from([e for e in (1, 2, 4, 8, 16) if dp % e == 0
                                    and experts % e == 0]))
    lay = Layout(dp=dp, tp=tp, ep=ep, zero=zero, global_batch=dp, sequence_parallel=tp > 1)
    (rp,) = rank_params(spec, lay)
    # each GPU holds experts / ep of every MoE layer, split over tp
    assert rp.expert == spec.moe_layers * (experts // ep) * spec.expert_params // tp
    one = Layout(dp=dp, tp=tp, ep=1, zero=zero, global_batch=dp, sequence_parallel=tp > 1)
    (rp1,) = rank_params(spec, one)
    assert rp.total - rp.expert == rp1.total - rp1.expert     # the rest is not divided
    # ZeRO shards the experts over the dp / ep ranks that hold the same ones
    assert lay.expert_dp * ep == dp
    assert rp.zero_shard(lay) == -(-(rp.total - rp.expert) // dp) + -(-rp.expert // (dp // ep))
    # so ep never adds states: at ZeRO 1+ the optimizer's shard of every expert is the same
    assert memory_lower_bound(spec, lay, device_bytes=0) <= \
        memory_lower_bound(spec, one, device_bytes=0) + 2 * rp.total // dp + 64


def test_plan_enumerates_ep_and_refuses_one_that_does_not_divide_the_experts() -> None:
    eps = {lay.ep for lay in enumerate_layouts(TOY, HW, 8, zero_stages=(1,),
                                               recompute=("none",), micro_batches=(1,))}
    assert eps == {1, 2, 4, 8}
    six = replace(TOY, experts=6)
    eps6 = {lay.ep for lay in enumerate_layouts(six, HW, 8, zero_stages=(1,),
                                                recompute=("none",), micro_batches=(1,))}
    assert eps6 == {1, 2}
    bad = Layout(dp=8, ep=4, zero=1, global_batch=8)
    for call in (lambda: step_time(six, bad, HW), lambda: memory_per_gpu(six, bad, HW),
                 lambda: check_experts(six, bad)):
        with pytest.raises(ValueError, match="ep=4 must divide the 6 routed experts"):
            call()
    with pytest.raises(ValueError, match="dense model"):
        step_time(PRESETS["llama3.2-1b"], bad, HW)
    with pytest.raises(ValueError, match="ep=3 must divide dp \\* cp = 8"):
        Layout(dp=8, ep=3, global_batch=8)
    # a dense model still enumerates ep=1 alone
    assert {lay.ep for lay in enumerate_layouts(PRESETS["llama3.2-1b"], HW, 8)} == {1}


@pytest.mark.parametrize("args, says", [
    (["--ep", "3"], "--ep 3: must divide the 256 routed experts of deepseek-v3"),
    (["--ep", "0"], "--ep"),
    (["--ep", "two"], "--ep"),
])
def test_bad_ep_input_is_one_line_and_exit_2(args: list[str], says: str, capsys) -> None:
    assert plan_main(["deepseek-v3", "--gpus", "64", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_ep_on_a_dense_model_is_one_line_and_exit_2(capsys) -> None:
    assert plan_main(["llama3.2-1b", "--gpus", "8", "--ep", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "dense model" in line


def test_the_ep_column_is_shown_for_models_with_experts_only() -> None:
    assert "ep a2a" not in [c.header for c in columns()]
    assert "ep a2a" not in [c.header for c in columns(PRESETS["llama3-8b"])]
    assert "ep a2a" in [c.header for c in columns(TOY)]


def test_every_moe_preset_cites_its_config() -> None:
    moe = {k for k, m in PRESETS.items() if m.moe}
    assert moe == set(MOE_SOURCES) == {"deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b",
                                       "mixtral-8x7b", "gpt-oss-120b"}
    assert all(MOE_SOURCES[k].startswith("https://huggingface.co/") for k in moe)
    # the published totals, within the approximations the presets' docstring names
    for name, billions in (("deepseek-v3", 671), ("mixtral-8x7b", 46.7),
                           ("qwen3-235b-a22b", 235), ("gpt-oss-120b", 117)):
        assert PRESETS[name].params / 1e9 == pytest.approx(billions, rel=0.03)


def test_the_moe_judgement_is_computed_from_the_runs() -> None:
    j = plan_moe.judge_moe()
    runs = load_moe_runs()
    assert [r.inputs.run.id for r in j.runs] == [r.id for r in runs]
    assert {r.split for r in j.runs} == {"calibration", "held_out", plan_moe.SET_ASIDE}
    for judged, run in zip(j.runs, runs, strict=True):
        i = moe_run_inputs(run)
        model = step_time(i.model, i.layout, i.hw, simulate_pipeline=False).step_s
        assert judged.model_step_s == pytest.approx(model, rel=1e-12)
        assert judged.step_error_pct == pytest.approx(
            error_pct(run.measured_step_s(), model), rel=1e-12)
        if "tokens_per_s_per_gpu" in run.measured:
            assert judged.measured_tokens_per_s_per_gpu == pytest.approx(
                run.measured["tokens_per_s_per_gpu"], rel=1e-9)
        assert i.layout.gpus == run.gpus and i.layout.ep == run.ep


def test_the_fit_picks_the_grid_point_with_the_least_calibration_error(monkeypatch) -> None:
    monkeypatch.setattr(plan_moe, "GROUPED_GEMM_GRID", (0.3, GROUPED_GEMM_EFFICIENCY))
    monkeypatch.setattr(plan_moe, "LINK_SHARE_GRID", (A2A_LINK_SHARE, 1.0))
    fitted = plan_moe.fit_moe_rate(grouped_gemm=True)
    medians = {}
    for g in plan_moe.GROUPED_GEMM_GRID:
        for share in plan_moe.LINK_SHARE_GRID:
            rate = replace(shipped_rate(), grouped_gemm=g, a2a_link_share=share)
            medians[g, share] = plan_moe.judge_moe(rate).summary("calibration").median
    assert medians[fitted.grouped_gemm, fitted.a2a_link_share] == min(medians.values())
    # without grouped_gemm the efficiency stays the measured one and only the share is chosen
    share_only = plan_moe.fit_moe_rate()
    assert share_only.grouped_gemm == GROUPED_GEMM_EFFICIENCY
    assert medians[GROUPED_GEMM_EFFICIENCY, share_only.a2a_link_share] == min(
        m for (g, _), m in medians.items() if g == GROUPED_GEMM_EFFICIENCY)


def test_the_shipped_share_is_the_full_grids_fit_at_the_measured_efficiency() -> None:
    fitted = plan_moe.fit_moe_rate()
    assert (fitted.grouped_gemm, fitted.a2a_link_share) == (GROUPED_GEMM_EFFICIENCY,
                                                           A2A_LINK_SHARE)


def test_the_grouped_gemm_efficiency_is_the_committed_measurement() -> None:
    """1 / the median over the published runs' per-GPU shapes of the grouped experts' forward
    and backward time over a dense SwiGLU of the expert's width on the same rows, on an H200."""
    import json
    import statistics
    from pathlib import Path

    path = (Path(__file__).resolve().parents[2] / "results" / "gpu-h200-2026-11-28-moe-step"
            / "moe_step.json")
    doc = json.loads(path.read_text())
    assert doc["device"] == "NVIDIA H200" and len(doc["rows"]) == 9

    def fb(row: dict, part: str) -> float:
        return row[part]["forward_s"] + row[part]["backward_s"]
    slower = statistics.median(fb(r, "experts") / fb(r, "dense_routed") for r in doc["rows"])
    assert all(r["experts"]["path"] == "grouped_mm" for r in doc["rows"])
    assert round(1 / slower, 2) == GROUPED_GEMM_EFFICIENCY


def test_judge_plan_moe_prints_each_split_against_the_target(capsys) -> None:
    assert judge_main(["--moe"]) == 0
    out = capsys.readouterr().out
    j = plan_moe.judge_moe()
    for split in ("calibration", "held_out"):
        s = j.summary(split)
        assert f"{split}: tokens/s per GPU |error| median {s.median:.1f}%, p90 {s.p90:.1f}%" \
            in out


MOE_MISFITS_MEASURED = 0
"""Published MoE runs the memory model calls misfits (all 24 ran: every misfit is the model's
error). 16 when the verdicts were first reported; 0 since the model keeps what Megatron-Core's
grouped experts keep (the rows weighted inside the fused SwiGLU, float8 linears' inputs in 8
bits), Megatron Bridge's 16-bit gradients are read from its configurations, and two GPT-OSS rows
take the layout their configuration ran; a change that calls more of them fails below."""


def test_judge_plan_moe_reports_its_memory_verdict_on_runs_that_ran(capsys) -> None:
    from distlab.judge.plan_command import moe_judgement_json, moe_memory_verdicts

    j = plan_moe.judge_moe()
    verdicts = moe_memory_verdicts(j)
    assert [v[0] for v in verdicts] == [r.inputs.run.id for r in j.runs]
    misfits = [rid for rid, model, gpu in verdicts if model > gpu]
    assert len(misfits) <= MOE_MISFITS_MEASURED
    assert judge_main(["--moe"]) == 0
    out = capsys.readouterr().out
    assert f"the model calls {len(misfits)} of {len(verdicts)} misfits" in out
    assert [line.split(": ")[1] for line in out.splitlines()
            if line.startswith("  called a misfit: ")] == misfits
    doc = moe_judgement_json(j)
    assert [r["id"] for r in doc["runs"] if not r["fits"]] == misfits


def test_the_floor_lines_mark_the_token_drop_runs() -> None:
    """Each same-layout line marks its token-drop runs with ``*`` and only those; the JSON
    carries every run's routing."""
    from distlab.judge.plan_command import moe_judgement_json, same_layout_lines

    routing = {r.id: r.routing for r in load_moe_runs()}
    floors = [line for line in same_layout_lines() if line.startswith("floor ")]
    assert floors
    for line in floors:
        for item in line.split(": ", 1)[1].split(", "):
            rid, tps = item.split()
            assert tps.endswith("*") == (routing[rid] == "tokendrop")
    runs = moe_judgement_json(plan_moe.judge_moe())["runs"]
    assert {r["id"]: r["routing"] for r in runs} == routing


def test_the_step_figure_stacks_the_all_to_all_of_a_model_with_experts() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from distlab.viz.plan import step_figure

    p = price(TOY, parse_layout("dp=8,ep=8,zero=1", global_batch=8), HW)
    fig = step_figure([p])
    (ax,) = fig.axes
    labels = [c.get_label() for c in ax.containers]
    assert "ep a2a" in labels
    total = sum(c[0].get_height() for c in ax.containers)
    assert total == pytest.approx(p.step.step_s, rel=1e-9)
    plt.close(fig)


def test_verify_runs_expert_parallel_layouts_or_says_why_in_one_line(capsys) -> None:
    assert plan_main(["qwen3-30b-a3b", "--gpus", "8", "--ep", "8", "--verify", "1",
                      "--verify-device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "expert parallelism is not run" not in out     # ep with FSDP runs: too big here
    (line,) = [x for x in out.splitlines() if "ep8" in x and "skipped: needs about" in x]
    assert "GiB are free" in line


def test_routed_expert_seconds_is_the_steps_pricing_of_one_layers_expert_products() -> None:
    from distlab.plan.step import routed_expert_seconds
    from distlab.transformer import routed_expert_flops

    model = PRESETS["qwen3-30b-a3b"]
    hw = hardware("h200", 8)
    rate = shipped_rate()
    fwd, bwd = routed_expert_seconds(model, 8192, hw, rate)
    per_s = rate.flops_per_s_dtype(hw, model.expert_width, "bf16") * GROUPED_GEMM_EFFICIENCY
    assert fwd == pytest.approx(routed_expert_flops(model, 8192) / per_s, rel=1e-12)
    assert bwd == pytest.approx(2 * fwd, rel=1e-12)
    assert routed_expert_seconds(model, 0, hw, rate) == (0.0, 0.0)
    with pytest.raises(ValueError, match="no routed experts"):
        routed_expert_seconds(PRESETS["llama3-8b"], 8192, hw, rate)


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(1, 64), dense=st.integers(0, 70), experts=st.sampled_from([0, 8]),
       start=st.integers(0, 80), n=st.integers(0, 40))
def test_moe_layers_in_counts_what_is_moe_layer_says(layers: int, dense: int, experts: int,
                                                     start: int, n: int) -> None:
    spec = replace(TOY, layers=layers, dense_layers=min(dense, layers - 1) if experts else 0,
                   experts=experts,
                   top_k=2 if experts else 0, shared_experts=1 if experts else 0,
                   expert_ffn=128 if experts else None)
    assert spec.moe_layers_in(start, start + n) == sum(
        spec.is_moe_layer(i) for i in range(start, start + n))


def test_token_drop_computes_every_expert_at_its_capacity() -> None:
    """A token-drop layout padded to capacity ``c`` routes ``tokens * top_k * c`` rows on every
    rank (dropless: ``IMBALANCE`` times the mean): at ``c = IMBALANCE`` it is priced as the
    dropless layout; at ``c = 1.5`` its routed rows are 1.5x the balanced ones, and its
    all-to-all, expert compute and kept activations grow with them."""
    dropless = parse_layout("dp=8,ep=8,zero=1", global_batch=8)
    assert row_factor(dropless) == IMBALANCE
    same = dropless.with_(expert_capacity=IMBALANCE)
    rate = shipped_rate()
    a = step_time(TOY, dropless, HW, rate=rate, simulate_pipeline=False)
    b = step_time(TOY, same, HW, rate=rate, simulate_pipeline=False)
    assert a.parts() == b.parts()
    over = dropless.with_(expert_capacity=1.5)
    tokens = TOY.seq_len * over.micro_batch
    assert routed_rows(TOY, over) == tokens * TOY.top_k * 1.5
    assert routed_rows(TOY, over) / routed_rows(TOY, dropless) == pytest.approx(1.5 / IMBALANCE)
    fwd_1, _ = moe_layer_a2a_seconds(TOY, dropless, HW)
    fwd_15, _ = moe_layer_a2a_seconds(TOY, over, HW)
    assert fwd_15 > fwd_1
    c = step_time(TOY, over, HW, rate=rate, simulate_pipeline=False)
    assert c.compute_s > a.compute_s and c.part_s("ep") > a.part_s("ep")
    assert memory_per_gpu(TOY, over, HW).activations > \
        memory_per_gpu(TOY, dropless, HW).activations


def test_the_published_tokendrop_runs_carry_their_capacity_into_the_layout() -> None:
    """The runs a source labels tokendrop (Megatron Bridge 25.09's) carry routing "tokendrop"
    and capacity factor 1.0 into ``Layout.expert_capacity``; every other run is dropless, its
    layout's capacity ``None``."""
    runs = load_moe_runs()
    drop = {r.id for r in runs if r.routing == "tokendrop"}
    assert drop and all(r.source.key == "megatron_bridge_25_09" for r in runs if r.id in drop)
    for run in runs:
        layout = moe_run_inputs(run).layout
        if run.id in drop:
            assert run.capacity_factor == 1.0 == layout.expert_capacity
            assert "tokendrop" in run.derived
        else:
            assert run.routing == "dropless"
            assert run.capacity_factor is None and layout.expert_capacity is None


def _opt(**kw: object) -> object:
    from distlab.plan.activations import activation_options

    kw = {"fused_swiglu": False, "moe_weighting": "output", **kw}
    return activation_options(Layout(), "flash", False, None, 1, kw["fused_swiglu"], False,
                              kw["moe_weighting"])


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), sp=st.booleans(), mb=st.integers(1, 3),
       fp8=st.booleans(), fused=st.booleans(), etp1=st.booleans())
def test_weighting_inside_the_activation_drops_one_routed_tensor(
        tp: int, sp: bool, mb: int, fp8: bool, fused: bool, etp1: bool) -> None:
    """``moe_weighting="activation"`` (Megatron-Core's weighted SwiGLU) keeps one ``rows *
    hidden`` tensor fewer than weighting the output or the input, and the rows' fp32
    probabilities instead; nothing else changes."""
    from distlab.plan.experts import moe_kept_tensors

    lay = Layout(dp=2, tp=tp, sequence_parallel=sp and tp > 1, micro_batch=mb,
                 global_batch=2 * mb, ep=2, etp=1 if etp1 else tp,
                 compute_dtype="fp8" if fp8 else "bf16")
    own = tp // lay.expert_tp
    rows = int(routed_rows(TOY, lay.with_(sequence_parallel=False)))   # the group's
    out = sum(moe_kept_tensors(TOY, lay, _opt(fused_swiglu=fused)))
    inp = sum(moe_kept_tensors(TOY, lay, _opt(fused_swiglu=fused, moe_weighting="input")))
    act = sum(moe_kept_tensors(TOY, lay, _opt(fused_swiglu=fused, moe_weighting="activation")))
    assert out == inp
    assert out - act == rows * TOY.hidden * 2 // own - rows * 4 // own


def test_megatron_core_grouped_experts_keep_what_its_code_keeps() -> None:
    """One MoE layer of Qwen3-30B-A3B, float8, weighted SwiGLU, fused (Megatron-Core's
    ``TEGroupedMLP``): beyond the dense layer's MLP the routed rows keep the first grouped
    linear's 8-bit input, the SwiGLU's 16-bit input (gate and up, ``2 * expert_ffn`` wide), the
    second grouped linear's 8-bit input and each row's fp32 probability; the router its fp32
    scores; written out here from the code, not from the model."""
    from distlab.plan.activations import layer_activation_terms
    from distlab.plan.experts import moe_kept_tensors

    m = PRESETS["qwen3-30b-a3b"]
    lay = Layout(dp=8, ep=8, global_batch=8, compute_dtype="fp8")
    t = m.seq_len
    rows = t * m.top_k
    f, h = m.expert_width, m.hidden
    megatron = rows * h * 1 + rows * 2 * f * 2 + rows * f * 1 + rows * 4 + t * m.experts * 4
    dense_mlp = sum(x.nbytes for x in layer_activation_terms(m, fused_swiglu=True,
                                                             linear_bytes=1)
                    if x.block == "mlp" and x.elements == t * m.ffn)
    kept = sum(moe_kept_tensors(m, lay, _opt(fused_swiglu=True, moe_weighting="activation")))
    assert kept + dense_mlp == megatron


@settings(max_examples=30, deadline=None)
@given(framework=st.sampled_from(sorted(FRAMEWORKS)), tp=st.sampled_from([1, 2]),
       pp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 2, 4]),
       zero=st.sampled_from([0, 1, 3]), mb=st.integers(1, 2), fp8=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_the_lower_bound_holds_for_every_framework(framework: str, tp: int, pp: int, ep: int,
                                                   zero: int, mb: int, fp8: bool,
                                                   recompute: str) -> None:
    """The planner rules a layout out by :func:`memory_lower_bound` before replaying it, with
    the framework's options: the bound must hold under them; and Megatron-Core's kernels never
    keep more of the layers than the default on any pipeline rank."""
    if pp > 1 and zero == 3:
        zero = 1
    lay = Layout(dp=4, tp=tp, pp=pp, ep=ep, zero=zero, micro_batch=mb, global_batch=8 * mb,
                 sequence_parallel=tp > 1, recompute=recompute,
                 compute_dtype="fp8" if fp8 else "bf16")
    opts = FRAMEWORKS[framework]
    assert memory_lower_bound(TOY, lay, **opts) <= memory_per_gpu(TOY, lay, **opts).total
    for meg, default, torch_ in zip(memory_per_rank(TOY, lay, **FRAMEWORKS["megatron"]),
                                    memory_per_rank(TOY, lay),
                                    memory_per_rank(TOY, lay, **FRAMEWORKS["torch"]),
                                    strict=True):   # rank by rank
        assert meg.activation_parts.layers <= default.activation_parts.layers
        assert default.activation_parts.layers <= torch_.activation_parts.layers


@settings(max_examples=20, deadline=None)
@given(tp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 2]), mb=st.integers(1, 2),
       recompute=st.sampled_from(["none", "selective"]), sp=st.booleans())
def test_torchaos_float8_linears_keep_what_reaches_them(tp: int, ep: int, mb: int, recompute: str,
                                                       sp: bool) -> None:
    """torchao's ``Float8Linear`` saves its input as it arrives: without tensor parallelism the
    16-bit activation (a float8 layout keeps what its bf16 twin keeps, and more than Transformer
    Engine's 8-bit copies); with it, float8 tensor parallelism casts the input before the gather
    (what Transformer Engine keeps)."""
    kw = dict(dp=4, tp=tp, ep=ep, micro_batch=mb, global_batch=8 * mb, recompute=recompute,
              sequence_parallel=sp and tp > 1)
    bf16 = memory_per_gpu(TOY, Layout(**kw, compute_dtype="bf16"))
    fp8 = Layout(**kw, compute_dtype="fp8")
    torchao = memory_per_gpu(TOY, fp8, float8_linear="torchao")
    te = memory_per_gpu(TOY, fp8)
    if tp == 1:
        assert torchao.activation_parts.layers == bf16.activation_parts.layers
        assert te.activation_parts.layers < torchao.activation_parts.layers
    else:
        assert torchao.activation_parts.layers == te.activation_parts.layers


def test_an_unknown_float8_library_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="float8_linear.*transformer_engine.*torchao"):
        memory_per_gpu(TOY, Layout(dp=8, global_batch=8, compute_dtype="fp8"),
                       float8_linear="te")


def test_the_planner_prices_and_bounds_with_the_frameworks_options(monkeypatch) -> None:
    """``plan(memory_options=...)`` passes the options the bound takes to the bound: every
    call of :func:`memory_lower_bound` the planner makes carries them."""
    from distlab.plan import planner

    seen: list[dict] = []
    real = planner.memory_lower_bound

    def spy(model, layout, **kw):
        seen.append(kw)
        return real(model, layout, **kw)

    monkeypatch.setattr(planner, "memory_lower_bound", spy)
    mem = {**FRAMEWORKS["megatron"], "expandable_segments": True}
    plan(TOY, HW, 8, top=2, recompute=("none",), memory_options=mem)
    assert seen and all(kw == FRAMEWORKS["megatron"] for kw in seen)


def _shown_by_framework(tmp_path, argv: list[str], frameworks: tuple[str, ...]) -> dict:
    """``python -m distlab.plan argv --framework F --json`` for each ``F``: the one layout shown."""
    import json

    shown = {}
    for framework in frameworks:
        out = tmp_path / f"{framework}.json"
        assert plan_main([*argv, "--framework", framework, "--json", str(out)]) == 0
        (shown[framework],) = json.loads(out.read_text())["layouts"]
    return shown


def test_the_command_prices_megatrons_kernels_with_framework_megatron(tmp_path) -> None:
    """Megatron Bridge's Qwen3-30B-A3B on 16 H100s (25.11's layout, float8) ran; priced with
    Megatron-Core's kernels it fits, with the default ones it does not."""
    argv = ["qwen3-30b-a3b", "--gpus", "16", "--global-batch", "512", "--layout",
            "dp=8,pp=2,ep=8,zero=1,schedule=Interleaved1F1B,v=24,mb=2,dtype=fp8"]
    shown = _shown_by_framework(tmp_path, argv, ("default", "megatron"))
    fits = {framework: row["fits"] for framework, row in shown.items()}
    assert fits == {"default": False, "megatron": True}


def test_the_command_prices_torchs_modules_with_framework_torch(tmp_path) -> None:
    """Llama 3 70B on 64 H100s at tp 8 with sequence parallelism in float8: the default kernels
    keep each column-parallel input's shard, torch's modules (torchtitan) the all-gathered input
    (in 8 bits under float8 tensor parallelism): the same states, more activations."""
    argv = ["llama3-70b", "--gpus", "64", "--global-batch", "64", "--layout",
            "dp=4,tp=8,pp=2,zero=1,sp=1,mb=1,dtype=fp8"]
    shown = _shown_by_framework(tmp_path, argv, ("default", "torch"))
    default, torch_ = (shown[f]["memory_bytes"] for f in ("default", "torch"))
    states = ("params", "grads", "optimizer")
    assert [torch_[k] for k in states] == [default[k] for k in states]
    assert torch_["activations"] > default["activations"]
