"""One MoE layer's step read back from a chrome trace whose parts are annotated ``moe/<part>``
(what ``tools/gpu/moe_step.py`` records with ``torch.profiler`` and trims, e.g.
``results/gpu-h200-2026-11-28-moe-step/moe_layer_trace.json``).

The forward's parts are the GPU-side annotations (``gpu_user_annotation`` events named
``moe/router``, ``moe/permute``, ``moe/experts``, ``moe/shared``, ``moe/combine``): each one's
span runs from its first kernel's start to its last kernel's end, host waits included, and its
kernel time is the sum of the kernels that start inside it. The backward runs under autograd's
own thread, unannotated on the GPU: it is every kernel after the forward's last part, one part
``backward``. The host syncs the layer makes are counted (``cudaStreamSynchronize``: a
``.tolist()``, ``int()`` or ``nonzero`` of a GPU tensor; the tool's own
``torch.cuda.synchronize`` is a device sync and is not). Pure: reads JSON, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlab.gpus import gpu
from distlab.trace.kineto_file import read_kineto_events

__all__ = ["FORWARD_PARTS", "MEASURED_SHAPE", "LayerStepTrace", "PartTime",
           "measured_layer_step_trace", "read_layer_step_trace"]

FORWARD_PARTS = ("router", "permute", "experts", "shared", "combine")
"""The annotated forward parts, in the order the layer runs them."""

MEASURED_SHAPE = {"gpu": gpu("h200").name, "model": "qwen3-30b-a3b", "tokens": 8192, "ep": 8,
                  "local_experts": 16, "dtype": "bf16"}
"""The shipped trace's layer: the model preset, the GPU's tokens (2 sequences of 4096), the
expert-parallel degree (its 128 experts, 16 on the GPU), top-8 routing, bf16."""

_SHIPPED = "data/layer_step_h200.json"

_SYNCS = ("cudaStreamSynchronize",)


@dataclass(frozen=True)
class PartTime:
    """One part of the step: ``span_s`` from its first kernel's start to its last kernel's end
    (what it holds the GPU for, host waits included), ``kernel_s`` the kernels' own time,
    ``kernels`` how many."""

    name: str
    span_s: float
    kernel_s: float
    kernels: int

    @property
    def idle_s(self) -> float:
        """Seconds of the span no kernel of the part ran (the GPU waiting on the host)."""
        return max(0.0, self.span_s - self.kernel_s)


@dataclass(frozen=True)
class LayerStepTrace:
    """A traced layer step: its parts (the forward's annotated ones that ran, then
    ``backward``), the step's span and kernel time, and the host syncs."""

    parts: tuple[PartTime, ...]
    span_s: float
    kernel_s: float
    syncs: int

    def part(self, name: str) -> PartTime:
        """The part called ``name``; ``KeyError`` if the trace has none."""
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(f"no part {name!r} in the trace; it has "
                       f"{[p.name for p in self.parts]}")

    @property
    def busy(self) -> float:
        """Share of the step's span a kernel ran."""
        return self.kernel_s / self.span_s if self.span_s else 0.0


def read_layer_step_trace(path: str | Path) -> LayerStepTrace:
    """The :class:`LayerStepTrace` of the chrome trace at ``path`` (module docstring).

    Raises:
        ValueError: no kernels, or no ``moe/<part>`` GPU annotation, in the trace.
    """
    events: list[dict[str, Any]] = []
    read_kineto_events(Path(path), lambda chunk: events.extend(
        e for e in chunk if e.get("ph") == "X"))
    kernels = sorted((float(e["ts"]), float(e.get("dur", 0.0))) for e in events
                     if e.get("cat") == "kernel")
    marks = {e["name"][len("moe/"):]: (float(e["ts"]), float(e.get("dur", 0.0)))
             for e in events if e.get("cat") == "gpu_user_annotation"
             and str(e.get("name", "")).startswith("moe/")}
    forward = [(n, marks[n]) for n in FORWARD_PARTS if n in marks]
    if not kernels or not forward:
        raise ValueError(f"{path}: a layer step trace needs kernels and moe/<part> GPU "
                         f"annotations, found {len(kernels)} kernels and parts {sorted(marks)}")

    def part(name: str, start: float, end: float) -> PartTime:
        inside = [(t, d) for t, d in kernels if start <= t < end]
        span = (max(t + d for t, d in inside) - min(t for t, _ in inside)) if inside else 0.0
        return PartTime(name, span / 1e6, sum(d for _, d in inside) / 1e6, len(inside))

    parts = [part(n, ts, ts + dur) for n, (ts, dur) in forward]
    forward_end = max(ts + dur for _, (ts, dur) in forward)
    parts.append(part("backward", forward_end, float("inf")))
    first, last = kernels[0][0], max(t + d for t, d in kernels)
    syncs = sum(1 for e in events if e.get("cat") == "cuda_runtime"
                and e.get("name") in _SYNCS)
    return LayerStepTrace(tuple(parts), (last - first) / 1e6,
                          sum(d for _, d in kernels) / 1e6, syncs)


def measured_layer_step_trace() -> LayerStepTrace:
    """The shipped H200 trace of one layer step (:data:`MEASURED_SHAPE`), read from the
    installed package."""
    from importlib import resources

    with resources.as_file(resources.files("distlab.moe").joinpath(_SHIPPED)) as path:
        return read_layer_step_trace(path)
