"""How fast one GPU runs the routed experts' matrix products of an MoE layer, against one dense
product of the same FLOPs: the grouped-GEMM efficiency the planner's expert dimension assumes.

    python tools/gpu/expert_gemm.py OUT.json

For each shape (a published model's hidden size, expert FFN width, routed experts and top-k)
and each expert-parallel degree, the local experts' SwiGLU products (gate and up fused,
``[tokens_e, hidden] x [hidden, 2 ffn]``, then ``[tokens_e, ffn] x [ffn, hidden]``) are timed
with balanced routing, three ways: a loop of one product per expert (Megatron-Core's
``SequentialMLP``), ``torch._grouped_mm`` where this torch has it (one grouped kernel, as
torchtitan and Megatron's ``GroupedMLP`` run), and one dense product of the same FLOPs (all
tokens through one expert-sized weight of ``experts x`` its width). bf16, forward only, CUDA
events around 20 timed calls after 5 warm-up calls; TFLOP/s from 2 m n k per product.
Writes JSON rows and the device, torch and CUDA versions; prints a table.
"""

from __future__ import annotations

import json
import platform
import sys
import time

import torch

# (name, hidden, expert ffn, routed experts, top-k): the models' published configs
SHAPES = [
    ("qwen3-30b-a3b", 2048, 768, 128, 8),
    ("qwen3-235b-a22b", 4096, 1536, 128, 8),
    ("deepseek-v3", 7168, 2048, 256, 8),
    ("gpt-oss-120b", 2880, 2880, 128, 4),
    ("mixtral-8x7b", 4096, 14336, 8, 2),
]
TOKENS = 8192          # tokens of one micro-batch on a rank (e.g. 2 x 4096)
EPS = (8, 32)          # expert-parallel degrees: local experts = experts / ep


def _time(fn, iters: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def measure(name: str, hidden: int, ffn: int, experts: int, top_k: int, ep: int) -> dict:
    dev, dt = "cuda", torch.bfloat16
    local = max(1, experts // ep)
    per_expert = TOKENS * top_k // experts       # balanced: each expert's tokens on this rank
    rows = local * per_expert
    x = torch.randn(rows, hidden, device=dev, dtype=dt)
    w1 = torch.randn(local, hidden, 2 * ffn, device=dev, dtype=dt) * 0.02
    w2 = torch.randn(local, ffn, hidden, device=dev, dtype=dt) * 0.02
    flops = 2 * rows * hidden * 2 * ffn + 2 * rows * ffn * hidden

    def loop() -> None:
        for e in range(local):
            xe = x[e * per_expert:(e + 1) * per_expert]
            h = xe @ w1[e]
            (h[:, :ffn] * h[:, ffn:]) @ w2[e]

    out = {"model": name, "hidden": hidden, "expert_ffn": ffn, "experts": experts,
           "top_k": top_k, "ep": ep, "local_experts": local, "tokens_per_expert": per_expert,
           "rows": rows, "flops": flops}
    out["loop_s"] = _time(loop)
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is not None:
        offs = torch.arange(per_expert, rows + 1, per_expert, device=dev, dtype=torch.int32)
        try:
            def grouped_fn() -> None:
                h = grouped(x, w1, offs=offs)
                grouped(h[:, :ffn] * h[:, ffn:], w2, offs=offs)
            out["grouped_s"] = _time(grouped_fn)
        except Exception as exc:  # noqa: BLE001 - recorded, not hidden
            out["grouped_error"] = f"{type(exc).__name__}: {exc}"[:300]
    wd1 = torch.randn(hidden, 2 * ffn, device=dev, dtype=dt) * 0.02
    wd2 = torch.randn(ffn, hidden, device=dev, dtype=dt) * 0.02

    def dense() -> None:     # the same FLOPs: all rows through one expert-sized weight
        h = x @ wd1
        (h[:, :ffn] * h[:, ffn:]) @ wd2
    out["dense_s"] = _time(dense)
    for k in ("loop_s", "grouped_s", "dense_s"):
        if k in out:
            out[k.replace("_s", "_tflops")] = flops / out[k] / 1e12
    return out


def main(path: str) -> int:
    props = torch.cuda.get_device_properties(0)
    doc = {"what": __doc__.split("\n\n")[0], "device": props.name,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "tokens": TOKENS, "rows": []}
    print(f"{'model':16s} {'ep':>3s} {'local':>5s} {'tok/e':>6s} {'loop':>7s} {'grouped':>8s} "
          f"{'dense':>7s}  TFLOP/s")
    for shape in SHAPES:
        for ep in EPS:
            if shape[3] < ep:
                continue
            row = measure(*shape, ep)
            doc["rows"].append(row)
            print(f"{row['model']:16s} {ep:3d} {row['local_experts']:5d} "
                  f"{row['tokens_per_expert']:6d} {row['loop_tflops']:7.0f} "
                  f"{row.get('grouped_tflops', float('nan')):8.0f} {row['dense_tflops']:7.0f}",
                  flush=True)
            with open(path, "w") as f:
                json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
