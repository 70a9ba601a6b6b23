"""The planner's compute rate: what fraction of a GPU's peak a transformer's matrix products
sustain, fitted on published training runs (placeholder values until fitted)."""

from __future__ import annotations

from dataclasses import dataclass, field

from distlab.collectives.model.nccl.boxes import GPU_BOXES
from distlab.plan.layout import Hardware

__all__ = ["ComputeRate", "rate_key", "shipped_rate"]

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


def shipped_rate() -> ComputeRate:
    """The shipped :class:`ComputeRate`."""
    return ComputeRate()
