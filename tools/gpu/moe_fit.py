"""MoE presets, shortened to a few layers, trained on one GPU as ``--verify`` trains them, each
run's peak allocated and reserved memory written beside the planner's prediction for the same
model and layout.

    PYTHONPATH=lib python tools/gpu/moe_fit.py OUT_DIR                 # the default cases
    PYTHONPATH=lib python tools/gpu/moe_fit.py OUT_DIR --cases "qwen3-30b-a3b 2 s4096 mb1 none"
    PYTHONPATH=lib python tools/gpu/moe_fit.py OUT_DIR --predict-only  # no GPU: predictions only

A case is ``MODEL LAYERS sSEQ mbN RECOMPUTE``: the preset with its first ``LAYERS`` layers (its
leading dense layers kept, as many as leave one MoE layer: what ``--verify-layers`` runs), one
GPU, ``dp=1`` FSDP2 (ZeRO 3) at micro-batch ``N``, one microbatch a step, ``fsdp-mixed``
precision, fused AdamW, FlashAttention, ``ep=1``. Every case runs in this one process on a
world of one (NCCL) with :func:`distlab.plan.verify.rank.run_rank`, the device freed between
cases; the prediction is :func:`distlab.plan.planner.price` of the shortened model and the
layout on an H200 (the allocator's setting read from ``PYTORCH_CUDA_ALLOC_CONF``). Writes
``moe_fit.json`` (rows, provenance) after every case and prints one line per case.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from distlab.plan.layout import Layout, hardware
from distlab.plan.planner import price
from distlab.plan.verify.rank import MeasuredOutOfMemory, VerifyCase, run_rank
from distlab.plan.verify.run import RUN_PRECISION, expandable_segments
from distlab.transformer import ModelSpec, model_spec

DEFAULT_CASES = (
    "qwen3-30b-a3b 4 s4096 mb1 none", "qwen3-30b-a3b 4 s4096 mb2 none",
    "qwen3-30b-a3b 4 s4096 mb2 full", "qwen3-30b-a3b 2 s4096 mb4 none",
    "qwen3-30b-a3b 2 s2048 mb2 none",
    "gpt-oss-120b 1 s4096 mb1 none", "gpt-oss-120b 1 s4096 mb2 full",
    "gpt-oss-120b 1 s2048 mb2 none",
    "mixtral-8x7b 1 s4096 mb1 none", "mixtral-8x7b 1 s4096 mb2 full",
    "deepseek-v3 2 s4096 mb1 none",
)


def parse(text: str) -> tuple[str, int, int, int, str]:
    """``(model, layers, seq_len, micro_batch, recompute)`` of a case's text."""
    w = text.split()
    if len(w) != 5 or not w[2].startswith("s") or not w[3].startswith("mb"):
        raise ValueError(f"case {text!r}: expected 'MODEL LAYERS sSEQ mbN RECOMPUTE'")
    return w[0], int(w[1]), int(w[2][1:]), int(w[3][2:]), w[4]


def shortened(model: str, layers: int, seq_len: int) -> ModelSpec:
    """The preset at ``seq_len`` with ``layers`` layers, as ``--verify-layers`` shortens it."""
    spec = model_spec(model, seq_len=seq_len)
    return replace(spec, layers=layers, name=f"{spec.name} ({layers} layers)",
                   dense_layers=min(spec.dense_layers, layers - 1))


def _predicted(spec: ModelSpec, lay: Layout) -> dict[str, Any]:
    p = price(spec, lay, hardware("h200", 1, gpus_per_node=1),
              expandable_segments=expandable_segments())
    return {"allocated": int(p.memory.allocated), "reserved": int(p.memory.reserved),
            "fits": bool(p.fits), "step_s": p.step.step_s, "parts": p.memory.parts()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder for moe_fit.json")
    p.add_argument("--cases", default=None, help="semicolon-separated cases (default: "
                   "the module's DEFAULT_CASES)")
    p.add_argument("--steps", type=int, default=2, help="timed steps after one untimed")
    p.add_argument("--predict-only", action="store_true", help="no runs: the predictions")
    p.add_argument("--limit-s", type=float, default=1e9, help="start no case after this")
    args = p.parse_args(argv)
    cases = [c.strip() for c in (args.cases.split(";") if args.cases else DEFAULT_CASES)
             if c.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"provenance": {
        "command": "python " + " ".join([os.path.relpath(__file__)] + (argv or sys.argv[1:])),
        "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}, "rows": []}
    run = not args.predict_only
    if run:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("nccl", rank=0, world_size=1)
        free, total = torch.cuda.mem_get_info(0)
        doc["provenance"]["device_total"] = int(total)
        doc["provenance"]["device_used_at_start"] = int(total - free)
    t0 = time.monotonic()
    for case in cases:
        if time.monotonic() - t0 > args.limit_s:
            doc["stopped"] = f"--limit-s reached before {case}"
            break
        model, layers, seq, mb, rc = parse(case)
        spec = shortened(model, layers, seq)
        lay = Layout(dp=1, zero=3, micro_batch=mb, global_batch=mb, recompute=rc,
                     precision=RUN_PRECISION)
        row: dict[str, Any] = {"case": case, "model": model, "layers": layers,
                               "moe_layers": spec.moe_layers, "seq_len": seq,
                               "micro_batch": mb, "recompute": rc, "layout": lay.label,
                               "predicted": _predicted(spec, lay)}
        start = time.monotonic()
        if run:
            try:
                m = run_rank(0, 1, VerifyCase(spec, lay, steps=args.steps, device="cuda"))
                row.update(measured=m.to_dict(), peak_allocated=m.peak_allocated,
                           peak_reserved=m.peak_reserved, oom=None)
            except MeasuredOutOfMemory as exc:
                row.update(measured=None, oom=exc.details)
            except Exception as exc:  # noqa: BLE001 - one case's failure is its row
                row.update(measured=None, oom=None,
                           error="".join(traceback.format_exception(exc))[-3000:])
                traceback.clear_frames(exc.__traceback__)
                torch.cuda.empty_cache()
        row["wall_s"] = round(time.monotonic() - start, 2)
        if run:   # what the case left allocated (a leak would inflate the next case)
            import gc

            gc.collect()
            torch.cuda.empty_cache()
            row["left_allocated"] = int(torch.cuda.memory_allocated(0))
        doc["rows"].append(row)
        (args.out / "moe_fit.json").write_text(json.dumps(doc, indent=1))
        pr = row["predicted"]
        line = (f"{case}: pred alloc {pr['allocated'] / 2**30:.2f} res "
                f"{pr['reserved'] / 2**30:.2f} GiB fits {pr['fits']}")
        if row.get("peak_allocated"):
            a, r = row["peak_allocated"], row["peak_reserved"]
            line += (f" | meas alloc {a / 2**30:.2f} ({(pr['allocated'] - a) / a:+.1%}) res "
                     f"{r / 2**30:.2f} ({(pr['reserved'] - r) / r:+.1%}) "
                     f"step {min(row['measured']['step_s']):.3f} s")
        if run:
            line += f" | left {row['left_allocated'] / 2**30:.2f} GiB"
        if run and not row.get("peak_allocated"):
            line += " | " + ("OOM " + json.dumps(row["oom"]) if row.get("oom") else
                             "error " + row.get("error", "").strip().splitlines()[-1])
        print(f"[{time.monotonic() - t0:.0f}s] {line}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
