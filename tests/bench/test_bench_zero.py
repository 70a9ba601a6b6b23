"""``python -m distlab.bench zero``: tiny run through the CLI, and the pure summary. Its table and
JSON carry the bytes per rank its notebook is about: measured model states beside the model."""

from __future__ import annotations

import json

import pytest

from distlab.bench.__main__ import main
from distlab.bench.zero import VARIANTS, columns, summarize
from distlab.zero.memory_model import zero_memory
from helpers.leaks import no_leaks

ARGS = ["zero", "--world-size", "2", "--layers", "1", "--width", "16", "--batch", "2",
        "--steps", "1", "--rounds", "2", "--timeout", "120"]
PARAMS = 16 * 16 + 16   # one Linear(16, 16)


def test_summary_takes_the_slowest_rank_and_pairs_rounds():
    a = {v: [1.0, 2.0, 3.0] for v in VARIANTS}
    b = {**a, "stage1": [2.0, 4.0, 9.0]}
    rows = {r["variant"]: r for r in summarize([a, b])}
    assert rows["ddp"]["vs_ddp"] == 1.0 and rows["ddp"]["step_ms"] == 2000.0
    assert rows["stage1"]["vs_ddp"] == 2.0 and rows["stage1"]["max_ms"] == 9000.0
    assert "state_bytes" not in rows["ddp"]


def test_summary_takes_the_largest_rank_s_bytes_and_the_model():
    seconds = [{v: [1.0, 1.0] for v in VARIANTS}] * 2
    held = [{v: {"params": 4_000_000, "grads": 4_000_000, "optimizer": 2_000_000 + r,
                 "total": 10_000_000 + r} for v in VARIANTS} for r in (0, 3)]
    rows = {r["variant"]: r for r in summarize(seconds, held, 1_000_000, 4)}
    assert rows["stage1"]["state_bytes"] == 10_000_003
    assert rows["stage1"]["state_parts"]["optimizer"] == 2_000_003
    assert rows["ddp"]["model_state_bytes"] == zero_memory(1_000_000, 4, 0, "fp32").total
    assert rows["stage2"]["model_state_bytes"] == zero_memory(1_000_000, 4, 2, "fp32").total
    headers = [c.header for c in columns(list(rows.values()))]
    assert headers[-2:] == ["states(MiB)", "model(MiB)"], "the unit that fits 4 to 16 MB"


def test_cli_tiny_reports_bytes_per_rank(capsys, tmp_path):
    out_json = tmp_path / "zero.json"
    with no_leaks():
        rc = main([*ARGS, "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    table = [ln.split() for ln in lines if ln.split() and ln.split()[0] in VARIANTS]
    assert [t[0] for t in table] == list(VARIANTS)
    header = next(ln.split() for ln in lines if ln.split()[:1] == ["variant"])
    assert header[-2:] == ["states(KiB)", "model(KiB)"]
    assert all(len(ln) <= 110 for ln in lines), "no printed line wraps"
    doc = json.loads(out_json.read_text())
    assert doc["params"] == PARAMS
    rows = {r["variant"]: r for r in doc["rows"]}
    for v, stage in (("ddp", 0), ("stage0", 0), ("stage1", 1), ("stage2", 2)):
        model = zero_memory(PARAMS, 2, stage, "fp32")
        r = rows[v]
        assert r["model_state_bytes"] == model.total
        parts = r["state_parts"]
        assert r["state_bytes"] == parts["total"] == sum(
            parts[k] for k in ("params", "grads", "optimizer"))
        # measured: the states' storages (buckets padded to a multiple of the world size, Adam's
        # step counters) within a few hundred bytes of the model's
        assert abs(parts["params"] - model.params) <= 64, (v, parts, model)
        assert abs(parts["grads"] - model.grads) <= 64, (v, parts, model)
        assert abs(parts["optimizer"] - model.optimizer) <= 64, (v, parts, model)
        shown = table[list(VARIANTS).index(v)]
        assert float(shown[-2]) == round(r["state_bytes"] / 1024, 3)
        assert float(shown[-1]) == round(model.total / 1024, 3)
    held = [rows[v]["state_bytes"] for v in ("stage2", "stage1", "ddp")]
    assert held == sorted(held) and len(set(held)) == 3, "each stage holds less"


def test_cli_stage3_beside_fsdp2(capsys):
    with no_leaks():
        rc = main([*ARGS, "--stage", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    names = ["ddp", "fsdp2", "stage3", "stage3:nopf", "stage3:builtin", "stage3:builtin:nopf"]
    table = [ln.split() for ln in lines if ln.split() and ln.split()[0] in names]
    assert [t[0] for t in table] == names
    header = next(ln.split() for ln in lines if ln.split()[:1] == ["variant"])
    assert header[4:8] == ["vs", "ddp", "vs", "fsdp2"]
    assert float(table[1][5]) == 1.0, "fsdp2 against itself"
    # FSDP2 and stage 3 hold the same shards (Adam keeps a step counter per tensor: FSDP2 has
    # one per parameter, stage 3 one per unit) and share the model's
    assert float(table[1][-2]) == pytest.approx(float(table[2][-2]), rel=0.01)
    assert table[2][-1] == table[1][-1]
    assert all(len(ln) <= 110 for ln in lines)


def test_cli_bad_stage_is_one_line(capsys):
    rc = main(["zero", "--stage", "5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--stage" in err[0]
