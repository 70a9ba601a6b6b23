"""Pipeline stages: one small interface and the built-in stages of a loading pipeline.

A stage turns one item into the next (``process(item) -> item``); items are batches. The chain
read -> decode -> collate -> pin -> h2d -> compute is the seed's storage -> pageable host memory ->
pinned host memory -> GPU pipeline with the training step at the end.

Every stage says where it may run (``placement``): ``"worker"`` stages are pure CPU/IO work that a
worker process may do (like DataLoader workers); ``"host"`` stages must run in the trainer process
(pinning, host-to-device copies, the training step). A stage that cannot do its job on this
machine (pinning or a CUDA copy without an accelerator) passes the item through unchanged and sets
``skipped`` to the reason; executors copy that reason into the Timeline's notes and span args.

User stages subclass :class:`Stage` and implement ``process``; or wrap a function with
:class:`FnStage`. Stages sent to worker processes must be picklable (module-level classes and
functions).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from .shards import ShardSet

__all__ = [
    "BurnStage", "CollateStage", "ComputeStage", "DecodeStage", "FnStage", "H2DStage",
    "IdentityStage", "PinStage", "ReadStage", "SleepStage", "Stage", "accelerator_available",
    "burn", "matmuls_per_second",
]

PLACEMENTS = ("worker", "host")


def accelerator_available() -> bool:
    """True when torch sees a CUDA device (pinning and H2D copies are real then)."""
    return bool(torch.cuda.is_available())


def _cost(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def burn(seconds: float, size: int = 128, *, fixed_work: bool = False) -> int:
    """Real CPU work: a loop of ``size`` x ``size`` torch matmuls (~0.03 ms each, long enough that
    the GIL is released for most of the loop, so burning threads run in parallel).

    ``fixed_work=False`` (default): burn until ``seconds`` of wall time have passed (the last
    half millisecond in 32 x 32 matmuls to land close to the deadline). The stage then costs
    ``seconds`` of wall time however much CPU it gets: predictable, what the model assumes.
    ``fixed_work=True``: do the number of matmuls that takes ``seconds`` on an unshared core
    (calibrated once per process); it takes longer when the CPU is shared, as real decoding
    does. Returns the number of matmuls done.
    """
    if seconds <= 0:
        return 0
    big, small = torch.ones(size, size), torch.ones(32, 32)
    out_big, out_small = torch.empty(size, size), torch.empty(32, 32)
    if fixed_work:
        n = max(1, round(seconds * matmuls_per_second(size)))
        for _ in range(n):
            torch.mm(big, big, out=out_big)
        return n
    now = time.perf_counter()
    deadline = now + seconds
    n = 0
    while now < deadline:
        if deadline - now > 5e-4:
            torch.mm(big, big, out=out_big)
        else:
            torch.mm(small, small, out=out_small)
        n += 1
        now = time.perf_counter()
    return n


_RATES: dict[int, float] = {}


def matmuls_per_second(size: int = 128) -> float:
    """``size`` x ``size`` matmuls per second on one core of this machine: the best of five
    short trials (the least disturbed by other processes); cached per process."""
    if size not in _RATES:
        a, out = torch.ones(size, size), torch.empty(size, size)
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(50):
                torch.mm(a, a, out=out)
            best = min(best, (time.perf_counter() - t) / 50)
        _RATES[size] = 1.0 / best
    return _RATES[size]


class Stage:
    """Base class. Subclasses set ``name``/``category`` and implement ``process(item)``.

    Attributes:
        name: stage name; the lane and span name in timelines.
        category: colour group in the Gantt chart (``io``, ``cpu``, ``copy``, ``compute``).
        placement: ``"worker"`` (may run in a worker process) or ``"host"`` (trainer process).
        cost_s: nominal seconds per item for the model, or None when unknown.
        skipped: None, or why this stage passes items through unchanged on this machine.
    """

    name: str = ""
    category: str = "cpu"
    placement: str = "worker"
    cost_s: float | None = None
    skipped: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [m for m in ("process",) if getattr(cls, m) is getattr(Stage, m)]
        if missing and not getattr(cls, "__abstract_ok__", False):
            raise TypeError(f"Stage subclass {cls.__name__} must implement {missing} "
                            "(process(item) -> item)")

    def process(self, item: Any) -> Any:
        """Turn one item into the next. Subclasses implement this."""
        raise NotImplementedError

    def __call__(self, item: Any) -> Any:
        return self.process(item)

    def check(self) -> None:
        """Raise TypeError/ValueError if the stage's attributes break the contract."""
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ValueError(f"stage name must be a non-empty str without '/', got {self.name!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"stage {self.name!r}: placement must be one of {PLACEMENTS}, "
                             f"got {self.placement!r}")

    def __repr__(self) -> str:
        extra = f", cost_s={self.cost_s:g}" if self.cost_s is not None else ""
        return f"{type(self).__name__}(name={self.name!r}{extra})"


class SleepStage(Stage):
    """Sleeps ``cost_s`` per item: stands for I/O latency (releases the GIL)."""

    category = "io"

    def __init__(self, cost_s: float, name: str = "sleep") -> None:
        self.cost_s = _cost("cost_s", cost_s)
        self.name = name

    def process(self, item: Any) -> Any:
        time.sleep(self.cost_s)
        return item


class BurnStage(Stage):
    """``cost_s`` seconds of real CPU work per item (torch matmuls, GIL released per op);
    ``fixed_work`` as in :func:`burn` (False: ``cost_s`` of wall time; True: a calibrated
    amount of work that slows down when CPUs are shared)."""

    category = "cpu"

    def __init__(self, cost_s: float, name: str = "burn", fixed_work: bool = False) -> None:
        self.cost_s = _cost("cost_s", cost_s)
        self.name, self.fixed_work = name, bool(fixed_work)

    def process(self, item: Any) -> Any:
        burn(self.cost_s, fixed_work=self.fixed_work)
        return item


class IdentityStage(Stage):
    """Does nothing (zero cost): measures the executor's own per-item overhead."""

    def __init__(self, name: str = "identity", placement: str = "worker") -> None:
        self.name, self.placement, self.cost_s = name, placement, 0.0

    def process(self, item: Any) -> Any:
        return item


class ReadStage(Stage):
    """Reads batch ``item`` (an int) of ``batch_size`` records from shard files; optional
    ``latency_s`` sleep per batch mimics remote storage. Output: a list of bytes records."""

    category = "io"

    def __init__(self, shards: ShardSet, batch_size: int = 8, latency_s: float = 0.0,
                 name: str = "read") -> None:
        if not isinstance(shards, ShardSet):
            raise TypeError(f"shards must be a ShardSet, got {type(shards).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.shards, self.batch_size, self.name = shards, batch_size, name
        self.latency_s = _cost("latency_s", latency_s)
        self.cost_s = None if self.latency_s == 0 else self.latency_s

    def process(self, item: Any) -> Any:
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.shards.read_batch(int(item), self.batch_size)


class DecodeStage(Stage):
    """Decodes each bytes record into a float32 tensor in [0, 1], then burns ``cost_s`` of extra
    CPU (standing for image decoding / augmentation). Output: a list of 1-D tensors."""

    category = "cpu"

    def __init__(self, cost_s: float = 0.0, name: str = "decode") -> None:
        self.cost_s = _cost("cost_s", cost_s)
        self.name = name

    def process(self, item: Any) -> Any:
        out = [torch.frombuffer(bytearray(rec), dtype=torch.uint8).float().div_(255.0)
               for rec in item]
        burn(self.cost_s)
        return out


class CollateStage(Stage):
    """Stacks a list of equal-shape tensors into one batch tensor."""

    category = "cpu"

    def __init__(self, name: str = "collate") -> None:
        self.name = name

    def process(self, item: Any) -> Any:
        return torch.stack(list(item)) if isinstance(item, (list, tuple)) else item


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
            from distlab.transfers.adapter import default_adapter
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
            from distlab.transfers.cuda import CudaAdapter
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
        if mode not in ("burn", "wait", "train"):
            raise ValueError(f"mode must be 'burn', 'wait' or 'train', got {mode!r}")
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


class FnStage(Stage):
    """Wraps a function ``fn(item) -> item`` as a stage (module-level for worker processes)."""

    def __init__(self, fn: Callable[[Any], Any], name: str | None = None, category: str = "cpu",
                 placement: str = "worker", cost_s: float | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn, self.category, self.placement = fn, category, placement
        self.name = name or getattr(fn, "__name__", "fn")
        self.cost_s = None if cost_s is None else _cost("cost_s", cost_s)

    def process(self, item: Any) -> Any:
        return self.fn(item)
