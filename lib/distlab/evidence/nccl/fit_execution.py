"""The constants of NCCL's measured-time model, calibrated on published tables, judged apart.

:mod:`~distlab.nccl.execution` has three constants no NCCL file states: host
enqueue per GPU, and the sync cost of a Simple/LL128 slice and of an NVLS chunk (an LL step has
none, by design: see that module). They are fitted here on a *calibration set* of published
8-GPU allreduce tables (``allreduce_8gpu`` of
:func:`~distlab.evidence.nccl.published.published_tables`: the tables the project
holds), by least squares on ``log(predicted / published)`` time.

The multi-node model has no constant of its own (it reuses these and NCCL's); it is judged on the
published tables beyond one 8-GPU box the project holds (``allreduce_multinode``: 2 to 4 nodes of
8 GPUs, GB200 NVL72 racks and one 4-GPU GB200 host),
none of which any constant is fitted on: :func:`multinode_points`, :func:`judge`. The same holds
for the published points of other collectives (all-gather, reduce-scatter) and of allreduce runs
with an algorithm switched off (``collectives_8gpu``): :func:`collective_points`,
:func:`judge_collectives`; and for what a source says NCCL chose, size by size
(``nccl_choice_8gpu``): :func:`published_choices`.

They are judged **leave-one-source-out**: every source (one web page: a table, or the tables of
one author and box) is priced with constants fitted on the others only. The tables NCCL users
publish come from different harnesses, boxes and versions; a source left out is the closest the
project can hold to "a run the model has never seen".

The shipped constants (``execution_calibration.json`` beside this module) are :func:`refit` on
every source, written by :func:`write_shipped` to a file its caller names (never into the
installed package: ``python -m distlab.judge nccl --published --write PATH``, then the file is
copied over the shipped one in a checkout); a test checks they are what the fit returns.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from os import PathLike
from typing import Any

import numpy as np

from distlab.evidence.judge import leave_one_out
from distlab.evidence.nccl.published import published_tables
from distlab.nccl.execution import nccl_execution
from distlab.nccl.family import nccl_collective
from distlab.nccl.per_size import (
    CONSTANT_NAMES,
    SHIPPED_RESOURCE,
    Execution,
    ExecutionConstants,
    exposed_steps,
    shipped_constants,
)
from distlab.nccl.tuning import algorithm_from_nccl
from distlab.nccl.versions import NcclReleaseWarning
from distlab.report.jsonfile import write_json
from distlab.vocabulary import ErrorSummary, busbw_factor, collective_name, error_pct

__all__ = ["CONSTANT_NAMES", "SHIPPED_RESOURCE", "JudgedPoint", "box_of",
           "calibration_points", "collective_points", "harness_of", "judge", "judge_collectives",
           "leave_one_source_out", "multinode_points", "published_choices", "refit",
           "shipped_constants", "summarize", "write_shipped"]

#: Search range per constant, us: the fit never leaves it. ``ll_step_us`` is held at 0: LL
#: carries its flag in every line and has no step wait to fit.
BOUNDS = {"host_us_per_gpu": (0.0, 20.0), "slice_sync_us": (0.0, 20.0),
          "ll_step_us": (0.0, 0.0), "nvls_chunk_us": (0.0, 50.0)}


def calibration_points() -> list[dict[str, Any]]:
    """The published 8-GPU allreduce points the project holds (every size >= 64 KiB)."""
    return [dict(p) for p in published_tables()["allreduce_8gpu"]]


def multinode_points() -> list[dict[str, Any]]:
    """The published multi-node allreduce points the project holds (every size >= 64 KiB; each
    names its ``nodes``, ``network`` preset and ``harness``). Judged only: never fitted on."""
    return [dict(p) for p in published_tables()["allreduce_multinode"]]


def collective_points() -> list[dict[str, Any]]:
    """The published single-node points of all-gather, reduce-scatter and of allreduce with an
    algorithm switched off (each names its ``collective`` and the ``algorithms`` NCCL could choose
    from). Judged only: never fitted on."""
    return [dict(p) for p in published_tables()["collectives_8gpu"]]


def published_choices() -> list[dict[str, Any]]:
    """What published sources say NCCL chose, size by size (``nccl_choice_8gpu``): each names
    its box, ``nccl_version`` and ``choices`` (``algorithm`` / ``protocol`` up to
    ``max_nbytes`` or from ``min_nbytes``)."""
    return [dict(p) for p in published_tables()["nccl_choice_8gpu"]]


def harness_of(point: dict[str, Any]) -> str:
    """The point's own ``harness`` where it states one (the multi-node points do); else
    ``"torch"`` for a torch.distributed table and ``"nccl-tests"`` for the rest (every
    single-node nccl-tests table the project holds ran ``-g 8``: one process drives the node;
    the p4dn comment does not say, and is taken as the same)."""
    if point.get("harness"):
        return str(point["harness"])
    return "torch" if str(point["tool"]).startswith("torch") else "nccl-tests"


def box_of(point: dict[str, Any]) -> str:
    """The GPU box a published point ran on: its ``box`` where it names one (an H200 run whose
    table is drawn on the ``h100_sxm8`` panels), else its ``preset``."""
    return str(point.get("box") or point["preset"])


def published_seconds(point: dict[str, Any]) -> float:
    """The point's time, seconds (its ``time_us``, else from nccl-tests' busbw definition of its
    ``collective``, allreduce where it names none)."""
    if point.get("time_us"):
        return float(point["time_us"]) * 1e-6
    n = int(point["world_size"])
    factor = busbw_factor(str(point.get("collective", "all_reduce")), n) or 0.0
    return float(point["nbytes"]) / (float(point["busbw_gbps"]) * 1e9) * factor


@dataclass(frozen=True)
class _Features:
    """A point's execution with every constant at 0 and 1: time is linear in each constant
    inside the GPU branch, so the fit prices it without re-running the model. A harness that
    waits for each call (``serial_host_us`` set) adds its stated host time to the GPUs'."""

    gpu_fixed_us: float
    host_gpus: int
    steps: int
    step_kind: int  # index into CONSTANT_NAMES of the step constant (1, 2 or 3)
    measured_us: float
    serial_host_us: float | None = None


def _features(point: dict[str, Any]) -> _Features:
    e = _execution(point, ExecutionConstants(1.0, 0.0, 0.0, 0.0))
    kind = 3 if e.algorithm == "nvls" else 2 if e.protocol == "LL" else 1
    return _Features(e.latency_us + e.transfer_us, round(e.host_us), exposed_steps(e.steps), kind,
                     published_seconds(point) * 1e6, e.host_us if e.serial else None)


def _execution(point: dict[str, Any], constants: ExecutionConstants) -> Execution:
    forced = point.get("nccl_algo")
    algos = None if forced is None else [algorithm_from_nccl(forced)]
    nodes = int(point.get("nodes", 1))
    # across nodes, the run's release sets only the Blackwell rows (multinode's module doc)
    where = {"nodes": nodes, "network": str(point["network"])} if nodes > 1 else {}
    with warnings.catch_warnings():  # a release the model does not hold: judged as priced
        warnings.simplefilter("ignore", NcclReleaseWarning)
        return nccl_execution(box_of(point), int(point["world_size"]), [int(point["nbytes"])],
                              harness=harness_of(point), constants=constants, algorithms=algos,
                              nccl_version=point.get("nccl_version"), **where)[0]


def _predict_us(f: Sequence[_Features], theta: np.ndarray) -> np.ndarray:
    gpu = np.array([x.gpu_fixed_us + x.steps * theta[x.step_kind] for x in f])
    host = np.array([x.host_gpus * theta[0] if x.serial_host_us is None else 0.0 for x in f])
    serial = np.array([x.serial_host_us or 0.0 for x in f])
    return np.maximum(gpu, host) + serial


def _loss(f: Sequence[_Features], theta: np.ndarray) -> float:
    meas = np.array([x.measured_us for x in f])
    return float(np.sum(np.log(_predict_us(f, theta) / meas) ** 2))


def refit(points: Iterable[dict[str, Any]]) -> ExecutionConstants:
    """The constants that minimize the squared log error of time over ``points``.

    Coordinate descent: each constant in turn over a grid of 201 values in its :data:`BOUNDS`,
    then a golden-section refinement, until no constant moves by 1e-4 us. Deterministic. A
    constant no point informs (no step of its kind) stays 0.
    """
    pts = list(points)
    f = [_features(p) for p in pts]
    theta = np.zeros(len(CONSTANT_NAMES))
    used = {0} | {x.step_kind for x in f}
    for _ in range(50):
        before = theta.copy()
        for k in sorted(used):
            lo, hi = BOUNDS[CONSTANT_NAMES[k]]
            grid = np.linspace(lo, hi, 201)
            losses = []
            for v in grid:
                theta[k] = v
                losses.append(_loss(f, theta))
            i = int(np.argmin(losses))
            a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
            theta[k] = _golden(lambda v, k=k: _loss(f, _with(theta, k, v)), a, b)
        if np.max(np.abs(theta - before)) < 1e-4:
            break
    sources = tuple(sorted({str(p["source"]) for p in pts}))
    return ExecutionConstants(*(round(float(v), 4) for v in theta), calibrated_on=sources)


def _with(theta: np.ndarray, k: int, v: float) -> np.ndarray:
    t = theta.copy()
    t[k] = v
    return t


def _golden(fn: Any, a: float, b: float, tol: float = 1e-6) -> float:
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    while b - a > tol:
        if fn(c) <= fn(d):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    return (a + b) / 2


@dataclass(frozen=True)
class JudgedPoint:
    """One published point priced by the model: ``error_pct`` of the published time against
    the model's (:func:`distlab.vocabulary.error_pct`: ``100 * (published - predicted) /
    predicted``; positive: the published run was slower than the model)."""

    source: str
    system: str
    nbytes: int
    execution: Execution
    published_us: float
    error_pct: float


def judge(points: Iterable[dict[str, Any]], constants: ExecutionConstants) -> list[JudgedPoint]:
    """Every point priced with ``constants``."""
    out = []
    for p in points:
        e = _execution(p, constants)
        pub = published_seconds(p) * 1e6
        out.append(JudgedPoint(str(p["source"]), str(p["system"]), int(p["nbytes"]), e, pub,
                               error_pct(pub, e.seconds * 1e6)))
    return out


def judge_collectives(points: Iterable[dict[str, Any]],
                      constants: ExecutionConstants) -> list[JudgedPoint]:
    """Every point of :func:`collective_points` priced with ``constants``: an allreduce by
    :func:`~distlab.nccl.execution.nccl_execution` with the point's
    ``algorithms``, the others by :func:`~distlab.nccl.family.nccl_collective`
    (NCCL 2.28.9's constants for both where the point states no release)."""
    out = []
    for p in points:
        n, size = int(p["world_size"]), [int(p["nbytes"])]
        collective = collective_name(str(p["collective"]))
        e: Execution
        if collective == "all_reduce":
            e = nccl_execution(box_of(p), n, size, harness=harness_of(p), constants=constants,
                               algorithms=p.get("algorithms"),
                               nccl_version=p.get("nccl_version"))[0]
        else:
            e = nccl_collective(box_of(p), n, size, collective, harness=harness_of(p),
                                constants=constants)[0]
        pub = published_seconds(p) * 1e6
        out.append(JudgedPoint(str(p["source"]), f"{collective}: {p['system']}",
                               int(p["nbytes"]), e, pub, error_pct(pub, e.seconds * 1e6)))
    return out


def leave_one_source_out(points: Iterable[dict[str, Any]]) -> list[JudgedPoint]:
    """Every point priced with constants fitted on the *other* sources only
    (:func:`distlab.evidence.judge.leave_one_out`)."""
    pts = list(points)
    fitted = leave_one_out(pts, lambda p: str(p["source"]), refit)
    out = []
    for source, constants in fitted.items():
        out.extend(judge([p for p in pts if p["source"] == source], constants))
    return out


def summarize(judged: Sequence[JudgedPoint], by: str = "system") -> list[ErrorSummary]:
    """One :class:`~distlab.vocabulary.ErrorSummary` of time errors per ``by`` value
    (``"system"`` or ``"source"``, its ``label``), then ``"all"``."""
    groups: dict[str, list[float]] = {}
    for j in judged:
        groups.setdefault(getattr(j, by), []).append(j.error_pct)
    groups["all"] = [j.error_pct for j in judged]
    return [ErrorSummary.of(v, label=k) for k, v in groups.items()]


def write_shipped(path: str | PathLike[str]) -> ExecutionConstants:
    """Refit on every point the project holds and write the result (JSON, the layout of the
    shipped ``execution_calibration.json``) to ``path``, a file the caller names: never into
    the installed package. The constants this process reads stay the shipped ones
    (:func:`~distlab.nccl.per_size.shipped_constants`) until the file is
    copied over them."""
    c = refit(calibration_points())
    body = {"about": "Constants of distlab.nccl.execution fitted by "
                     "distlab.evidence.nccl.fit_execution.refit on every published "
                     "8-GPU allreduce table the project holds (allreduce_8gpu of "
                     "evidence/nccl/data/published.json); microseconds. Regenerate "
                     "with python -m distlab.judge nccl --published --write PATH and copy PATH "
                     "over this file.",
            "constants": {k: v for k, v in asdict(c).items() if k in CONSTANT_NAMES},
            "calibrated_on": list(c.calibrated_on)}
    write_json(path, body)
    return c
