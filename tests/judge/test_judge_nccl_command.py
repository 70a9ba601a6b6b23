"""``python -m distlab.judge nccl``: NCCL's choice per size, the published tables' errors, and one
error line with exit 2 for bad input."""

from __future__ import annotations

import pytest

from distlab.judge.__main__ import main as judge_main


def test_choice_per_size(capsys) -> None:
    assert judge_main(["nccl", "h100_sxm8", "--sizes", "64K,1G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# 8x H100") and "NCCL 2.28.9, torch:" in lines[0]
    assert lines[1].split()[:3] == ["size", "algo", "proto"]
    rows = [ln.split() for ln in lines[2:]]
    assert [r[0] + r[1] for r in rows] == ["64KiB", "1GiB"]
    assert rows[0][2:4] == ["ring", "LL"] and rows[1][2:4] == ["nvls", "Simple"]
    assert max(len(ln) for ln in lines) <= 110


def test_published_tables_in_and_out_of_sample(capsys) -> None:
    assert judge_main(["nccl", "--published"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# constants (us): host_us_per_gpu")
    single = out[:out.index(next(ln for ln in out if ln.startswith("# multi-node")))]
    assert single[-1].split()[0] == "all" and single[-1].split()[1] == "132"
    assert sum("Azure" in ln for ln in single) == 4
    others_at = out.index(next(ln for ln in out if ln.startswith("# other collectives")))
    multi = out[len(single):others_at]
    assert "never fitted on" in multi[0]
    assert multi[-1].split()[:2] == ["all", "86"]
    assert sum(ln.startswith(("2 x 8", "4 x 8")) for ln in multi) == 7
    others = out[others_at:]
    rows = [ln.split() for ln in others[2:6]]
    assert [r[0] for r in rows] == ["all_gather", "reduce_scatter", "allreduce", "allreduce"]
    assert [r[1] for r in rows] == ["any", "any", "any", "ring+tree"]
    assert all(r[4] == r[5].split("/")[0] for r in rows)    # the algorithm the source says ran
    assert others[6].startswith("# NCCL's choice as published") and "2.27.7" in others[6]
    assert [ln.split()[0] for ln in others[7:]] == ["ring/LL", "nvls/Simple"]
    assert all(ln.split()[0] == ln.split()[-1] for ln in others[7:])   # the model agrees
    assert max(len(ln) for ln in out) <= 110


@pytest.mark.parametrize(("argv", "words"), [
    (["nccl"], "give a BOX or --published"),
    (["nccl", "tpu_pod"], "invalid choice: 'tpu_pod'"),
    (["nccl", "pcie5_8", "-n", "9"], "at most 8"),
    (["nccl", "pcie5_8", "-n", "1"], "--world-size"),
    (["nccl", "h100_sxm8", "--harness", "mpi"], "--harness"),
    (["nccl", "h100_sxm8", "--write"], "use it with --published"),
    (["nccl", "h100_sxm8", "--sizes", "lots"], "--sizes"),
    (["nccl", "h100_sxm8", "--nodes", "2"], "--nodes 2 needs --network"),
    (["nccl", "h100_sxm8", "--nodes", "2", "--network", "wifi"], "--network"),
    (["nccl", "h100_sxm8", "--nodes", "3", "--network", "tcp100", "-n", "20"], "multiple"),
    (["nccl", "h100_sxm8", "--nodes", "2", "--network", "tcp100", "--nccl-version", "2.18"],
     "2.28.9's only"),
    (["nccl", "h100_sxm8", "--collective", "broadcast", "--nodes", "2", "--network", "tcp100"],
     "on one node"),
    (["nccl", "h100_sxm8", "--collective", "gather"], "--collective"),
    (["nccl", "h100_sxm8", "--nccl-version", "2.25.1"], "the releases modelled are 2.18"),
    (["nccl", "h100_sxm8", "--nccl-version", "latest"], "--nccl-version")])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys) -> None:
    assert judge_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and err[0].endswith("(see --help)")


@pytest.mark.parametrize("spelled", ["2.26", "2.26.2", "v2.26.2-1", "2.26.2+cuda12.8"])
def test_nccl_version_as_nccl_prints_it(spelled, capsys) -> None:
    assert judge_main(["nccl", "h100_sxm8", "--sizes", "1G", "--nccl-version", spelled]) == 0
    assert "NCCL 2.26.2, torch:" in capsys.readouterr().out.splitlines()[0]


def test_choice_across_nodes(capsys) -> None:
    assert judge_main(["nccl", "h100_sxm8", "--nodes", "4", "--network", "ib_ndr400x8",
                       "--sizes", "64K,8G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# 4 x h100_sxm8 over ib_ndr400x8, 32 GPUs, NCCL 2.28.9")
    rows = [ln.split() for ln in lines[2:]]
    assert [r[2] for r in rows] == ["tree", "nvls_tree"]
    assert max(len(ln) for ln in lines) <= 110


def test_other_collectives(capsys) -> None:
    assert judge_main(["nccl", "h100_sxm8", "--collective", "all_gather", "--sizes", "1G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# h100_sxm8, 8 GPUs, NCCL 2.28.9, torch: all_gather")
    assert lines[2].split()[2:4] == ["ring", "Simple"]
    assert max(len(ln) for ln in lines) <= 110
