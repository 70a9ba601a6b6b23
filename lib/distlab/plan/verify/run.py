"""``--verify``: the layouts the planner ranks, run on this machine for a few steps, each
measurement printed beside the planner's prediction.

:func:`verify` takes a model and layouts, runs each with
:func:`~distlab.plan.verify.rank.run_rank` on as many local ranks as it has GPUs
(:func:`distlab.launch.run`: forked local ranks, or the ranks of a ``torchrun`` launch), and
returns one :class:`VerifyRow` per layout: the prediction for the model as it ran
(:func:`~distlab.plan.planner.price` of the run's model and layout: its layers, its
microbatches, the precision torch runs, ``"fsdp-mixed"``), the measurement of every rank, or
why it did not run: out of memory (measured: the bytes asked for and reserved), more GPUs than
this machine has, a layout torch's APIs do not run here (context parallelism; expert
parallelism with ZeRO 1, tensor parallelism or a pipeline:
:func:`~distlab.plan.verify.rank.unsupported_reason`), or a model too large for this host's
memory (on a CPU).

Where it runs:

- **GPUs** (CUDA, NCCL): each layout whose GPU count this machine (or the ``torchrun`` world)
  has; the allocator's setting is read from ``PYTORCH_CUDA_ALLOC_CONF`` and priced with it.
- **A host** (no CUDA, gloo): every layout at the size given (use a small model or
  ``layers=``); memory is every byte the CPU allocator hands out, with no caching allocator
  (reserved is not measured and not predicted), and step time is measured but not predicted
  (the planner prices GPUs).

``layers=K`` runs the model with ``K`` layers; the prediction is for that model too, and the
full model's prediction is scaled by it (:attr:`VerifyRow.scale`). A model with experts keeps
its leading dense layers, as many as leave at least one MoE layer.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from distlab import launch
from distlab._checks import check_choice, check_int
from distlab.plan.layout import Hardware, Layout, hardware
from distlab.plan.memory import memory_per_gpu
from distlab.plan.planner import LayoutPrice, price
from distlab.plan.verify.rank import (
    MeasuredOutOfMemory,
    RankMeasurement,
    VerifyCase,
    run_rank,
    unsupported_reason,
)
from distlab.transformer import ModelSpec
from distlab.vocabulary import size_in

__all__ = ["DEVICES", "VerifyRow", "count_reason", "expandable_segments", "local_devices",
           "verify"]

DEVICES = ("auto", "cuda", "cpu")
"""Where :func:`verify` runs: ``auto`` is CUDA where torch sees a GPU, else the host."""

RUN_PRECISION = "fsdp-mixed"
"""What every verified layout trains in: fp32 states, bf16 compute (FSDP2's mixed precision,
autocast without it), as torch runs a layout."""


def count_reason(layout: Layout, device: str, available: int) -> str | None:
    """Why ``layout`` cannot run on this machine's ``available`` ranks of ``device``
    (``"cuda"``: the GPUs, or the ``torchrun`` world; ``"cpu"``: any number, ``available`` 0),
    or ``None``. A pure function of the counts."""
    if device == "cuda" and layout.gpus > available:
        return f"needs {layout.gpus} GPUs; this machine runs {available}"
    return None


def expandable_segments() -> bool:
    """Whether ``PYTORCH_CUDA_ALLOC_CONF`` turns expandable segments on for this process."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
    return "expandable_segments:true" in conf


def local_devices(device: str) -> tuple[str, int]:
    """``(device type, ranks this machine can run)``: the GPUs torch sees (or the ``torchrun``
    world), or, on a host, any number (returned as 0: no limit)."""
    device = check_choice("device", device, DEVICES)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no GPU")
        if launch.in_torchrun():
            return "cuda", int(os.environ["WORLD_SIZE"])
        return "cuda", torch.cuda.device_count()
    return "cpu", 0


@dataclass(frozen=True)
class VerifyRow:
    """One layout, predicted and (where it ran) measured.

    Attributes:
        layout: the layout as it ran (its precision set to what torch runs).
        spec: the model as it ran (``layers=`` applied).
        predicted: the planner's price of ``spec`` and ``layout`` (``None`` on a host: the
            planner prices GPUs).
        predicted_allocated: the memory model's peak allocated bytes of the most loaded rank
            (on a host, with nothing held outside an allocator).
        measured: every rank's measurement (``None``: it did not run).
        outcome: ``"ran"``, ``"out of memory"``, ``"skipped"`` or ``"failed"``.
        detail: why (the out-of-memory details, the reason it was skipped, the error).
        scale: the full model's predicted step over the run model's (``1`` without ``layers=``).
    """

    layout: Layout
    spec: ModelSpec
    predicted: LayoutPrice | None
    predicted_allocated: int
    measured: tuple[RankMeasurement, ...] | None
    outcome: str
    detail: str = ""
    scale: float = 1.0

    @property
    def step_s(self) -> float | None:
        """The measured step: the slowest rank's median, seconds."""
        if not self.measured:
            return None
        return max(statistics.median(m.step_s) for m in self.measured)

    @property
    def peak_allocated(self) -> int | None:
        """The most bytes any rank had allocated."""
        return max(m.peak_allocated for m in self.measured) if self.measured else None

    @property
    def peak_reserved(self) -> int | None:
        """The most bytes any rank's caching allocator reserved (``None`` on a host)."""
        if not self.measured or self.measured[0].peak_reserved is None:
            return None
        return max(m.peak_reserved or 0 for m in self.measured)

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """Tokens trained per second per GPU, measured."""
        step = self.step_s
        if step is None:
            return None
        return self.layout.global_batch * self.spec.seq_len / step / self.layout.gpus


def _host_budget_reason(spec: ModelSpec, layout: Layout) -> str | None:
    """Why the host cannot hold ``layout`` of ``spec`` on its ranks, or ``None``."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of the test stack
        return None
    need = memory_per_gpu(spec, layout, device_bytes=0).allocated * layout.gpus
    have = psutil.virtual_memory().available
    if need > 0.8 * have:
        return (f"needs about {size_in(need, 'GiB')} on this host for {layout.gpus} ranks and "
                f"{size_in(have, 'GiB')} are free: verify a smaller model (a JSON shape) or "
                "fewer layers (--verify-layers)")
    return None


def verify(spec: ModelSpec, layouts: Sequence[Layout], *, hw: Hardware | None = None,
           layers: int | None = None, steps: int = 3, device: str = "auto",
           timeout: float = 600.0, optimizer: str = "fused",
           progress: Callable[[str], None] | None = None) -> list[VerifyRow]:
    """Run each of ``layouts`` of ``spec`` here and set the measurement beside the prediction
    (the module docstring).

    Args:
        spec: the model.
        layouts: the layouts, in the order to run them.
        hw: the GPUs to price on a GPU run (default: this machine's GPU kind, as many as the
            layout has; a GPU kind the planner does not know is priced as an H100).
        layers: run this many layers (at most the model's); ``None``: all.
        steps: timed steps after one untimed.
        device: one of :data:`DEVICES`.
        timeout: seconds for each layout's ranks.
        optimizer: AdamW's ``"fused"`` or ``"foreach"``.
        progress: called with one line before each layout runs.
    """
    dev, available = local_devices(device)
    steps = check_int("steps", steps, minimum=1)
    full = spec
    if layers is not None:
        layers = check_int("layers", layers, minimum=1, maximum=spec.layers)
        spec = replace(spec, layers=layers, name=f"{spec.name} ({layers} layers)",
                       dense_layers=min(spec.dense_layers, layers - 1) if spec.moe else 0)
    kind = None
    if dev == "cuda":
        from distlab.plan.kernels import gpu_kind_for_device

        kind = gpu_kind_for_device(torch.cuda.get_device_name(0))
    rows: list[VerifyRow] = []
    for i, given in enumerate(layouts):
        lay = given.with_(precision=RUN_PRECISION)
        if progress is not None:
            progress(f"[{i + 1}/{len(layouts)}] {lay.label}")
        reason = unsupported_reason(lay)
        if reason is None and lay.stages > spec.layers:
            reason = f"{lay.stages} pipeline stages need at least as many layers ({spec.layers})"
        reason = reason or count_reason(lay, dev, available)
        if reason is None and dev == "cpu":
            reason = _host_budget_reason(spec, lay)
        try:
            predicted, alloc, scale = _predict(full, spec, lay, dev, kind, hw, optimizer)
        except ValueError as exc:          # a layout the model cannot split either
            predicted, alloc, scale = None, 0, 1.0
            reason = reason or str(exc)
        if reason is not None:
            rows.append(VerifyRow(lay, spec, predicted, alloc, None, "skipped", reason, scale))
            continue
        case = VerifyCase(spec, lay, steps=steps, optimizer=optimizer, device=dev)
        try:
            measured = tuple(launch.run(run_rank, lay.gpus, args=(case,), timeout=timeout,
                                        backend="nccl" if dev == "cuda" else "gloo"))
            rows.append(VerifyRow(lay, spec, predicted, alloc, measured, "ran", "", scale))
        except MeasuredOutOfMemory as exc:
            rows.append(VerifyRow(lay, spec, predicted, alloc, None, "out of memory",
                                  _oom_text(exc.details), scale))
        except launch.RankError as exc:
            details = MeasuredOutOfMemory.parse(exc.traceback_text)
            if details is not None:
                rows.append(VerifyRow(lay, spec, predicted, alloc, None, "out of memory",
                                      f"rank {exc.rank}: " + _oom_text(details), scale))
            else:
                last = exc.traceback_text.strip().splitlines()[-1]
                rows.append(VerifyRow(lay, spec, predicted, alloc, None, "failed",
                                      f"rank {exc.rank}: {last}", scale))
        except launch.LaunchError as exc:
            rows.append(VerifyRow(lay, spec, predicted, alloc, None, "failed", str(exc), scale))
    return rows


def _oom_text(d: dict[str, Any]) -> str:
    parts = [f"in {d.get('phase')}"]
    if d.get("requested"):
        parts.append(f"asked for {size_in(d['requested'], 'GiB', '.2f')}")
    if d.get("reserved") is not None:
        parts.append(f"with {size_in(d['reserved'], 'GiB')} reserved")
    return ", ".join(parts)


def _predict(full: ModelSpec, spec: ModelSpec, lay: Layout, dev: str, kind: Any,
             hw: Hardware | None, optimizer: str) -> tuple[LayoutPrice | None, int, float]:
    """The planner's price of the run (GPU), the memory model's allocated peak, and the full
    model's step over the run model's."""
    if dev == "cpu":
        alloc = memory_per_gpu(spec, lay, device_bytes=0, optimizer=optimizer).allocated
        return None, alloc, 1.0
    if hw is None or hw.gpus != lay.gpus:
        gpu = kind if kind is not None else "h100"
        per_node = min(8, lay.gpus)
        hw = hardware(gpu, lay.gpus, gpus_per_node=per_node)
    try:
        run = price(spec, lay, hw, expandable_segments=expandable_segments(),
                    optimizer=optimizer)
        whole = price(full, lay, hw, expandable_segments=expandable_segments(),
                      optimizer=optimizer) if full is not spec else run
    except ValueError:
        return None, 0, 1.0
    return run, run.memory.allocated, whole.step.step_s / run.step.step_s
