"""``python -m distlab.judge nccl``: NCCL's choice per size, the published tables' errors, and one
error line with exit 2 for bad input."""

from __future__ import annotations

import json

import pytest

from distlab.judge.__main__ import main as judge_main
from distlab.judge.nccl_command import ERROR_LINE


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
    single = out[:out.index(next(ln for ln in out if ln.startswith("# beyond one 8-GPU box")))]
    assert single[-1].split()[0] == "all" and single[-1].split()[1] == "132"
    assert sum("Azure" in ln for ln in single) == 4
    others_at = out.index(next(ln for ln in out if ln.startswith("# other collectives")))
    multi = out[len(single):others_at]
    assert "never fitted on" in multi[0]
    assert multi[-1].split()[:2] == ["all", "124"]
    assert sum(ln.startswith(("2 x 8", "3 x 8", "4 x 8")) for ln in multi) == 10
    assert sum(ln.startswith(("GB200", "4x GB200")) for ln in multi) == 4
    others = out[others_at:]
    assert others[1] == ERROR_LINE and out[1] == ERROR_LINE and multi[1] == ERROR_LINE
    rows = [ln.split() for ln in others[3:7]]
    assert [r[0] for r in rows] == ["all_gather", "reduce_scatter", "all_reduce", "all_reduce"]
    assert [r[1] for r in rows] == ["any", "any", "any", "ring+tree"]
    assert all(r[4] == r[5].split("/")[0] for r in rows)    # the algorithm the source says ran
    assert others[7].startswith("# NCCL's choice as published") and "2.27.7" in others[7]
    assert [ln.split()[0] for ln in others[8:]] == ["ring/LL", "nvls/Simple"]
    assert all(ln.split()[0] == ln.split()[-1] for ln in others[8:])   # the model agrees
    assert max(len(ln) for ln in out) <= 110


@pytest.mark.parametrize(("argv", "words"), [
    (["nccl"], "give a BOX, --boxes or --published"),
    (["nccl", "h100_sxm8", "--boxes"], "give one of BOX, --boxes or --published"),
    (["nccl", "--published", "--json", "x.json"], "--json writes"),
    (["nccl", "tpu_pod"], "invalid choice: 'tpu_pod'"),
    (["nccl", "pcie5_8", "-n", "9"], "at most 8"),
    (["nccl", "pcie5_8", "-n", "1"], "--world-size"),
    (["nccl", "h100_sxm8", "--harness", "mpi"], "--harness"),
    (["nccl", "h100_sxm8", "--write"], "use it with --published"),
    (["nccl", "h100_sxm8", "--sizes", "lots"], "--sizes"),
    (["nccl", "h100_sxm8", "--nodes", "2"], "--nodes 2 needs --network"),
    (["nccl", "h100_sxm8", "--nodes", "2", "--network", "wifi"], "--network"),
    (["nccl", "h100_sxm8", "--nodes", "3", "--network", "tcp100", "-n", "20"], "multiple"),
    (["nccl", "h100_sxm8", "--collective", "broadcast", "--nodes", "2", "--network", "tcp100"],
     "on one node"),
    (["nccl", "h100_sxm8", "--collective", "gather"], "--collective"),
    (["nccl", "h100_sxm8", "--nccl-version", "latest"], "the releases modelled are 2.18"),
    (["nccl", "h100_sxm8", "--nccl-version", "2.x"], "--nccl-version")])
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


@pytest.mark.parametrize(("asked", "priced"), [("2.31.1+cuda13.0", "2.30.7"),
                                               ("2.17.3", "2.18.5"), ("2.25.1", "2.24.3")])
def test_a_release_the_model_does_not_hold_is_priced_with_a_warning_and_a_json_field(
        asked, priced, capsys, tmp_path) -> None:
    out = tmp_path / "choice.json"
    assert judge_main(["nccl", "b200_sxm8", "--sizes", "1M,1G", "--nccl-version", asked,
                       "--json", str(out)]) == 0
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "warning" in err[0] and f"priced as NCCL {priced}" in err[0]
    assert f"NCCL {priced}, torch:" in captured.out.splitlines()[0]
    data = json.loads(out.read_text())
    assert data["nccl_version"] == {"asked": asked, "priced_as": priced,
                                    "note": err[0].split("warning: ")[1]}
    assert [r["nbytes"] for r in data["rows"]] == [1 << 20, 1 << 30]
    assert data["rows"][1]["algorithm"] == "nvls"


def test_a_release_the_model_holds_has_no_warning_and_an_empty_note(capsys, tmp_path) -> None:
    out = tmp_path / "choice.json"
    assert judge_main(["nccl", "h200_sxm8", "--sizes", "1G", "--nccl-version", "2.29.7",
                       "--json", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert json.loads(out.read_text())["nccl_version"] == {"asked": "2.29.7",
                                                           "priced_as": "2.29.7", "note": ""}


def test_new_boxes_and_networks_are_priced(capsys) -> None:
    for argv in (["gb200_nvl72", "--sizes", "1M,1G"], ["l40s_pcie8", "--sizes", "1G"],
                 ["a100_pcie8", "--sizes", "1G"],
                 ["b200_sxm8", "--nodes", "2", "--network", "gcp_roce400x8", "--sizes", "1G",
                  "--nccl-version", "2.30.4"],
                 ["a100_sxm8", "--nodes", "2", "--network", "efa400", "--sizes", "1G"],
                 ["h100_sxm8", "--nodes", "2", "--network", "gcp_tcpxo", "--sizes", "1G"]):
        assert judge_main(["nccl", *argv]) == 0, argv
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# GB200 NVL72") and ", 72 GPUs, NCCL 2.28.9" in lines[0]
    assert any("2 x b200_sxm8 over gcp_roce400x8, 16 GPUs, NCCL 2.30.7" in ln for ln in lines)


def test_boxes_lists_every_box_network_and_release_with_its_source_and_judgement(
        capsys, tmp_path) -> None:
    from distlab.collectives.model.nccl.boxes import GPU_BOXES
    from distlab.collectives.model.nccl.multinode import NETWORKS
    from distlab.collectives.model.nccl.versions import NCCL_VERSIONS

    out = tmp_path / "boxes.json"
    assert judge_main(["nccl", "--boxes", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    firsts = [ln.split()[0] for ln in lines if ln.strip() and not ln.startswith("#")]
    for key in (*GPU_BOXES, *NETWORKS, *NCCL_VERSIONS):
        assert key in firsts, key
    sources = lines[lines.index("# where each constant comes from"):]
    for key in (*GPU_BOXES, *NETWORKS):
        assert any(ln.startswith(f"  {key}: ") for ln in sources), key
    assert lines[-1].startswith("  ") and "# what the model cannot price" in lines
    assert max(len(ln) for ln in lines) <= 110
    data = json.loads(out.read_text())
    boxes = {b["key"]: b for b in data["boxes"]}
    assert set(boxes) == set(GPU_BOXES)
    # the H100 table is judged leave-one-source-out: the --published numbers, by box
    h100 = boxes["h100_sxm8"]["one_node"]
    assert h100["tables"] == 1 and h100["points"] == 18 and h100["median"] < 7
    assert boxes["l40s_pcie8"]["one_node"] == {"tables": 0, "points": 0, "median": None,
                                               "p90": None}
    assert {r["key"] for r in data["releases"]} == set(NCCL_VERSIONS)


def test_published_labels_are_never_cut_and_the_help_says_the_sizes_it_prints(capsys) -> None:
    from distlab.collectives.model.nccl.fit_execution import judge as judge_points
    from distlab.collectives.model.nccl.fit_execution import (
        multinode_points,
        shipped_constants,
        summarize,
    )

    assert judge_main(["nccl", "--published"]) == 0
    out = capsys.readouterr().out
    words = [ln[:62].split() for ln in out.splitlines()]
    shown = " ".join(w for line in words for w in line)  # the label column, lines joined
    labels = [s.label for s in summarize(judge_points(multinode_points(), shipped_constants()))]
    assert labels and all(" ".join(label.split()) in shown for label in labels)
    assert max(len(ln) for ln in out.splitlines()) <= 110
    assert judge_main(["nccl", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "64 KiB..4 GiB x4" in help_text
    assert judge_main(["nccl", "h100_sxm8"]) == 0
    sizes = [ln.split()[:2] for ln in capsys.readouterr().out.splitlines()
             if ln.strip() and ln.split()[0][0].isdigit()]
    assert sizes[0] == ["64", "KiB"] and sizes[-1] == ["4", "GiB"]
