"""Host stages that move a batch towards the device and train on it: pin, h2d, compute.

Without an accelerator, pin and h2d pass the batch through and ``compute`` in ``wait`` mode
sleeps for its cost; each says so in ``skipped``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from distlab._checks import check_choice
from distlab.loading.cpuwork import burn
from distlab.loading.stage import Stage, accelerator_available
from distlab.loading.stage import stage_cost as _cost
from distlab.transfers.cuda import CudaAdapter
from distlab.transfers.default import default_adapter

__all__ = ["ComputeStage", "H2DStage", "PinStage"]


class PinStage(Stage):
    """Copies a tensor into pinned (page-locked) host memory. Without an accelerator pinning is
    impossible: the stage passes the tensor through and ``skipped`` says so."""

    category = "copy"
    placement = "host"

    def __init__(self, name: str = "pin") -> None:
        self.name = name
        self._adapter: Any = None   # distlab.transfers adapter, made on first use
        self.skipped = None if accelerator_available() else \
            "pin skipped: no accelerator (torch.cuda.is_available() is False)"

    def process(self, item: Any) -> Any:
        if self.skipped or not isinstance(item, torch.Tensor):
            return item
        if self._adapter is None:
            self._adapter = default_adapter()
        return self._adapter.transfer(item, "pinned")


class H2DStage(Stage):
    """Copies a tensor to the GPU on a side CUDA stream (non_blocking), timed with CUDA events
    (``last_copy_ms``). Skipped on CPU: the tensor passes through and ``skipped`` says so."""

    category = "copy"
    placement = "host"

    def __init__(self, device: str = "cuda", name: str = "h2d") -> None:
        self.name, self.device = name, device
        self.last_copy_ms: float | None = None
        self._stream: Any = None
        self.skipped = None if accelerator_available() else \
            "h2d skipped: no CUDA device (torch.cuda.is_available() is False)"

    def process(self, item: Any) -> Any:
        if self.skipped or not isinstance(item, torch.Tensor):
            return item
        if self._stream is None:
            self._adapter = CudaAdapter(torch.device(self.device).index or 0)
            self._stream = self._adapter.stream
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self._stream):
            start.record()
            out = self._adapter.transfer(item, "device")
            end.record()
        torch.cuda.current_stream().wait_stream(self._stream)
        end.synchronize()
        self.last_copy_ms = start.elapsed_time(end)
        return out


class ComputeStage(Stage):
    """The training step.

    - ``mode="burn"``: ``cost_s`` of matmuls on the batch's device (CPU work on CPU tensors);
    - ``mode="wait"``: the step as the host sees a GPU step: on a CUDA tensor a matmul loop on
      the device that the host waits for; without a GPU a sleep of ``cost_s`` stands for that
      wait (``skipped`` says so), leaving the CPU free as a real GPU step would;
    - ``mode="train"``: one real SGD step of a small MLP on the batch (cost set by the model).
    """

    category = "compute"
    placement = "host"

    def __init__(self, cost_s: float = 0.0, mode: str = "burn", hidden: int = 256,
                 name: str = "compute") -> None:
        check_choice("mode", mode, ("burn", "wait", "train"))
        self.cost_s = _cost("cost_s", cost_s) if mode != "train" else None
        if mode == "wait" and not accelerator_available():
            self.skipped = ("compute on GPU skipped: no CUDA device; a sleep of cost_s stands "
                            "for the host waiting on the device step")
        self.mode, self.hidden, self.name = mode, hidden, name
        self._model: Any = None
        self._opt: Any = None

    def process(self, item: Any) -> Any:
        if self.mode == "wait" and not (isinstance(item, torch.Tensor) and item.is_cuda):
            time.sleep(self.cost_s or 0.0)
            return item
        if self.mode in ("burn", "wait"):
            if isinstance(item, torch.Tensor) and item.is_cuda:
                a = torch.ones(256, 256, device=item.device)
                deadline = time.perf_counter() + (self.cost_s or 0.0)
                while time.perf_counter() < deadline:
                    a = (a @ a).clamp_(-1, 1)
                torch.cuda.synchronize(item.device)
            else:
                burn(self.cost_s or 0.0)
            return item
        x = item if isinstance(item, torch.Tensor) else torch.zeros(1, 16)
        x = x.reshape(x.shape[0], -1).float()
        if self._model is None or self._model[0].in_features != x.shape[1]:
            self._model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], self.hidden),
                                              torch.nn.ReLU(), torch.nn.Linear(self.hidden, 1))
            self._model.to(x.device)
            self._opt = torch.optim.SGD(self._model.parameters(), lr=1e-3)
        loss = self._model(x).pow(2).mean()
        self._opt.zero_grad()
        loss.backward()
        self._opt.step()
        return float(loss.detach())

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_model"] = state["_opt"] = None
        return state
