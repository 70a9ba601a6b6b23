"""What one pipeline step held and how long it took, measured on the rank: :class:`StepStats`.

Activation bytes are counted from the tensors autograd really keeps. While a stage's forward of
a microbatch runs, :class:`ActivationMeter` sees every tensor autograd saves for the backward
(``torch.autograd.graph.saved_tensors_hooks``; the hook hands the tensor back unchanged) and keeps
a weak reference to its storage and the byte range the tensor reaches in it. The live activation
bytes at a moment are the bytes the saved tensors of the microbatches *in flight* (forward done,
backward not yet finished) reach in their still-alive storages, each byte counted once (a
microbatch that is a slice of the whole batch counts its slice, not the batch), leaving out the
storages of the stage parameters (a ``Linear`` saves its weight too). The meter samples after
every compute action; the largest sample is the step's peak. A microbatch leaves flight when its
backward (``B``, or ``W`` after ``I``) has run, and its graph is then freed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["ActivationMeter", "StepStats"]


@dataclass(frozen=True)
class StepStats:
    """One rank's measurements of one ``step()``.

    Attributes:
        schedule: the plan's schedule name (``"1F1B"``).
        rank: this rank's pipeline rank (its rank in the pipeline group).
        stages: the stages this rank holds.
        microbatches: microbatches in the step.
        step_seconds: wall time of the step on this rank, from its first action to the end of
            its last send.
        compute_seconds: time in compute actions (``F``, ``B``, ``I``, ``W``) in all.
        p2p_wait_seconds: time waiting for receives and, at the end, for sends.
        peak_activation_nbytes: the most activation bytes held at once (see the module
            docstring); ``None`` for a step run without a timeline (not measured).
        peak_in_flight: the most ``(stage, microbatch)`` pairs in flight at once (``None``:
            not measured).
        saved_nbytes: per stage here, the largest bytes one microbatch's forward saved.
        compute_actions: compute actions run.
    """

    schedule: str
    rank: int
    stages: tuple[int, ...]
    microbatches: int
    step_seconds: float
    compute_seconds: float
    p2p_wait_seconds: float
    peak_activation_nbytes: int | None
    peak_in_flight: int | None
    saved_nbytes: dict[int, int] = field(default_factory=dict)
    compute_actions: int = 0

    @property
    def bubble_fraction(self) -> float:
        """Share of the step this rank did not compute: ``1 - compute / step``."""
        if self.step_seconds <= 0:
            return 0.0
        return max(0.0, 1.0 - self.compute_seconds / self.step_seconds)


class ActivationMeter:
    """Counts the activation bytes of the microbatches in flight on one rank (module docstring).

    Args:
        exclude: tensors whose storages never count (the stages' parameters).
    """

    def __init__(self, exclude: list[torch.Tensor] | None = None) -> None:
        self._skip = {t.untyped_storage().data_ptr() for t in exclude or []}
        self._records: dict[tuple[int, int],
                            dict[int, tuple[StorageWeakRef, list[tuple[int, int]]]]] = {}
        self._saved: dict[int, int] = {}
        self.peak_nbytes = 0
        self.peak_in_flight = 0

    @contextmanager
    def saving(self, stage: int, microbatch: int) -> Iterator[None]:
        """Record what autograd saves inside the block as ``(stage, microbatch)``'s."""
        record = self._records.setdefault((stage, microbatch), {})
        skip = self._skip

        def pack(t: torch.Tensor) -> torch.Tensor:
            try:
                st = t.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                return t
            ptr = st.data_ptr()
            span = _byte_span(t)
            if ptr not in skip and span[1] > span[0]:
                ref, spans = record.get(ptr, (StorageWeakRef(st), []))
                record[ptr] = (ref, [*spans, span])
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, _unpack):
            yield
        nbytes = sum(_union_nbytes(spans) for _, spans in record.values())
        self._saved[stage] = max(self._saved.get(stage, 0), nbytes)

    def release(self, stage: int, microbatch: int) -> None:
        """``(stage, microbatch)`` is out of flight (its backward is done)."""
        self._records.pop((stage, microbatch), None)

    def live_nbytes(self) -> int:
        """Bytes the live tensors saved by the microbatches in flight reach, each byte of a
        storage counted once (two views of one storage: the union of their byte ranges)."""
        seen: dict[int, list[tuple[int, int]]] = {}
        for record in self._records.values():
            for ptr, (ref, spans) in list(record.items()):
                if ref.expired():
                    del record[ptr]
                else:
                    seen.setdefault(ptr, []).extend(spans)
        return sum(_union_nbytes(spans) for spans in seen.values())

    def sample(self) -> int:
        """Take one sample; update the peaks; the sample in bytes."""
        now = self.live_nbytes()
        self.peak_nbytes = max(self.peak_nbytes, now)
        self.peak_in_flight = max(self.peak_in_flight, len(self._records))
        return now

    @property
    def saved_nbytes(self) -> dict[int, int]:
        """Per stage, the largest bytes one microbatch's forward saved."""
        return dict(self._saved)


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """``(first, end)`` byte offsets of ``t``'s elements inside its storage."""
    if t.numel() == 0:
        return (0, 0)
    first = t.storage_offset() * t.element_size()
    extent = 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride(), strict=True))
    return (first, first + extent * t.element_size())


def _union_nbytes(spans: list[tuple[int, int]]) -> int:
    """Bytes covered by the union of ``[first, end)`` ranges."""
    total, reach = 0, -1
    for first, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(first, reach)
        reach = end
    return total


def _unpack(t: Any) -> Any:
    return t
