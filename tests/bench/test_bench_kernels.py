"""python -m distlab.bench kernels on this CPU: the tables, the planner's price where a GPU kind
is named, a kernel torch lacks here as a skipped row with its reason, bad options refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distlab.bench import kernels
from distlab.plan.calibration import SHIPPED
from distlab.plan.kernels import layer_matmuls
from distlab.plan.model import PRESETS

SMALL = ["--device", "cpu", "--models", "gpt3-1.3b", "--tp", "8", "--attention-tp", "8",
         "--tokens", "16", "--seq-lens", "16", "--reps", "1", "--warmup", "0", "--dtype", "fp32"]


def test_a_small_run_on_cpu_writes_both_tables(tmp_path: Path, capsys) -> None:
    out = tmp_path / "k.json"
    assert kernels.main([*SMALL, "--backends", "flash,cudnn", "--gpu", "h100",
                         "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "priced as the planner's H100-80GB-SXM" in text
    doc = json.loads(out.read_text())
    rows, attention = doc["rows"], doc["attention"]
    products = layer_matmuls(PRESETS["gpt3-1.3b"], 8, 16)
    assert [r["product"] for r in rows] == [p.name for p in products] + ["layer"]
    layer = rows[-1]
    assert layer["flops"] == sum(p.step_flops for p in products)
    assert layer["measured_s"] == pytest.approx(sum(r["measured_s"] for r in rows[:-1]))
    for r in rows:
        assert r["measured_s"] > 0 and r["error_pct"] == pytest.approx(
            (r["measured_s"] - r["model_s"]) / r["model_s"] * 100)
    flash, cudnn = attention
    assert flash["backend"] == "flash" and flash["measured_s"] > 0 and flash["heads"] == 2
    # the planner's attention takes model_s at `attention` x its matrix rate: the measured
    # kernel's factor is that rate over the planner's matrix rate
    assert flash["factor"] == pytest.approx(
        flash["model_s"] * SHIPPED.attention / flash["measured_s"])
    assert cudnn["measured_s"] is None and "no cudnn kernel" in cudnn["skipped"]
    assert doc["gpu_kind"] == "H100-80GB-SXM" and doc["rate"]["attention"] == SHIPPED.attention


def test_without_a_gpu_kind_nothing_is_priced(tmp_path: Path, capsys) -> None:
    out = tmp_path / "k.json"
    assert kernels.main([*SMALL, "--backends", "math", "--json", str(out)]) == 0
    assert "no planner price" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["gpu_kind"] is None
    assert all("model_s" not in r and r["measured_s"] > 0 for r in doc["rows"])
    assert [r["backend"] for r in doc["attention"]] == ["math"]
    assert doc["attention"][0]["vs_matmul"] > 0 and "factor" not in doc["attention"][0]


@pytest.mark.parametrize(("argv", "message"), [
    (["--tp", "3"], "a degree that splits"),
    (["--attention-tp", "7", "--models", "llama3-8b"], "a divisor of llama3-8b's 32 heads"),
    (["--gpu", "v100"], "must be one of A100-40GB-SXM"),
    (["--backends", "triton"], "comma list of flash, cudnn, efficient, math"),
    (["--models", "gpt5"], "comma list of"),
])
def test_bad_options_are_one_line_and_exit_2(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        kernels.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine "
                    "without CUDA")
def test_cuda_asked_for_without_one_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        kernels.main(["--device", "cuda"])
    assert e.value.code == 2 and "torch sees no CUDA device" in capsys.readouterr().err
