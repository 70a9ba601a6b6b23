"""``python -m distlab.bench pipeline-parallel``: a tiny run through the CLI (distlab's schedule
and torch's on the same stages, the model beside them), the pure parts, and bad input."""

from __future__ import annotations

import json

import pytest

from distlab.bench.__main__ import main
from distlab.bench.pipeline_parallel import schedule_list
from distlab.pipeline_parallel import SCHEDULES, build_plan
from distlab.pipeline_parallel.mlp_run import stage_activation_nbytes, stage_layers, stage_times
from helpers.leaks import no_leaks

ARGS = ["pipeline-parallel", "--world-size", "2", "--layers", "4", "--width", "16",
        "--batch", "8", "--microbatches", "4", "--steps", "1", "--rounds", "2",
        "--timeout", "240"]


def test_stage_layers_cut_consecutive_runs_longest_first():
    assert stage_layers(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert stage_layers(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="layers=3 cannot fill 4 stages"):
        stage_layers(3, 4)


def test_schedule_list_resolves_names_any_case_and_all():
    assert schedule_list("1f1b, ScheduleGPipe,1F1B") == ["1F1B", "GPipe"]
    assert schedule_list("all") == list(SCHEDULES)
    with pytest.raises(Exception, match="GPipe"):
        schedule_list("nope")


def test_stage_activation_bytes_count_input_relus_and_the_target_last():
    assert stage_activation_nbytes(range(2), 4, 8, last=False) == 3 * 4 * 8 * 4
    assert stage_activation_nbytes(range(2), 4, 8, last=True) == 4 * 4 * 8 * 4
    assert stage_activation_nbytes(range(2), 4, 8, last=False, handed_over=True) == 2 * 4 * 8 * 4


def test_stage_times_take_means_and_charge_a_full_backward_whole():
    plan = build_plan("1F1B", 2, 2)
    spans = [[(0, "F", 1.0), (0, "F", 3.5), (0, "F", 1.5), (0, "B", 4.0)],
             [(1, "F", 5.0), (1, "B", 6.0)]]
    t = stage_times(plan, spans)
    assert t.forward_s == (2.0, 5.0)
    assert t.backward_input_s == (4.0, 6.0) and t.backward_weight_s == (0.0, 0.0)
    zb = build_plan("ZBVZeroBubble", 1, 2)
    t = stage_times(zb, [[(0, "F", 1.0), (0, "I", 2.0), (0, "W", 3.0), (1, "F", 1.0),
                          (1, "I", 1.0), (1, "W", 1.0)]])
    assert t.backward_input_s == (2.0, 1.0) and t.backward_weight_s == (3.0, 1.0)


@pytest.mark.multiprocess
def test_cli_tiny_runs_both_implementations_with_the_model_beside(capsys, tmp_path):
    out_json = tmp_path / "pp.json"
    with no_leaks():
        rc = main([*ARGS, "--schedules", "1F1B,ZBVZeroBubble", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    assert all(len(ln) <= 110 for ln in lines), "no printed line wraps"
    table = [ln.split() for ln in lines if ln.split()[:1] in (["1F1B"], ["ZBVZeroBubble"])]
    assert [(t[0], t[1]) for t in table] == [("1F1B", "distlab"), ("1F1B", "torch"),
                                             ("ZBVZeroBubble", "distlab"),
                                             ("ZBVZeroBubble", "torch")]
    assert any(ln.startswith("# target: distlab's step rate >= 0.9x") for ln in lines)
    doc = json.loads(out_json.read_text())
    rows = {(r["schedule"], r["impl"]): r for r in doc["rows"]}
    for s in ("1F1B", "ZBVZeroBubble"):
        mine = rows[(s, "distlab")]
        assert mine["wrong"] == 0, "distlab's loss equals torch's"
        assert mine["model_ms"] > 0 and 0 <= mine["model_bubble"] < 1
        assert mine["act_bytes"] == mine["model_act_bytes"], \
            "live activation bytes equal in-flight microbatches x bytes per microbatch"
        assert rows[(s, "torch")]["rate_vs_torch"] == 1.0
    assert doc["provenance"]["world_size"] == 2


@pytest.mark.parametrize("argv, message", [
    (["--schedules", "Bogus"], "is not a known schedule"),
    (["--schedules", "1F1B", "--microbatches", "1"], "microbatches"),
    (["--schedules", "GPipe", "--layers", "1"], "cannot fill 2 stages"),
    (["--schedules", "GPipe", "--batch", "6", "--microbatches", "4"], "--batch"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["pipeline-parallel", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
