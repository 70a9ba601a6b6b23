"""The size of an NCCL kernel read from torch's annotation span around its launch.

torch's NCCL process group records each collective as a CPU-side ``record_function`` span named
``nccl:<collective>`` (``nccl:all_to_all``, ``nccl:all_reduce``, ``nccl:_all_gather_base``, ...,
category ``user_annotation``) whose args, under ``record_shapes=True``, are ``Input Dims`` (the
input tensor's shape) and ``Input type`` (its dtype as Kineto spells it, ``"float"``) — the same
arguments a ``gloo:`` span carries. The GPU kernel the call launches (``ncclKernel_SendRecv``,
``ncclDevKernel_*``) carries no message size itself on traces without ``record_param_comms``;
it is linked to its span here: the kernel's ``correlation`` names the CUDA runtime launch
(``cudaLaunchKernel``, a host event with the same ``correlation``), and the innermost
``nccl:`` span on the launch's thread that contains the launch's start is the call's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distlab.trace.torch_trace import RankTrace

__all__ = ["SPAN_PREFIX", "SpanSize", "annotation_sizes"]

SPAN_PREFIX = "nccl:"
"""The prefix of torch's NCCL annotation spans."""


@dataclass(frozen=True)
class SpanSize:
    """What one ``nccl:`` span states: ``collective`` (the name after the prefix, as written:
    ``all_to_all``, ``_reduce_scatter_base``), ``nelems`` (product of the first input's dims;
    None where no dims are stated) and ``dtype`` (``Input type``'s first entry, or None)."""

    collective: str
    nelems: int | None
    dtype: str | None


def _span_size(name: str, args: dict[str, object]) -> SpanSize:
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    first = dims[0] if isinstance(dims, list) and dims else None
    nelems = int(np.prod(first)) if isinstance(first, list) and first and \
        all(isinstance(d, int) for d in first) else None
    dtype = str(types[0]) if isinstance(types, list) and types and types[0] else None
    return SpanSize(name[len(SPAN_PREFIX):], nelems, dtype)


def annotation_sizes(rt: RankTrace, kernels: np.ndarray) -> dict[int, SpanSize]:
    """For each GPU kernel index of ``kernels`` (events of ``rt``) launched inside an ``nccl:``
    span that states ``Input Dims``, that span's :class:`SpanSize` (see the module doc);
    kernels with no such span are absent."""
    spans = [i for i in rt.args if rt.names[rt.name[i]].startswith(SPAN_PREFIX)]
    if not spans or not len(kernels):
        return {}
    s_ts = np.array([rt.ts[i] for i in spans])
    s_end = s_ts + np.array([rt.dur[i] for i in spans])
    s_tid = np.array([rt.tid[i] for i in spans])
    corr = rt.correlation
    complete = ~np.isnan(rt.ts) & ~np.isnan(rt.dur)
    runtime = np.flatnonzero(complete & (rt.stream < 0) & (corr >= 0))
    launch = {int(c): (float(t), int(d)) for c, t, d in
              zip(corr[runtime].tolist(), rt.ts[runtime].tolist(), rt.tid[runtime].tolist(),
                  strict=True)}
    out: dict[int, SpanSize] = {}
    for k in kernels.tolist():
        hit = launch.get(int(corr[k]))
        if hit is None:
            continue
        t, tid = hit
        inside = np.flatnonzero((s_tid == tid) & (s_ts <= t) & (t <= s_end))
        if len(inside):
            j = spans[int(inside[np.argmax(s_ts[inside])])]
            out[int(k)] = _span_size(rt.names[rt.name[j]], rt.args[j])
    return out
