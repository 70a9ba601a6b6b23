"""The planner's compute rate: what fraction of a GPU's peak a transformer's matrix products
sustain, fitted on published training runs; and what was measured beside it (the attention
kernels' speeds and their forward-backward split, the optimizer step's bandwidth)."""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.nccl.boxes import GPU_BOXES
from distlab.plan.experts import A2A_LINK_SHARE, GROUPED_GEMM_EFFICIENCY
from distlab.plan.layout import Hardware

__all__ = ["ATTENTION_BACKWARD", "CAUSAL_WORK", "KERNEL_SPEED", "OPTIMIZER_BANDWIDTH",
           "OPTIMIZER_BYTES_PER_PARAM", "RESERVED_ERROR_P90", "SHIPPED", "ComputeRate",
           "rate_key", "shipped_rate"]

ARCHITECTURES = {80: "ampere", 90: "hopper", 100: "blackwell"}
"""GPU architectures by compute capability x 10: one efficiency per architecture and dtype
(A100 40 and 80 GB share their silicon, as H100 and H200 share theirs)."""


def _architecture(hw: Hardware) -> str:
    """The GPU's architecture from the registry (:attr:`distlab.gpus.Gpu.architecture`); for a
    GPU that names none (one read from a trace), its NCCL box's compute capability."""
    if hw.gpu.architecture:
        return hw.gpu.architecture
    sm = GPU_BOXES[hw.gpu.box].sm
    return ARCHITECTURES.get(sm, f"sm{sm}")


def rate_key(hw: Hardware, dtype: str) -> str:
    """The key of :attr:`ComputeRate.efficiency` for ``hw``'s GPU and ``dtype``:
    ``"<architecture>/<dtype>"``, e.g. ``"hopper/fp8"``."""
    return f"{_architecture(hw)}/{dtype}"


KERNEL_SPEED = {"hopper/cudnn": 1.75}
"""Attention kernels' speed over FlashAttention-2, measured, per GPU architecture: cuDNN's fused
attention against FlashAttention-2 on an H200 (torch 2.11, cuDNN 9.19), causal, forward and
backward, the median over 24 layer shapes at 4k-32k tokens per sequence (1.59-1.95x):
``results/gpu-h200-2026-11-27`` (``python -m distlab.bench kernels``;
:func:`distlab.plan.kernels.attention_speedup` of that file); an H100 gave the same median
(1.75x, 1.66-1.93x: ``results/gpu-h100-2026-11-27``). Nothing measured on Ampere or
Blackwell."""


ATTENTION_BACKWARD = {"hopper": 2.86}
"""FlashAttention-2's backward over its forward, kernel time, per GPU architecture, measured:
Llama 3.2 1B (head_dim 64, causal, 4096 tokens, batch 2) on an H200 (torch 2.11), the
profiler's ``flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel`` against ``flash_fwd_kernel``, 47.6
and 16.6 ms over the same 32 calls (``results/gpu-h200-2026-11-27-fit/kernels.txt``). Where
nothing is measured the FLOP count's 2 holds (the backward's products are twice the
forward's). It splits the attention's fitted time between forward and backward: recompute runs
the forward again, never the backward."""

CAUSAL_WORK = 0.5
"""The share of the attention's counted ``s^2`` products a causal kernel computes (flash
attention skips the masked blocks): FLOPs and MFU count them whole, as every source does; time
is spent on half."""

OPTIMIZER_BYTES_PER_PARAM = 28
"""Bytes an AdamW step moves per parameter with fp32 states: it reads the parameter, its
gradient and both moments (16) and writes the parameter and both moments (12)."""

OPTIMIZER_BANDWIDTH = 0.72
"""The share of the memory's data-sheet bandwidth a fused AdamW step moves its bytes at,
measured: Llama 3.2 1B and 3B on an H200, 10.0 and 26.1 ms a step for 1.24 and 3.21 billion
parameters (3.45 TB/s of 4.8; ``results/gpu-h200-2026-11-27-fit``, the optimizer phase of the
fused runs). torch's foreach AdamW runs 2.7 times longer there; the planner prices the fused
one."""

RESERVED_ERROR_P90 = 2.76
"""How far off the memory model's peak reserved bytes are, measured: the p90 of ``|error%|``
(:func:`~distlab.vocabulary.error_pct` of the allocator's measured peak reserved bytes against
the replay's) over the 39 held-out runs of ``results/gpu-h200-2026-11-27-fit`` that ran (Llama
3.2 3B, Llama 3 8B, Llama 2 7B and GPT-3 1.3B on one H200; ``python -m distlab.judge fit``
prints it, 2.8%; ``tests/judge/test_judge_fit.py`` computes it again from those runs). The
planner calls a layout *tight* when it fits with less than this share of the GPU's memory to
spare (:attr:`distlab.plan.planner.LayoutPrice.tight`): its verdict rests on the replay being
closer than the model has been."""


@dataclass(frozen=True)
class ComputeRate:
    """FLOP/s one GPU sustains on a transformer's matrix products.

    ``peak * efficiency[key] * w / (w + width_scale)`` with ``w = hidden / tp``, the width of
    the matrices one GPU multiplies: a step at a narrow width (a small model, or a wide split)
    runs slower per FLOP. That is the whole step's, fitted on published runs, not the
    kernels': on an H200 one layer's matrix products alone run at 0.70-0.76 of the peak at
    every width from 1536 to 12288 (``python -m distlab.bench kernels``), so the narrow
    widths' loss is what a step spends outside its matrix products. ``efficiency`` holds one
    value per GPU architecture and compute dtype (:func:`rate_key`, e.g. ``"hopper/fp8"``;
    ``"default"`` for any other). The attention's ``s^2`` products
    (:meth:`attention_flops_per_s`) run in 16-bit whatever the layout's ``compute_dtype`` (no
    float8 attention kernels in the runs), at ``attention`` times the 16-bit peak rate (no
    width term) for FlashAttention-2, and ``kernel_speed["<architecture>/<kernel>"]``
    times that for another kernel (measured, not fitted: :data:`KERNEL_SPEED`; a kernel with no
    measurement on an architecture is priced as FlashAttention-2, see :meth:`kernel_factor`).
    ``source`` names the runs the values were fitted on (:mod:`distlab.evidence.plan.fit_rate`).
    ``grouped_gemm``: the routed experts' grouped products' rate over a dense product of the
    same width (:data:`~distlab.plan.experts.GROUPED_GEMM_EFFICIENCY`) and
    ``a2a_link_share`` the share of NVLink an expert-parallel dispatch moves its bytes at
    (:data:`~distlab.plan.experts.A2A_LINK_SHARE`), for models with experts only.
    """

    efficiency: dict[str, float] = field(default_factory=lambda: {"default": 0.6})
    width_scale: float = 512.0
    attention: float = 1.0
    source: str = "unfitted defaults"
    kernel_speed: dict[str, float] = field(default_factory=dict)
    attention_backward: dict[str, float] = field(default_factory=dict)
    grouped_gemm: float = GROUPED_GEMM_EFFICIENCY
    a2a_link_share: float = A2A_LINK_SHARE

    def attention_forward_share(self, hw: Hardware) -> float:
        """The share of the attention's forward-and-backward time its forward takes on
        ``hw``'s architecture: ``1 / (1 + r)`` with ``r`` = :attr:`attention_backward`'s
        ratio there (2, the FLOP count's, where unmeasured)."""
        r = self.attention_backward.get(_architecture(hw), 2.0)
        return 1.0 / (1.0 + r)

    def flops_per_s(self, hw: Hardware, width: int) -> float:
        """Sustained FLOP/s of one GPU of ``hw`` multiplying matrices ``width`` wide."""
        return self.flops_per_s_dtype(hw, width, "bf16")

    def flops_per_s_dtype(self, hw: Hardware, width: int, dtype: str) -> float:
        """As :meth:`flops_per_s`, for matrix products in ``dtype`` (``"bf16"``, ``"fp8"``),
        at the efficiency of :func:`rate_key` (``"hopper/fp8"``), else ``"default"``."""
        e = self.efficiency.get(rate_key(hw, dtype), self.efficiency.get("default", 0.6))
        return hw.gpu.peak_flops * e * width / (width + self.width_scale)



    def kernel_factor(self, hw: Hardware, kernel: str) -> float | None:
        """How many times FlashAttention-2's speed ``kernel`` runs on ``hw``'s GPU architecture
        (1 for ``"flash"``), or ``None`` where it was not measured there."""
        if kernel == "flash":
            return 1.0
        return self.kernel_speed.get(f"{_architecture(hw)}/{kernel}")

    def attention_flops_per_s(self, hw: Hardware, kernel: str = "flash") -> float:
        """Sustained FLOP/s of the attention's ``Q K^T`` and ``softmax V`` products (counted
        whole, as :func:`~distlab.transformer.layer_matmul_flops` counts them) with ``kernel``
        (one of :data:`~distlab.plan.layout.ATTENTION_KERNELS`; unmeasured on this
        architecture: FlashAttention-2's rate): ``peak * efficiency["<arch>/bf16"] *
        attention * kernel factor``.

        No width term: an attention kernel multiplies ``head_dim``-wide tiles whatever the
        layer's ``hidden / tp``, and splitting over tp only hands each GPU fewer heads. Measured
        (``results/gpu-h200-2026-11-27``): from 16k tokens cuDNN's and FlashAttention-2's rates
        at tp 8 are within 15% of tp 1's for every model (8% at 32k), where the matrix
        products lose a third at the narrow widths."""
        factor = self.kernel_factor(hw, kernel)
        e = self.efficiency.get(rate_key(hw, "bf16"), self.efficiency.get("default", 0.6))
        return hw.gpu.peak_flops * e * self.attention * (factor or 1.0)


SHIPPED = ComputeRate(
    efficiency={"ampere/bf16": 0.737, "hopper/bf16": 0.588, "hopper/fp8": 0.907,
                "blackwell/fp8": 1.256},
    width_scale=384.0, attention=0.3, kernel_speed=KERNEL_SPEED,
    attention_backward=ATTENTION_BACKWARD,
    source="fitted by distlab.evidence.plan.fit_rate on the calibration split of the published "
           "runs (evidence/plan/data/published_runs.json: narayanan2021, megatron_lm_h100_2024, "
           "torchtitan_bench_2024_12, torchtitan_asynctp_2025_06, "
           "torchtitan_h200_trainy_2025_06, mosaicml_llm_foundry, nemo_24_07, "
           "megatron_bridge_25_11); python -m distlab.judge plan --refit fits it again")
"""The shipped rate. fp8 efficiencies above 1 are relative to the 16-bit peak (float8 matrix
products run up to twice as fast). The attention's 0.30 is FlashAttention-2's rate of the
``s^2`` products (counted causal, half of the whole) against the 16-bit peak times the 16-bit
efficiency, with no width term (:meth:`ComputeRate.attention_flops_per_s`); the Transformer
Engine runs (:data:`~distlab.evidence.plan.runs.TRANSFORMER_ENGINE_SOURCES`) on Hopper run cuDNN's
kernel at :data:`KERNEL_SPEED` times that, measured, not fitted. The kernels alone on an H200
(``python -m distlab.bench kernels``) run FlashAttention-2 at 0.22-0.28 of the peak at 4k-32k
tokens at tp 1 (0.30 x 0.588 = 0.18 here): a step's attention costs more than its kernel,
as its matrix products do."""


def shipped_rate() -> ComputeRate:
    """The shipped :class:`ComputeRate` (:data:`SHIPPED`)."""
    return SHIPPED
