"""The AMD boxes and NICs of ``python -m distlab.rccl --boxes``: constants with sources, each
box's judged tables counted from the published set, and what is not priced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.evidence.nccl.inventory import boxes_lines
from distlab.evidence.rccl.inventory import box_lines, box_rows, nic_rows
from distlab.evidence.rccl.judged import judge, published_tables
from distlab.rccl.__main__ import main
from distlab.rccl.boxes import AMD_BOXES, AMD_NICS, NOT_PRICED
from distlab.rccl.execution import NIC_GBPS, ONE_NODE_ARCHS
from distlab.rccl.tables import RCCL_ARCH_TABLES


def test_every_box_and_nic_states_its_source_and_the_priced_ones_are_the_arch_with_tables() -> None:
    for b in AMD_BOXES:
        assert b.links == 7 and b.source and b.rccl_link_gbps == 48.0
        assert b.priced == (b.arch in RCCL_ARCH_TABLES), b.key
        # every architecture's one node is timed now: no box is priced on some nodes only
        assert b.arch in ONE_NODE_ARCHS and b.priced_where == "", b.key
    assert {b.gpu for b in AMD_BOXES} == {"MI300X", "MI325X", "MI355X"}
    assert all(n.gbps == 50.0 == NIC_GBPS and n.source for n in AMD_NICS)
    assert {n.key for n in AMD_NICS} == {"cx7", "thor2", "pollara"}


def test_each_boxs_judgement_is_its_gpus_published_tables() -> None:
    rows = {r["key"]: r for r in box_rows()}
    gpu_of = {t["id"]: t["gpu"] for t in published_tables()}
    for b in AMD_BOXES:
        judged = [j for j in judge() if gpu_of[j.id] == b.gpu]
        assert rows[b.key]["points"] == sum(len(j.rows) for j in judged)
        assert rows[b.key]["tables"] == sum(1 for t in published_tables() if t["gpu"] == b.gpu)
    # MI355X: held-out tables only; one node priced too (19 points at the scaled xGMI rates),
    # the -g 8 table's small sizes and the two clusters' tree sizes (each on the other's fit)
    # its p90
    mi355 = [j for j in judge() if gpu_of[j.id] == "MI355X"]
    assert all(j.split == "held_out" for j in mi355) and len(mi355) == 7
    assert sum(len(j.rows) for j in mi355 if j.id.endswith("1node")) == 19
    assert rows["mi355x_8"]["points"] == 60 and rows["mi355x_8"]["priced"] == "yes"
    assert rows["mi355x_8"]["median_pct"] == pytest.approx(12.9, abs=0.05)
    assert rows["mi355x_8"]["p90_pct"] > 30
    assert rows["mi300x_8"]["priced"] == rows["mi325x_8"]["priced"] == "yes"
    assert rows["mi325x_8"]["tables"] == 4 and rows["mi325x_8"]["p90_pct"] < 5
    # every multi-node published table is counted under exactly one NIC
    multi = [t for t in published_tables() if t["nodes"] > 1]
    assert sum(r["tables"] for r in nic_rows()) == len(multi)


def test_boxes_prints_every_box_nic_and_limit(tmp_path: Path, capsys) -> None:
    out = tmp_path / "boxes.json"
    assert main(["--boxes", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for b in AMD_BOXES:
        assert f"\n{b.key} " in text and f"{b.key} ({b.gpu}, {b.arch}):" in text
    for n in AMD_NICS:
        assert n.name in text
    assert all(len(ln) <= 100 for ln in box_lines()) and box_lines() == text.splitlines()
    assert text.count("\n  - ") == len(NOT_PRICED)
    data = json.loads(out.read_text())
    assert [b["key"] for b in data["boxes"]] == [b.key for b in AMD_BOXES]
    assert data["not_priced"] == list(NOT_PRICED)


def test_the_nvidia_boxes_point_amd_users_to_the_rccl_model() -> None:
    text = "\n".join(boxes_lines())
    assert "python -m distlab.rccl --boxes" in text


@pytest.mark.parametrize("argv", [["--boxes", "--judge"]])
def test_boxes_and_judge_together_is_one_line_and_exit_2(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give one of --judge and --boxes" in err[0]
