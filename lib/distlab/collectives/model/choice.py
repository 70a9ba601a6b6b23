"""Options a call leaves unset, chosen by the calibrated cost model: the model pays for itself.

``all_reduce(x, algorithm="ring")`` without ``pieces`` runs the ring with the number of pieces per
block (:mod:`distlab.collectives.plan.ranges`) that the cost model predicts fastest for that
algorithm, world size and message size (:func:`best_pieces`). The model is the calibration set with
:func:`use_calibration` in this process, else the one shipped inside the package
(``distlab/data/allreduce_calibration.json``: gloo on loopback, measured by ``python -m
distlab.bench allreduce``; :data:`~distlab.collectives.model.presets.CALIBRATION_RESOURCE`). Every
rank must use the same calibration (the shipped one is the same everywhere); a rank that loads
another may choose another ``k``, which the peer check reports as differing options.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from distlab._checks import check_int
from distlab.collectives.algorithms.registry import build_plan, check_plan_algorithm, plan_options
from distlab.collectives.model.predict import call_model
from distlab.collectives.model.presets import _packaged_calibration
from distlab.collectives.plan.ranges import check_pieces
from distlab.report.jsonfile import read_json

__all__ = ["PIECES_CANDIDATES", "best_pieces", "default_calibration", "pieces_curve",
           "schedule_seconds", "shipped_calibration", "use_calibration"]

PIECES_CANDIDATES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)

_STATE: dict[str, Any] = {"calibration": None, "version": 0}


def use_calibration(calibration: Any) -> None:
    """Make ``calibration`` (a :class:`~distlab.collectives.model.calibration.Calibration`, its
    ``to_dict()``, or ``None`` for the shipped one) the model that picks this process's defaults."""
    if calibration is not None and not isinstance(calibration, Mapping):
        to_dict = getattr(calibration, "to_dict", None)
        if to_dict is None:
            raise TypeError("calibration must be a Calibration, a dict with alpha, beta, gamma, "
                            f"or None, got {type(calibration).__name__}")
        calibration = to_dict()
    if calibration is not None:
        missing = [k for k in ("alpha", "beta", "gamma") if k not in calibration]
        if missing:
            raise ValueError(f"calibration lacks {missing}; pass a Calibration or its dict")
    _STATE["calibration"] = None if calibration is None else dict(calibration)
    _STATE["version"] += 1


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, Any]:
    return dict(read_json(_packaged_calibration())["calibration"])


def shipped_calibration() -> dict[str, Any]:
    """The gloo loopback calibration shipped with distlab (whatever :func:`use_calibration`
    set)."""
    return _shipped()


def default_calibration() -> dict[str, Any]:
    """The calibration that picks defaults: :func:`use_calibration`'s, else the shipped one."""
    cal = _STATE["calibration"]
    return dict(cal) if cal is not None else _shipped()


def schedule_seconds(calibration: Mapping[str, Any], schedule: Any, itemsize: int) -> float:
    """The model's time of one call of ``schedule``:
    :func:`~distlab.collectives.model.predict.call_model`'s (the calibration's per-call overhead
    plus the schedule's cost, with per-size prices when the calibration has its series; terms a
    calibration lacks count 0)."""
    return call_model(calibration).schedule_seconds(schedule, itemsize)


def pieces_curve(algorithm: str, world_size: int, count: int, itemsize: int,
                 calibration: Mapping[str, Any] | None = None, *,
                 candidates: Sequence[int] = PIECES_CANDIDATES,
                 options: Mapping[str, Any] | None = None,
                 collective: str = "all_reduce") -> dict[int, float]:
    """Predicted seconds of ``collective``'s ``algorithm`` for each ``pieces`` in
    ``candidates`` (``count``: the call's elements, :mod:`distlab.collectives.plan.semantics`)."""
    c, name = check_plan_algorithm(collective, algorithm)
    if "pieces" not in plan_options(c, name):
        raise ValueError(f"algorithm {name!r} takes no pieces option (options: "
                         f"{plan_options(c, name)})")
    itemsize = check_int("itemsize (bytes per element)", itemsize, minimum=1)
    cal = default_calibration() if calibration is None else calibration
    opts = {k: v for k, v in (options or {}).items() if k != "pieces" and v is not None}
    return {k: schedule_seconds(cal, build_plan(c, name, world_size, count,
                                                pieces=check_pieces(k), **opts), itemsize)
            for k in candidates}


def best_pieces(algorithm: str, world_size: int, count: int, itemsize: int,
                calibration: Mapping[str, Any] | None = None, *,
                candidates: Sequence[int] = PIECES_CANDIDATES,
                options: Mapping[str, Any] | None = None,
                collective: str = "all_reduce") -> int:
    """The ``pieces`` of ``candidates`` with the lowest predicted time (ties: the fewest)."""
    if calibration is None and tuple(candidates) == PIECES_CANDIDATES:
        key = tuple(sorted((options or {}).items()))
        try:
            return _cached_best(collective, algorithm, world_size, count, itemsize, key,
                                _STATE["version"])
        except TypeError:  # an unhashable option value: no cache
            pass
    curve = pieces_curve(algorithm, world_size, count, itemsize, calibration,
                         candidates=candidates, options=options, collective=collective)
    return min(curve, key=lambda k: (curve[k], k))


@functools.lru_cache(maxsize=1024)
def _cached_best(collective: str, algorithm: str, world_size: int, count: int, itemsize: int,
                 options: tuple[tuple[str, Any], ...], version: int) -> int:
    curve = pieces_curve(algorithm, world_size, count, itemsize, options=dict(options),
                         collective=collective)
    return min(curve, key=lambda k: (curve[k], k))
