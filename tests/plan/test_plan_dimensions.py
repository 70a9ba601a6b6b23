"""The step's parts keyed by parallel dimension: one registry that the step, the command's table
and the step figure read, so that a new dimension is one entry (a toy one is added, priced,
printed, drawn and removed here)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from distlab.plan.__main__ import columns, main, plan_rows, price_json  # noqa: E402
from distlab.plan.dimensions import (  # noqa: E402
    Dimension,
    PipelinePart,
    StagePart,
    StepPart,
    column_parts,
    dimensions,
    register_dimension,
    stack_parts,
    step_parts,
    unregister_dimension,
)
from distlab.plan.layout import DIMS, hardware, parse_layout  # noqa: E402
from distlab.plan.planner import price  # noqa: E402
from distlab.plan.step import step_time, step_timeline  # noqa: E402
from distlab.transformer import PRESETS  # noqa: E402
from distlab.viz.plan import step_figure  # noqa: E402

MODEL = PRESETS["llama3.2-1b"]
HW = hardware("h100", 8)
COMMAND = ["llama3.2-1b", "--gpus", "8", "--global-batch", "16", "--layout", "dp=8,fsdp"]

TOY = Dimension("toy", fields=(), group=None, parts=(
    StepPart("toy", "toy", "toy", "toy exposed", "exposed toy communication",
             lambda inputs, rank: 0.25),))
"""A toy dimension: a constant quarter second exposed after the pipeline."""


def test_the_registry_is_the_steps_parts_the_commands_columns_and_the_figures_stacks() -> None:
    assert [d.name for d in dimensions()] == list(DIMS) == ["tp", "cp", "dp", "pp"]
    est = step_time(MODEL, parse_layout("dp=2,tp=2,pp=2", global_batch=8), HW)
    assert [p.name for p in step_parts()] == list(est.parts()) == [
        "compute", "tp", "cp", "fsdp", "bubble", "dp", "optimizer"]
    assert {(h, k): ps for (h, k), ps in column_parts().items()} == {
        ("compute", "compute"): ("compute",), ("tp+cp", "tp_cp"): ("tp", "cp"),
        ("dp+fsdp", "dp_fsdp"): ("fsdp", "dp"), ("bubble", "bubble"): ("bubble",),
        ("optim", "optimizer"): ("optimizer",)}
    assert [c.header for c in columns()] == [
        "#", "layout", "mem GiB", "states", "act", "other", "fits", "step s", "compute",
        "tp+cp", "dp+fsdp", "bubble", "optim", "tok/s/GPU", "MFU %"]
    assert stack_parts() == {"compute": ("compute",), "tp/cp exposed": ("tp", "cp"),
                             "dp/fsdp exposed": ("fsdp", "dp"), "bubble": ("bubble",),
                             "optimizer step": ("optimizer",)}
    # the built-in attribute names read the same seconds
    assert [est.compute_s, est.tp_s, est.cp_s, est.fsdp_s, est.bubble_s, est.dp_s,
            est.optimizer_s] == list(est.parts().values())
    assert est.step_s == pytest.approx(sum(est.parts().values()), rel=1e-12)


def test_a_toy_dimension_is_priced_printed_and_drawn_then_gone(capsys) -> None:
    layout = parse_layout("dp=8,fsdp", global_batch=16)
    plain = price(MODEL, layout, HW)
    register_dimension(TOY)
    try:
        # priced: a part of the step, in its sum, in the JSON
        toy = price(MODEL, layout, HW)
        assert list(toy.step.parts())[-2:] == ["toy", "optimizer"]
        assert toy.step.part_s("toy") == 0.25
        assert toy.step.step_s == pytest.approx(plain.step.step_s + 0.25, rel=1e-12)
        assert price_json(toy)["step_seconds"]["toy"] == 0.25
        # printed: a column of the command's table
        assert main(COMMAND) == 0
        header, row = capsys.readouterr().out.splitlines()[-2:]
        heads = header.split()
        assert heads[heads.index("bubble") + 1] == "toy" and row.split()[-4] == "0.250"
        assert plan_rows([toy])[0]["toy"] == 0.25
        # labelled: a stack of the step figure, under the optimizer's
        (ax,) = step_figure([plain, toy]).axes
        assert [c.get_label() for c in ax.containers][-2:] == ["toy exposed", "optimizer step"]
        assert ax.containers[-2][0].get_height() == 0.0
        assert ax.containers[-2][1].get_height() == pytest.approx(0.25, rel=1e-12)
        assert "toy exposed" in [t.get_text() for t in ax.get_legend().get_texts()]
        # and on a pipeline's timeline, after the simulated step
        pipe = step_time(MODEL, parse_layout("dp=2,pp=4", global_batch=16), HW)
        spans = [s for s in step_timeline(pipe).spans if s.category == "toy"]
        assert len(spans) == 4 and all(s.duration_us == pytest.approx(0.25e6) for s in spans)
    finally:
        assert unregister_dimension("toy") is TOY
    gone = price(MODEL, layout, HW)
    assert "toy" not in gone.step.parts() and "toy" not in plan_rows([gone])[0]
    assert gone.step.step_s == pytest.approx(plain.step.step_s, rel=1e-12)
    assert "toy" not in [c.header for c in columns()] and "toy exposed" not in stack_parts()


def test_a_stage_part_sits_on_the_compute_stream_the_pipeline_sees() -> None:
    """A stage part adds to every stage's forward and backward, so a pipeline's bubble and FSDP's
    window grow with it; its seconds per step are the busiest rank's microbatches'."""
    lay = parse_layout("dp=2,pp=4", global_batch=16)
    plain = step_time(MODEL, lay, HW)

    def ring(inputs):
        from distlab.plan.dimensions import Exposed

        return lambda stage: Exposed.of(0.001 * stage.layers, 0.002 * stage.layers)

    register_dimension(Dimension("ring", ("dp",), None, (
        StagePart("ring", "ring", "ring", "ring exposed", "a toy ring", ring),)))
    try:
        est = step_time(MODEL, lay, HW)
    finally:
        unregister_dimension("ring")
    layers_per_rank = MODEL.layers // 4
    assert est.part_s("ring") == pytest.approx(lay.microbatches * 0.003 * layers_per_rank,
                                               rel=1e-12)
    assert list(est.parts()).index("ring") == list(est.parts()).index("bubble") - 1
    assert est.bubble_s > plain.bubble_s   # the stages are longer: so is their fill and drain


def test_register_refuses_what_would_break_the_registry() -> None:
    const = StepPart("x", "x", "x", "x", "x", lambda inputs, rank: 0.0)
    with pytest.raises(ValueError, match="dimension 'tp' is registered already"):
        register_dimension(Dimension("tp", (), None, (const,)))
    with pytest.raises(ValueError, match="part 'dp' is taken"):
        register_dimension(Dimension("x", (), None, (
            StepPart("dp", "x", "x", "x", "x", lambda inputs, rank: 0.0),)))
    with pytest.raises(ValueError, match="dimension 'ep' is registered already"):
        register_dimension(Dimension("ep", (), None, (const,)))
    with pytest.raises(ValueError, match="group='toy' must be one of tp, cp, dp, pp"):
        register_dimension(Dimension("toy", (), "toy", (const,)))
    with pytest.raises(ValueError, match="column 'tp\\+cp' has key 'tp_cp'"):
        register_dimension(Dimension("x", (), None, (
            StepPart("x", "tp+cp", "other", "x", "x", lambda inputs, rank: 0.0),)))
    with pytest.raises(ValueError, match="one pipeline part already"):
        register_dimension(Dimension("x", (), None, (
            PipelinePart("x", None, None, "x", "x", lambda inputs, rank: (0.0, None)),)))
    with pytest.raises(TypeError, match="dim must be a Dimension"):
        register_dimension("toy")
    with pytest.raises(ValueError, match="no dimension 'toy' is registered"):
        unregister_dimension("toy")
    assert [d.name for d in dimensions()] == ["tp", "cp", "dp", "pp"]
