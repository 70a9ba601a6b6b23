"""``python -m distlab.plan``: the ranked table, one given layout, JSON, and bad input (one
line, exit 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distlab.plan.__main__ import main


def _fits_at(row: list[str]) -> int:
    """The index of a table row's ``fits`` cell: GiB to spare (``+``) or short (``-``)."""
    return next(i for i, t in enumerate(row) if t[:1] in "+-" and t[1:2].isdigit())


def test_ranks_the_layouts_that_fit_fastest_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-8b", "--gpus", "8", "--global-batch", "16", "--top", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# llama3-8b: 8.03B parameters, sequence 8192")
    assert "layouts fit; the 4 first, fastest first, each checked by replaying its step" in out[1]
    rows = [line.split() for line in out[3:7]]
    steps = [float(r[_fits_at(r) + 1]) for r in rows]
    assert all(float(r[_fits_at(r)]) >= 0 for r in rows)
    assert len(rows) == 4
    assert all(a <= b * 1.01 for a, b in zip(steps, steps[1:], strict=False))


def test_one_layout_explained_and_written_as_json(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "plan.json"
    assert main(["gpt3-1.3b", "--gpu", "a100", "--gpus", "16", "--global-batch", "32",
                 "--layout", "dp=4,tp=2,pp=2,zero=1,mb=2", "--explain", "1",
                 "--json", str(out_file)]) == 0
    text = capsys.readouterr().out
    assert "dp4 tp2 pp2 zero1 sp 1F1B mb2" in text and "pipeline rank 1: busy" in text
    doc = json.loads(out_file.read_text())
    (only,) = doc["layouts"]
    assert only["fields"]["tp"] == 2 and only["memory_bytes"]["total"] > 0
    assert only["step_seconds"]["step"] == pytest.approx(sum(
        v for k, v in only["step_seconds"].items() if k != "step"))


def test_a_model_from_a_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model file is read; without gated_ffn a note says which MLP was priced (a Llama-like
    13B without it prices as a two-matrix MLP, 10.18B parameters), and none with it."""
    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"layers": 4, "hidden": 512, "heads": 8, "vocab": 1000,
                             "seq_len": 1024}))
    assert main([str(f), "--gpus", "2", "--global-batch", "4", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# mine: 0.01B parameters")
    assert "# note: mine.json gives no gated_ffn: priced as a two-matrix MLP (512 -> 2048 -> " \
        "512, GPT's)" in out
    shape = {"layers": 40, "hidden": 5120, "heads": 40, "vocab": 32000, "seq_len": 4096,
             "ffn_hidden": 13824}
    f.write_text(json.dumps(shape))
    assert main([str(f), "--gpus", "8", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "10.18B parameters" in out and "gives no gated_ffn" in out
    f.write_text(json.dumps(shape | {"gated_ffn": True}))
    assert main([str(f), "--gpus", "8", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "13.02B parameters" in out and "note:" not in out


def test_a_layout_whose_tensor_parallelism_crosses_nodes_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["llama3-8b", "--gpus", "16", "--global-batch", "16", "--layout"]
    assert main([*argv, "dp=1,tp=16"]) == 0
    out = capsys.readouterr().out
    assert "# note: tp=16 spans 2 nodes (8 GPUs of the group per node): its collectives are " \
        "priced across nodes over ib_ndr400x8" in out
    assert main([*argv, "dp=2,tp=8"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_explain_names_both_bubbles_and_the_last_stages_output_layer(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The bubble column is the busiest rank's idle time; the other ranks idle longer by the
    work they lack, which is the output layer only the last stage runs (equal stages)."""
    assert main(["llama3-70b", "--gpus", "64", "--global-batch", "256", "--layout",
                 "dp=4,tp=4,pp=4,zero=1,recompute=full", "--explain", "1"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"pipeline rank (\d): busy ([\d.]+) s, idle ([\d.]+) s(.*)", out)
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3]
    busy = [float(r[1]) for r in rows]
    idle = [float(r[2]) for r in rows]
    output = float(re.search(r"; ([\d.]+) s of it the output layer, which only the last stage "
                             r"runs", rows[3][3]).group(1))
    assert busy[3] - busy[0] == pytest.approx(output, abs=2e-4)
    bubble = float(re.search(r"bubble ([\d.]+) s: the idle time of the busiest rank \(rank 3\)",
                             out).group(1))
    assert bubble == pytest.approx(idle[3], abs=1e-4) and idle[0] > bubble
    assert re.search(r"Bubble fraction \(idle share of every rank's time\): [\d.]+%", out)


def test_help_imports_no_torch_and_ctrl_c_while_importing_is_one_line() -> None:
    """``--help`` reads the options without torch (the planner is pure); a Ctrl-C while the
    command imports the planner ends in one line and exit 130, no traceback."""
    code = ("import sys; from distlab.plan.__main__ import main; rc = main(['--help']); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH'); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("NO-TORCH"), done.stderr
    assert "--explain N" in done.stdout
    stop = ("import sys, types\n"
            "class Stop(types.ModuleType):\n"
            "    def __getattr__(self, name):\n"
            "        raise KeyboardInterrupt\n"
            "sys.modules['distlab.plan.planner'] = Stop('distlab.plan.planner')\n"
            "from distlab.plan.__main__ import main\n"
            "sys.exit(main(['llama3-8b']))\n")
    done = subprocess.run([sys.executable, "-c", stop], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 130
    assert done.stderr.strip().splitlines() == [
        "python -m distlab.plan: interrupted by Ctrl-C; nothing written"]


def test_recompute_choices_add_torchtitans_per_op_checkpointing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--recompute none,op,full`` tries per-op checkpointing too: it ranks among the fastest
    layouts of Llama 3 8B on 8 GPUs, in less memory than the same split without it; the
    default tries none and full only."""
    argv = ["llama3-8b", "--gpus", "8", "--global-batch", "16", "--top", "10"]
    assert main(argv) == 0
    assert "op-ac" not in capsys.readouterr().out
    assert main(argv + ["--recompute", "none,op,full"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[3:13]]
    mem = {" ".join(r[1:_fits_at(r) - 4]): float(r[_fits_at(r) - 4]) for r in rows}
    assert mem["dp4 cp2 fsdp mb1 op-ac"] < mem["dp4 cp2 fsdp mb1"]


def test_nothing_fits_without_full_recompute_says_it_was_not_tried(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-70b", "--gpus", "8", "--global-batch", "8", "--recompute", "none"]) == 0
    assert "full recompute was not tried" in capsys.readouterr().out


def test_nothing_fits_says_what_would(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama3-405b", "--gpus", "8", "--global-batch", "8", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "nothing fits in 79.2 GiB" in out
    assert "on 112 GPUs it fits, priced: dp1 tp8 pp7 cp2 zero1 sp 1F1B mb1 full-ac needs " \
        "73.7 GiB per GPU with the same global batch of 8" in out
    assert "at most 0 of" in out and "the least short" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["nope"], "neither a preset"),
    (["llama3-8b", "--layout", "dp=4"], "uses dp*tp*pp*cp = 4 GPUs"),
    (["llama3-8b", "--layout", "dp=8,tq=1"], "unknown key 'tq'"),
    (["llama3-8b", "--gpu", "p100"], "gpu must be one of"),
    (["llama3-8b", "--gpu-spec", "memory_gib=24,bf16_tflops=71"],
     "gpu-spec: bandwidth_gbs missing"),
    (["llama3-8b", "--gpu-spec", "memory_gib=24,bf16_tflops=71,bandwidth_gbs=936,box=nvl"],
     "gpu-spec: box='nvl' is not a box of NCCL's model"),
    (["llama3-8b", "--gpu", "mi350x"], "gpu must be one of"),
    (["llama3-70b", "--gpu", "mi300x", "--gpus", "16", "--network", "ib_ndr400x8"],
     "network must be one of 'cx7', 'thor2', 'pollara'"),
    (["llama3-8b", "--gpu", "mi300x", "--layout", "dp=4,tp=2"],
     "a group of 2 GPUs on 1 node (RCCL's model holds whole 8-GPU nodes only)"),
    (["llama3-8b", "--gpus", "12"], "whole nodes"),
    (["llama3-8b", "--gpus", "0"], "--gpus"),
    (["llama3-8b", "--recompute", "none,ops"], "must be a comma list of none, selective, op"),
    (["llama3-8b", "--explain", "9", "--top", "2", "--global-batch", "16"], "--explain 9"),
    (["llama3-8b", "--explain", "99", "--global-batch", "16"], "only 10 layouts are shown"),
    (["llama3-8b", "--explain", "2", "--layout", "dp=8"], "only 1 layout is shown"),
    (["gpt3-175b", "--gpus", "64", "--seq-len", "8192"],
     "gpt3-175b learns positions for 2048 tokens"),
    (["llama3-8b", "--gpus", "16", "--layout", "dp=1,tp=16,tp=8"], "'tp=16' and 'tp=8' both"),
    (["llama3-8b", "--layout", "dp=8,fsdp,zero=1"], "'fsdp' and 'zero=1' both set zero"),
    (["llama3-8b", "--layout", "dp=8,v=2,stages_per_rank=2"], "both set stages_per_rank"),
    # the layout's GPU count is refused before its batch (8 is no multiple of dp=3)
    (["llama3-8b", "--layout", "dp=3,tp=7"], "'dp=3,tp=7' uses dp*tp*pp*cp = 21 GPUs; --gpus is 8"),
    (["llama3-8b", "--layout", "dp=8,recompute_num_layers=5"],
     "unknown key 'recompute_num_layers' in 'recompute_num_layers=5'; the keys are dp, tp"),
    (["llama3-8b", "--layout", "dp=8,tp"], "'tp' is not KEY=VALUE"),
    (["llama3-8b", "--layout", "dp=8,precision=fp32", "--precision", "mixed"],
     "--precision mixed and the layout's precision=fp32 disagree"),
    (["./no/such/model.json"], "MODEL ./no/such/model.json: no such file"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """One line on stderr, exit 2, and nothing on stdout (no table printed before the
    error)."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert err[0].startswith("python -m distlab.plan: error: ") and \
        err[0].endswith(" (see --help)") and err[0].count("(see --help)") == 1, err
    assert captured.out == ""


def test_bad_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.json"
    f.write_text("{not json")
    assert main([str(f)]) == 2
    f.write_text(json.dumps({"layers": 2}))
    assert main([str(f)]) == 2
    assert "missing field" in capsys.readouterr().err


def test_trace_writes_the_explained_step(tmp_path: Path) -> None:
    from distlab.trace.chrome import read_chrome_trace

    out = tmp_path / "step.json"
    assert main(["gpt3-1.3b", "--gpus", "8", "--global-batch", "16", "--layout",
                 "dp=2,pp=4", "--explain", "1", "--trace", str(out)]) == 0
    lanes = {s.lane for s in read_chrome_trace(out).spans}
    assert lanes == {f"rank{r}/compute" for r in range(4)}
    assert main(["gpt3-1.3b", "--trace", str(out)]) == 2  # --trace needs --explain


def test_the_attention_kernel_is_chosen_and_said(capsys: pytest.CaptureFixture[str]) -> None:
    """--attention-kernel cudnn prices every layout with cuDNN's attention (labelled), faster
    than FlashAttention-2 on an H100 at long sequences; on an A100, where no speed was
    measured, a note says it is priced as flash."""
    args = ["llama3-8b", "--gpus", "8", "--global-batch", "8", "--seq-len", "32768",
            "--layout", "dp=1,cp=8,fsdp"]
    assert main(args) == 0
    flash = capsys.readouterr().out
    assert main([*args, "--attention-kernel", "cudnn"]) == 0
    cudnn = capsys.readouterr().out
    assert "cudnn-attn" in cudnn and "cudnn-attn" not in flash and "note:" not in cudnn

    def step(text: str) -> float:
        row = next(line for line in text.splitlines() if line.startswith("1 ")).split()
        return float(row[_fits_at(row) + 1])

    assert step(cudnn) < step(flash)
    assert main(["llama3-8b", "--gpu", "a100", "--gpus", "8", "--global-batch", "8",
                 "--layout", "dp=8,fsdp,recompute=full", "--attention-kernel", "cudnn"]) == 0
    assert "note: cudnn attention has no measured speed on A100-80GB-SXM: priced as flash" \
        in capsys.readouterr().out


def test_the_readmes_command_counts_what_notebook_17s_plan_counts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The README's ``python -m distlab.plan llama3-70b --gpus 64 --network ib_ndr400x8
    --global-batch 256`` (its default --top 10) prints the count of layouts that fit that
    notebook 17's ``plan(MODEL, HW, 256, top=8)`` prints: the count does not depend on how many
    layouts are shown (it once said 463 where the notebook said 464)."""
    from distlab.plan import hardware, model_spec, plan

    assert main(["llama3-70b", "--gpus", "64", "--network", "ib_ndr400x8",
                 "--global-batch", "256"]) == 0
    said = re.search(r"# at most (\d+) of (\d+) layouts fit", capsys.readouterr().out)
    assert said is not None
    notebook = plan(model_spec("llama3-70b"), hardware("h100", 64), 256, top=8)
    assert (int(said[1]), int(said[2])) == (notebook.fitting, notebook.tried)


def test_a_tight_layout_is_marked_and_the_mark_explained(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A layout that fits within the memory model's own error says ``tight`` in its ``fits``
    cell, and a line under the table says what that rests on (the error's p90, from the
    calibration constant, in GiB of this GPU)."""
    from distlab.plan.calibration import RESERVED_ERROR_P90

    assert main(["llama3-70b", "--gpus", "64", "--global-batch", "256", "--layout",
                 "dp=16,tp=2,cp=2,fsdp"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("1 dp16 tp2 cp2 fsdp"))
    assert "+0.1 tight" in row
    assert ("# tight: fits with less than 2.2 GiB to spare, within the memory model's own error\n"
            f"# ({RESERVED_ERROR_P90:.1f}% of the GPU's memory, its held-out p90") in out
    assert f"{RESERVED_ERROR_P90:.1f}" == "2.8"


def test_framework_hf_prices_the_gathered_logits(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``--framework hf``: a Hugging Face model under tensor parallelism keeps the whole
    vocabulary's logits on every rank (Llama 3 8B, tp=8, 4096 tokens: 3.1 GB of fp32 and
    16-bit logits where the vocabulary-parallel loss keeps an eighth)."""
    totals = {}
    for framework in ("default", "hf"):
        out = tmp_path / f"{framework}.json"
        assert main(["llama3-8b", "--gpus", "8", "--global-batch", "1", "--seq-len", "4096",
                     "--layout", "dp=1,tp=8,mb=1", "--framework", framework,
                     "--json", str(out)]) == 0
        (only,) = json.loads(out.read_text())["layouts"]
        totals[framework] = only["memory_bytes"]["total"]
    capsys.readouterr()
    assert totals["hf"] - totals["default"] >= 4096 * (128256 - 128256 // 8) * (4 + 2)
