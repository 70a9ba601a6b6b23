"""A transformer layer's kernels as one GPU runs them, beside the planner's price of each.

The planner (:mod:`distlab.plan.step`) prices a layer's compute as its matrix products' FLOPs at
:meth:`~distlab.plan.calibration.ComputeRate.flops_per_s_dtype` (the GPU's peak times an
efficiency times ``w / (w + width_scale)``, ``w = hidden / tp``) and the causal attention's
``s^2`` products at ``attention`` times that rate. Both constants are fitted on whole published
training runs. This module names the kernels one layer runs on one of its ``tp`` GPUs (each
linear's ``m x k @ k x n`` product, the attention's shape), the FLOPs the planner counts for
each, and the planner's seconds for each, so a measurement of the kernels alone
(``python -m distlab.bench kernels``) can be set beside the fitted rate: the matrix products'
own efficiency against the fitted one (the difference is what a training step spends outside
its matrix products), and the attention kernel's rate against the fitted ``attention``.

:func:`measured_kernels` reads the two runs the planner's attention kernel speed
(:data:`~distlab.plan.calibration.KERNEL_SPEED`) is measured on, an H200's and an H100's, shipped
with the package (``distlab/plan/data/kernels_*.json``, copies of the committed
``results/gpu-h200-2026-11-27`` and ``results/gpu-h100-2026-11-27`` runs), so a notebook or a test
reads them wherever it runs.

Pure: no torch. FLOPs are floating-point operations (a multiply-add is 2), seconds are seconds.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_int
from distlab.plan.calibration import CAUSAL_WORK, ComputeRate
from distlab.plan.layout import GPU_KINDS, GpuKind, Hardware
from distlab.report.jsonfile import read_json
from distlab.transformer import ModelSpec

MEASURED = {"H200": "data/kernels_h200.json", "H100": "data/kernels_h100.json"}
"""The shipped ``python -m distlab.bench kernels`` runs, by GPU: package resources of
:mod:`distlab.plan`."""


def measured_kernels(gpus: tuple[str, ...] = tuple(MEASURED)) -> dict[str, dict[str, Any]]:
    """The shipped kernel runs of ``gpus`` (keys of :data:`MEASURED`), each a ``python -m
    distlab.bench kernels`` JSON document read from the installed package (never from the
    working directory), in the order given. ``ValueError`` for a GPU with no shipped run."""
    from importlib import resources

    out = {}
    for gpu in gpus:
        if gpu not in MEASURED:
            raise ValueError(f"gpus: no shipped kernel run for {gpu!r}; there are "
                             f"{', '.join(MEASURED)}")
        out[gpu] = read_json(resources.files("distlab.plan").joinpath(MEASURED[gpu]))
    return out

__all__ = ["MEASURED", "PASSES", "AttentionShape", "Matmul", "attention_shape",
           "attention_speedup", "gpu_kind_for_device", "measured_kernels",
           "attention_factor", "layer_matmuls", "model_attention_s", "model_matmul_s"]

PASSES = 3
"""A training step runs each product three times: forward, and in backward the gradient of the
input and of the weight (the attention: backward counted as twice the forward, as the planner
counts it)."""


@dataclass(frozen=True)
class Matmul:
    """One linear layer's forward product on one GPU: ``(m, k) @ (k, n)``.

    Attributes:
        name: the weight's name in a Llama-/GPT-shaped block (``wq``, ``w1`` ...).
        m: tokens (rows of the input).
        k: input features.
        n: output features.
    """

    name: str
    m: int
    k: int
    n: int

    @property
    def forward_flops(self) -> int:
        """``2 m k n``."""
        return 2 * self.m * self.k * self.n

    @property
    def step_flops(self) -> int:
        """Forward, input gradient and weight gradient: :data:`PASSES` forwards."""
        return PASSES * self.forward_flops


def _split(name: str, size: int, tp: int) -> int:
    if size % tp:
        raise ValueError(f"{name} {size} is not divisible by tp={tp}")
    return size // tp


def layer_matmuls(spec: ModelSpec, tp: int, tokens: int) -> list[Matmul]:
    """The matrix products of one of ``spec``'s layers on one of ``tp`` GPUs (Megatron's split:
    Q, K, V and the first MLP matrices by columns, the output projection and the last MLP
    matrix by rows), for ``tokens`` tokens (micro-batch times sequence length).

    Raises:
        ValueError: ``tp`` or ``tokens`` below 1, or a width ``tp`` does not divide.
    """
    check_int("tp", tp, minimum=1)
    check_int("tokens", tokens, minimum=1)
    h, kv, f = spec.hidden, spec.kv_width, spec.ffn
    q = _split("hidden" if spec.q_width == h else "query width (heads * head_dim)",
               spec.q_width, tp)
    kvs, hs = _split("key/value width", kv, tp), _split("ffn_hidden", f, tp)
    out = [Matmul("wq", tokens, h, q), Matmul("wk", tokens, h, kvs),
           Matmul("wv", tokens, h, kvs), Matmul("wo", tokens, q, h), Matmul("w1", tokens, h, hs)]
    if spec.gated_ffn:
        out.append(Matmul("w3", tokens, h, hs))
    out.append(Matmul("w2", tokens, hs, h))
    return out


@dataclass(frozen=True)
class AttentionShape:
    """The causal attention one GPU runs for one layer: ``batch`` sequences of ``seq_len``
    tokens, ``heads`` query heads of ``head_dim`` (key/value heads repeated to match, as a
    kernel without grouped-query support is given them).

    ``counted_flops`` is what the planner (and every MFU) counts for the forward: ``4 s^2 d``
    per sequence, ``d = heads * head_dim``, the masked half included; a causal kernel computes
    :data:`~distlab.plan.calibration.CAUSAL_WORK` of it.
    """

    batch: int
    heads: int
    seq_len: int
    head_dim: int

    @property
    def counted_flops(self) -> int:
        """Forward FLOPs as counted whole: ``4 s^2 (heads head_dim) batch``."""
        return 4 * self.seq_len ** 2 * self.heads * self.head_dim * self.batch

    @property
    def step_counted_flops(self) -> int:
        """Forward and backward (twice the forward), counted whole."""
        return PASSES * self.counted_flops

    @property
    def step_causal_flops(self) -> float:
        """What a causal kernel computes of :attr:`step_counted_flops`."""
        return self.step_counted_flops * CAUSAL_WORK


def attention_shape(spec: ModelSpec, tp: int, seq_len: int, batch: int) -> AttentionShape:
    """One GPU's attention for ``spec`` split over ``tp`` GPUs by heads.

    Raises:
        ValueError: ``tp`` does not divide the heads, or a size below 1.
    """
    check_int("seq_len", seq_len, minimum=1)
    check_int("batch", batch, minimum=1)
    check_int("tp", tp, minimum=1)
    return AttentionShape(batch, _split("heads", spec.heads, tp), seq_len, spec.head_width)


def model_matmul_s(rate: ComputeRate, gpu: GpuKind, width: int, flops: float,
                   dtype: str = "bf16") -> float:
    """The planner's seconds for ``flops`` of matrix products ``width`` wide on one ``gpu``."""
    return flops / rate.flops_per_s_dtype(Hardware(gpu, 1, gpus_per_node=1), width, dtype)


def model_attention_s(rate: ComputeRate, gpu: GpuKind, shape: AttentionShape) -> float:
    """The planner's seconds for ``shape``'s forward and backward on one ``gpu``: the causal
    share of the counted FLOPs at the attention's rate (FlashAttention-2's)."""
    per_s = rate.attention_flops_per_s(Hardware(gpu, 1, gpus_per_node=1))
    return shape.step_causal_flops / per_s


def attention_factor(rate: ComputeRate, gpu: GpuKind, flops_per_s: float) -> float:
    """An attention kernel's measured rate (``flops_per_s`` of the causal half it computes) in
    the planner's units: over ``gpu``'s 16-bit peak times the planner's 16-bit efficiency, the
    quantity ``rate.attention`` is (FlashAttention-2's, fitted on whole steps)."""
    hw = Hardware(gpu, 1, gpus_per_node=1)
    return flops_per_s * rate.attention / rate.attention_flops_per_s(hw)


_DEVICE_NAMES = tuple((pattern, g.name) for g in GPU_KINDS.values()
                      for pattern in g.device_patterns)
"""Device names (``torch.cuda.get_device_name``) of the planner's GPU kinds, from the registry
(:attr:`distlab.gpus.Gpu.device_patterns`), first match wins."""

_OTHER_PARTS = re.compile(r"\b(PCIe|NVL)\b", re.IGNORECASE)
"""Parts with another peak or memory than the SXM kind of the same name (H100 PCIe, H100 NVL,
A100 PCIe): they match no kind rather than the wrong one."""


def gpu_kind_for_device(device_name: str) -> GpuKind | None:
    """The planner's :class:`~distlab.plan.layout.GpuKind` for a CUDA device name, or ``None``
    when the name is no kind the planner knows (a PCIe or NVL part has another peak).

    ``"NVIDIA H200"`` -> H200-141GB-SXM, ``"NVIDIA H100 80GB HBM3"`` -> H100-80GB-SXM,
    ``"NVIDIA A100-SXM4-80GB"`` -> A100-80GB-SXM, ``"NVIDIA H100 PCIe"`` -> ``None``.
    """
    if _OTHER_PARTS.search(device_name):
        return None
    for pattern, key in _DEVICE_NAMES:
        if re.search(pattern, device_name):
            return GPU_KINDS[key]
    return None


def attention_speedup(doc: Mapping[str, Any], kernel: str, over: str = "flash", *,
                      min_seq_len: int = 4096) -> float:
    """How many times faster ``kernel`` ran than ``over`` in a ``python -m distlab.bench
    kernels`` JSON document: the median, over every (model, tp, sequence length) both measured
    at ``min_seq_len`` tokens or more, of ``over``'s seconds over ``kernel``'s.

    Raises:
        ValueError: no such pair in ``doc``.
    """
    seconds = {(r["model"], r["tp"], r["seq_len"], r["backend"]): r["measured_s"]
               for r in doc.get("attention", []) if r.get("measured_s")}
    ratios = [seconds[(m, t, s, over)] / sec for (m, t, s, b), sec in seconds.items()
              if b == kernel and s >= min_seq_len and (m, t, s, over) in seconds]
    if not ratios:
        raise ValueError(f"no row measured both {kernel!r} and {over!r} at {min_seq_len} "
                         "tokens or more")
    return statistics.median(ratios)
