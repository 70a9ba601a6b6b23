"""The planner's figures and explorer, driven without a browser, on small plans."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import dataclasses  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402

from distlab.evidence.plan.judged import judge_published  # noqa: E402
from distlab.evidence.plan.published import load_published  # noqa: E402
from distlab.plan import hardware, model_spec, parse_layout  # noqa: E402
from distlab.plan.dimensions import stack_parts  # noqa: E402
from distlab.plan.planner import plan, price  # noqa: E402
from distlab.viz.figure import DisplayFigure  # noqa: E402
from distlab.viz.layout_check import JUPYTERLAB_WIDTH_PX, layout_problems  # noqa: E402
from distlab.viz.palette import colour  # noqa: E402
from distlab.viz.plan import (  # noqa: E402
    MEMORY_COLUMNS,
    MEMORY_PARTS,
    STEP_COLUMNS,
    PlannerExplorer,
    best_by_gpus,
    fit_grid_figure,
    judged_figure,
    kernels_figure,
    memory_figure,
    pipeline_figure,
    plan_table,
    scaling_figure,
    scaling_table,
    short_label,
    step_figure,
)

pytestmark = pytest.mark.timeout(120)

GIB = 2**30
MODEL = model_spec("llama3-8b")
HW = hardware("h100", 8)


def _clean(fig) -> None:
    assert isinstance(fig, DisplayFigure)
    assert layout_problems(fig) == []
    assert fig.get_tightbbox().width * fig.dpi <= JUPYTERLAB_WIDTH_PX


@pytest.fixture(scope="module")
def prices():
    texts = ["dp=8", "dp=8,fsdp", "dp=8,fsdp,recompute=full", "dp=2,tp=4", "dp=1,tp=2,pp=4"]
    return [price(MODEL, parse_layout(t, global_batch=16), HW) for t in texts]


def test_short_label_names_the_split_then_how() -> None:
    lay = parse_layout("dp=2,tp=4,pp=4,cp=2,zero=1,schedule=Interleaved1F1B,v=2,mb=2,"
                       "recompute=full", global_batch=64)
    assert short_label(lay) == "dp2 tp4 pp4 cp2\nzero1 i1F1Bx2 mb2 full-ac"
    assert short_label(parse_layout("dp=8", global_batch=8)) == "dp8\nddp"
    assert short_label(parse_layout("dp=1,tp=8,sp=0", global_batch=8)) == "dp1 tp8\nno-sp"
    # expert parallelism in the split, or six DeepSeek-V3 bars read "dp256 fsdp" three times
    assert short_label(parse_layout("dp=16,ep=8,zero=3", global_batch=16)) == "dp16 ep8\nfsdp"
    with pytest.raises(TypeError, match="Layout"):
        short_label("dp=8")


def test_memory_figure_stacks_the_parts_against_the_gpu(prices) -> None:
    fig = memory_figure(prices)
    _clean(fig)
    (ax,) = fig.axes
    assert [c.get_label() for c in ax.containers] == list(MEMORY_PARTS)
    tops = [sum(c[i].get_height() for c in ax.containers) for i in range(len(prices))]
    for top, p in zip(tops, prices, strict=True):
        assert abs(top - p.memory.total / GIB) < 1e-6
    assert abs(ax.lines[0].get_ydata()[0] - HW.gpu.memory_bytes / GIB) < 1e-9
    assert not prices[0].fits and "does not fit" in " ".join(t.get_text() for t in ax.texts)
    red = [t.get_text() for t in ax.get_xticklabels() if t.get_color() != "black"]
    assert red == [short_label(p.layout) for p in prices if not p.fits]
    for c, name in zip(ax.containers, MEMORY_PARTS, strict=True):
        assert matplotlib.colors.to_hex(c[0].get_facecolor()) == colour(name)
        assert c[0].get_hatch() and not any(bar.get_hatch() for bar in c[1:3])   # dp8: no fit
    legend = dict(zip([t.get_text() for t in ax.get_legend().get_texts()],
                      ax.get_legend().legend_handles, strict=True))
    assert not any(legend[name].get_hatch() for name in MEMORY_PARTS), "parts drawn plain"
    assert legend["hatched, red edge: does not fit"].get_hatch()


def test_memory_figure_cuts_a_bar_taller_than_the_axes(prices) -> None:
    ddp = price(model_spec("llama3-70b"), parse_layout("dp=64", global_batch=64),
                hardware("h100", 64))
    fig = memory_figure([ddp])
    (ax,) = fig.axes
    assert ax.get_ylim()[1] < ddp.memory.total / GIB
    assert any("↑" in t.get_text() for t in ax.texts)
    with pytest.raises(ValueError, match="at least one"):
        memory_figure([])
    with pytest.raises(ValueError, match="one GPU kind"):
        memory_figure([prices[1], price(MODEL, parse_layout("dp=8", global_batch=16),
                                        hardware("a100", 8))])


def test_every_memory_label_stays_inside_the_axes() -> None:
    """A bar that does not fit but stays under the axis cap (dp8 tp8 of Llama 3 70B on 64 H100s,
    162 GiB, under 2.2 x 79.2) has its label above it inside the axes, not over the frame; the
    taller ones are cut and written inside their top."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    model, hw = model_spec("llama3-70b"), hardware("h100", 64)
    layouts = ("dp=64,fsdp", "dp=8,tp=8", "dp=8,tp=4,cp=2,fsdp")
    prices = [price(model, parse_layout(t, global_batch=256), hw) for t in layouts]
    assert hw.gpu.memory_bytes < prices[1].memory.total < 2.2 * hw.gpu.memory_bytes
    fig = memory_figure(prices)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (ax,) = fig.axes
    frame = ax.get_window_extent(canvas.get_renderer())
    for t in ax.texts:
        box = t.get_window_extent(canvas.get_renderer())
        assert box.y1 <= frame.y1 + 0.5, f"{t.get_text()!r} reaches over the axes' top"
    assert ax.get_ylim()[1] > prices[1].memory.total / GIB            # drawn whole
    assert ax.get_ylim()[1] < prices[0].memory.total / GIB            # cut


def test_a_total_just_under_the_gpu_memory_stands_above_its_line() -> None:
    """Llama 3 70B as dp16 tp4 fsdp on 64 H100s keeps 77.0 GiB of the 79.2: its label goes
    above the dashed GPU-memory line instead of being struck through by it; a total far below
    stays on its bar."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    model, hw = model_spec("llama3-70b"), hardware("h100", 64)
    near, low = (price(model, parse_layout(t, global_batch=256), hw)
                 for t in ("dp=16,tp=4,fsdp", "dp=64,fsdp,recompute=full"))
    assert 74 < near.memory.total / GIB < hw.gpu.memory_bytes / GIB
    fig = memory_figure([near, low])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (ax, *_) = fig.axes
    line_y = ax.transData.transform((0, hw.gpu.memory_bytes / GIB))[1]
    renderer = canvas.get_renderer()
    labels = {t.get_text().split("\n")[0]: t for t in ax.texts}
    box = labels[f"{near.memory.total / GIB:.1f} GiB"].get_window_extent(renderer)
    assert box.y0 > line_y, "the label is struck through by the GPU-memory line"
    bar_top = ax.transData.transform((0, low.memory.total / GIB))[1]
    low_label = labels[f"{low.memory.total / GIB:.1f} GiB"]
    assert low_label.get_window_extent(renderer).y0 > bar_top
    assert low_label.get_window_extent(renderer).y1 < line_y


def test_step_figure_stacks_the_step_and_writes_tokens(prices) -> None:
    fig = step_figure(prices)
    _clean(fig)
    (ax,) = fig.axes
    assert [c.get_label() for c in ax.containers] == list(stack_parts())
    for i, p in enumerate(prices):
        assert abs(sum(c[i].get_height() for c in ax.containers) - p.step.step_s) < 1e-9
    assert f"{prices[2].step.tokens_per_s_per_gpu:,.0f}" in [t.get_text() for t in ax.texts]
    assert not prices[0].fits and prices[2].fits
    for c in ax.containers:   # what does not fit is hatched with a red edge, never faded
        assert c[0].get_hatch() and not c[2].get_hatch()
        assert c[0].get_alpha() in (None, 1.0) and c[2].get_alpha() in (None, 1.0)
        assert matplotlib.colors.to_hex(c[0].get_edgecolor()) == "#c0392b"
    (marker,) = [h for h in ax.get_legend().legend_handles if "does not fit" in h.get_label()]
    assert marker.get_hatch() and matplotlib.colors.to_hex(marker.get_facecolor()) == "#ffffff"


def _hue_and_lightness(hex_colour: str) -> tuple[float, float, float]:
    import colorsys

    r, g, b = matplotlib.colors.to_rgb(hex_colour)
    h, lightness, sat = colorsys.rgb_to_hls(r, g, b)
    return 360 * h, lightness, sat


@pytest.mark.parametrize("moe", [False, True])
def test_no_two_parts_of_the_step_look_alike(moe) -> None:
    """Every two stacks of the step figure differ in hue by 15 degrees or in lightness by a
    quarter (a grey, the bubble, counts as no hue): the optimizer's step was once a lighter
    green than compute, and a faded compute read as it."""
    from distlab.plan.dimensions import stack_parts
    from distlab.viz.palette import colours

    fills = colours(stack_parts(model_spec("mixtral-8x7b") if moe else None))
    names = list(fills)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (ha, la, sa), (hb, lb, sb) = (_hue_and_lightness(fills[x]) for x in (a, b))
            hue = min(abs(ha - hb), 360 - abs(ha - hb)) if min(sa, sb) > 0.15 else 180
            assert hue >= 15 or abs(la - lb) >= 0.25, (a, fills[a], b, fills[b])


def test_a_tight_layout_is_marked_in_the_figure_and_the_table() -> None:
    """Llama 3 70B on 64 H100s, ``dp16 tp2 cp2 fsdp``: 0.5 GiB to spare, within the memory
    model's error; the memory figure says ``tight`` under its total and shades the band the
    error covers under the GPU's line (its label from the calibration constant), and the
    table's ``fits`` says it, with the line that explains it."""
    from distlab.plan.calibration import RESERVED_ERROR_P90

    hw = hardware("h100", 64)
    spec = model_spec("llama3-70b")
    tight, roomy = (price(spec, parse_layout(t, global_batch=256), hw)
                    for t in ("dp=16,tp=2,cp=2,fsdp", "dp=8,tp=4,cp=2,fsdp"))
    fig = memory_figure([roomy, tight])
    _clean(fig)
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.texts]
    assert "tight: +0.1" in labels[1] and "tight" not in labels[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"tight: within the model's\n{RESERVED_ERROR_P90:.1f}% p90 error (2.2 GiB)" in legend
    text = plan_table([roomy, tight])
    assert "+0.1 tight" in text.splitlines()[2] and "tight" not in text.splitlines()[1]
    assert text.splitlines()[3].startswith("tight: fits with less than 2.2 GiB to spare")
    assert max(len(line) for line in text.splitlines()) <= 100   # no line wraps in a notebook
    assert "tight" not in plan_table([roomy])


def test_seconds_are_plain_numbers_in_the_summary_and_titles(prices) -> None:
    """A step of thousands of seconds reads ``2794 s``, never ``2.79e+03 s``."""
    import dataclasses

    from distlab.viz.plan import plan_summary, planning_line

    result = plan(MODEL, HW, 16, top=2)
    best = result.best
    slow = dataclasses.replace(best, step=dataclasses.replace(
        best.step, seconds=tuple((k, v * 2793.57 / best.step.step_s)
                                 for k, v in best.step.seconds)))
    line = plan_summary(dataclasses.replace(result, ranked=(slow,)))
    assert "2794 s per step" in line and "e+" not in line
    pipe = prices[4]
    assert "e+" not in pipeline_figure(pipe).axes[0].get_title()
    assert planning_line(10, 1194, 0, 3.21) == "planning: 10 of 1194 layouts bounded (3.2 s)..."
    assert planning_line(1194, 1194, 7, 12.0) == \
        "planning: 1194 layouts bounded; 7 priced in full (12 s)..."


def test_pipeline_figure_draws_the_simulated_step(prices) -> None:
    fig = pipeline_figure(prices[4])
    _clean(fig)
    assert fig.axes[0].get_title().startswith("dp1 tp2 pp4")
    with pytest.raises(ValueError, match="pp=1"):
        pipeline_figure(prices[0])


def test_plan_table_is_the_commands_rows(prices) -> None:
    text = plan_table(prices[:2], columns=MEMORY_COLUMNS)
    head, first, second = text.splitlines()
    assert head.split() == ["#", "layout", "mem", "GiB", "states", "act", "other", "fits"]
    assert first.startswith("1 dp8 mb1") and second.startswith("2 dp8 fsdp mb1")


def test_step_columns_add_up_to_the_step(prices) -> None:
    """The step table's parts (compute, exposed tp/cp and dp/fsdp, bubble, optimizer) add up to
    the step it prints, to its rounding."""
    lines = plan_table(prices, columns=STEP_COLUMNS).splitlines()
    assert lines[0].split()[-5:] == ["bubble", "optim", "tok/s/GPU", "MFU", "%"]
    for line, p in zip(lines[1:], prices, strict=True):
        nums = [float(x) for x in line.split()[-8:-2]]
        assert abs(sum(nums[1:]) - nums[0]) <= 0.003, line
        assert nums[-1] == pytest.approx(p.step.optimizer_s, abs=5e-4) and nums[-1] > 0


def test_scaling_series_figure_and_table() -> None:
    small = model_spec("gpt3-1.3b", seq_len=2048)
    a = best_by_gpus(small, (8, 16), 32, micro_batches=(1,))
    b = best_by_gpus(small, (8, 16), 32, network="tcp100", micro_batches=(1,), label="tcp")
    assert a.gpus == (8, 16) and all(x is not None for x in a.best)
    assert a.labels()[0] == a.best[0].layout.label and b.label == "tcp"
    fig = scaling_figure([a, b])
    _clean(fig)
    assert len(fig.axes) == 2
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert short_label(a.best[1].layout) in texts
    assert scaling_table(a).splitlines()[1].split()[1] == a.best[0].layout.label.split()[0]
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert legend == ["the panel's series: its best layout at each count, labelled",
                      "the other panels' series, for comparison"]
    labels = [t for t in fig.axes[0].texts if t.get_text() == short_label(a.best[1].layout)]
    assert labels and labels[0].get_bbox_patch().get_alpha() in (None, 1.0)   # lines behind
    assert labels[0].get_zorder() > max(line.get_zorder() for line in fig.axes[0].lines)
    none = best_by_gpus(model_spec("llama3-70b"), (8,), 8, micro_batches=(1,))
    assert none.best == (None,) and none.tokens_per_s_per_gpu() == [None]
    fig = scaling_figure([none])
    assert "nothing fits" in [t.get_text() for t in fig.axes[0].texts]
    assert "nothing fits" in scaling_table(none)


def test_judged_figure_on_a_few_runs() -> None:
    pub = load_published()
    keep = ("megatron_lm_h100_2024", "korthikanti2022", "torchtitan_perf_2024", "nemo_24_07")
    runs = tuple(r for r in pub.all_runs if r.source in keep)
    judged = judge_published(dataclasses.replace(pub, all_runs=runs))
    fig = judged_figure(judged)
    _clean(fig)
    left, right = fig.axes
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"held out ({sum(r.split == 'held_out' for r in judged.runs)} runs)" in labels
    assert [t.get_text() for t in right.get_yticklabels()] == [
        "megatron_lm_h100_2024", "nemo_24_07", "korthikanti2022", "torchtitan_perf_2024"]
    with pytest.raises(TypeError, match="PlanJudgement"):
        judged_figure(runs)


def test_explorer_replans_on_a_control_change() -> None:
    ex = PlannerExplorer("llama3-8b", 8, seq_len=2048, global_batch=16, top=3)
    assert ex.plan is not None and ex.plan.best is not None
    assert ex.summary.startswith("llama3-8b on 8x H100-80GB-SXM: ")
    assert "layouts fit; first " in ex.summary and "planned in" in ex.summary
    assert ex.network.disabled and "<table" in ex.table.value
    assert ex.table in ex.widget.children
    _clean(ex.figure)
    png, summary = ex.png, ex.summary
    ex.gpus.value = 16
    assert not ex.network.disabled and ex.plan.hardware.gpus == 16
    assert ex.png != png and ex.summary != summary
    ex.gpus.value = 8
    ex.model.value = "llama3-70b"                       # nothing fits on 8 H100s
    assert ex.plan.best is None and "on 8x H100-80GB-SXM: nothing fits" in ex.summary
    m = re.search(r"on (\d+) GPUs it fits, priced", ex.summary)
    assert m and plan(model_spec("llama3-70b", seq_len=2048), hardware("h100", int(m.group(1))),
                      16, top=1).best is not None
    _clean(ex.figure)
    ex.model.value = "llama3-8b"
    ex.gpus.value = 512                                  # 16 sequences cannot split over 512
    assert ex.plan.ranked == () and ex.plan.rejected == ()
    assert "no layout of llama3-8b splits" in ex.summary and ex.table.value == ""
    _clean(ex.figure)
    with pytest.raises(ValueError, match="model must be one of"):
        PlannerExplorer("llama9")


def test_explorer_says_gpt3s_position_limit_in_one_line() -> None:
    ex = PlannerExplorer("gpt3-1.3b", 8, seq_len=8192, global_batch=16)
    assert ex.plan is None and ex.summary == ex.error
    assert ex.summary == ("gpt3-1.3b learns positions for 2048 tokens (a learned position "
                          "embedding has one row per position), so seq_len=8192 is too long: "
                          "at most 2048")
    ex.seq_len.value = 2048
    assert ex.plan is not None and ex.summary.startswith("gpt3-1.3b on 8x ")


def test_explorer_shows_its_controls_plan_after_two_quick_changes(monkeypatch) -> None:
    """The model and then the GPU kind changed back to back, the second while the first still
    plans (another thread, as JupyterLab delivers widget messages): the figure, the summary
    and the plan end on both values, never on the GPU kind of before."""
    import distlab.viz.plan as viz_plan

    ex = PlannerExplorer("llama3-8b", 8, seq_len=2048, global_batch=16, top=3)
    inside, release = threading.Event(), threading.Event()
    real = viz_plan.plan

    def slow_first(*args, **kwargs):
        if not inside.is_set():
            inside.set()
            assert release.wait(60), "the test never released the plan"
        return real(*args, **kwargs)

    monkeypatch.setattr(viz_plan, "plan", slow_first)
    first = threading.Thread(target=lambda: setattr(ex.model, "value", "llama2-7b"))
    first.start()
    assert inside.wait(60)
    ex.gpu.value = "B200"
    release.set()
    first.join(60)
    assert not first.is_alive()
    assert ex.plan is not None and ex.plan.model.name == "llama2-7b"
    assert ex.plan.hardware.gpu.name == ex.gpu.value == "B200"
    assert "llama2-7b on 8x B200" in ex.figure.axes[0].get_title()
    assert ex.summary.startswith("llama2-7b on 8x B200: ")


def test_kernels_figure_draws_the_measured_kernels_beside_the_planner() -> None:
    """The committed H200 run: one point per layer (width, efficiency), the planner's curve for
    Hopper, one line per attention kernel at the median factor of each length, and the
    planner's flash and cuDNN attention as horizontal lines; a CPU run (no GPU kind) refused."""
    import json
    import statistics

    from distlab.plan.calibration import KERNEL_SPEED, SHIPPED
    from helpers.paths import RESULTS

    doc = json.loads((RESULTS / "gpu-h200-2026-11-27" / "kernels.json").read_text())
    fig = kernels_figure({"H200": doc})
    _clean(fig)
    left, right = fig.axes
    layers = [r for r in doc["rows"] if r["product"] == "layer"]
    (points,) = left.collections
    drawn = sorted(map(tuple, points.get_offsets().tolist()))
    expected = sorted((r["width"], r["efficiency"]) for r in layers)
    assert len(drawn) == len(expected)
    assert all(a == pytest.approx(b, rel=1e-12) for a, b in zip(drawn, expected, strict=True))
    flat = {round(float(line.get_ydata()[0]), 6) for line in right.get_lines()
            if len(set(line.get_ydata())) == 1}
    assert flat == {round(SHIPPED.attention, 6),
                    round(SHIPPED.attention * KERNEL_SPEED["hopper/cudnn"], 6)}
    cudnn = next(line for line in right.get_lines() if line.get_label() == "H200: cudnn")
    # the measured TFLOP/s over the peak x the planner's 16-bit efficiency (no width term),
    # recomputed with the shipped rate rather than read from the run's own `factor`
    per_unit = 989.4e12 * SHIPPED.efficiency["hopper/bf16"]
    at_32k = [r["tflops"] * 1e12 / per_unit for r in doc["attention"]
              if r["backend"] == "cudnn" and r["seq_len"] == 32768]
    assert cudnn.get_ydata()[-1] == pytest.approx(statistics.median(at_32k))
    with pytest.raises(ValueError, match="priced no GPU kind"):
        kernels_figure({"cpu": {**doc, "gpu_kind": None}})


def test_kernels_figure_names_its_units_and_tells_the_two_gpus_apart() -> None:
    """The attention axis says what it divides by; the H200's and H100's series differ in
    colour and line style (the second open and dashed), so where they overlap both show."""
    from distlab.plan.kernels import measured_kernels

    fig = kernels_figure(measured_kernels())
    _clean(fig)
    left, right = fig.axes
    assert right.get_ylabel() == "attention FLOP/s / (16-bit peak x efficiency)"
    lines = {line.get_label(): line for line in right.get_lines()}
    h200, h100 = lines["H200: flash"], lines["H100: flash"]
    assert h200.get_color() != h100.get_color()
    assert (h200.get_linestyle(), h100.get_linestyle()) == ("-", "--")
    assert h100.get_markerfacecolor() == "white"


def test_fit_grid_figure_draws_every_run_where_it_was_measured() -> None:
    """The committed H200 grid: one point per run that ran at (model's, measured) peak reserved,
    filled where the allocator was free and hollow where it was capped; a red x per run that
    ran out of memory at (model's reserve, the cap it hit); one point per judged step at
    (model's, measured) step; the H200's allocator limit dotted; the held-out medians titled."""
    from distlab.judge.fit_grid import judge_grid, summaries
    from helpers.paths import RESULTS

    runs = judge_grid([RESULTS / "gpu-h200-2026-11-27-fit"])
    fig = fit_grid_figure(runs)
    _clean(fig)
    left, right = fig.axes

    def scatters(ax) -> list[PathCollection]:
        return [c for c in ax.collections if isinstance(c, PathCollection)]

    def offsets(ax) -> list[tuple[float, float]]:
        return sorted(tuple(p) for c in scatters(ax) for p in c.get_offsets().tolist())

    def close(a, b) -> bool:
        return len(a) == len(b) and all(x == pytest.approx(y, rel=1e-9)
                                        for p, q in zip(a, b, strict=True)
                                        for x, y in zip(p, q, strict=True))

    ran = [r for r in runs if r.reserved is not None]
    oom = [r for r in runs if r.oom is not None]
    assert len(oom) == 3 and all(r.capped for r in oom)
    cap = {r.case: (r.price.step.hardware.gpu.memory_bytes - r.price.memory.device) / GIB
           for r in oom}
    expected = sorted([(r.price.memory.reserved / GIB, r.reserved / GIB) for r in ran]
                      + [(r.price.memory.reserved / GIB, cap[r.case]) for r in oom])
    assert close(offsets(left), expected)
    hollow = [c for c in scatters(left) if len(c.get_facecolors()) == 0]
    assert sum(len(c.get_offsets()) for c in hollow) == sum(r.capped for r in ran) > 0
    timed = [r for r in runs if r.step_error_pct is not None]
    assert close(offsets(right), sorted((r.price.step.step_s, r.step_s) for r in timed))
    assert not any(r.capped for r in timed)
    held = summaries(runs, "held_out")
    assert left.get_title().endswith(f"{held['reserved'].median:.1f}%")
    assert right.get_title().endswith(f"{held['step'].median:.1f}%")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "out of memory under a cap (3 runs)" in labels
    from distlab.judge.fit_grid import counts

    held_runs = sum(r.split == 'held_out' for r in runs)
    assert f"held out: {held_runs} runs, " in " ".join(labels)
    assert counts(runs, "held_out").line("held_out") in labels
    assert any(t.startswith("H200-141GB-SXM's allocator limit") for t in labels)


def test_fit_grid_figure_without_failures_or_caps_and_its_errors() -> None:
    """A grid of runs that all ran on a free allocator draws no out-of-memory or capped entry;
    an empty list or something other than runs is refused."""
    from distlab.judge.fit_grid import judge_grid
    from helpers.paths import RESULTS

    runs = judge_grid([RESULTS / "gpu-h200-2026-11-27-fit" / "grid-run3.json"])
    assert runs and not any(r.capped or r.oom for r in runs)
    fig = fit_grid_figure(runs)
    _clean(fig)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("out of memory" in t or "capped" in t for t in labels)
    with pytest.raises(ValueError, match="at least one GridRun"):
        fit_grid_figure([])
    with pytest.raises(TypeError, match="GridRun"):
        fit_grid_figure(["llama3.2-1b s4096 mb1 none"])


def test_notebook_17s_seven_layouts_draw_with_room_for_the_legend() -> None:
    """The memory and step figures of notebook 17's seven layouts of Llama 3 70B (some do not
    fit, none is tight): the legends' marks for what does not fit and what is tight leave the
    axes room for every layout's name."""
    spec, hw = model_spec("llama3-70b"), hardware("h100", 64)
    texts = ["dp=64", "dp=64,zero=1", "dp=64,fsdp", "dp=64,fsdp,recompute=full", "dp=8,tp=8",
             "dp=2,tp=8,pp=4", "dp=8,tp=4,cp=2,fsdp"]
    seven = [price(spec, parse_layout(t, global_batch=256), hw) for t in texts]
    for fig in (memory_figure(seven), step_figure(seven)):
        _clean(fig)


def test_a_split_of_four_dimensions_takes_two_lines_under_its_bar() -> None:
    """``dp1 tp8 pp32 cp2`` beside ``dp128 tp2 cp2`` overlapped under the explorer's five bars
    (Llama 3 405B on 512 H100s): a split of four or more dimensions is drawn in two lines."""
    spec, hw = model_spec("llama3-405b"), hardware("h100", 512)
    four = price(spec, parse_layout("dp=1,tp=8,pp=32,cp=2,zero=1", global_batch=1024), hw)
    three = price(spec, parse_layout("dp=128,tp=2,cp=2,fsdp,recompute=full", global_batch=1024),
                  hw)
    fig = step_figure([three, four])
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["dp128 tp2 cp2\nfsdp full-ac", "dp1 tp8 pp32\ncp2\nzero1 1F1B"]
