"""Measure alpha, beta and gamma on the current process group and fit them, with fit quality.

Call :func:`calibrate` on every rank of an initialized group (it is collective); or
:func:`calibrate_local` from a plain process, which launches ``world_size`` gloo ranks.

- **alpha, beta** (latency per message, seconds per byte): timed message exchanges over
  ``sizes`` bytes, run through the same executor as the algorithms (a :class:`Schedule` of
  ``chain`` exchange steps, so alpha includes the executor's per-step overhead), fitted as ``t = alpha + beta * nbytes`` by least squares on relative error
  (so 1 KB and 64 MB points weigh alike). ``pattern="exchange"`` (default) pairs ranks
  ``(2i, 2i+1)`` and has *all* pairs send and receive at once, which is what a schedule step
  does and loads the machine as a step would. With ``k`` ranks exchanging, one exchange moves
  ``2 k nbytes`` through the host in ``k`` messages, so ``alpha = intercept / k`` and
  ``beta = slope / (2 k)`` belong to the ``duplex="shared"`` cost model (ranks on one host
  share its cores and memory bus). ``pattern="pingpong"`` is the classic round trip between
  ranks 0 and 1 (time / 2, ``duplex="full"``), the others idle.
- **gamma** (seconds per reduced byte): every rank at once times the in-place reduction the
  executor performs (``out.add_(x)``, ...) on ``reduce_sizes`` bytes, fitted the same way.

Each point is the median over ``iters`` timed repeats after ``warmup``, then the maximum over
ranks (a step lasts as long as its slowest rank). Exchanges are timed both in a chain of
``chain`` steps (alpha and beta come from the chain: the steady state of a multi-step schedule)
and alone (the difference is ``call_overhead``, paid once per collective call).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .schedule import Schedule, Step, Transfer

__all__ = ["Calibration", "DEFAULT_REDUCE_SIZES", "DEFAULT_SIZES", "calibrate", "calibrate_local",
           "calibrate_worker", "exchange_schedule", "fit_linear"]

DEFAULT_SIZES: tuple[int, ...] = tuple(4 ** k * 1024 for k in range(0, 9))      # 1 KiB .. 64 MiB
DEFAULT_REDUCE_SIZES: tuple[int, ...] = tuple(4 ** k * 65536 for k in range(0, 5))  # 64 KiB .. 16 MiB
PATTERNS = ("exchange", "pingpong")


@dataclass(frozen=True)
class Calibration:
    """Fitted alpha (s), beta (s/byte), gamma (s/byte reduced) and the data behind them.

    ``*_r2`` is the coefficient of determination of each fit and ``*_max_rel_residual`` the
    largest ``|fit - measured| / measured`` over its points. ``call_overhead`` (seconds) is what
    one collective call costs beyond its steps: the median over sizes of (one exchange timed
    alone after a barrier) minus (one exchange of a back-to-back chain), i.e. barrier-exit skew
    and per-call work; a prediction of a whole call is ``call_overhead + cost(schedule)``.
    ``handoff`` (seconds per step, 0 for :func:`calibrate`) is the per-step cost distinct from the
    per-message alpha (``cost(..., handoff=)``); ``method`` says how it was measured:
    ``"upfront"`` (:func:`calibrate`, before the benchmark) or ``"rounds"``
    (:class:`~distlab.collectives.rounds.RoundCalibrator`, inside the benchmark's rounds, whose
    one-way and ring-shift chain step times are ``oneway_seconds`` and ``shift_seconds``, per
    size of ``sizes``). ``relay`` (seconds per step per linked rank beyond 2, 0 for
    :func:`calibrate`) is the ring hand-off term of ``cost(..., relay=)``.
    """

    alpha: float
    beta: float
    gamma: float
    comm_r2: float
    comm_max_rel_residual: float
    reduce_r2: float
    reduce_max_rel_residual: float
    sizes: list[int] = field(default_factory=list)
    comm_seconds: list[float] = field(default_factory=list)
    reduce_sizes: list[int] = field(default_factory=list)
    reduce_seconds: list[float] = field(default_factory=list)
    reduce_offset: float = 0.0
    backend: str = ""
    world_size: int = 0
    dtype: str = "float32"
    pattern: str = "exchange"
    duplex: str = "shared"
    call_overhead: float = 0.0
    single_seconds: list[float] = field(default_factory=list)
    handoff: float = 0.0
    method: str = "upfront"
    oneway_seconds: list[float] = field(default_factory=list)
    relay: float = 0.0
    shift_seconds: list[float] = field(default_factory=list)

    @property
    def bandwidth_gbps(self) -> float:
        """1 / beta in GB/s (1e9 bytes per second)."""
        return 1.0 / self.beta / 1e9 if self.beta > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (see :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


def fit_linear(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float, float]:
    """Fit ``y = a + b x`` minimizing relative error; returns ``(a, b, r2, max_rel_residual)``.

    ``a`` and ``b`` are clipped at 0 (a negative latency or per-byte cost is noise); when a
    coefficient is clipped the other is refitted alone.
    """
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.size < 2 or xs.size != ys.size or np.any(ys <= 0):
        raise ValueError(f"fit_linear needs >= 2 points with positive y, got x={list(xs)} "
                         f"y={list(ys)}")
    w = 1.0 / ys
    design = np.stack([np.ones_like(xs), xs], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(design, ys * w, rcond=None)
    if a < 0:
        a, b = 0.0, float(np.sum(xs * ys * w * w) / np.sum(xs * xs * w * w))
    if b < 0:
        b, a = 0.0, float(np.sum(ys * w * w) / np.sum(w * w))
    pred = a + b * xs
    ss_res = float(np.sum((ys - pred) ** 2))
    ss_tot = float(np.sum((ys - ys.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return float(a), float(b), r2, float(np.max(np.abs(pred - ys) / ys))


def exchange_schedule(world_size: int, count: int, chain: int = 1) -> Schedule:
    """``chain`` steps in which ranks ``2i`` and ``2i+1`` swap ``count`` elements (copy).

    The buffer has ``2 count`` elements: the even rank sends ``[0, count)`` and receives
    ``[count, 2 count)``, the odd rank the reverse, so no rank overwrites what it sends. An odd
    last rank sits out.
    """
    pairs = [(r, r + 1) for r in range(0, world_size - 1, 2)]
    transfers = tuple(t for a, b in pairs for t in (Transfer(a, b, 0, count, "copy"),
                                                     Transfer(b, a, count, 2 * count, "copy")))
    steps = tuple(Step(transfers, f"exchange {i + 1}/{chain}") for i in range(chain)) \
        if count and pairs else ()
    return Schedule("exchange", world_size, 2 * count, steps, {"chain": chain})


def _median_time(fn: Any, iters: int, warmup: int, barrier: Any) -> float:
    times = []
    for i in range(warmup + iters):
        barrier()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    return float(np.median(times))


def _check_sizes(name: str, sizes: Any, itemsize: int) -> list[int]:
    vals = list(sizes)
    if len(vals) < 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < itemsize
                            for s in vals):
        raise ValueError(f"{name} must hold >= 2 ints >= {itemsize} bytes, got {vals!r}")
    return vals


def calibrate(sizes: Sequence[int] = DEFAULT_SIZES, *, iters: int = 10, warmup: int = 3,
              group: Any = None, dtype: Any = None, op: str = "sum",
              reduce_sizes: Sequence[int] = DEFAULT_REDUCE_SIZES,
              pattern: str = "exchange", chain: int = 4) -> Calibration:
    """Measure and fit alpha, beta, gamma on this process group (collective: call on every rank).

    Args:
        sizes: message sizes in bytes for alpha/beta (>= 2 of them).
        iters, warmup: timed and untimed repeats per point.
        group: process group (``None``: world). Needs >= 2 ranks.
        dtype: torch dtype of the buffers (default float32); gamma depends on it.
        op: the reduction timed for gamma.
        reduce_sizes: buffer sizes in bytes for gamma.
        pattern: ``"exchange"`` (all pairs at once) or ``"pingpong"`` (ranks 0 and 1).
        chain: exchanges run back to back per timed repeat (``"exchange"`` only); the time per
            exchange is the total / chain, the steady state of a multi-step schedule.

    Returns:
        The same :class:`Calibration` on every rank.
    """
    import torch
    import torch.distributed as dist

    from .execute import _group_info, _peer, _reducer, run_schedule
    from .ops import check_op

    op = check_op(op)
    dtype = torch.float32 if dtype is None else dtype
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be an int >= 1, got {iters!r}")
    if isinstance(chain, bool) or not isinstance(chain, int) or chain < 1:
        raise ValueError(f"chain must be an int >= 1, got {chain!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    rank, world, backend = _group_info(group)
    if world < 2:
        raise ValueError(f"calibrate needs a group of >= 2 ranks, got world_size={world}")
    device = torch.device("cuda", torch.cuda.current_device()) \
        if "nccl" in backend and torch.cuda.is_available() else torch.device("cpu")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    sizes = _check_sizes("sizes", sizes, itemsize)
    reduce_sizes = _check_sizes("reduce_sizes", reduce_sizes, itemsize)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def barrier() -> None:
        sync()
        dist.barrier(group=group)

    comm, single = [], []
    if pattern == "exchange":
        for nbytes in sizes:
            count = nbytes // itemsize
            buf = torch.ones(2 * count, dtype=dtype, device=device)
            for k, out in ((chain, comm), (1, single)):
                sched = exchange_schedule(world, count, k)

                def run(buf: Any = buf, sched: Schedule = sched, check: bool = k == 1) -> None:
                    # the lone exchange pays the per-call peer check, as every all_reduce does
                    run_schedule(sched, buf, "sum", group, check=check)
                    sync()
                out.append(_median_time(run, iters, warmup, barrier) / k)
    else:
        partner = {0: 1, 1: 0}.get(rank)
        for nbytes in sizes:
            buf = torch.ones(nbytes // itemsize, dtype=dtype, device=device)
            inbox = torch.empty_like(buf)

            def step(buf: Any = buf, inbox: Any = inbox) -> None:
                if partner is None:
                    return
                peer = _peer(group, partner)
                if rank == 0:
                    dist.send(buf, peer, group=group)
                    dist.recv(inbox, peer, group=group)
                else:
                    dist.recv(inbox, peer, group=group)
                    dist.send(buf, peer, group=group)
                sync()
            comm.append(_median_time(step, iters, warmup, barrier) / 2)
    reduce = _reducer(op)
    red = []
    for nbytes in reduce_sizes:
        out = torch.ones(nbytes // itemsize, dtype=dtype, device=device)
        x = torch.ones_like(out)
        red.append(_median_time(lambda: (reduce(out, x), sync()), iters, warmup, barrier))
    single = single or list(comm)
    both = torch.tensor(comm + red + single, dtype=torch.float64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group)
    values = both.tolist()
    comm, red = values[:len(sizes)], values[len(sizes):len(sizes) + len(reduce_sizes)]
    single = values[len(sizes) + len(reduce_sizes):]
    overhead = max(0.0, float(np.median([one - step for one, step in zip(single, comm)])))
    alpha, slope, c_r2, c_res = fit_linear(sizes, comm)
    r0, gamma, r_r2, r_res = fit_linear(reduce_sizes, red)
    duplex = "shared" if pattern == "exchange" else "full"
    active = 2 * (world // 2)  # ranks exchanging: one message each per step
    if duplex == "shared":
        alpha, beta = alpha / active, slope / (2 * active)
    else:
        beta = slope
    return Calibration(alpha, beta, gamma, c_r2, c_res, r_r2, r_res, list(sizes), comm,
                       list(reduce_sizes), red, r0, backend, world, str(dtype).replace("torch.", ""),
                       pattern, duplex, overhead, single)


def calibrate_local(world_size: int = 2, *, timeout: float = 120.0, **kwargs: Any) -> Calibration:
    """Launch ``world_size`` gloo ranks with :func:`distlab.launch.run` and :func:`calibrate`."""
    from distlab import launch

    return Calibration.from_dict(launch.run(calibrate_worker, world_size, kwargs=kwargs,
                                            timeout=timeout)[0])


def calibrate_worker(rank: int, world_size: int, **kwargs: Any) -> dict[str, Any]:
    """:func:`calibrate` on this rank (a :func:`distlab.launch.run` target); returns
    ``Calibration.to_dict()``. A string ``dtype`` names a torch dtype."""
    import torch

    if isinstance(kwargs.get("dtype"), str):
        kwargs["dtype"] = getattr(torch, kwargs["dtype"])
    return calibrate(**kwargs).to_dict()
