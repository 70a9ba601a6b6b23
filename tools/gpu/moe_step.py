"""Where one MoE layer's time goes on one GPU: router, permute, routed experts, combine, shared
expert and host syncs, forward and backward, against dense products of the same FLOPs.

    python tools/gpu/moe_step.py OUT_DIR [--tiny] [--iters N] [--commit SHA]

For each per-GPU shape of the published MoE runs (``distlab/plan/data/published_moe_runs.json``:
its preset's hidden size, expert FFN width, routed and shared experts and top-k; the GPU's
tokens per microbatch, ``mbs * seq_len / cp``, over ``tp`` with sequence parallelism; the
``experts / ep`` local experts), one MoE layer is built from :mod:`distlab.moe` exactly as
``distlab.moe.MoE`` and ``distlab.moe.dispatch`` compose it, with the all-to-alls left out
(the rank's own routed rows stand in for what it receives; routing a fresh router's choices on
random tokens, near balanced):

- ``router``: ``TokenChoiceRouter`` (the gate GEMM, fp32 scores, softmax or sigmoid, top-k,
  normalisation, the token counts' ``bincount`` and the auxiliary balance loss);
- ``permute``: ``sort_by_expert`` (a stable argsort of the chosen experts), the gather of the
  routed rows and their weights, and dispatch's reorder into local-expert order
  (``expert_major_order`` and a second gather);
- ``experts``: ``GroupedExperts`` of the local experts (torch's grouped matmul where
  ``grouped_mm_problem`` finds none, its ``last_path`` recorded);
- ``combine``: the inverse reorder, the weights applied in fp32 and the scatter-add into the
  token rows (``index_put(accumulate=True)``);
- ``shared``: the shared experts' ``SwiGLU`` (where the model has them);
- ``layer``: all of it in sequence, forward, backward, and a whole step (forward and backward
  on a fresh graph);
- ``dense_routed``: one SwiGLU of the expert's width on all routed rows (the routed experts'
  FLOPs as one dense product); ``dense_active``: one SwiGLU ``(top_k + shared) * ffn`` wide on
  the tokens (a dense MLP of the layer's active FLOPs, what a dense model's rate prices).

Each part is timed alone on inputs from one layer run: CUDA events around ``iters`` calls after
warm-up calls (on a CPU, ``time.perf_counter``), its backward on a retained graph. Host syncs
are counted with ``torch.cuda.set_sync_debug_mode`` per part. The copy bandwidth of a 256 MiB
buffer is measured too, to express permute and combine as passes over the routed rows. For
one shape (qwen3-30b-a3b, 8192 tokens at ep 8: its first) a ``torch.profiler`` trace of one
layer step is recorded with each part annotated, and trimmed to kernels, annotations and
synchronising runtime calls (``moe_layer_trace.json``).

Writes ``moe_step.json`` (rows and provenance: device, torch, CUDA, distlab commit, date,
command) and prints a table. ``--tiny`` runs three tiny shapes in float32 (on a CPU when there
is no GPU), fast: what the test runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from distlab.moe import (
    GroupedExperts,
    SwiGLU,
    TokenChoiceRouter,
    expert_major_order,
    sort_by_expert,
)

PARTS = ("router", "permute", "experts", "combine", "shared")
TRACE_KEEP = {"kernel", "gpu_user_annotation", "user_annotation", "gpu_memcpy", "gpu_memset"}
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpyAsync",
              "cudaEventSynchronize")

# the routers of the models' published configs
SCORE = {"deepseek-v3": "sigmoid"}
TINY = [  # (model, tokens, hidden, ffn, experts, top_k, shared, ep)
    ("tiny-a", 64, 64, 32, 8, 2, 0, 2),
    ("tiny-b", 96, 64, 64, 16, 4, 1, 4),
    ("tiny-c", 32, 32, 32, 4, 1, 0, 1),
]


def published_shapes() -> list[tuple]:
    """The distinct per-GPU shapes of the published MoE runs, in file order."""
    from distlab.evidence.plan.published_moe import load_moe_runs, moe_run_inputs
    from distlab.plan.experts import _tokens
    seen: dict[tuple, list[str]] = {}
    for run in load_moe_runs():
        inp = moe_run_inputs(run)
        m = inp.model
        key = (run.model, _tokens(m, inp.layout), m.hidden, m.expert_width, m.experts,
               m.top_k, m.shared_experts, run.ep)
        seen.setdefault(key, []).append(run.id)
    return [(*k, ids) for k, ids in seen.items()]


class Clock:
    """Seconds per call of a function: CUDA events on a GPU, perf_counter on a CPU."""

    def __init__(self, device: torch.device, iters: int, warmup: int) -> None:
        self.cuda = device.type == "cuda"
        self.iters, self.warmup = iters, warmup

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def __call__(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.warmup):
            fn()
        self.sync()
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(self.iters):
                fn()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b) / 1e3 / self.iters
        t = time.perf_counter()
        for _ in range(self.iters):
            fn()
        return (time.perf_counter() - t) / self.iters


def count_syncs(fn: Callable[[], Any], device: torch.device) -> int | None:
    """Synchronising CUDA calls one call of ``fn`` makes (None on a CPU)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


class Layer:
    """One MoE layer of one GPU, built from distlab.moe (module docstring)."""

    def __init__(self, tokens: int, hidden: int, ffn: int, experts: int, top_k: int,
                 shared: int, ep: int, score: str, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.tokens, self.hidden, self.ep, self.dtype = tokens, hidden, ep, dtype
        self.local = experts // ep
        self.router = TokenChoiceRouter(hidden, experts, top_k, score_func=score,
                                        normalize=True, aux_loss_coeff=1e-3).to(device, dtype)
        self.experts = GroupedExperts(hidden, ffn, self.local).to(device, dtype)
        self.shared = SwiGLU(hidden, ffn * shared).to(device, dtype) if shared else None
        self.x = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
        self.grad = torch.randn(tokens, hidden, device=device, dtype=dtype)

    def route(self, x: torch.Tensor) -> Any:
        return self.router(x)

    def permute(self, x: torch.Tensor, routing: Any) -> tuple:
        assignment, token = sort_by_expert(routing)
        weight = routing.weights.reshape(-1)[assignment].unsqueeze(1)
        routed = x.index_select(0, token)
        received = routing.tokens_per_expert.reshape(self.ep, self.local)
        order = expert_major_order(received)
        return routed.index_select(0, order), received.sum(dim=0), order, token, weight

    def combine(self, y: torch.Tensor, order: torch.Tensor, token: torch.Tensor,
                weight: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), dtype=order.dtype, device=order.device)
        back = (y.index_select(0, inverse).to(torch.float32) * weight).to(self.dtype)
        return base.index_put((token,), back, accumulate=True)

    def forward(self, x: torch.Tensor, annotate: bool = False) -> tuple:
        rf = torch.profiler.record_function if annotate else (lambda _n: nullcontext())
        with rf("moe/router"):
            routing = self.route(x)
        with rf("moe/permute"):
            local, counts, order, token, weight = self.permute(x, routing)
        with rf("moe/experts"):
            y = self.experts(local, counts)
        with rf("moe/shared"):
            base = self.shared(x) if self.shared is not None else torch.zeros_like(x)
        with rf("moe/combine"):
            out = self.combine(y, order, token, weight, base)
        return out, routing.aux_loss

    def step(self, annotate: bool = False) -> None:
        out, aux = self.forward(self.x, annotate)
        rf = torch.profiler.record_function if annotate else (lambda _n: nullcontext())
        with rf("moe/backward"):
            torch.autograd.backward([out, aux], [self.grad, torch.ones_like(aux)])


def _bwd(outs: list[torch.Tensor]) -> Callable[[], None]:
    grads = [torch.randn_like(o) if o.dim() else torch.ones_like(o) for o in outs]

    def run() -> None:
        torch.autograd.backward(outs, grads, retain_graph=True)
    return run


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def measure(layer: Layer, clock: Clock, device: torch.device) -> dict[str, Any]:
    """Forward and backward seconds of each part, the layer, and the dense products."""
    out: dict[str, Any] = {}
    x = layer.x
    with torch.no_grad():
        routing0 = layer.route(x)
    parts: dict[str, tuple[Callable[[], Any], Callable[[], list[torch.Tensor]]]] = {}

    def router_f() -> Any:
        return layer.route(x)
    parts["router"] = (router_f, lambda: [router_f().weights, router_f().aux_loss])

    xp = _leaf(x)

    def permute_f() -> tuple:
        return layer.permute(xp, routing0)
    parts["permute"] = (permute_f, lambda: [permute_f()[0]])

    with torch.no_grad():
        local, counts, order, token, weight = layer.permute(x, routing0)
    xl = _leaf(local)

    def experts_f() -> torch.Tensor:
        return layer.experts(xl, counts)
    parts["experts"] = (experts_f, lambda: [experts_f()])

    y = _leaf(local)
    w = _leaf(weight)
    base = _leaf(torch.zeros_like(x))

    def combine_f() -> torch.Tensor:
        return layer.combine(y, order, token, w, base)
    parts["combine"] = (combine_f, lambda: [combine_f()])

    if layer.shared is not None:
        xs = _leaf(x)

        def shared_f() -> torch.Tensor:
            return layer.shared(xs)
        parts["shared"] = (shared_f, lambda: [shared_f()])

    for name, (fwd, outs) in parts.items():
        row = {"forward_s": clock(fwd), "syncs_forward": count_syncs(fwd, device)}
        bwd = _bwd(outs())
        row["backward_s"] = clock(bwd)
        row["syncs_backward"] = count_syncs(bwd, device)
        out[name] = row
    out["experts"]["path"] = layer.experts.last_path

    def layer_f() -> tuple:
        return layer.forward(x)
    lay = {"forward_s": clock(layer_f), "syncs_forward": count_syncs(layer_f, device)}
    lay["backward_s"] = clock(_bwd(list(layer_f())))
    lay["step_s"] = clock(layer.step)
    lay["syncs_step"] = count_syncs(layer.step, device)
    # the host's own time for one step (launches and syncs), beside the device's
    clock.sync()
    t = time.perf_counter()
    for _ in range(clock.iters):
        layer.step()
    clock.sync()
    lay["step_wall_s"] = (time.perf_counter() - t) / clock.iters
    out["layer"] = lay

    rows = local.shape[0]
    ffn = layer.experts.hidden
    dense_r = SwiGLU(layer.hidden, ffn).to(device, layer.dtype)
    xr = _leaf(local)
    active = (rows // layer.tokens) * ffn + (layer.shared.hidden if layer.shared else 0)
    dense_a = SwiGLU(layer.hidden, active).to(device, layer.dtype)
    xa = _leaf(x)
    for name, mod, inp in (("dense_routed", dense_r, xr), ("dense_active", dense_a, xa)):
        def f(mod: Any = mod, inp: torch.Tensor = inp) -> torch.Tensor:
            return mod(inp)
        out[name] = {"forward_s": clock(f), "backward_s": clock(_bwd([f()]))}
    out["rows"] = rows
    out["routed_bytes"] = rows * layer.hidden * x.element_size()
    return out


def copy_bandwidth(device: torch.device, nbytes: int, clock: Clock) -> float:
    """Bytes per second of a device-to-device copy (read and write counted)."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    return 2 * nbytes / clock(lambda: b.copy_(a))


def trim_trace(path: Path, out: Path) -> dict[str, Any]:
    """Keep the kernels, annotations, memcpys/memsets and synchronising runtime calls of a
    chrome trace, with short args; returns counts."""
    doc = json.loads(path.read_text())
    keep = []
    for ev in doc.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        name = ev.get("name", "")
        if cat in TRACE_KEEP or (cat == "cuda_runtime" and name in SYNC_CALLS) \
                or (cat == "cpu_op" and name.startswith("moe/")):
            e = {k: ev[k] for k in ("name", "cat", "ph", "ts", "dur", "pid", "tid") if k in ev}
            e["name"] = name[:120]
            e["ts"] = round(float(e["ts"]), 3)
            e["dur"] = round(float(e.get("dur", 0)), 3)
            keep.append(e)
    t0 = min((e["ts"] for e in keep), default=0.0)
    for e in keep:
        e["ts"] = round(e["ts"] - t0, 3)
    trimmed = {"traceEvents": keep, "displayTimeUnit": "ms",
               "about": "one MoE layer step (tools/gpu/moe_step.py), trimmed to kernels, "
                        "annotations (moe/<part>), memcpys and synchronising runtime calls"}
    out.write_text(json.dumps(trimmed, separators=(",", ":")))
    return {"events": len(keep), "bytes": out.stat().st_size}


def record_trace(layer: Layer, device: torch.device, out_dir: Path) -> dict[str, Any]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(3):
        layer.step(annotate=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    raw = out_dir / "moe_layer_trace_full.json"
    with torch.profiler.profile(activities=acts) as prof:
        layer.step(annotate=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(raw))
    info = trim_trace(raw, out_dir / "moe_layer_trace.json")
    raw.unlink()
    return info


def _commit(given: str | None) -> str:
    if given:
        return given
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:7.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--tiny", action="store_true", help="three tiny float32 shapes (CPU test)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--commit", default=None, help="distlab's commit (where git is absent)")
    p.add_argument("--no-trace", action="store_true")
    p.add_argument("--trace-model", default="qwen3-30b-a3b",
                   help="the model whose first shape is traced (--tiny: the first shape)")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if args.tiny else torch.bfloat16
    if not args.tiny and device.type != "cuda":
        p.error("the published shapes need a GPU; --tiny runs on a CPU")
    shapes = [(*t, []) for t in TINY] if args.tiny else published_shapes()
    args.out.mkdir(parents=True, exist_ok=True)
    clock = Clock(device, args.iters, args.warmup)
    torch.manual_seed(0)
    doc: dict[str, Any] = {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "device": (torch.cuda.get_device_name(0) if device.type == "cuda"
                   else f"cpu ({platform.processor() or platform.machine()})"),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "distlab_commit": _commit(args.commit),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": "python " + " ".join([os.path.relpath(__file__)] + (argv or sys.argv[1:])),
        "dtype": str(dtype).replace("torch.", ""), "iters": args.iters, "warmup": args.warmup,
        "copy_bandwidth_Bps": copy_bandwidth(device, (1 << 20) if args.tiny else (256 << 20),
                                             clock),
        "rows": []}
    head = (f"{'model':16s} {'tok':>5s} {'ep':>3s} {'L':>3s} |" + "".join(
        f" {n:>15s}" for n in (*PARTS, "layer", "dense_routed", "dense_active"))
        + " | step  wall  syncs")
    print("fwd/bwd ms per part;", doc["device"], doc["torch"])
    print(head)
    for model, tokens, hidden, ffn, experts, top_k, shared, ep, runs in shapes:
        layer = Layer(tokens, hidden, ffn, experts, top_k, shared, ep,
                      SCORE.get(model, "softmax"), device, dtype)
        row = {"model": model, "tokens": tokens, "hidden": hidden, "expert_ffn": ffn,
               "experts": experts, "top_k": top_k, "shared_experts": shared, "ep": ep,
               "local_experts": layer.local, "runs": runs}
        row.update(measure(layer, clock, device))
        doc["rows"].append(row)
        cells = "".join(
            f" {_ms(row[n]['forward_s'])}/{_ms(row[n]['backward_s']).strip():>7s}"
            if n in row else f" {'-':>15s}"
            for n in (*PARTS, "layer", "dense_routed", "dense_active"))
        lay = row["layer"]
        print(f"{model:16s} {tokens:5d} {ep:3d} {layer.local:3d} |{cells} | "
              f"{_ms(lay['step_s'])} {_ms(lay['step_wall_s'])} {lay['syncs_step']}", flush=True)
        if not args.no_trace and "trace" not in doc \
                and (args.tiny or model == args.trace_model):
            doc["trace"] = {"model": model, "tokens": tokens, "ep": ep,
                            **record_trace(layer, device, args.out)}
        (args.out / "moe_step.json").write_text(json.dumps(doc, indent=1))
        del layer
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
