"""A model of one DDP step: backward overlapped with per-bucket allreduces (pure functions).

Inputs are measured or assumed: when each bucket's last gradient is ready (seconds from the start
of backward), the backward duration, bucket sizes in bytes, and a link with ``alpha`` (s/message),
``beta`` (s/byte), ``gamma`` (s/byte reduced), ``duplex`` and optionally ``call_overhead`` (s) --
a :class:`distlab.collectives.Calibration` or :class:`distlab.collectives.LinkPreset`. Each
bucket's allreduce is costed as the named distlab schedule (default ring, the shape of gloo's and
NCCL's large-message allreduce) plus ``call_overhead``. Simulation rule (as the reducer runs):
with overlap a bucket's allreduce starts when its last gradient is ready and the previous
allreduce has finished; without overlap they run back to back after backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from distlab._checks import check_int
from distlab.collectives import build, cost
from distlab.ddp.buckets import compute_bucket_assignment_by_size

_MB = 1024 * 1024


def allreduce_seconds(nbytes: int, world_size: int, link: Any, *, algorithm: str = "ring",
                      itemsize: int = 4) -> float:
    """Predicted seconds of one allreduce of ``nbytes`` over ``world_size`` ranks on ``link``."""
    check_int("world_size", world_size, minimum=1)
    count = max(int(nbytes) // itemsize, 1)
    if world_size == 1:
        return 0.0
    sched = build(algorithm, world_size, count)
    return float(getattr(link, "call_overhead", 0.0)) + cost(
        sched, link.alpha, link.beta, link.gamma, itemsize, duplex=getattr(link, "duplex", "full"))


#: Collectives Join adds to every iteration of a rank still training (each a one-element float32
#: allreduce): ``Join.notify_join_context``'s "not joined yet" and DDP's "this backward syncs".
JOIN_ALLREDUCES_PER_STEP = 2


def join_step_seconds(world_size: int, link: Any) -> float:
    """Predicted seconds Join adds to a step of a rank still training: its
    :data:`JOIN_ALLREDUCES_PER_STEP` one-element allreduces, each a latency-bound call on
    ``link`` (they queue ahead of the first bucket's allreduce on the same group)."""
    return JOIN_ALLREDUCES_PER_STEP * allreduce_seconds(4, world_size, link)


def shadow_step_seconds(bucket_bytes: list[int], world_size: int, link: Any) -> float:
    """Predicted seconds of one iteration a joined rank shadows: Join's count allreduce, the
    flag allreduce and one allreduce of zeros per bucket (``bucket_bytes``, in bytes), back to
    back -- it computes nothing, so it waits on every one."""
    return (join_step_seconds(world_size, link)
            + sum(allreduce_seconds(b, world_size, link) for b in bucket_bytes))


#: Bytes per element on the wire for each compression a comm hook applies
#: (:mod:`distlab.ddp.comm_hooks`); ``None``: the bucket's own dtype.
COMPRESSION_ITEMSIZE = {"fp16": 2, "bf16": 2}


def compression_pass_bytes(nbytes: int, *, itemsize: int = 4, wire_itemsize: int = 2) -> int:
    """Bytes read plus written by the elementwise passes of a compressing hook on a bucket of
    ``nbytes`` (elements of ``itemsize`` bytes): the cast down (reads ``nbytes``, writes the wire
    tensor), the division by the world size on the wire tensor (reads and writes it) and the cast
    back into the bucket (reads the wire tensor, writes ``nbytes``) -- what
    ``fp16_compress_hook``/``bf16_compress_hook`` do. ``3 * (nbytes + wire)`` in all."""
    check_int("nbytes", nbytes, minimum=0)
    check_int("itemsize", itemsize, minimum=1)
    check_int("wire_itemsize", wire_itemsize, minimum=1)
    wire = (nbytes // itemsize) * wire_itemsize
    return (nbytes + wire) + 2 * wire + (wire + nbytes)


def compressed_allreduce_seconds(nbytes: int, world_size: int, link: Any, *,
                                 algorithm: str = "ring", itemsize: int = 4,
                                 wire_itemsize: int = 2,
                                 pass_s_per_byte: float | None = None) -> float:
    """Predicted seconds of a compressed allreduce of a bucket of ``nbytes``: the allreduce of
    the wire tensor (``nbytes * wire_itemsize / itemsize`` bytes, elements of ``wire_itemsize``)
    plus the hook's elementwise passes, :func:`compression_pass_bytes` priced at
    ``pass_s_per_byte`` seconds per byte read or written. ``pass_s_per_byte=None`` takes the
    link's ``gamma`` (seconds per byte reduced: the same kind of local elementwise pass), an
    assumption stated here, not a measurement. One rank (``world_size == 1``): 0.0, as for
    :func:`allreduce_seconds` (torch's hooks still cast; distlab prices communication only)."""
    check_int("world_size", world_size, minimum=1)
    if world_size == 1:
        return 0.0
    count = int(nbytes) // itemsize
    rate = float(link.gamma if pass_s_per_byte is None else pass_s_per_byte)
    if rate < 0:
        raise ValueError(f"pass_s_per_byte must be >= 0 seconds per byte, got {rate!r}")
    comm = allreduce_seconds(count * wire_itemsize, world_size, link, algorithm=algorithm,
                             itemsize=wire_itemsize)
    return comm + rate * compression_pass_bytes(count * itemsize, itemsize=itemsize,
                                                wire_itemsize=wire_itemsize)


def bucket_seconds(nbytes: int, world_size: int, link: Any, *, algorithm: str = "ring",
                   compression: str | None = None,
                   pass_s_per_byte: float | None = None) -> float:
    """Seconds of one bucket's reduction: :func:`allreduce_seconds`, or with ``compression``
    (``"fp16"``/``"bf16"``, float32 buckets) :func:`compressed_allreduce_seconds`."""
    if compression is None:
        return allreduce_seconds(nbytes, world_size, link, algorithm=algorithm)
    if compression not in COMPRESSION_ITEMSIZE:
        raise ValueError(f"compression must be None or one of {sorted(COMPRESSION_ITEMSIZE)}, "
                         f"got {compression!r}")
    return compressed_allreduce_seconds(nbytes, world_size, link, algorithm=algorithm,
                                        wire_itemsize=COMPRESSION_ITEMSIZE[compression],
                                        pass_s_per_byte=pass_s_per_byte)


@dataclass(frozen=True)
class StepPrediction:
    """Seconds. ``comm_spans``: (start, end) of each bucket's allreduce from backward start;
    ``exposed_s``: communication after backward ended; ``overlap_fraction``: share of the total
    allreduce time hidden under backward (1.0 when there is no communication)."""

    step_s: float
    backward_s: float
    comm_s: float
    exposed_s: float
    overlap_fraction: float
    comm_spans: tuple[tuple[float, float], ...]


def simulate_step(ready_s: Sequence[float], comm_s: Sequence[float], backward_s: float, *,
                  overlap: bool = True, other_s: float = 0.0) -> StepPrediction:
    """Simulate one step. ``ready_s[b]``: when bucket b's last gradient is ready; ``comm_s[b]``:
    its allreduce time; ``other_s``: forward + optimizer time added to the step."""
    if len(ready_s) != len(comm_s):
        raise ValueError(f"ready_s and comm_s: expected equal lengths, got {len(ready_s)} "
                         f"and {len(comm_s)}")
    end = 0.0 if overlap else float(backward_s)
    spans = []
    for r, c in zip(ready_s, comm_s, strict=True):
        start = max(float(r), end) if overlap else end
        end = start + float(c)
        spans.append((start, end))
    total = float(sum(comm_s))
    exposed = max(0.0, end - backward_s) if spans else 0.0
    frac = min(1.0, max(0.0, 1.0 - exposed / total)) if total > 0 else 1.0
    return StepPrediction(other_s + backward_s + exposed, float(backward_s), total, exposed,
                          frac, tuple(spans))


def buckets_for_sizes(sizes: Sequence[int], bucket_cap_mb: float | None) -> list[list[int]]:
    """torch's rebuilt buckets for float32 parameters of ``sizes`` bytes given in ready order
    (indices into ``sizes``)."""
    first, cap = ((1 << 20, 25 * _MB) if bucket_cap_mb is None
                  else (int(bucket_cap_mb * _MB),) * 2)
    tensors = [torch.empty(max(s // 4, 0), device="meta") for s in sizes]
    b, _ = compute_bucket_assignment_by_size(tensors, [first, cap],
                                             tensor_indices=list(range(len(sizes))))
    return b


def bucket_ready_s(sizes: Sequence[int], ready_s: Sequence[float],
                   bucket_cap_mb: float | None) -> list[float]:
    """When each bucket of :func:`buckets_for_sizes` is ready: the latest ready time (seconds
    from backward's start) of its parameters, given per parameter in ready order."""
    return [max(ready_s[i] for i in b) for b in buckets_for_sizes(sizes, bucket_cap_mb)]


@dataclass(frozen=True)
class ReadyOrder:
    """Parameters in the order one backward pass makes their gradients ready.

    ``names``: the module's ``named_parameters()`` names; ``sizes``: bytes of each;
    ``ready_s``: seconds from backward's start when each gradient is ready (non-decreasing);
    ``backward_s``: seconds of the whole backward. ``sizes``, ``ready_s`` and ``backward_s``
    are the inputs :func:`predict` takes.
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    ready_s: tuple[float, ...]
    backward_s: float


def mlp_ready_order(layers: int, width: int, backward_s_per_byte: float, *,
                    itemsize: int = 4) -> ReadyOrder:
    """The ready order of ``torch.nn.Sequential`` of ``layers`` x (``Linear(width, width)``,
    ``ReLU``) with ``itemsize``-byte parameters (names ``"{2 i}.weight"``, ``"{2 i}.bias"``).

    Backward runs from the last layer to the first and, within a layer, makes the bias's
    gradient ready before the weight's. Time is a model: backward spends
    ``backward_s_per_byte`` seconds on each parameter byte, in that order, so a gradient is
    ready once its own bytes and those before it are done, and ``backward_s`` is the rate times
    all the bytes.
    """
    check_int("layers", layers, minimum=1)
    check_int("width", width, minimum=1)
    check_int("itemsize", itemsize, minimum=1)
    rate = float(backward_s_per_byte)
    if not rate >= 0:
        raise ValueError(f"backward_s_per_byte must be >= 0 seconds per byte, got "
                         f"{backward_s_per_byte!r}")
    names: list[str] = []
    sizes: list[int] = []
    for i in reversed(range(layers)):
        names += [f"{2 * i}.bias", f"{2 * i}.weight"]
        sizes += [width * itemsize, width * width * itemsize]
    ready, t = [], 0.0
    for nbytes in sizes:
        t += nbytes * rate
        ready.append(t)
    return ReadyOrder(tuple(names), tuple(sizes), tuple(ready), t)


def predict(sizes: Sequence[int], ready_s: Sequence[float], backward_s: float, link: Any,
            world_size: int, bucket_cap_mb: float | None, *, overlap: bool = True,
            other_s: float = 0.0, algorithm: str = "ring", compression: str | None = None,
            pass_s_per_byte: float | None = None) -> StepPrediction:
    """Predict a step for parameters of ``sizes`` bytes in ready order, ready at ``ready_s``;
    ``compression`` (``"fp16"``/``"bf16"``) prices every bucket as a compressing comm hook runs
    it (:func:`bucket_seconds`)."""
    buckets = buckets_for_sizes(sizes, bucket_cap_mb)
    ready = bucket_ready_s(sizes, ready_s, bucket_cap_mb)
    comm = [bucket_seconds(sum(sizes[i] for i in b), world_size, link, algorithm=algorithm,
                           compression=compression, pass_s_per_byte=pass_s_per_byte)
            for b in buckets]
    return simulate_step(ready, comm, backward_s, overlap=overlap, other_s=other_s)


def sweep_bucket_cap(sizes: Sequence[int], ready_s: Sequence[float], backward_s: float,
                     link: Any, world_size: int, caps_mb: Sequence[float], **kw: Any
                     ) -> list[tuple[float, StepPrediction]]:
    """:func:`predict` for every cap in ``caps_mb``."""
    return [(c, predict(sizes, ready_s, backward_s, link, world_size, c, **kw)) for c in caps_mb]


@dataclass(frozen=True)
class Traffic:
    """Per-step data movement (bytes) and its time (s) on one link model."""

    name: str
    phases: tuple[tuple[str, int, float], ...]  # (phase, bytes over the busiest link, seconds)

    @property
    def total_bytes(self) -> int:
        return sum(p[1] for p in self.phases)

    @property
    def total_s(self) -> float:
        return sum(p[2] for p in self.phases)


def dataparallel_vs_ddp(param_bytes: int, input_bytes: int, output_bytes: int, n: int,
                        link: Any) -> tuple[Traffic, Traffic]:
    """Model only. DataParallel on ``n`` devices funnels everything through device 0: broadcast
    parameters ((n-1) P), scatter inputs and gather outputs ((n-1)/n of each), reduce gradients
    to device 0 ((n-1) P); every transfer is one message over device 0's link. DDP: one ring
    allreduce of the gradients per rank (inputs are loaded locally, parameters stay put)."""
    check_int("n", n, minimum=2)

    def t(nbytes: float, msgs: int) -> float:
        return msgs * link.alpha + nbytes * link.beta

    share = (n - 1) / n
    dp = (("broadcast params", (n - 1) * param_bytes, t((n - 1) * param_bytes, n - 1)),
          ("scatter inputs", int(share * input_bytes), t(share * input_bytes, n - 1)),
          ("gather outputs", int(share * output_bytes), t(share * output_bytes, n - 1)),
          ("reduce grads", (n - 1) * param_bytes,
           t((n - 1) * param_bytes, n - 1) + (n - 1) * param_bytes * link.gamma))
    ddp = (("allreduce grads", int(2 * share * param_bytes),
            allreduce_seconds(param_bytes, n, link)),)
    return Traffic("DataParallel", tuple((a, int(b), c) for a, b, c in dp)), Traffic("DDP", ddp)
