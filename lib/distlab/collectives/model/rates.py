"""What a message and a reduction of each size cost: the cost model's per-size rates (pure).

One ``beta`` (seconds per byte) for every message size averages away what a transport does
differently at different sizes: a protocol or buffer switch, a socket buffer that a message no
longer fits into, a reduction that falls out of cache. The calibration already times its patterns at
every size (:class:`~distlab.collectives.model.calibration.Calibration`: ``comm_seconds``,
``oneway_seconds``, ``shift_seconds``, ``reduce_seconds`` per size), so :func:`size_rates` prices
each size from its own points:

- the per-step and per-message terms (``handoff``, ``alpha``, ``relay``) stay the calibration's,
  fitted over all sizes at once (they are what a step and a message cost whatever their size);
- ``beta(s)``: at each calibration size ``s``, the bytes term that fits that size's points
  alone, given the fixed terms: ``fit_terms({"beta": bytes}, measured, known=handoff + alpha
  messages + relay ranks)`` over the exchange, one-way and (more than 2 ranks) ring-shift
  points of size ``s`` (:func:`distlab.fit.fit_terms`: relative error, ``beta(s) >= 0``, so a
  size whose fixed terms already take all the measured time gets 0). At a size whose bytes,
  priced with the calibration's one ``beta``, cost less than the fit's own scatter
  (``comm_max_rel_residual`` times the size's fixed terms), the bytes are not resolved there, and
  ``beta(s)`` is that one ``beta``: fitted alone, it would price the scatter of the fixed terms
  as bytes (1e-6 s/B, 4000 times the link's rate, at 256 B on the 2-core VM);
- ``reduce(s)``: the measured time of reducing ``s`` bytes in place, read off the reduce series
  (it holds what one reduction call costs at that size, call included).

Between calibration sizes both are interpolated linearly in ``log(size)`` (``reduce`` in
``log(time)`` too, since it spans four decades); below the smallest size ``beta`` and ``reduce`` are
those of the smallest; above the largest, ``beta`` is the largest size's and a reduction costs the
largest size's time per byte. A message of ``b`` bytes then costs ``beta(b) * b`` in the step's
bytes term (:func:`distlab.collectives.model.cost.cost` with ``rates=``): the step structure of the
schedule is kept, only the price of each message depends on its size. With a calibration whose times
lie exactly on one line, ``beta(s)`` is the calibration's ``beta`` at every size and the prediction
is the constant model's. The backend's own loop (gloo's ring in C++) pays its bytes at the one
``beta`` instead (:meth:`SizeRates.with_beta`; why: :mod:`distlab.collectives.model.predict`), since
``beta(s)`` is read with the fixed terms of distlab's executor, which that loop does not pay.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distlab.collectives.model.calibration import Calibration, pattern_terms
from distlab.fit import fit_terms

__all__ = ["SizeRates", "size_rates"]


@dataclass(frozen=True)
class SizeRates:
    """Per-size prices of the cost model (see the module docstring).

    Attributes:
        sizes: calibration message sizes, bytes, increasing.
        beta: seconds per byte of a message of each size of ``sizes``.
        reduce_sizes: sizes of the reduce series, bytes, increasing.
        reduce_seconds: seconds to reduce each size of ``reduce_sizes`` in place.
    """

    sizes: tuple[int, ...]
    beta: tuple[float, ...]
    reduce_sizes: tuple[int, ...]
    reduce_seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        for name, xs, ys in (("sizes", self.sizes, self.beta),
                             ("reduce_sizes", self.reduce_sizes, self.reduce_seconds)):
            if len(xs) < 1 or len(xs) != len(ys):
                raise ValueError(f"{name} needs >= 1 size and one value per size, got "
                                 f"{len(xs)} sizes and {len(ys)} values")
            if any(b <= a for a, b in itertools.pairwise(xs)) or xs[0] <= 0:
                raise ValueError(f"{name} must be positive and increasing, got {list(xs)}")
        if any(not np.isfinite(v) or v < 0 for v in self.beta):
            raise ValueError(f"beta must be finite and >= 0 s/B, got {list(self.beta)}")
        if any(not np.isfinite(v) or v <= 0 for v in self.reduce_seconds):
            raise ValueError(f"reduce_seconds must be finite and > 0, got "
                             f"{list(self.reduce_seconds)}")

    def beta_at(self, nbytes: float) -> float:
        """Seconds per byte of one message of ``nbytes`` bytes."""
        if nbytes <= self.sizes[0]:
            return self.beta[0]
        if nbytes >= self.sizes[-1]:
            return self.beta[-1]
        return float(np.interp(np.log(nbytes), np.log(self.sizes), self.beta))

    def message_seconds(self, nbytes: float) -> float:
        """The bytes term of one message of ``nbytes`` bytes: ``beta_at(nbytes) * nbytes``."""
        return self.beta_at(nbytes) * nbytes

    def reduce_at(self, nbytes: float) -> float:
        """Seconds to reduce ``nbytes`` bytes into a buffer (0 for 0 bytes)."""
        xs, ys = self.reduce_sizes, self.reduce_seconds
        if nbytes <= 0:
            return 0.0
        if nbytes <= xs[0]:
            return ys[0]
        if nbytes >= xs[-1]:
            return ys[-1] * nbytes / xs[-1]
        return float(np.exp(np.interp(np.log(nbytes), np.log(xs), np.log(ys))))

    def without_call_cost(self, call_seconds: float) -> SizeRates:
        """These rates with ``call_seconds`` taken off every reduction (each at least 1 ns):
        the reduce series times one torch call per size from Python, whose fixed part a
        reduction inside compiled code (gloo's own loop) does not pay."""
        if not np.isfinite(call_seconds) or call_seconds < 0:
            raise ValueError(f"call_seconds must be finite and >= 0, got {call_seconds}")
        return dataclasses.replace(self, reduce_seconds=tuple(
            max(1e-9, v - call_seconds) for v in self.reduce_seconds))

    def with_beta(self, beta: float) -> SizeRates:
        """These rates with one ``beta`` (s/B) for every size (the reductions unchanged)."""
        if not np.isfinite(beta) or beta < 0:
            raise ValueError(f"beta must be finite and >= 0 s/B, got {beta}")
        return dataclasses.replace(self, beta=(float(beta),) * len(self.sizes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (lists)."""
        return {"sizes": list(self.sizes), "beta": list(self.beta),
                "reduce_sizes": list(self.reduce_sizes),
                "reduce_seconds": list(self.reduce_seconds)}


def _calibration(cal: Calibration | Mapping[str, Any]) -> Calibration:
    if isinstance(cal, Calibration):
        return cal
    if isinstance(cal, Mapping):
        return Calibration.from_dict(dict(cal))
    raise TypeError(f"cal must be a Calibration or its dict, got {type(cal).__name__}")


def size_rates(cal: Calibration | Mapping[str, Any]) -> SizeRates | None:
    """The :class:`SizeRates` of a calibration's stored series, or ``None`` when it has none
    (a calibration loaded from alpha/beta/gamma alone, or one of fewer than 2 sizes): the
    constant model then applies.

    Raises:
        ValueError: series of different lengths, or a world size below 2.
    """
    c = _calibration(cal)
    series = [c.comm_seconds, c.oneway_seconds, c.shift_seconds]
    if len(c.sizes) < 2 or any(len(s) != len(c.sizes) for s in series) \
            or len(c.reduce_seconds) != len(c.reduce_sizes) or not c.reduce_sizes:
        return None
    terms = pattern_terms(c.world_size, c.sizes)
    used = ["exchange", "oneway"] + (["shift"] if c.world_size > 2 else [])
    measured = {"exchange": c.comm_seconds, "oneway": c.oneway_seconds,
                "shift": c.shift_seconds}
    betas = []
    for j in range(len(c.sizes)):
        fixed = [c.handoff + c.alpha * terms[k][0][j] + c.relay * terms[k][2][j] for k in used]
        moved = [c.beta * terms[k][1][j] for k in used]
        if max(moved) < c.comm_max_rel_residual * min(fixed):
            betas.append(c.beta)  # bytes below the fit's own scatter: not resolved at this size
            continue
        fit = fit_terms({"beta": [terms[k][1][j] for k in used]},
                        [measured[k][j] for k in used], known=fixed)
        betas.append(fit.coef["beta"])
    order = np.argsort(c.sizes)
    red_order = np.argsort(c.reduce_sizes)
    return SizeRates(tuple(int(c.sizes[i]) for i in order), tuple(betas[i] for i in order),
                     tuple(int(c.reduce_sizes[i]) for i in red_order),
                     tuple(float(c.reduce_seconds[i]) for i in red_order))


def rates_from_dict(data: Mapping[str, Sequence[float]]) -> SizeRates:
    """Inverse of :meth:`SizeRates.to_dict`."""
    return SizeRates(tuple(int(v) for v in data["sizes"]), tuple(float(v) for v in data["beta"]),
                     tuple(int(v) for v in data["reduce_sizes"]),
                     tuple(float(v) for v in data["reduce_seconds"]))
