"""The MLP block split on 2 gloo ranks, without and with sequence parallelism, against one
process: errors, collectives per pass, traced lanes and the shapes each rank holds."""

from __future__ import annotations

import pytest
import torch

from distlab.tensor_parallel.cost import layer_collectives
from distlab.tensor_parallel.demo import run_mlp_tensor_parallel, tp_plan
from distlab.tensor_parallel.style import ColwiseParallel, SequenceParallel
from distlab.viz.tensor_parallel import gpt_shape
from helpers.float_tolerance import float_tolerance

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def run():
    return run_mlp_tensor_parallel(2, hidden=16, seq_len=4, micro_batch=2)


def test_output_and_gradients_equal_one_process(run) -> None:
    assert set(run.cases) == {"tp", "tp+sp"}
    for case in run.cases.values():
        # errors relative to each tensor's largest value: sums of at most ffn = 64 terms, 6
        # deep (LayerNorm, w1, w2 forward and backward): 4.6e-5; observed <= 2.6e-7
        bound = float_tolerance(torch.float32, 64, 1.0, depth=6)
        assert case.max_out_error <= bound and case.max_grad_error <= bound


def test_collectives_per_pass(run) -> None:
    tp, sp = run.cases["tp"], run.cases["tp+sp"]
    assert tp.forward == ({"all_reduce": 1},) * 2 and tp.backward == ({"all_reduce": 1},) * 2
    assert sp.forward == ({"all_gather": 1, "reduce_scatter": 1},) * 2
    # the LayerNorm's weight and bias gradients are all-reduced besides the activations'
    assert sp.backward == ({"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2},) * 2
    for name, flag in (("tp", False), ("tp+sp", True)):
        mlp = sorted((c.phase, c.collective) for c in layer_collectives(gpt_shape(256), 2, flag)
                     if c.where.startswith("MLP"))
        case = run.cases[name]
        ran = sorted((phase, k) for phase in ("forward", "backward")
                     for k, n in getattr(case, phase)[0].items()
                     if not (flag and k == "all_reduce") for _ in range(n))
        assert ran == mlp
    rows = run.count_rows()
    assert {"case": "tp+sp", "pass": "backward", "collective": "all_reduce", "count": "2"} in rows


def test_timeline_lanes_and_names(run) -> None:
    for name, case in run.cases.items():
        tl = case.timeline
        assert sorted(tl.lanes) == ["rank0/compute", "rank0/tp", "rank1/compute", "rank1/tp"]
        comm = [s.name for s in tl.spans if s.lane == "rank0/tp"]
        want = (["all_reduce"] * 2 if name == "tp" else
                ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter", "all_reduce",
                 "all_reduce"])
        assert comm == want


def test_steps_carry_each_ranks_shapes(run) -> None:
    h, ffn = run.hidden, run.ffn
    for r in range(2):
        tp = {s.label: s for s in run.cases["tp"].steps[r]}
        assert tp["fc1.weight"].shape == (ffn // 2, h) and tp["fc1.weight"].full_shape == (ffn, h)
        assert tp["fc2.weight"].shape == (h, ffn // 2)
        assert (tp["f"].forward, tp["f"].backward) == ("identity", "all_reduce")
        assert (tp["f_bar"].forward, tp["f_bar"].backward) == ("all_reduce", "identity")
        assert "g" not in tp   # one name, one operator: g is sequence parallelism's gather
        sp = {s.label: s for s in run.cases["tp+sp"].steps[r]}
        assert sp["x"].shape == (2, 2, h) and sp["gathered"].shape == (2, 4, h)
        assert (sp["g_bar"].forward, sp["g_bar"].backward) == ("reduce_scatter", "all_gather")
        assert (sp["g"].forward, sp["g"].backward) == ("all_gather", "reduce_scatter")


def test_plans_and_bad_sizes() -> None:
    assert set(tp_plan(False)) == {"mlp.fc1", "mlp.fc2"}
    plan = tp_plan(True)
    assert isinstance(plan["norm"], SequenceParallel)
    assert isinstance(plan["mlp.fc1"], ColwiseParallel)
    with pytest.raises(ValueError, match="seq_len=3"):
        run_mlp_tensor_parallel(2, hidden=8, seq_len=3)
    with pytest.raises(ValueError, match="ranks"):
        run_mlp_tensor_parallel(0)
