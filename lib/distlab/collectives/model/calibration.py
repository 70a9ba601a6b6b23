"""What a calibration of the cost model is, and how it is fitted: pure (no process group).

The runtime (:mod:`distlab.collectives.runtime.rounds`) times a few small schedules per round on
real ranks; this module defines those schedules, the :class:`Calibration` record, and
:func:`fit_calibration`, which turns the per-size medians into the model's terms. Because the fit
is pure, a stored calibration's series can be refitted offline.

Per calibration size ``s`` (bytes), through the same executor as the algorithms:

- ``exchange``: a chain of steps in which every pair ``(2i, 2i+1)`` swaps ``s`` bytes
  (``M = 2 (p // 2)`` messages and ``B = 2 M s`` bytes through the host per step);
- ``oneway``: rank 0 sends ``s`` bytes to rank 1 per step (``M = 1``, ``B = 2 s``);
- ``single``: one exchange step on its own (``call_overhead`` = median over sizes of ``single``
  minus the chained step time: what one collective call costs beyond its steps);
- ``reduce``: the executor's in-place reduction of ``s`` bytes (gamma);
- ``shift`` (``p > 2``): ring-shift steps, every rank sending ``s`` bytes to ``r + 1`` (``M = p``,
  ``B = 2 p s``, all ``p`` ranks linked in one cycle, as in a ring step);
- ``builtin floor`` and ``builtin call`` (once per round, not per size): the backend's own
  allreduce of the smallest calibration size (``builtin_floor``) and of an empty tensor
  (``builtin_call``: the call without any iteration of the backend's loop); they price only the
  builtin, see :mod:`distlab.collectives.model.predict`.

The per-step times of the three patterns are fitted together (:func:`distlab.fit.fit_terms`) as
``t = handoff + alpha M + beta B + relay (linked ranks - 2)``: patterns with different message
counts separate a per-step hand-off from the per-message ``alpha``, and the ring shift against the
pairwise exchange gives ``relay``. ``beta`` counts every byte sent or received through the host
(``duplex="shared"`` in :func:`distlab.collectives.model.cost.cost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from distlab._checks import check_choice
from distlab.collectives.plan.schedule import Schedule, Step, Transfer
from distlab.fit import fit_line, fit_terms
from distlab.vocabulary import gb_per_s

__all__ = ["STATISTICS", "Calibration", "calibration_sizes", "exchange_schedule",
           "fit_calibration", "fit_rounds", "fit_step_model", "oneway_schedule", "pattern_terms",
           "restate_calibration", "round_statistic", "shift_schedule"]

STATISTICS = ("median", "mean")
"""How a timed point summarizes its rounds (:func:`round_statistic`)."""

ROUND_COLUMNS = ("exchange", "oneway", "single", "reduce", "shift")
"""Per calibration size, the columns of one recorded round, in order; the round ends with the
builtin floor and the builtin call (:class:`Calibration` ``round_seconds``)."""


@dataclass(frozen=True)
class Calibration:
    """Fitted alpha (s per message), beta (s per byte), gamma (s per reduced byte), handoff
    (s per step), relay (s per step per linked rank beyond 2) and the series behind them.

    ``comm_r2`` / ``comm_max_rel_residual`` rate the step fit, ``reduce_*`` the gamma fit.
    ``call_overhead`` (seconds) is what one collective call costs beyond its steps; a whole call
    is predicted as ``call_overhead + cost(schedule, ...)``. Series are per size of ``sizes``
    (bytes): ``comm_seconds`` (chained exchange step), ``oneway_seconds``, ``shift_seconds``,
    ``single_seconds``; ``reduce_seconds`` per size of ``reduce_sizes``. ``method`` says when
    the rounds ran: ``"rounds"`` (inside a benchmark's timed rounds) or ``"upfront"`` (before
    it). ``pattern`` and ``duplex`` name the calibration patterns and the link model its beta
    belongs to.

    ``builtin_floor`` (seconds; 0: not measured) is the median time of the backend's own
    allreduce of ``builtin_floor_bytes`` (the smallest calibration size) and ``builtin_call``
    that of an empty tensor (the call without any iteration of the backend's loop), timed in the
    same rounds (:mod:`distlab.collectives.model.predict` prices the builtin with both).
    ``cpus_allowed`` and ``local_world_size`` (0: not recorded) are the CPUs rank 0 could run on
    and the ranks on its host: the cores per rank, which decide whether a pipelined step's bytes
    and reduction overlap. ``round_seconds`` keeps every recorded round (the slowest rank's
    seconds, in the order of :class:`~distlab.collectives.runtime.rounds.RoundCalibrator`: per
    size exchange step, oneway step, single, reduce, shift step, then the builtin floor and
    call), so the spread behind each median can be read offline. ``statistic`` names how each
    point summarizes its rounds: ``"median"`` or ``"mean"`` (:func:`fit_rounds`,
    :func:`restate_calibration`).
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
    method: str = "rounds"
    oneway_seconds: list[float] = field(default_factory=list)
    relay: float = 0.0
    shift_seconds: list[float] = field(default_factory=list)
    builtin_floor: float = 0.0
    builtin_floor_bytes: int = 0
    builtin_call: float = 0.0
    cpus_allowed: int = 0
    local_world_size: int = 0
    round_seconds: list[list[float]] = field(default_factory=list)
    statistic: str = "median"

    @property
    def bandwidth_gbps(self) -> float:
        """1 / beta in GB/s (1e9 bytes per second)."""
        return gb_per_s(1.0, self.beta) if self.beta > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (see :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        """Inverse of :meth:`to_dict` (unknown keys are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})


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


def oneway_schedule(world_size: int, count: int, chain: int = 1) -> Schedule:
    """``chain`` steps in which rank 0 sends ``count`` elements to rank 1 (copy); others idle."""
    steps = tuple(Step((Transfer(0, 1, 0, count, "copy"),), f"oneway {i + 1}/{chain}")
                  for i in range(chain)) if count and world_size >= 2 else ()
    return Schedule("oneway", world_size, count, steps, {"chain": chain})


def shift_schedule(world_size: int, count: int, chain: int = 1) -> Schedule:
    """``chain`` ring-shift steps: rank ``r`` sends block ``r`` (``count`` elements of a buffer
    of ``world_size * count``) to ``r + 1``, which receives it in place: the communication
    pattern of a ring step (every rank linked in one cycle) without its reduction. With 2 ranks
    it is the pairwise exchange."""
    p = world_size
    transfers = tuple(Transfer(r, (r + 1) % p, r * count, (r + 1) * count, "copy")
                      for r in range(p))
    steps = tuple(Step(transfers, f"shift {i + 1}/{chain}") for i in range(chain)) \
        if count and p >= 2 else ()
    return Schedule("shift", world_size, p * count, steps, {"chain": chain})


def calibration_sizes(sizes: Sequence[int], world_size: int, itemsize: int) -> list[int]:
    """Message sizes (bytes) that cover what the algorithms send for buffers of ``sizes``: from
    ``min(sizes) / (2 p)`` (rabenseifner's smallest pieces) to ``max(sizes)`` (tree and recursive
    doubling send whole buffers), one point per factor of 4, plus 4 KiB to pin the latency."""
    lo = max(itemsize, min(sizes) // (2 * world_size))
    hi = max(sizes)
    out = {4096}
    s = lo
    while s < hi:
        out.add(s)
        s *= 4
    out.add(hi)
    return sorted(max(itemsize, v - v % itemsize) for v in out)


PATTERNS = ("exchange", "oneway", "shift")
"""The timed step patterns, in the order :func:`fit_calibration` stacks their points."""


def pattern_terms(world_size: int, sizes: Sequence[float]
                  ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per pattern of :data:`PATTERNS`, the columns of the step model at each size of ``sizes``
    (bytes): ``(messages, bytes through the host, linked ranks beyond 2)`` in the ``"shared"``
    link model (see the module docstring): exchange ``M = 2 (p // 2)``, ``B = 2 M s``; oneway
    ``M = 1``, ``B = 2 s``; shift ``M = p``, ``B = 2 p s``, ``p - 2`` relay ranks."""
    s = np.asarray(sizes, dtype=float)
    n, p = s.size, world_size
    pairs = 2 * (p // 2)
    return {"exchange": (np.full(n, float(pairs)), 2 * pairs * s, np.zeros(n)),
            "oneway": (np.ones(n), 2 * s, np.zeros(n)),
            "shift": (np.full(n, float(p)), 2 * p * s, np.full(n, float(max(0, p - 2))))}


def fit_step_model(messages: Sequence[float], nbytes: Sequence[float],
                   seconds: Sequence[float], relay_ranks: Sequence[float] | None = None
                   ) -> tuple[float, float, float, float, float, float]:
    """Fit ``seconds = handoff + alpha messages + beta nbytes + relay relay_ranks`` (relative
    error, every term >= 0; :func:`distlab.fit.fit_terms`). ``relay_ranks`` is
    ``max(0, linked ranks - 2)`` per point (default all 0: no relay term).

    Returns ``(handoff, alpha, beta, relay, r2, max_rel_residual)``.
    """
    y = np.asarray(seconds, dtype=float)
    if y.size < 3 or not np.all(y > 0):
        raise ValueError(f"fit_step_model needs >= 3 points with positive seconds, got "
                         f"{y.size} points")
    k = np.zeros_like(y) if relay_ranks is None else relay_ranks
    f = fit_terms({"handoff": np.ones_like(y), "alpha": messages, "beta": nbytes, "relay": k},
                  y)
    c = f.coef
    return c["handoff"], c["alpha"], c["beta"], c["relay"], f.r2, f.max_rel_residual


def fit_calibration(sizes: Sequence[int], exchange_s: Sequence[float],
                    oneway_s: Sequence[float], single_s: Sequence[float],
                    reduce_s: Sequence[float], shift_s: Sequence[float], *, world_size: int,
                    backend: str = "", dtype: str = "float32",
                    method: str = "rounds", builtin_floor: float = 0.0,
                    builtin_floor_bytes: int = 0, builtin_call: float = 0.0,
                    cpus_allowed: int = 0, local_world_size: int = 0,
                    round_seconds: Sequence[Sequence[float]] = (),
                    statistic: str = "median") -> Calibration:
    """The :class:`Calibration` of per-size median step times (seconds; one value per size of
    ``sizes`` in every series; see the module docstring for the patterns). ``builtin_floor``,
    ``builtin_floor_bytes``, ``builtin_call``, ``cpus_allowed``, ``local_world_size`` and
    ``round_seconds`` are stored as given, and ``statistic`` names how the series summarize
    their rounds (see :class:`Calibration`).

    With ``world_size == 2`` the shift is the exchange (pass the exchange series again).
    """
    if world_size < 2:
        raise ValueError(f"a calibration needs world_size >= 2, got {world_size}")
    n = len(sizes)
    series = {"exchange_s": exchange_s, "oneway_s": oneway_s, "single_s": single_s,
              "reduce_s": reduce_s, "shift_s": shift_s}
    bad = [k for k, v in series.items() if len(v) != n]
    if n < 2 or bad:
        raise ValueError(f"need >= 2 sizes and one value per size in every series; sizes has "
                         f"{n}, wrong length: {bad}")
    exch, oneway, single, red, shift = (np.asarray(series[k], dtype=float) for k in series)
    s = np.asarray(sizes, dtype=float)
    terms = pattern_terms(world_size, sizes)
    msgs, nbytes, relay_ranks = (np.concatenate([terms[k][i] for k in PATTERNS])
                                 for i in range(3))
    handoff, alpha, beta, relay, c_r2, c_res = fit_step_model(
        msgs, nbytes, np.concatenate([exch, oneway, shift]), relay_ranks)
    red_fit = fit_line(s, red)
    overhead = max(0.0, float(np.median(single - exch)))
    return Calibration(alpha, beta, red_fit.slope_s_per_unit, c_r2, c_res, red_fit.r2,
                       red_fit.max_rel_residual, [int(v) for v in sizes], exch.tolist(),
                       [int(v) for v in sizes], red.tolist(), red_fit.intercept_s, backend,
                       world_size, dtype, "exchange", "shared", overhead, single.tolist(),
                       handoff, method, oneway.tolist(), relay, shift.tolist(),
                       float(builtin_floor), int(builtin_floor_bytes), float(builtin_call),
                       int(cpus_allowed), int(local_world_size),
                       [[float(v) for v in r] for r in round_seconds],
                       check_choice("statistic", statistic, STATISTICS))


def round_statistic(values: Sequence[float] | np.ndarray, statistic: str,
                    axis: int | None = None) -> Any:
    """``values`` summarized by ``statistic`` (one of :data:`STATISTICS`) along ``axis``
    (None: all of them): the median, or the arithmetic mean."""
    check_choice("statistic", statistic, STATISTICS)
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        raise ValueError("round_statistic needs at least one value")
    return np.median(a, axis=axis) if statistic == "median" else np.mean(a, axis=axis)


def fit_rounds(sizes: Sequence[int], round_seconds: Sequence[Sequence[float]], *,
               statistic: str = "median", builtin_floor_bytes: int = 0,
               **kwargs: Any) -> Calibration:
    """The :class:`Calibration` of recorded rounds (one row per round, the slowest rank's
    seconds in the order of :data:`ROUND_COLUMNS` per size of ``sizes``, then the builtin floor
    and call): each column summarized by ``statistic`` (:func:`round_statistic`), then
    :func:`fit_calibration` (``kwargs``: its keyword arguments ``world_size``, ``backend``,
    ``dtype``, ``method``, ``cpus_allowed``, ``local_world_size``). The rounds are stored.

    Raises:
        ValueError: no rounds, or rounds whose length is not ``5 len(sizes) + 2``.
    """
    data = np.asarray(round_seconds, dtype=float)
    width = len(ROUND_COLUMNS) * len(sizes) + 2
    if data.ndim != 2 or data.shape[0] == 0 or data.shape[1] != width:
        raise ValueError(f"round_seconds must be >= 1 round of {width} values (5 per size of "
                         f"{len(sizes)} sizes, then the builtin floor and call), got shape "
                         f"{data.shape}")
    point = round_statistic(data, statistic, axis=0)
    per_size = point[:-2].reshape(len(sizes), len(ROUND_COLUMNS))
    return fit_calibration(sizes, *(per_size[:, i] for i in range(len(ROUND_COLUMNS))),
                           builtin_floor=float(point[-2]), builtin_call=float(point[-1]),
                           builtin_floor_bytes=builtin_floor_bytes,
                           round_seconds=data.tolist(), statistic=statistic, **kwargs)


def restate_calibration(cal: Calibration | dict[str, Any], statistic: str) -> Calibration:
    """``cal`` fitted again from its own recorded rounds (``round_seconds``) with each point
    summarized by ``statistic`` (:func:`fit_rounds`); ``cal`` itself when it already uses it.

    Raises:
        ValueError: an unknown statistic, or a calibration that kept no rounds
            (``round_seconds`` empty: only its points under its own statistic exist).
    """
    c = cal if isinstance(cal, Calibration) else Calibration.from_dict(dict(cal))
    check_choice("statistic", statistic, STATISTICS)
    if c.statistic == statistic:
        return c
    if not c.round_seconds:
        raise ValueError(f"a calibration can be restated as {statistic} only from its rounds; "
                         f"this one kept none (only its {c.statistic}s)")
    return fit_rounds(c.sizes, c.round_seconds, statistic=statistic,
                      builtin_floor_bytes=c.builtin_floor_bytes, world_size=c.world_size,
                      backend=c.backend, dtype=c.dtype, method=c.method,
                      cpus_allowed=c.cpus_allowed, local_world_size=c.local_world_size)
