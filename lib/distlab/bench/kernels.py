"""A transformer layer's kernels on this device, beside the planner's compute rate.

    python -m distlab.bench kernels                       # on the GPU (CUDA), every default
    python -m distlab.bench kernels --models llama3-8b --tp 1,8 --seq-lens 2048,8192
    python -m distlab.bench kernels --device cpu --models gpt3-1.3b --tokens 64 --seq-lens 64

The planner (``python -m distlab.plan``) prices a layer's compute with two constants fitted on
whole published training runs: the matrix products' efficiency (of the GPU's 16-bit peak, times
``w / (w + 512)``, ``w = hidden / tp``) and the causal attention's rate (0.30 of that). This
measures the kernels alone, in one run, and sets each beside the planner's price:

- **Matrix products** (the first table): each linear of one layer of each ``--models``
  preset split over each ``--tp`` degree as Megatron splits it
  (:func:`distlab.plan.kernels.layer_matmuls`), on ``--tokens`` tokens, forward and backward
  (``torch.nn.functional.linear`` and autograd: three products). ``TFLOP/s`` counts
  ``3 x 2 m k n``; ``eff`` is that over the GPU's peak; ``model`` is the planner's rate for
  that width; ``error%`` the measured time against the planner's
  (:func:`distlab.vocabulary.error_pct`, + = slower than the planner says). The planner's
  efficiency is a whole step's, so kernels alone are expected faster (negative): the gap is
  what a step spends outside its matrix products.
- **Attention** (the second table, ``attention`` in the JSON):
  ``torch.nn.functional.scaled_dot_product_attention``,
  causal, ``head_dim`` of the preset, each ``--backends`` kernel forced with
  ``torch.nn.attention.sdpa_kernel`` (``flash``: FlashAttention-2; ``cudnn``: cuDNN's fused
  attention; ``efficient``: memory-efficient; ``math``: unfused), forward and backward, batch
  ``max(1, --tokens // s)``. ``TFLOP/s`` counts the half of ``3 x 4 s^2 d`` a causal kernel
  computes; ``vs matmul`` is that over the same width's measured matrix rate, and ``factor`` over
  the planner's 16-bit rate without its width term (peak x efficiency, as the planner prices
  attention): comparable with the planner's ``attention`` (printed below). A
  kernel this device or torch lacks is a row with its reason and no time.

``--dtype fp8``: the three products of each linear run as float8 (``torch._scaled_mm``, every
operand e4m3, per-tensor scales, bf16 out; TransformerEngine's recipe puts the gradients in e5m2,
which times the same), with each operand already cast and laid out as the kernel wants (a
training step also pays those casts and transposes: the kernels alone are what is measured);
``eff`` stays over the 16-bit peak and the planner's price is its fp8 rate. Attention has no
float8 kernel in SDPA and runs in bf16, as it does in a float8 training step.

Timing: ``--warmup`` calls, then ``--reps`` calls timed one by one (CUDA events on a GPU, the
host clock on CPU); the median is reported. Data: seeded normal values in ``--dtype``. Without
CUDA (``--device cpu``) it runs the same on the host at whatever size is asked (use small
ones), with no planner price unless ``--gpu`` names one. Needs no network and writes nothing
unless ``--json``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, run_cli
from distlab.cli import options
from distlab.plan.calibration import SHIPPED, ComputeRate
from distlab.plan.kernels import (
    AttentionShape,
    Matmul,
    attention_factor,
    attention_shape,
    gpu_kind_for_device,
    layer_matmuls,
    model_attention_s,
    model_matmul_s,
)
from distlab.plan.layout import GPU_KINDS, GpuKind, gpu_kind
from distlab.report.table import Column, Table
from distlab.transformer import PRESETS, ModelSpec
from distlab.vocabulary import error_pct

__all__ = ["BACKENDS", "BENCHMARK", "KernelsConfig", "main", "measure_attention",
           "measure_matmuls", "measure_matmuls_fp8"]

BACKENDS = ("flash", "cudnn", "efficient", "math")
"""``--backends`` names, each one member of ``torch.nn.attention.SDPBackend``."""

_SDPA = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
         "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


class _Clock:
    """Seconds of one call: CUDA events on a GPU, the host's clock otherwise."""

    def __init__(self, device: Any) -> None:
        import torch
        self.cuda = device.type == "cuda"
        self.torch = torch

    def time(self, call: Callable[[], None], warmup: int, reps: int) -> float:
        for _ in range(warmup):
            call()
        times = []
        for _ in range(reps):
            if self.cuda:
                start = self.torch.cuda.Event(enable_timing=True)
                stop = self.torch.cuda.Event(enable_timing=True)
                start.record()
                call()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop) / 1e3)
            else:
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def measure_matmuls(products: Sequence[Matmul], device: Any, dtype: Any, *, warmup: int,
                    reps: int) -> list[float]:
    """Median seconds of each product's forward and backward (``F.linear`` and autograd: the
    input's and the weight's gradients), in ``products``' order."""
    import torch
    import torch.nn.functional as F
    clock, out = _Clock(device), []
    g = torch.Generator(device="cpu").manual_seed(0)
    for p in products:
        x = torch.randn(p.m, p.k, generator=g).to(device, dtype).requires_grad_()
        w = torch.randn(p.n, p.k, generator=g).to(device, dtype).mul_(p.k ** -0.5)
        w.requires_grad_()
        grad = torch.randn(p.m, p.n, generator=g).to(device, dtype)

        def call(x: Any = x, w: Any = w, grad: Any = grad) -> None:
            x.grad = w.grad = None
            F.linear(x, w).backward(grad)

        out.append(clock.time(call, warmup, reps))
        del x, w, grad, call
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def measure_matmuls_fp8(products: Sequence[Matmul], device: Any, *, warmup: int,
                        reps: int) -> list[float]:
    """As :func:`measure_matmuls` with the three products of each linear in float8
    (``torch._scaled_mm``, e4m3 operands, per-tensor scales of 1, bf16 out): forward
    ``x @ w.T``, input gradient ``grad @ w``, weight gradient ``grad.T @ x``. Each operand is
    cast and laid out (first row-major, second column-major) before the timing.

    Raises:
        RuntimeError: torch has no float8 matrix product for this device.
    """
    import torch
    f8 = torch.float8_e4m3fn
    clock, out = _Clock(device), []
    g = torch.Generator(device="cpu").manual_seed(0)
    one = torch.ones((), device=device)

    def col(t: Any) -> Any:   # the same matrix, stored column-major
        return t.t().contiguous().t()

    for p in products:
        x = torch.randn(p.m, p.k, generator=g).to(device).to(f8)
        w = torch.randn(p.n, p.k, generator=g).mul_(p.k ** -0.5).to(device).to(f8)
        grad = torch.randn(p.m, p.n, generator=g).to(device).to(f8)
        pairs = ((x, w.t()), (grad, col(w)), (grad.t().contiguous(), col(x)))

        def call(pairs: Any = pairs) -> None:
            for a, b in pairs:
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        out.append(clock.time(call, warmup, reps))
        del x, w, grad, pairs, call
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def measure_attention(shape: AttentionShape, backend: str, device: Any, dtype: Any, *,
                      warmup: int, reps: int) -> tuple[float | None, str]:
    """Median seconds of one causal SDPA forward and backward of ``shape`` with ``backend``
    forced, and ``""``; or ``(None, reason)`` when the kernel cannot run it here."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator(device="cpu").manual_seed(1)
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    q, k, v = (torch.randn(*dims, generator=g).to(device, dtype).requires_grad_()
               for _ in range(3))
    grad = torch.randn(*dims, generator=g).to(device, dtype)

    def call() -> None:
        q.grad = k.grad = v.grad = None
        with sdpa_kernel(getattr(SDPBackend, _SDPA[backend])):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    try:
        return _Clock(device).time(call, warmup, reps), ""
    except RuntimeError as e:   # no kernel for this device, dtype or shape
        if device.type == "cuda" and "out of memory" in str(e):
            torch.cuda.empty_cache()
            return None, "out of memory"
        if "No viable backend" in str(e):
            return None, f"torch has no {backend} kernel for this device, dtype or shape"
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return None, first[:100]


@dataclass(frozen=True)
class KernelsConfig(BenchConfig):
    """Options of ``python -m distlab.bench kernels``."""

    device: str = opt("auto", "--device", choices=("auto", "cuda", "cpu"),
                      help="where to run (auto: CUDA when present)")
    models: tuple[str, ...] = opt(("llama3-8b", "llama3-70b", "gpt3-175b"), "--models",
                                  type=options.comma_choices(PRESETS, all_word=None),
                                  help="the planner's presets whose layer is measured")
    tp: tuple[int, ...] = opt((1, 2, 4, 8), "--tp", type=options.int_list(1),
                              help="tensor-parallel degrees: each splits the layer's widths")
    tokens: int = opt(8192, "--tokens", type=options.positive_int,
                      help="tokens per product (micro-batch x sequence)")
    seq_lens: tuple[int, ...] = opt((1024, 2048, 4096, 8192, 16384, 32768), "--seq-lens",
                                    type=options.int_list(1), help="attention sequence lengths")
    attention_tp: tuple[int, ...] = opt((1, 8), "--attention-tp", type=options.int_list(1),
                                        help="tp degrees whose attention is measured "
                                             "(heads per GPU = heads / tp)")
    backends: tuple[str, ...] = opt(("flash", "cudnn", "efficient"), "--backends",
                                    type=options.comma_choices(BACKENDS),
                                    help="SDPA kernels to force, one row each")
    dtype: str = opt("bf16", "--dtype", choices=("bf16", "fp16", "fp32", "fp8"),
                     help="element type of the tensors (fp8: the matrix products in float8, "
                          "the attention in bf16)")
    gpu: str | None = opt(None, "--gpu", metavar="KIND",
                          help="the planner's GPU kind to price with (default: from the "
                               f"device's name; one of {', '.join(GPU_KINDS)} or h100, h200...)")
    warmup: int = opt(3, "--warmup", type=options.int_at_least(0), help="untimed calls first")
    reps: int = opt(10, "--reps", type=options.positive_int, help="timed calls (median)")


def _resolve_device(name: str) -> Any:
    import torch
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _no_fp8_here(torch: Any, device: Any) -> str:
    """Why float8 matrix products cannot run on ``device``, or ``""``."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8 matrix product"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        return (f"{torch.cuda.get_device_name(device)} has no float8 tensor cores (compute "
                "capability 8.9 or later)")
    return ""


def _device_name(device: Any) -> str:
    import torch
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    import platform
    return platform.processor() or platform.machine() or "cpu"


def _model(c: KernelsConfig, device_name: str) -> GpuKind | None:
    if c.gpu is not None:
        return gpu_kind(c.gpu)
    return gpu_kind_for_device(device_name)


MATMUL_COLUMNS = (
    Column("model", "model", align="<"), Column("tp", "tp"), Column("w", "width"),
    Column("product", "product", align="<"), Column("m x k x n", "shape", align="<"),
    Column("ms", "measured_s", ".3f", 1e3), Column("TFLOP/s", "tflops", ".1f"),
    Column("eff", "efficiency", ".2f", missing="-"),
    Column("model TFLOP/s", "model_tflops", ".0f", missing="-"),
    Column("error%", "error_pct", "+.1f", missing="-"))

ATTENTION_COLUMNS = (
    Column("model", "model", align="<"), Column("tp", "tp"),
    Column("backend", "backend", align="<"), Column("s", "seq_len"),
    Column("b x heads", "batch_heads", align="<"),
    Column("ms", "measured_s", ".3f", 1e3, missing="-"),
    Column("TFLOP/s", "tflops", ".1f", missing="-"),
    Column("vs matmul", "vs_matmul", ".2f", missing="-"),
    Column("factor", "factor", ".2f", missing="-"),
    Column("error%", "error_pct", "+.1f", missing="-"),
    Column("skipped", "skipped", align="<", missing=""))


def _priced_dtype(dtype: str) -> str:
    """The planner's compute dtype for ``--dtype``: ``"fp8"`` or its 16-bit rate."""
    return "fp8" if dtype == "fp8" else "bf16"


def _matmul_rows(spec: ModelSpec, tp: int, c: KernelsConfig, device: Any, dtype: Any,
                 gpu: GpuKind | None, rate: ComputeRate) -> list[dict[str, Any]]:
    products = layer_matmuls(spec, tp, c.tokens)
    if c.dtype == "fp8":
        seconds = measure_matmuls_fp8(products, device, warmup=c.warmup, reps=c.reps)
    else:
        seconds = measure_matmuls(products, device, dtype, warmup=c.warmup, reps=c.reps)
    width = spec.hidden // tp
    rows = []
    # each product, then the whole layer (every product's FLOPs over their summed seconds)
    measured = [(p.name, f"{p.m}x{p.k}x{p.n}", p.step_flops, sec)
                for p, sec in zip(products, seconds, strict=True)]
    measured.append(("layer", "all", sum(p.step_flops for p in products), sum(seconds)))
    for name, shape, flops, s in measured:
        row: dict[str, Any] = {"model": spec.name, "tp": tp, "width": width, "product": name,
                               "shape": shape, "flops": flops, "measured_s": s,
                               "tflops": flops / s / 1e12}
        if gpu is not None:
            model_s = model_matmul_s(rate, gpu, width, flops, _priced_dtype(c.dtype))
            row.update(efficiency=flops / s / gpu.peak_flops, model_s=model_s,
                       model_tflops=flops / model_s / 1e12, error_pct=error_pct(s, model_s))
        rows.append(row)
    return rows


def _attention_rows(spec: ModelSpec, tp: int, c: KernelsConfig, device: Any, dtype: Any,
                    gpu: GpuKind | None, rate: ComputeRate,
                    layer_rate: float | None) -> list[dict[str, Any]]:
    rows = []
    for s in c.seq_lens:
        shape = attention_shape(spec, tp, s, max(1, c.tokens // s))
        for backend in c.backends:
            secs, why = measure_attention(shape, backend, device, dtype, warmup=c.warmup,
                                          reps=c.reps)
            row: dict[str, Any] = {"model": spec.name, "tp": tp, "backend": backend,
                                   "seq_len": s, "batch": shape.batch, "heads": shape.heads,
                                   "head_dim": shape.head_dim,
                                   "batch_heads": f"{shape.batch} x {shape.heads}",
                                   "causal_flops": shape.step_causal_flops,
                                   "measured_s": secs, "skipped": why or None}
            if secs is not None:
                per_s = shape.step_causal_flops / secs
                row.update(tflops=per_s / 1e12,
                           vs_matmul=per_s / layer_rate if layer_rate else None)
                if gpu is not None:
                    model_s = model_attention_s(rate, gpu, shape)
                    row.update(model_s=model_s, factor=attention_factor(rate, gpu, per_s),
                               error_pct=error_pct(secs, model_s))
            rows.append(row)
    return rows


class KernelsBenchmark(Benchmark[KernelsConfig]):
    """A layer's matrix products and attention beside the planner's rate (module docstring)."""

    name = "kernels"
    about = ("a transformer layer's matrix products and attention kernels on this device, "
             "beside the planner's fitted compute rate")
    config_type = KernelsConfig

    def check(self, parser: Any, config: KernelsConfig) -> KernelsConfig:
        import torch
        if config.device == "cuda" and not torch.cuda.is_available():
            options.fail(parser, "--device", "cuda", "auto or cpu: torch sees no CUDA device here")
        if config.dtype == "fp8":
            why = _no_fp8_here(torch, _resolve_device(config.device))
            if why:
                options.fail(parser, "--dtype", "fp8", f"bf16, fp16 or fp32: {why}")
        if config.gpu is not None:
            try:
                gpu_kind(config.gpu)
            except ValueError as e:
                options.fail(parser, "--gpu", config.gpu,
                             str(e).split("; got")[0].removeprefix("gpu must be "))
        for name in config.models:
            spec = PRESETS[name]
            for tp in config.tp:
                try:
                    layer_matmuls(spec, tp, config.tokens)
                except ValueError as e:
                    options.fail(parser, "--tp", tp, f"a degree that splits {name}: {e}")
            for tp in config.attention_tp:
                if spec.heads % tp:
                    options.fail(parser, "--attention-tp", tp,
                                 f"a divisor of {name}'s {spec.heads} heads")
        return config

    def run(self, config: KernelsConfig) -> Report:
        import torch
        c = config
        device = _resolve_device(c.device)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                 "fp8": torch.bfloat16}[c.dtype]   # fp8: the attention's (and no matmul's)
        name = _device_name(device)
        gpu = _model(c, name)
        rate = SHIPPED
        matmul: list[dict[str, Any]] = []
        attention: list[dict[str, Any]] = []
        jobs = [(n, t) for n in c.models for t in c.tp]
        attn_jobs = [(n, t) for n in c.models for t in c.attention_tp]
        with tqdm(total=len(jobs) + len(attn_jobs), desc="kernels", unit="case",
                  leave=False, disable=None) as bar:
            for n, t in jobs:
                matmul += _matmul_rows(PRESETS[n], t, c, device, dtype, gpu, rate)
                bar.update()
            layer = {(r["model"], r["tp"]): r["flops"] / r["measured_s"]
                     for r in matmul if r["product"] == "layer"}
            for n, t in attn_jobs:
                attention += _attention_rows(PRESETS[n], t, c, device, dtype, gpu, rate,
                                             layer.get((n, t)))
                bar.update()
        priced = (f"priced as the planner's {gpu.name} (peak {gpu.peak_flops / 1e12:.0f} "
                  "TFLOP/s 16-bit)" if gpu is not None else
                  "no planner price: the device is no GPU kind the planner knows (--gpu names "
                  "one)")
        kind = ("fp8 (matrix products float8 e4m3 via torch._scaled_mm, attention bf16)"
                if c.dtype == "fp8" else c.dtype)
        head = [f"kernels: {name} ({device.type}), torch {torch.__version__}, {kind}; "
                f"{priced}",
                f"matmul: each linear of one layer on one of tp GPUs, {c.tokens} tokens, "
                "forward + backward (3 products); median of "
                f"{c.reps} after {c.warmup} warm-up calls",
                "error%: measured time against the planner's (+ = slower than the planner)"]
        tail = [f"the planner's rate: efficiency {rate.efficiency}, width scale "
                f"{rate.width_scale:.0f}, attention {rate.attention:.2f} ({rate.source[:60]}...)",
                "attention: causal SDPA, TFLOP/s of the half of 3 x 4 s^2 d it computes; vs "
                "matmul: over the same layer's measured matrix rate; factor: over the "
                "planner's peak x efficiency (the planner's attention is "
                f"{rate.attention:.2f})"]
        return Report([Table(matmul, MATMUL_COLUMNS, key="matmul"),
                       Table(attention, ATTENTION_COLUMNS, key="attention")], head, tail,
                      {"device": name, "dtype": c.dtype, "gpu_kind": gpu.name if gpu else None,
                       "rate": {"efficiency": rate.efficiency, "width_scale": rate.width_scale,
                                "attention": rate.attention, "source": rate.source}})


BENCHMARK = KernelsBenchmark()


def main(argv: list[str] | None = None) -> int:
    """``python -m distlab.bench kernels``; see the module docstring."""
    return run_cli(BENCHMARK, argv)


if __name__ == "__main__":
    raise SystemExit(main())
