"""The MLP pipeline run the notebook and the bench share: on real gloo ranks its losses and
gradients equal one process's, its live activation bytes equal the plan's microbatches in flight
x bytes per microbatch, and its simulation reads the times the run measured."""

from __future__ import annotations

import pytest

from distlab.pipeline_parallel import build_plan
from distlab.pipeline_parallel.mlp_run import run_mlp_pipeline, stage_layers
from helpers.leaks import no_leaks


@pytest.mark.multiprocess
@pytest.mark.parametrize("schedule", ["1F1B", "ZBVZeroBubble"])
def test_a_run_equals_one_process_and_its_model_counts_the_bytes(schedule):
    with no_leaks():
        run = run_mlp_pipeline(schedule, 2, 4, layers=4, width=16, batch=8, steps=2,
                               timeout=120)
    assert run.max_loss_error <= 1e-6 and run.max_grad_error <= 1e-6
    assert [s["peak_activation_nbytes"] for s in run.stats] == list(run.model_act_nbytes)
    plan = run.plan
    computed = sorted((sp.lane, sp.name) for sp in run.timeline.spans
                      if sp.lane.endswith("/compute"))
    assert computed == sorted((f"rank{r}/compute", str(a)) for r in range(plan.ranks)
                              for a in plan.compute(r))
    assert run.simulation.step_time_s > 0 and run.step_s > 0
    assert 0 <= run.bubble_fraction < 1
    lines = run.summary_lines()
    assert lines[0].startswith(f"{schedule}: 2 ranks") and all(len(ln) <= 110 for ln in lines)


def test_bad_sizes_are_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match="layers=3 cannot fill 4 stages"):
        run_mlp_pipeline("Interleaved1F1B", 2, 4, layers=3)
    with pytest.raises(ValueError, match="batch"):
        run_mlp_pipeline("1F1B", 2, 4, batch=2)
    with pytest.raises(ValueError, match="microbatches"):
        run_mlp_pipeline("DualPipeV", 2, 3)
    assert stage_layers(build_plan("GPipe", 3, 1).num_stages, 3) == [range(i, i + 1)
                                                                     for i in range(3)]
