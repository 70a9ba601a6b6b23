"""The planner's compute rate: what fraction of a GPU's peak a transformer's matrix products
sustain, fitted on published training runs (placeholder values until fitted)."""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.nccl.boxes import GPU_BOXES
from distlab.plan.layout import Hardware

__all__ = ["SHIPPED", "ComputeRate", "rate_key", "shipped_rate"]

ARCHITECTURES = {80: "ampere", 90: "hopper", 100: "blackwell"}
"""GPU architectures by compute capability x 10: one efficiency per architecture and dtype
(A100 40 and 80 GB share their silicon, as H100 and H200 share theirs)."""


def rate_key(hw: Hardware, dtype: str) -> str:
    """The key of :attr:`ComputeRate.efficiency` for ``hw``'s GPU and ``dtype``:
    ``"<architecture>/<dtype>"``, e.g. ``"hopper/fp8"``."""
    sm = GPU_BOXES[hw.gpu.box].sm
    return f"{ARCHITECTURES.get(sm, f'sm{sm}')}/{dtype}"


@dataclass(frozen=True)
class ComputeRate:
    """FLOP/s one GPU sustains on a transformer's matrix products.

    ``peak * efficiency[key] * w / (w + width_scale)`` with ``w = hidden / tp``, the width of
    the matrices one GPU multiplies: narrow matrices (a small model, or a wide split) keep the
    tensor cores less busy. ``efficiency`` holds one value per GPU architecture and compute
    dtype (:func:`rate_key`, e.g. ``"hopper/fp8"``; ``"default"`` for any other). The
    attention's ``s^2`` products (:meth:`attention_flops_per_s`) run in 16-bit whatever the
    layout's ``compute_dtype`` (no float8 attention kernels in the runs), at ``attention``
    times the 16-bit rate. ``source`` names the runs the values were fitted on
    (:mod:`distlab.plan.fit_rate`).
    """

    efficiency: dict[str, float] = field(default_factory=lambda: {"default": 0.6})
    width_scale: float = 512.0
    attention: float = 1.0
    source: str = "unfitted defaults"

    def flops_per_s(self, hw: Hardware, width: int) -> float:
        """Sustained FLOP/s of one GPU of ``hw`` multiplying matrices ``width`` wide."""
        return self.flops_per_s_dtype(hw, width, "bf16")

    def flops_per_s_dtype(self, hw: Hardware, width: int, dtype: str) -> float:
        """As :meth:`flops_per_s`, for matrix products in ``dtype`` (``"bf16"``, ``"fp8"``),
        at the efficiency of :func:`rate_key` (``"hopper/fp8"``), else ``"default"``."""
        e = self.efficiency.get(rate_key(hw, dtype), self.efficiency.get("default", 0.6))
        return hw.gpu.peak_flops * e * width / (width + self.width_scale)



    def attention_flops_per_s(self, hw: Hardware, width: int) -> float:
        """Sustained FLOP/s of the attention's ``Q K^T`` and ``softmax V`` products (counted
        whole, as :func:`~distlab.plan.model.layer_matmul_flops` counts them)."""
        return self.flops_per_s_dtype(hw, width, "bf16") * self.attention


SHIPPED = ComputeRate(
    efficiency={"ampere/bf16": 0.774, "hopper/bf16": 0.63, "hopper/fp8": 1.198,
                "blackwell/fp8": 1.471},
    width_scale=512.0, attention=0.30,
    source="fitted by distlab.plan.fit_rate on the calibration split of the published runs "
           "(plan/data/published_runs.json: narayanan2021, megatron_lm_h100_2024, "
           "torchtitan_bench_2024_12, torchtitan_asynctp_2025_06, "
           "torchtitan_h200_trainy_2025_06, mosaicml_llm_foundry, nemo_24_07, "
           "megatron_bridge_25_11); python -m distlab.judge plan --refit fits it again")
"""The shipped rate. fp8 efficiencies above 1 are relative to the 16-bit peak (float8 matrix
products run up to twice as fast). The attention's 0.30 is the rate of the ``s^2`` products
(counted causal, half of the whole) against the 16-bit matrix rate: the calibration runs' long
sequences (torchtitan's context-parallel rows, MPT at 32k) pay for their attention far more
than for their matrix products."""


def shipped_rate() -> ComputeRate:
    """The shipped :class:`ComputeRate` (:data:`SHIPPED`)."""
    return SHIPPED
