"""``python -m distlab.nccl``: NCCL's choice per size on a box (one node, across nodes, other
collectives, any release), every box the model knows (``--boxes``), ``--help``, and one error line
with exit 2 for bad input; a bug is not reported as bad input."""

from __future__ import annotations

import json

import pytest

from distlab.nccl.__main__ import main as nccl_main


def test_choice_per_size(capsys) -> None:
    assert nccl_main(["h100_sxm8", "--sizes", "64K,1G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# 8x H100") and "NCCL 2.28.9, torch:" in lines[0]
    assert lines[1].split()[:3] == ["size", "algo", "proto"]
    rows = [ln.split() for ln in lines[2:]]
    assert [r[0] + r[1] for r in rows] == ["64KiB", "1GiB"]
    assert rows[0][2:4] == ["ring", "LL"] and rows[1][2:4] == ["nvls", "Simple"]
    assert max(len(ln) for ln in lines) <= 110


@pytest.mark.parametrize("spelled", ["2.26", "2.26.2", "v2.26.2-1", "2.26.2+cuda12.8"])
def test_nccl_version_as_nccl_prints_it(spelled, capsys) -> None:
    assert nccl_main(["h100_sxm8", "--sizes", "1G", "--nccl-version", spelled]) == 0
    assert "NCCL 2.26.2, torch:" in capsys.readouterr().out.splitlines()[0]


def test_choice_across_nodes(capsys) -> None:
    assert nccl_main(["h100_sxm8", "--nodes", "4", "--network", "ib_ndr400x8",
                       "--sizes", "64K,8G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# 4 x h100_sxm8 over ib_ndr400x8, 32 GPUs, NCCL 2.28.9")
    rows = [ln.split() for ln in lines[2:]]
    assert [r[2] for r in rows] == ["tree", "nvls_tree"]
    assert max(len(ln) for ln in lines) <= 110


@pytest.mark.parametrize(("network", "release", "said"), [
    ("efa3200", "2.28", ["8 devices of 50 GB/s (32 ports)", "plugin's 75 us", "20 us hop"]),
    ("roce200x16", "2.26", ["8 devices of 50 GB/s (16 ports)"]),
    ("roce200x16", "2.18", []),           # NCCL merges a NIC's ports from 2.20 only
    ("ib_ndr400x8", "2.28", [])])
def test_across_nodes_says_how_nccl_holds_the_network(network, release, said, capsys) -> None:
    """A line under the header where NCCL's devices, its estimate or the run's hop differ from
    the network's ports; none where they do not."""
    assert nccl_main(["h100_sxm8", "--nodes", "2", "--network", network, "--nccl-version",
                      release, "--sizes", "64K"]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = " ".join(ln[2:] for ln in out[1:] if ln.startswith("#"))
    assert all(words in notes for words in said) and (notes == "") == (not said), notes
    assert out[1 + len([ln for ln in out[1:] if ln.startswith("#")])].split()[:2] == \
        ["size", "algo"]
    assert max(len(ln) for ln in out) <= 110


def test_other_collectives(capsys) -> None:
    assert nccl_main(["h100_sxm8", "--collective", "all_gather", "--sizes", "1G"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# h100_sxm8, 8 GPUs, NCCL 2.28.9, torch: all_gather")
    assert lines[2].split()[2:4] == ["ring", "Simple"]
    assert max(len(ln) for ln in lines) <= 110


@pytest.mark.parametrize(("asked", "priced"), [("2.31.1+cuda13.0", "2.30.7"),
                                               ("2.17.3", "2.18.5"), ("2.25.1", "2.24.3")])
def test_a_release_the_model_does_not_hold_is_priced_with_a_warning_and_a_json_field(
        asked, priced, capsys, tmp_path) -> None:
    out = tmp_path / "choice.json"
    assert nccl_main(["b200_sxm8", "--sizes", "1M,1G", "--nccl-version", asked,
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
    assert nccl_main(["h200_sxm8", "--sizes", "1G", "--nccl-version", "2.29.7",
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
        assert nccl_main(argv) == 0, argv
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# GB200 NVL72") and ", 72 GPUs, NCCL 2.28.9" in lines[0]
    assert any("2 x b200_sxm8 over gcp_roce400x8, 16 GPUs, NCCL 2.30.7" in ln for ln in lines)


def test_boxes_lists_every_box_network_and_release_with_its_source_and_judgement(
        capsys, tmp_path) -> None:
    from distlab.nccl.boxes import GPU_BOXES
    from distlab.nccl.multinode import NETWORKS
    from distlab.nccl.versions import NCCL_CONSTANTS

    out = tmp_path / "boxes.json"
    assert nccl_main(["--boxes", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    firsts = [ln.split()[0] for ln in lines if ln.strip() and not ln.startswith("#")]
    for key in (*GPU_BOXES, *NETWORKS, *NCCL_CONSTANTS):
        assert key in firsts, key
    sources = lines[lines.index("# where each constant comes from"):]
    for key in GPU_BOXES:   # each box with its GPU
        assert any(ln.startswith(f"  {key} ({GPU_BOXES[key].name}): ") for ln in sources), key
    for key in NETWORKS:
        assert any(ln.startswith(f"  {key} (") for ln in sources), key
    head = " ".join(lines[:lines.index(next(ln for ln in lines if ln.split()[:1] == ["box"]))])
    assert all(f"{word}:" in head for word in ("sm", "NCCL GB/s", "path"))
    tcp = next(ln for ln in lines if ln.split()[:1] == ["tcp100"])
    assert tcp.split()[6:8] == ["-", "-"]     # no plugin, no longer hop: not "0"
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
    assert {r["key"] for r in data["releases"]} == set(NCCL_CONSTANTS)


@pytest.mark.parametrize(("argv", "words"), [
    ([], "give a BOX, --judge (the model on published tables) or --boxes"),
    (["h100_sxm8", "--boxes"], "give one of BOX, --judge or --boxes"),
    (["h100_sxm8", "--judge"], "give one of BOX, --judge or --boxes"),
    (["--judge", "--json", "x.json"], "--json writes a BOX's table or the --boxes report"),
    (["--published"], "unrecognized arguments: --published"),
    (["tpu_pod"], "invalid choice: 'tpu_pod'"),
    (["pcie5_8", "-n", "9"], "at most 8"),
    (["pcie5_8", "-n", "1"], "--world-size"),
    (["h100_sxm8", "--harness", "mpi"], "--harness"),
    (["h100_sxm8", "--sizes", "lots"], "--sizes"),
    (["h100_sxm8", "--nodes", "2"], "--nodes 2 needs --network"),
    (["h100_sxm8", "--network", "ib_ndr400x8"], "--network ib_ndr400x8 joins nodes"),
    (["h100_sxm8", "--nodes", "2", "--network", "wifi"], "--network"),
    (["h100_sxm8", "--nodes", "3", "--network", "tcp100", "-n", "20"], "multiple"),
    (["h100_sxm8", "--collective", "broadcast", "--nodes", "2", "--network", "tcp100"],
     "on one node"),
    (["h100_sxm8", "--collective", "all_gather", "--json", "x.json"], "--json writes"),
    (["h100_sxm8", "--collective", "gather"], "--collective"),
    (["h100_sxm8", "--nccl-version", "latest"], "the modelled ones are 2.18"),
    (["h100_sxm8", "--nccl-version", "2.x"], "--nccl-version"),
    # a CUDA version is refused, not priced as the newest release with a warning
    (["h100_sxm8", "--release", "12.8"], "'12.8' is not an NCCL release (NCCL's are 2.x")])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys) -> None:
    assert nccl_main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == ""
    assert len(err) == 1 and words in err[0], err
    assert err[0].startswith("python -m distlab.nccl: error: ") and err[0].endswith("(see --help)")


def test_help_names_the_examples_the_default_sizes_and_the_judgement(capsys) -> None:
    assert nccl_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m distlab.nccl ")
    flat = " ".join(text.split())
    assert "64 KiB..4 GiB x4" in flat and "python -m distlab.judge nccl --published" in flat
    assert "--release RELEASE, --nccl-version RELEASE" in flat and "--judge" in flat
    assert "python -m distlab.nccl --boxes" in flat
    assert nccl_main(["h100_sxm8"]) == 0
    sizes = [ln.split()[:2] for ln in capsys.readouterr().out.splitlines()
             if ln.strip() and ln.split()[0][0].isdigit()]
    assert sizes[0] == ["64", "KiB"] and sizes[-1] == ["4", "GiB"]


def test_a_bug_is_a_traceback_not_bad_input(monkeypatch) -> None:
    """A KeyError inside the model is a bug: it is raised, not turned into one line and exit 2."""
    import distlab.nccl.lines as lines

    def broken(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(lines, "nccl_execution", broken)
    with pytest.raises(KeyError, match="planted"):
        nccl_main(["h100_sxm8", "--sizes", "1G"])


def test_runs_as_a_module() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "distlab.nccl", "h100_sxm8", "--sizes", "1G"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].split()[:3] == ["size", "algo", "proto"]


def test_the_header_names_the_column_it_explains(capsys) -> None:
    assert nccl_main(["h100_sxm8", "--sizes", "64K"]) == 0
    head, columns = capsys.readouterr().out.splitlines()[:2]
    assert head.endswith("NCCL's choice, predicted time as measured")
    assert "predicted us" in columns and "estimate us" in columns


def test_judge_prints_what_judge_nccl_published_prints(monkeypatch, capsys) -> None:
    """``--judge`` as ``python -m distlab.rccl --judge``: the same report as ``python -m
    distlab.judge nccl --published``, from one module (:mod:`distlab.evidence.nccl.judged`, whose
    tables tests/judge/test_judge_nccl_command.py checks; stood in for here, since pricing
    every published table takes seconds)."""
    import distlab.evidence.nccl.judged as judged
    import distlab.judge.nccl_command as judge_command
    from distlab.judge.nccl_command import main as judge_main

    parts = {"published_lines": ["# constants (us): planted"], "multinode_lines": ["# nodes"],
             "collective_lines": ["# other collectives"]}
    for name, lines in parts.items():
        monkeypatch.setattr(judged, name, lambda *a, lines=lines, **k: list(lines))
        monkeypatch.setattr(judge_command, name, getattr(judged, name))
    assert nccl_main(["--judge"]) == 0
    ours = capsys.readouterr().out
    assert judge_main(["--published"]) == 0
    assert capsys.readouterr().out == ours == "# constants (us): planted\n# nodes\n" \
        "# other collectives\n"


@pytest.mark.parametrize("option", ["--release", "--nodes", "--sizes", "--judge", "--boxes",
                                    "--json"])
def test_the_nccl_and_rccl_commands_spell_the_same_things_alike(option, capsys) -> None:
    from distlab.rccl.__main__ import main as rccl_main

    assert nccl_main(["--help"]) == 0
    nccl_help = capsys.readouterr().out
    assert rccl_main(["--help"]) == 0
    rccl_help = capsys.readouterr().out
    assert option in nccl_help and option in rccl_help
