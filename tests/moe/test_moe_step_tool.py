"""tools/gpu/moe_step.py, the GPU timing of one MoE layer's parts, runs on a CPU at tiny sizes:
its JSON carries every part, the layer and the dense products with provenance, and its trimmed
trace holds the annotated parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_moe_step_tool_runs_tiny_on_a_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(ROOT / "tools/gpu/moe_step.py"), str(tmp_path),
                           "--tiny", "--iters", "1", "--warmup", "0"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "router" in proc.stdout and "tiny-a" in proc.stdout
    doc = json.loads((tmp_path / "moe_step.json").read_text())
    for key in ("device", "torch", "distlab_commit", "started", "command", "copy_bandwidth_Bps"):
        assert doc[key], key
    assert len(doc["rows"]) == 3
    for row in doc["rows"]:
        for part in ("router", "permute", "experts", "combine", "layer", "dense_routed",
                     "dense_active"):
            assert row[part]["forward_s"] > 0 and row[part]["backward_s"] > 0, part
        assert ("shared" in row) == bool(row["shared_experts"])
        assert row["rows"] == row["tokens"] * row["top_k"]
        assert row["experts"]["path"] == "grouped_mm"
    trace = json.loads((tmp_path / "moe_layer_trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"moe/router", "moe/permute", "moe/experts", "moe/combine"} <= names
    assert doc["trace"]["bytes"] < 200_000
