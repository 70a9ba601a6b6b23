"""The NCCL model beside every collective kernel of a user's trace.

For each rank's call of each matched collective (:mod:`distlab.trace.collectives`) the kernel's
time is split into *waiting for the last peer* (the last rank's kernel start minus this rank's,
capped at the kernel) and *moving data* (the rest). Where the trace states the message
(collective, ``In msg nelems``, ``dtype``, ``Group size``) and the GPU is one of the NCCL model's
boxes, the moving-data time stands beside
``predict_builtin(box, group_size, [nbytes], nccl_model="measured")`` with the error
``(measured - model) / model`` (distlab's one sign). Otherwise one line says why.

GPU names map to boxes by :data:`BOX_PATTERNS` (a list a user extends): ``A100`` -> the A100 SXM
box, ``H100`` -> the H100 SXM box, ``RTX PRO 6000`` -> the PCIe box. A group larger than the box's
GPUs spans nodes whose network the trace does not name: not priced. Only ranks whose traces are
given can be waited for: where a peer of the group has no trace here, the wait is unknown
(``wait_us`` and ``transfer_us`` are None, not 0), the whole kernel stands beside the model
(``measured_us``, ``measured`` says which) and the note says so. ``predict_builtin`` prices
allreduce; other collectives are named, not priced.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from distlab.collectives.model.nccl.boxes import GPU_BOXES
from distlab.collectives.model.nccl.versions import NcclVersionWarning
from distlab.collectives.model.predict import predict_builtin
from distlab.trace.collectives import Collectives, dtype_bytes

__all__ = ["BOX_PATTERNS", "PEERS_ABSENT", "KernelPrice", "box_for_gpu", "price_collectives"]

BOX_PATTERNS: list[tuple[str, str]] = [(r".*A100", "a100_sxm8"), (r".*H100", "h100_sxm8"),
                                       (r".*RTX PRO 6000", "pcie5_8")]
"""(regex on ``deviceProperties[0].name``, key of GPU_BOXES), first match wins."""


def box_for_gpu(gpu: str | None) -> str | None:
    """The NCCL model's box for a GPU name, or None."""
    if not gpu:
        return None
    for rx, key in BOX_PATTERNS:
        if re.match(rx, gpu) and key in GPU_BOXES:
            return key
    return None


PEERS_ABSENT = ("peers' traces absent: the wait for them is unknown, so the whole kernel stands "
                "beside the model")
"""The note of a kernel whose group has ranks without a trace here."""


@dataclass
class KernelPrice:
    """One rank's collective kernel beside the model (microseconds); ``why`` when not priced.
    ``wait_us`` and ``transfer_us`` are None where the wait is unknown (a peer's trace is
    absent)."""

    rank: int
    group: str
    seq: int
    step: int | None
    collective: str | None
    name: str
    nbytes: int | None
    group_size: int | None
    kernel_us: float
    wait_us: float | None
    transfer_us: float | None
    peers_seen: int
    model_us: float | None
    why: str | None
    note: str | None = None

    @property
    def measured(self) -> str:
        """What :attr:`measured_us` is: ``"transfer"`` (after the last peer arrived) or
        ``"kernel (wait unknown)"``."""
        return "transfer" if self.transfer_us is not None else "kernel (wait unknown)"

    @property
    def measured_us(self) -> float:
        """The time beside the model: the transfer where the wait is known, else the kernel."""
        return self.transfer_us if self.transfer_us is not None else self.kernel_us

    @property
    def error(self) -> float | None:
        """(measured - model) / model of :attr:`measured_us`, or None."""
        if self.model_us is None or self.model_us <= 0:
            return None
        return (self.measured_us - self.model_us) / self.model_us

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["measured"], d["measured_us"], d["error"] = self.measured, self.measured_us, self.error
        return d


def _model_us(box: str, n: int, nbytes: int, itemsize: int,
              nccl_version: str | None) -> tuple[float, str | None]:
    """The model's microseconds, and the model's one line when it priced another release
    than the trace's (its warning, kept as the kernel's note instead of printed)."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", NcclVersionWarning)
        seconds = predict_builtin(box, n, [nbytes], itemsize=itemsize, nccl_model="measured",
                                  nccl_version=nccl_version)[0]
    notes = [str(w.message) for w in said if issubclass(w.category, NcclVersionWarning)]
    return seconds * 1e6, (notes[0] if notes else None)


def price_collectives(col: Collectives, gpus: dict[int, str | None],
                      nccl_versions: dict[int, str | None]) -> list[KernelPrice]:
    """Every rank's call of every collective beside the model (see the module docstring).

    Args:
        col: the run's matched calls.
        gpus: rank -> GPU name (``RankTrace.gpu``); None for a CPU trace.
        nccl_versions: rank -> NCCL release from the trace, or None.
    """
    out: list[KernelPrice] = []
    cache: dict[tuple[Any, ...], tuple[float, str | None]] = {}
    for call in col.calls:
        last = call.last_start_us
        for r, c in call.calls.items():
            kernel = c.end_us - c.start_us
            seen = len(call.calls)
            known = seen > 1 and (not c.group_size or seen >= c.group_size)
            wait = min(max(0.0, last - c.start_us), kernel) if known else None
            transfer = kernel - wait if wait is not None else None
            why: str | None = None
            model: float | None = None
            note = None if known else PEERS_ABSENT
            box = box_for_gpu(gpus.get(r))
            nbytes = c.nbytes
            if c.library == "gloo":
                why = "gloo on CPU: the NCCL model prices NCCL on GPU boxes only"
            elif gpus.get(r) is None:
                why = "GPU not stated in the trace (no deviceProperties): no box to price on"
            elif box is None:
                why = (f"GPU {gpus.get(r)!r} is none of the NCCL model's boxes "
                       f"({', '.join(GPU_BOXES)})")
            elif c.collective != "allreduce":
                why = (f"collective {c.collective or 'unknown'}: predict_builtin prices "
                       "allreduce only")
            elif nbytes is None:
                why = ("message size unknown (no In msg nelems/dtype in the trace; record with "
                       "record_shapes=True)")
            elif not c.group_size:
                why = "group size unknown"
            elif c.group_size > GPU_BOXES[box].gpus:
                why = (f"group of {c.group_size} ranks spans nodes of {box}: the network is not "
                       "in the trace")
            else:
                key = (box, c.group_size, nbytes, nccl_versions.get(r))
                if key not in cache:
                    cache[key] = _model_us(box, c.group_size, nbytes,
                                           dtype_bytes(c.dtype) or 4, nccl_versions.get(r))
                model, vnote = cache[key]
                note = "; ".join(x for x in (note, vnote) if x) or None
            out.append(KernelPrice(r, call.group, call.seq, c.step, c.collective, c.name, nbytes,
                                   c.group_size, kernel, wait, transfer, len(call.calls), model,
                                   why, note))
    return out
