"""The predicted time of one allreduce call, distlab's algorithms and the backend's own (pure).

    m = call_model(calibration)                     # a Calibration or its JSON dict
    m.seconds("ring", world_size=4, count=1 << 20, itemsize=4)
    m.seconds("builtin", 4, 1 << 20, 4)             # gloo's own ring, from its source
    predict_builtin("h100_sxm8", 8, [1 << 20])      # NCCL's own allreduce on a GPU box

A call costs ``call_overhead`` plus the cost of its schedule
(:func:`distlab.collectives.model.cost.cost`) with the calibration's terms and, when the calibration
stores its per-size series, the per-size prices of :mod:`distlab.collectives.model.rates`.
``"builtin"`` means the backend's own allreduce: for gloo (CPU tensors) the schedule of
:mod:`distlab.collectives.algorithms.allreduce.gloo_ring` with its pipeline of two iterations in
flight, priced as below (distlab's per-call overhead left out, see :meth:`CallModel.seconds`); for
NCCL on a GPU box of :mod:`distlab.nccl.boxes`, NCCL's own tuning model
(:mod:`distlab.nccl.tuning`).

How the builtin is priced. gloo's ring runs in compiled code on the process group's worker
thread: per iteration it posts a send and a receive, waits, and reduces in C++, where distlab's
executor pays a Python hand-off per step and a torch call per reduction. So the builtin keeps
the schedule's bytes terms and takes its fixed costs from the builtin itself, timed by the
calibration in the same rounds (:class:`~distlab.collectives.model.calibration.Calibration`):

- ``builtin_call``: an allreduce of an empty tensor, the call alone (handed to the worker thread
  and back, no iteration of the loop), paid once per call;
- ``builtin_step``: seconds per iteration, such that gloo's schedule of the floor's size
  (``builtin_floor_bytes``, the smallest calibration size) costs the measured ``builtin_floor``
  less ``builtin_call`` (:func:`builtin_step_seconds`);
- reductions: the reduce series less the torch call's fixed part (the reduce fit's
  ``reduce_offset``), which a reduction inside the C++ loop does not pay;
- bytes: at the calibration's one ``beta`` (fitted over every size, so set by the large
  sizes, where the bytes are most of a step), not at the per-size ``beta(s)`` that distlab's
  algorithms pay. ``beta(s)`` is read off single steps of distlab's executor, whose fixed part
  can be several times the bytes of a 128 KiB-1 MiB message; where the fit moves part of that
  fixed wait into ``beta(s)``, the algorithms pay the same fixed part and the two cancel, while
  gloo's loop, with a much smaller fixed part, would be priced too cheap. The price of this
  choice: a switch of the transport's rate between sizes is priced for the algorithms only, and
  where a step's fixed part and its bytes add (small pipelined messages) the pipeline model
  still overlaps them. Notebook 11 shows how far this travels on the committed profiles.

A calibration without a floor (one that did not time the builtin) prices the builtin with
the executor's hand-off and alpha, which over-prices it where fixed costs dominate (small
buffers on slow CPUs); one with a floor but no call counts the whole floor per
iteration. Whether a pipelined step's bytes and reduction overlap depends on the
cores per rank (:attr:`CallModel.cpu_overlap`, :data:`MIN_CORES_TO_OVERLAP`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_choice, check_int
from distlab.collectives.algorithms.allreduce.gloo_ring import gloo_ring
from distlab.collectives.algorithms.registry import BUILTIN, build, is_builtin, options_of
from distlab.collectives.model.calibration import Calibration
from distlab.collectives.model.cost import DUPLEX, cost
from distlab.collectives.model.presets import _packaged_calibration
from distlab.collectives.model.rates import SizeRates, size_rates
from distlab.collectives.plan.schedule import Schedule
from distlab.nccl.boxes import GPU_BOXES, GpuBox
from distlab.nccl.tuning import predict_nccl_allreduce
from distlab.report.jsonfile import read_json
from distlab.vocabulary import dtype_bytes

__all__ = ["CallModel", "builtin_schedule", "builtin_step_seconds", "call_model",
           "predict_builtin"]

MIN_CORES_TO_OVERLAP = 2
"""Cores per rank below which a pipelined step's bytes and reduction add instead of overlapping: a
rank's own thread reduces while gloo's I/O thread copies bytes through loopback TCP, and with fewer
cores than those two threads they take turns (:func:`distlab.collectives.model.cost.cost`,
``cpu_overlap``)."""

BUILTIN_SCHEDULES = {"gloo": "gloo_ring"}
"""The backend whose own allreduce distlab has as a schedule, and that schedule's name."""


@dataclass(frozen=True)
class CallModel:
    """The terms that price one call (seconds; see :func:`distlab.collectives.model.cost.cost`) and,
    if the calibration had per-size series, its :class:`~distlab.collectives.model.rates.SizeRates`
    (``None``: constant beta and gamma). ``backend`` names whose builtin allreduce ``"builtin"``
    means."""

    alpha: float
    beta: float
    gamma: float
    handoff: float = 0.0
    relay: float = 0.0
    call_overhead: float = 0.0
    duplex: str = "full"
    backend: str = "gloo"
    rates: SizeRates | None = None
    reduce_call: float = 0.0
    builtin_step: float | None = None
    builtin_call: float = 0.0
    cores_per_rank: float | None = None

    @property
    def cpu_overlap(self) -> bool:
        """Whether a pipelined step's bytes and reduction run at once
        (:func:`distlab.collectives.model.cost.cost`): unless the ranks had fewer than 2 cores each
        (unknown: yes)."""
        return self.cores_per_rank is None or self.cores_per_rank >= MIN_CORES_TO_OVERLAP

    def compiled_seconds(self, schedule: Schedule, itemsize: int, step_seconds: float) -> float:
        """``schedule`` run by a compiled loop (the backend's own): its bytes at the streaming
        rate (the calibration's one ``beta``, see the module docstring), reductions at the
        per-size rates less the torch call's fixed part (``reduce_call``), and
        ``step_seconds`` per step instead of the executor's hand-off, alpha and relay."""
        rates = None if self.rates is None else \
            self.rates.without_call_cost(self.reduce_call).with_beta(self.beta)
        return cost(schedule, 0.0, self.beta, self.gamma, itemsize, duplex=self.duplex,
                    handoff=step_seconds, rates=rates, cpu_overlap=self.cpu_overlap)

    def schedule_seconds(self, schedule: Schedule, itemsize: int, *,
                         call_overhead: bool = True) -> float:
        """The schedule's cost, plus ``call_overhead`` unless told not to."""
        return (self.call_overhead if call_overhead else 0.0) + cost(
            schedule, self.alpha, self.beta, self.gamma, itemsize, duplex=self.duplex,
            handoff=self.handoff, relay=self.relay, rates=self.rates,
            cpu_overlap=self.cpu_overlap)

    def seconds(self, algorithm: str, world_size: int, count: int, itemsize: int,
                options: Mapping[str, Any] | None = None) -> float:
        """Predicted seconds of one allreduce call of ``count`` elements of ``itemsize`` bytes
        with ``algorithm`` (a registered name or ``"builtin"``); ``options`` the algorithm does
        not take, or that are None, are ignored.

        ``"builtin"`` is the backend's schedule without ``call_overhead``: that term is what a call
        of distlab's executor costs beyond its steps (a lone exchange called through
        :func:`~distlab.collectives.runtime.execute.run_schedule` minus a chained step: Python
        argument checks, plan lookup, dispatch), a path ``torch.distributed.all_reduce`` does not
        take (it enqueues gloo's C++ ring on the process group's worker thread). With
        ``builtin_step`` (a calibration that timed the builtin's floor) the schedule is priced as
        compiled code (:meth:`compiled_seconds`); without it, with the executor's fixed terms (see
        the module docstring).
        """
        if is_builtin("all_reduce", algorithm):
            schedule = builtin_schedule(self.backend, world_size, count, itemsize)
            if self.builtin_step is not None:
                return self.builtin_call + self.compiled_seconds(schedule, itemsize,
                                                                 self.builtin_step)
            return self.schedule_seconds(schedule, itemsize, call_overhead=False)
        opts = {k: v for k, v in (options or {}).items()
                if v is not None and k in options_of(algorithm)}
        return self.schedule_seconds(build(algorithm, world_size, count, **opts), itemsize)


def _number(cal: Mapping[str, Any], key: str) -> float:
    value = cal.get(key) or 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"calibration {key} must be a number >= 0, got {value!r}")
    return float(value)


def call_model(cal: Calibration | Mapping[str, Any], *, per_size: bool = True,
               backend: str | None = None, cpus: int | None = None) -> CallModel:
    """The :class:`CallModel` of a calibration (a
    :class:`~distlab.collectives.model.calibration.Calibration` or its dict; fields it lacks count
    as 0, ``duplex`` as ``"full"``, ``backend`` as gloo). ``per_size=False`` prices every size with
    the one ``beta`` and ``gamma`` (no per-size rates); ``backend`` overrides the calibration's
    (whose builtin ``"builtin"`` means). ``cores_per_rank`` is ``cpus_allowed /
    local_world_size`` of the calibration, else ``cpus / world_size`` (``cpus``: the CPUs the
    calibrated ranks could run on, for a calibration that records no ``cpus_allowed``, 0);
    neither: unknown."""
    if isinstance(cal, Calibration):
        data: Mapping[str, Any] = cal.to_dict()
    elif isinstance(cal, Mapping):
        data = cal
    else:
        raise TypeError(f"cal must be a Calibration or its dict, got {type(cal).__name__}")
    for key in ("alpha", "beta", "gamma"):
        if key not in data:
            raise ValueError(f"calibration needs alpha, beta and gamma; {key} is missing")
    duplex = check_choice("calibration duplex", str(data.get("duplex", "full")), DUPLEX)
    rates = size_rates(data) if per_size and "world_size" in data else None
    model = CallModel(_number(data, "alpha"), _number(data, "beta"), _number(data, "gamma"),
                      _number(data, "handoff"), _number(data, "relay"),
                      _number(data, "call_overhead"), duplex,
                      backend or str(data.get("backend") or "gloo"), rates,
                      _number(data, "reduce_offset"))
    floor, floor_bytes = _number(data, "builtin_floor"), int(_number(data, "builtin_floor_bytes"))
    call = min(_number(data, "builtin_call"), floor)
    world = int(data.get("world_size") or 0)
    have, local = int(_number(data, "cpus_allowed")), int(_number(data, "local_world_size"))
    if have and local:
        model = dataclasses.replace(model, cores_per_rank=have / local)
    elif cpus is not None and world >= 1:
        model = dataclasses.replace(model, cores_per_rank=check_int("cpus", cpus, minimum=1)
                                    / world)
    if floor > 0 and floor_bytes > 0 and world >= 2 and model.backend in BUILTIN_SCHEDULES:
        itemsize = dtype_bytes(str(data.get("dtype") or "float32")) or 4
        step = builtin_step_seconds(model, world, floor - call, floor_bytes, itemsize) \
            if floor > call else 0.0
        model = dataclasses.replace(model, builtin_step=step, builtin_call=call)
    return model


def builtin_step_seconds(model: CallModel, world_size: int, floor_seconds: float,
                         floor_bytes: int, itemsize: int = 4) -> float:
    """Seconds per iteration of the backend's own allreduce such that its schedule for
    ``floor_bytes`` (:func:`builtin_schedule`), priced as compiled code
    (:meth:`CallModel.compiled_seconds`), takes ``floor_seconds`` (the measured floor less the
    call's own cost): the fixed cost per iteration left once the floor's bytes and reductions
    are paid (0 if they alone take it).
    The price is monotone in the step (piecewise linear: two iterations in flight share their
    fixed parts), so the step is found by bisection to a relative 1e-12.

    Raises:
        ValueError: ``floor_seconds <= 0``, or a floor buffer of no whole element.
    """
    if not floor_seconds > 0:
        raise ValueError(f"floor_seconds must be > 0, got {floor_seconds!r}")
    count = check_int("floor_bytes // itemsize", floor_bytes // itemsize, minimum=1)
    schedule = builtin_schedule(model.backend, world_size, count, itemsize)

    def price(step: float) -> float:
        return model.compiled_seconds(schedule, itemsize, step)

    if price(0.0) >= floor_seconds or not schedule.steps:
        return 0.0
    lo, hi = 0.0, floor_seconds
    while price(hi) < floor_seconds:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if price(mid) < floor_seconds else (lo, mid)
    return (lo + hi) / 2


def builtin_schedule(backend: str, world_size: int, count: int, itemsize: int) -> Schedule:
    """The schedule of ``backend``'s own allreduce (gloo:
    :func:`distlab.collectives.algorithms.allreduce.gloo_ring.gloo_ring`, whose segmentation depends
    on ``itemsize``). NCCL's is not a fixed schedule: it picks an algorithm and protocol per size
    (:func:`predict_builtin` with a GPU box)."""
    check_choice("backend", backend, tuple(BUILTIN_SCHEDULES))
    return gloo_ring(world_size, count, itemsize=itemsize)


def _loopback_calibration() -> dict[str, Any]:
    return dict(read_json(_packaged_calibration())["calibration"])


def predict_builtin(preset: Any, world_size: int, sizes_bytes: Sequence[int], *,
                    itemsize: int = 4, nccl_model: str = "estimate",
                    harness: str = "torch", nccl_version: str | None = None, nodes: int = 1,
                    network: str | None = None) -> list[float]:
    """Seconds of the backend's own allreduce at each size.

    Args:
        preset: a gloo calibration (a :class:`~distlab.collectives.model.calibration.Calibration`,
            its dict, or ``"loopback"``: the one shipped with distlab): gloo's ring
            (:mod:`distlab.collectives.algorithms.allreduce.gloo_ring`) costed with it; or a GPU box
            (a :class:`~distlab.nccl.boxes.GpuBox` or a name of
            :data:`~distlab.nccl.boxes.GPU_BOXES`): NCCL's own choice and estimate
            (:func:`~distlab.nccl.tuning.predict_nccl_allreduce`).
        world_size: ranks (>= 1).
        sizes_bytes: buffer sizes in bytes (multiples of ``itemsize`` for a calibration).
        itemsize: bytes per element (gloo segments by bytes; NCCL's model is per byte).
        nccl_model: on a GPU box, ``"estimate"`` (NCCL's own tuning estimate, what it minimizes
            to choose) or ``"measured"`` (the time of the execution it chooses:
            :mod:`~distlab.nccl.execution`, calibrated on published tables).
        harness: with ``nccl_model="measured"``, how the calls are issued (a key of
            :data:`~distlab.nccl.execution.HARNESSES`; checked whatever the model, though only
            the measured one reads it).
        nccl_version: on a GPU box, the NCCL release (``"2.18"`` ... ``"2.30"``, or as NCCL
            prints it, ``"2.29.7+cuda12.9"``); ``None``: 2.28.9, torch 2.11's. A release the
            model does not hold is priced with its neighbour, with a one-line
            :class:`~distlab.nccl.versions.NcclReleaseWarning`.
        nodes, network: on a GPU box, ``nodes`` boxes joined by the network preset ``network``
            (:data:`~distlab.nccl.multinode.NETWORKS`); ``world_size`` is then
            the GPUs of all nodes (NCCL 2.28.9's multi-node model, the release's Blackwell rows).

    Raises:
        ValueError / TypeError: a bad argument (every one checked, a harness or a release
            included), or an NCCL-only argument (``nccl_version``, ``nodes``, ``network``)
            given with a gloo calibration.
    """
    world_size = check_int("world_size", world_size, minimum=1)
    check_choice("nccl_model", nccl_model, ("estimate", "measured"))
    from distlab.nccl.execution import HARNESSES
    check_choice("harness", harness, HARNESSES)  # whatever the model: a bad one is refused
    itemsize = check_int("itemsize (bytes per element)", itemsize, minimum=1)
    if isinstance(preset, GpuBox) or (isinstance(preset, str) and preset in GPU_BOXES):
        from distlab.nccl.versions import resolve_nccl_version
        resolve_nccl_version(nccl_version)  # a bad release is refused, one rank or many
        if nccl_model == "measured":
            from distlab.nccl.execution import predict_nccl_measured
            return predict_nccl_measured(preset, world_size, sizes_bytes, harness=harness,
                                         nccl_version=nccl_version, nodes=nodes,
                                         network=network)
        if nodes != 1 or network is not None:
            from distlab.nccl.multinode import multinode_choices
            if network is None:
                raise ValueError(f"nodes={nodes} needs a network (see "
                                 "distlab.nccl.multinode.NETWORKS)")
            from distlab.nccl.versions import nccl_constants
            version = None if nccl_version is None else nccl_constants(nccl_version)
            return [c.seconds for c in multinode_choices(preset, world_size, sizes_bytes,
                                                         nodes, network, version=version)]
        return predict_nccl_allreduce(preset, world_size, sizes_bytes,
                                      nccl_version=nccl_version)
    if preset == "loopback":
        preset = _loopback_calibration()
    if not isinstance(preset, (Calibration, Mapping)):
        raise ValueError(  # noqa: TRY004 - a wrong name is a value error, as elsewhere
f"preset must be a gloo calibration (Calibration, its dict or "
                         f"'loopback') or a GPU box ({', '.join(map(repr, GPU_BOXES))}), got "
                         f"{preset!r}")
    model = call_model(preset)
    if model.backend != "gloo":
        raise ValueError(f"preset is a {model.backend!r} calibration; the builtin allreduce is "
                         f"modelled for gloo calibrations and for NCCL on the GPU boxes "
                         f"{', '.join(map(repr, GPU_BOXES))}")
    nccl_only = {"nccl_version": (nccl_version, None), "nodes": (nodes, 1),
                 "network": (network, None)}
    for name, (value, default) in nccl_only.items():
        if value != default:
            raise ValueError(f"{name}={value!r} prices NCCL on a GPU box; preset is a gloo "
                             f"calibration (one host), which takes the default {default!r}")
    out = []
    for i, nbytes in enumerate(sizes_bytes):
        nbytes = check_int(f"sizes_bytes[{i}]", nbytes, minimum=0)
        if nbytes % itemsize:
            raise ValueError(f"sizes_bytes[{i}]={nbytes} is not a multiple of itemsize "
                             f"{itemsize}")
        out.append(model.seconds(BUILTIN, world_size, nbytes // itemsize, itemsize))
    return out
