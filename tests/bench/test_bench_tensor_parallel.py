"""``python -m distlab.bench tensor-parallel``: a tiny run through the CLI (distlab's split and
torch's DTensor split of the same model side by side, the collectives priced), and bad input."""

from __future__ import annotations

import json

import pytest

from distlab.bench.__main__ import main
from distlab.bench.tensor_parallel import comm_model_seconds
from distlab.bench.tensor_parallel_ranks import block_plan
from distlab.collectives import predict_builtin
from helpers.leaks import no_leaks

ARGS = ["tensor-parallel", "--world-size", "2", "--layers", "2", "--width", "16", "--batch",
        "4", "--steps", "1", "--rounds", "2", "--timeout", "240"]


def test_comm_model_prices_each_all_reduce_with_gloo_s_ring():
    one = predict_builtin("loopback", 2, [4 * 16 * 4])[0]
    assert comm_model_seconds({"all_reduce": 3}, 2, 4, 16) == pytest.approx(3 * one)
    assert comm_model_seconds({}, 2, 4, 16) == 0.0
    assert comm_model_seconds({"all_reduce": 3}, 1, 4, 16) == 0.0
    with pytest.raises(ValueError, match="all_gather"):
        comm_model_seconds({"all_reduce": 1, "all_gather": 2}, 2, 4, 16)


def test_the_plan_splits_each_block_column_then_row():
    import distlab.tensor_parallel as lib
    plan = block_plan(2, lib)
    assert sorted(plan) == ["0.0", "0.2", "1.0", "1.2"]
    assert isinstance(plan["1.0"], lib.ColwiseParallel)
    assert isinstance(plan["1.2"], lib.RowwiseParallel)


@pytest.mark.multiprocess
def test_cli_tiny_runs_both_splits_with_the_same_loss(capsys, tmp_path):
    out_json = tmp_path / "tp.json"
    with no_leaks():
        rc = main([*ARGS, "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.splitlines()
    assert all(len(ln) <= 110 for ln in lines), "no printed line wraps"
    assert [ln.split()[0] for ln in lines if ln.split()[:1] in (["distlab"], ["torch"])] == \
        ["distlab", "torch"]
    doc = json.loads(out_json.read_text())
    mine = doc["rows"][0]
    assert mine["wrong"] == 0, "distlab's loss equals torch's"
    # 2 blocks: one all-reduce per block forward, one backward for the second block's input
    assert mine["collectives"] == "all_reducex3"
    assert mine["comm_model_ms"] > 0
    assert any(ln.startswith("# target: distlab's step rate >= 0.9x") for ln in lines)


def test_a_width_the_ranks_do_not_divide_is_one_line_and_exit_2(capsys):
    assert main(["tensor-parallel", "--world-size", "3", "--width", "16"]) == 2
    err = capsys.readouterr().err
    assert "--width" in err and len(err.strip().splitlines()) == 1
