"""tools/migrate_results.py: every committed result is at the current schema, a result without
one is brought to it with the fields readers need, and a second run changes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from distlab.profile.load import load_profile
from distlab.report.jsonfile import SCHEMA_VERSION, SchemaError, write_json
from helpers.paths import PROFILES, RESULTS
from helpers.tools import load_tool

H100 = PROFILES / "h100-2026-11-23"


tool = load_tool("migrate_results")


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def test_every_committed_result_carries_the_current_schema() -> None:
    files = tool.committed_files()
    assert len([p for p in files if p.is_relative_to(RESULTS)]) >= 90
    for path in files:
        doc = _read(path)
        if tool.is_chrome_trace(doc):
            assert "schema" not in doc, path  # Chrome's format, not distlab's
            continue
        assert doc.get("schema") == SCHEMA_VERSION and next(iter(doc)) == "schema", path


def test_a_run_over_the_committed_results_changes_nothing() -> None:
    assert tool.migrate_files(tool.committed_files(), write=False) == []
    assert tool.main(["--check"]) == 0


def _unmigrated_profile(dest: Path) -> Path:
    """The committed H100 profile as it was before results carried a schema: no ``schema``,
    calibrations without statistic and cores, allreduce rows without executor, options and
    mean, and the one-rank NCCL run it measured in ``runs``."""
    shutil.copytree(H100, dest)
    for path in dest.glob("*.json"):
        doc = _read(path)
        if tool.is_chrome_trace(doc):
            continue
        doc.pop("schema")
        if doc.get("part") == "collectives":
            for run in doc["runs"]:
                for key in ("statistic", "cpus_allowed", "local_world_size"):
                    run["calibration"].pop(key)
                for row in run["rows"]:
                    for key in ("executor", "options", "mean_us"):
                        row.pop(key)
            skip = doc["skipped"].pop()
            assert skip["what"] == "collectives/nccl"
            row = dict(doc["runs"][0]["rows"][0], busbw_gbps=0.0, predicted_us=None)
            doc["runs"].append({"backend": "nccl", "world_size": 1, "calibration": None,
                                "rows": [row]})
        for cal in tool._calibrations(doc):
            cal.pop("statistic", None)
        path.write_text(json.dumps(doc, indent=1))
    return dest


def test_a_profile_without_schema_is_refused_then_migrated_once(tmp_path) -> None:
    old = _unmigrated_profile(tmp_path / "h100")
    with pytest.raises(SchemaError, match="profile.json has no schema field"):
        load_profile(old)
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    changed = tool.migrate_files(tool._files([old]))
    assert sorted(p.name for p in changed) == ["collectives.json", "ddp.json", "env.json",
                                               "profile.json", "transfers.json"]
    for path in old.glob("*.json"):
        doc = _read(path)
        if not tool.is_chrome_trace(doc):
            assert doc["schema"] == SCHEMA_VERSION, path
    coll = _read(old / "collectives.json")
    assert [(r["backend"], r["world_size"]) for r in coll["runs"]] == [("gloo", 2), ("gloo", 4)]
    assert coll["skipped"][-1]["what"] == "collectives/nccl" and "1 GPU" in \
        coll["skipped"][-1]["why"]
    for run in coll["runs"]:
        cal = run["calibration"]
        assert cal["statistic"] == "median" and cal["local_world_size"] == run["world_size"]
        assert cal["cpus_allowed"] >= 1
        assert all(r["executor"] == ("builtin" if r["algorithm"] == "builtin" else "python")
                   and "mean_us" in r and "options" in r for r in run["rows"])
    # what the migration makes is what is committed, summary included
    for path in old.iterdir():
        if path.suffix == ".json":
            assert _read(path) == _read(H100 / path.name), path.name
    assert (old / "summary.md").read_text() == (H100 / "summary.md").read_text()
    assert (old / "trace.json").read_bytes() == before["trace.json"]
    load_profile(old)
    # idempotent: a second run writes nothing
    after = {p.name: p.read_bytes() for p in old.iterdir()}
    assert tool.migrate_files(tool._files([old])) == []
    assert {p.name: p.read_bytes() for p in old.iterdir()} == after


def test_bench_results_get_executor_options_and_startup(tmp_path) -> None:
    filled = {"allreduce_ws2_run1.json": ("executor", "options", "mean_us"),
              "pipeline_cpu.json": ("startup_s",)}
    names = list(filled)
    for name in names:
        doc = _read(RESULTS / name)
        doc.pop("schema")
        for row in doc["rows"]:
            for key in filled[name]:
                row.pop(key)
        doc.get("calibration", {}).pop("statistic", None)
        (tmp_path / name).write_text(json.dumps(doc))
    assert len(tool.migrate_files(tool._files([tmp_path]))) == 2
    for name in names:
        assert _read(tmp_path / name) == _read(RESULTS / name), name
    assert tool.migrate_files(tool._files([tmp_path])) == []


def test_a_newer_schema_is_an_error_naming_the_file(tmp_path, capsys) -> None:
    path = write_json(tmp_path / "new.json", {"rows": []})
    path.write_text(json.dumps({"schema": SCHEMA_VERSION + 1, "rows": []}))
    assert tool.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"schemas 0 to {SCHEMA_VERSION}" in err


def test_schema_1_errors_become_error_pct_of_the_rows_own_numbers(tmp_path) -> None:
    """Schema 1 kept errors as fractions, some (model - measured) / measured of times, transfers
    (measured - model) / model of GB/s; schema 2 holds every one as error_pct (measured time
    against the model's, percent), recomputed from each row's numbers."""
    pipeline, ddp = _read(RESULTS / "pipeline_cpu.json"), _read(PROFILES / "h100-2026-11-23"
                                                                / "ddp.json")
    transfers, images = _read(RESULTS / "transfers_h100.json"), _read(
        RESULTS / "images" / "imagenet_cpu_2core.json")
    old = {name: json.loads(json.dumps(doc)) for name, doc in
           [("pipeline", pipeline), ("ddp", ddp), ("transfers", transfers), ("images", images)]}
    for row in old["pipeline"]["rows"]:
        del row["sim_error_pct"]
        row["sim_err"] = (row["sim_s"] - row["wall_s"]) / row["wall_s"]
    ddp_rows = [d for d in tool._dicts(old["ddp"]) if "error_pct" in d]
    assert ddp_rows
    for row in ddp_rows:
        e = row.pop("error_pct")
        row["error"] = None if e is None else \
            (row["predicted_step_s"] - row["step_s"]) / row["step_s"]
    worst = old["transfers"]["targets"]["model_max_error_ge_64KiB"]
    for v in worst.values():
        v["max_error"] = v.pop("max_error_pct") / 7   # any number: the rows give it again
    for row in old["images"]["rows"]:
        e = row.pop("model_error_pct")
        row["model_err"] = None if e is None else e / 100
        if "model_error_pct_without" in row:
            row["model_err_without"] = {k: v / 100 for k, v in
                                        row.pop("model_error_pct_without").items()}
    for name, doc in old.items():
        doc["schema"] = 1
        again = tool.migrated(doc, tmp_path)
        want = {"pipeline": pipeline, "ddp": ddp, "transfers": transfers, "images": images}[name]
        assert _close(again, want), name
    slower = [r for r in pipeline["rows"] if r["wall_s"] > r["sim_s"]]
    assert slower and all(r["sim_error_pct"] > 0 for r in slower)   # slower than the model: +


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return a == b
