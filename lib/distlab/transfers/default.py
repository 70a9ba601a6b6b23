"""The device adapter for this machine: CUDA when torch sees a GPU, else the host-only twin."""

from __future__ import annotations

import torch

from distlab.transfers.adapter import DeviceAdapter
from distlab.transfers.cuda import CudaAdapter
from distlab.transfers.host import HostAdapter

__all__ = ["default_adapter"]


def default_adapter() -> DeviceAdapter:
    """The CUDA adapter (current device) when torch sees a GPU, else the host-only adapter."""
    return CudaAdapter() if torch.cuda.is_available() else HostAdapter()
