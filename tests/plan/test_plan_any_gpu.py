"""Any GPU in the planner: the GPUs users train on (GeForce cards, V100, the export parts, L4,
GH200, B300) and a user's own from its figures (``--gpu-spec``), each saying what its price
rests on: a stand-in box for its collectives, an assumed compute rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlab.plan.__main__ import main
from distlab.plan.layout import hardware, parse_layout
from distlab.plan.planner import price
from distlab.transformer import model_spec

RTX3090_ZERO3 = ["llama3-8b", "--gpu", "rtx3090", "--gpus", "8", "--global-batch", "8",
                 "--seq-len", "2048", "--layout", "dp=8,zero=3,mb=1,recompute=full"]
"""A Llama-3-8B full fine-tune with ZeRO-3 on 8 RTX 3090s (24 GB), one that ran out of memory."""


@pytest.mark.parametrize("name", ["rtx3090", "rtx4090", "rtx5090", "v100", "V100-32GB", "a800",
                                  "h800", "h20", "l40s", "l4", "gh200", "b300"])
def test_every_gpu_users_train_on_is_planned(name: str) -> None:
    hw = hardware(name, 8)
    layout = parse_layout("dp=8,zero=3,mb=1,recompute=full", gpus=8, global_batch=8)
    p = price(model_spec("llama3-8b", seq_len=2048), layout, hw)
    assert p.step.step_s > 0 and p.memory.total > 0


def test_the_rtx3090_zero3_case_is_priced_saying_what_it_rests_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(RTX3090_ZERO3) == 0
    out = capsys.readouterr().out
    assert "on 8x RTX-3090 (one node), 24.0 GiB each" in out
    assert "# collectives priced through pcie4_8, a stand-in: no box of RTX-3090 is held" in out
    assert ("# compute rate ASSUMED: 0.74 of RTX-3090's data-sheet peak (71 TFLOP/s bf16 "
            "dense), ampere's efficiency, fitted on other GPUs' runs") in out
    assert "dp8 fsdp mb1 full-ac" in out


def test_the_rtx3090_zero3_case_is_never_a_fit_with_room() -> None:
    """Users ran out of memory on it: the planner may not call it a fit with room to spare.
    With ZeRO-3's fp32 master copy priced (2 + 2 + 12 bytes per parameter, sharded) it needs
    23.99 GiB of the card's nominal 24.0: tight, within the memory model's own error."""
    hw = hardware("rtx3090", 8)
    layout = parse_layout("dp=8,zero=3,mb=1,recompute=full", gpus=8, global_batch=8)
    p = price(model_spec("llama3-8b", seq_len=2048), layout, hw)
    assert not p.fits or p.tight, \
        f"{p.memory.total / 2**30:.2f} GiB of {hw.gpu.memory_bytes / 2**30:.1f}"
    assert round(p.memory.optimizer / 2**30, 2) == 11.22     # 12 bytes of 8.03B over 8 ranks


def test_a_calibrated_gpu_on_its_own_box_says_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-8b", "--gpu", "h800", "--gpus", "8", "--global-batch", "8",
                 "--layout", "dp=8,zero=1"]) == 0
    out = capsys.readouterr().out
    assert "ASSUMED" not in out and "stand-in" not in out


def test_an_architecture_with_no_fitted_rate_is_assumed(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-8b", "--gpu", "l40s", "--gpus", "8", "--global-batch", "8",
                 "--layout", "dp=8,zero=3,recompute=full"]) == 0
    out = capsys.readouterr().out
    assert ("# compute rate ASSUMED: 0.60 of L40S's data-sheet peak (362 TFLOP/s bf16 dense), "
            "the planner's default efficiency; no published run on ada in bf16 calibrates it"
            ) in out
    assert "stand-in" not in out      # l40s_pcie8 is an L40S box


def test_your_own_gpu_from_its_figures(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    spec = "name=my3090,memory_gib=24,bf16_tflops=71,bandwidth_gbs=936"
    assert main([*RTX3090_ZERO3[:1], "--gpu-spec", spec, *RTX3090_ZERO3[5:]]) == 0
    out = capsys.readouterr().out
    assert "on 8x my3090 (one node), 24.0 GiB each" in out
    assert "# collectives priced through pcie4_8, a stand-in: no box of my3090 is held" in out
    assert ("compute rate ASSUMED: 0.60 of my3090's data-sheet peak (71 TFLOP/s bf16 dense), "
            "the planner's default efficiency; no published run on an unnamed architecture "
            "calibrates it") in out
    path = tmp_path / "gpu.json"
    path.write_text('{"name": "my3090", "memory_gib": 24, "bf16_tflops": 71, '
                    '"bandwidth_gbs": 936, "architecture": "ampere"}')
    assert main([*RTX3090_ZERO3[:1], "--gpu-spec", str(path), *RTX3090_ZERO3[5:]]) == 0
    out = capsys.readouterr().out
    assert "0.74 of my3090's data-sheet peak (71 TFLOP/s bf16 dense), ampere's efficiency" in out


def test_a_bad_gpu_spec_is_one_line_naming_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-8b", "--gpu-spec", "memory_gib=24,bf16_tflops=71,bandwidth=936"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpu-spec: unknown key 'bandwidth'" in err[0]
