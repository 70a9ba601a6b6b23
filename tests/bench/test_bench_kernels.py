"""python -m distlab.bench kernels on this CPU: the tables, the planner's price where a GPU kind
is named, a kernel torch lacks here as a skipped row with its reason, bad options refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distlab.bench import kernels
from distlab.plan.calibration import SHIPPED
from distlab.plan.kernels import Matmul, layer_matmuls, model_matmul_s
from distlab.plan.layout import gpu_kind
from distlab.plan.model import PRESETS
from helpers.float_tolerance import error_ratio

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
    (["--gpu", "p100"], "must be one of A100-40GB-SXM"),
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


def test_fp8_times_three_float8_products_and_prices_the_planners_fp8_rate(
        tmp_path: Path, capsys) -> None:
    out = tmp_path / "k.json"
    # tp 32: a quarter of the widths of SMALL's tp 8 (torch's float8 product on a CPU is
    # emulated, about a second per product at tp 16; the fp8 price is below the bf16 one at
    # every width, so the check holds the same at width 64)
    argv = [a for a in SMALL if a not in ("--dtype", "fp32")]
    argv[argv.index("--tp") + 1] = "32"
    assert kernels.main([*argv, "--dtype", "fp8", "--backends", "math", "--gpu", "h100",
                         "--json", str(out)]) == 0
    assert "float8 e4m3 via torch._scaled_mm, attention bf16" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["dtype"] == "fp8"
    gpu = gpu_kind("h100")
    for r in doc["rows"]:
        assert r["model_s"] == pytest.approx(
            model_matmul_s(SHIPPED, gpu, r["width"], r["flops"], "fp8"))
        assert r["model_s"] < model_matmul_s(SHIPPED, gpu, r["width"], r["flops"], "bf16")
    assert doc["attention"][0]["measured_s"] > 0


def test_fp8_products_equal_the_16_bit_products_of_the_cast_operands() -> None:
    """What is timed is the real computation: each float8 product, widened, equals the
    float32 product of the same float8 values."""
    f8 = torch.float8_e4m3fn
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 48, generator=g).to(f8)
    w = torch.randn(64, 48, generator=g).to(f8)
    one = torch.ones(())
    got = torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
    # each product of two float8 values is exact in float32; their 48-term sums may round in
    # another order in each kernel
    assert error_ratio(got, x.float() @ w.float().t(), reduction_length=48) <= 1
    products = [Matmul("a", 16, 64, 32), Matmul("b", 32, 16, 48)]   # small: emulated on a CPU
    seconds = kernels.measure_matmuls_fp8(products, torch.device("cpu"), warmup=0, reps=1)
    assert len(seconds) == len(products) and all(s > 0 for s in seconds)


FP8_RUN = Path(__file__).resolve().parents[2] / "results" / "gpu-h100-fp8-2026-11-27"


def test_the_fp8_results_readme_quotes_the_run() -> None:
    """The numbers results/gpu-h100-fp8-2026-11-27/README.md states, from its two JSON files."""
    import statistics

    fp8, bf16 = (json.loads((FP8_RUN / f"kernels-{d}.json").read_text())
                 for d in ("fp8", "bf16"))
    for doc, dtype in ((fp8, "fp8"), (bf16, "bf16")):
        assert doc["dtype"] == dtype and doc["device"] == "NVIDIA H100 80GB HBM3"
        assert doc["provenance"]["cuda"]["available"]

    def layers(doc: dict) -> dict:
        return {(r["model"], r["tp"]): r for r in doc["rows"] if r["product"] == "layer"}

    f, b = layers(fp8), layers(bf16)
    gains = [b[k]["measured_s"] / f[k]["measured_s"] for k in f]
    assert (round(min(gains), 2), round(max(gains), 2)) == (1.87, 2.08)
    assert round(statistics.median(gains), 2) == 1.91
    wide = [r["efficiency"] for r in f.values() if r["width"] >= 1024]
    assert (round(min(wide), 2), round(max(wide), 2)) == (1.33, 1.45)
    planner = SHIPPED.efficiency["hopper/fp8"] / SHIPPED.efficiency["hopper/bf16"]
    assert round(planner, 2) == 1.54 and planner < min(gains)
    readme = (FP8_RUN / "README.md").read_text()
    assert f"gain is smaller: {planner:.2f}x" in readme
