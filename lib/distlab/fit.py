"""The one least-squares fit of times to cost terms that distlab uses everywhere.

Every model in distlab is a sum of non-negative terms: a copy costs ``latency + nbytes / bandwidth``
(:mod:`distlab.transfers`), a step of a collective ``handoff + alpha messages + beta bytes + relay
ranks`` (:mod:`distlab.collectives`), a reduction ``offset + gamma bytes``. :func:`fit_terms` fits
such a model to measured seconds, and :func:`fit_line` is its two-term case.

The fit minimises *relative* error (each point weighted by ``1 / seconds``), so a 1 KiB point and a
64 MiB point count alike, and keeps every coefficient ``>= 0``: a term whose least-squares value
would be negative (a negative latency or per-byte cost is noise) is dropped, the most negative
first, and the others refitted without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LineFit", "TermFit", "fit_line", "fit_terms"]


@dataclass(frozen=True)
class TermFit:
    """Coefficients of ``seconds = sum_k coef[k] * column_k`` and how well they fit.

    Attributes:
        coef: one coefficient per column name (0.0 for a dropped term), in the columns' order.
        r2: coefficient of determination over the points.
        max_rel_residual: the largest ``|fit - measured| / measured`` over the points.
    """

    coef: dict[str, float]
    r2: float
    max_rel_residual: float


@dataclass(frozen=True)
class LineFit:
    """``seconds = intercept_s + slope_s_per_unit * x`` (for bytes: latency and 1 / bandwidth)."""

    intercept_s: float
    slope_s_per_unit: float
    r2: float
    max_rel_residual: float

    def seconds(self, x: float) -> float:
        """Predicted seconds at ``x`` (bytes, elements, ...: the unit the fit was made in)."""
        return self.intercept_s + self.slope_s_per_unit * x


def _quality(y: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return r2, float(np.max(np.abs(pred - y) / y))


def fit_terms(columns: Mapping[str, Sequence[float]], seconds: Sequence[float], *,
              known: Sequence[float] | None = None) -> TermFit:
    """Fit ``seconds = known + sum_k coef_k * columns[k]`` with every ``coef_k >= 0``,
    minimising relative error (see the module docstring).

    Args:
        columns: name -> the term's multiplier at each point (e.g. ``{"latency": [1, 1, ...],
            "per_byte": nbytes}``); all of one length. A column that is zero everywhere gets 0.
        seconds: measured seconds at each point, all > 0 and finite.
        known: seconds at each point already accounted for by terms fitted elsewhere (default
            0): the columns fit what is left, and each point still weighs ``1 / seconds``.

    Raises:
        ValueError: no columns, mismatched lengths, fewer points than one, non-positive or
            non-finite seconds.
    """
    if not columns:
        raise ValueError("fit_terms needs at least one column")
    y = np.asarray(seconds, dtype=float)
    cols = {k: np.asarray(v, dtype=float) for k, v in columns.items()}
    if y.ndim != 1 or y.size < 1 or any(c.shape != y.shape for c in cols.values()):
        raise ValueError(f"fit_terms needs columns and seconds of one length >= 1, got seconds "
                         f"{y.shape} and columns {[c.shape for c in cols.values()]}")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError(f"seconds must be finite and > 0, got {y.tolist()}")
    base = np.zeros_like(y) if known is None else np.asarray(known, dtype=float)
    if base.shape != y.shape or not np.all(np.isfinite(base)):
        raise ValueError(f"known must be finite and as long as seconds ({y.size}), got "
                         f"{np.asarray(known).tolist()}")
    names = list(cols)
    active = [k for k in names if np.any(cols[k] != 0)]
    coef = dict.fromkeys(names, 0.0)
    w = 1.0 / y
    while active:
        design = np.stack([cols[k] for k in active], axis=1) * w[:, None]
        sol, *_ = np.linalg.lstsq(design, (y - base) * w, rcond=None)
        if np.all(sol >= 0):
            coef.update({k: float(v) for k, v in zip(active, sol, strict=True)})
            break
        active.pop(int(np.argmin(sol)))
    pred = base + sum(coef[k] * cols[k] for k in names)
    r2, worst = _quality(y, np.asarray(pred, dtype=float))
    return TermFit(coef, r2, worst)


def fit_line(x: Sequence[float], seconds: Sequence[float]) -> LineFit:
    """Fit ``seconds = intercept + slope * x`` (both >= 0, relative error): the latency +
    bandwidth line of a copy or a message when ``x`` is bytes.

    Raises:
        ValueError: fewer than 2 points, fewer than 2 distinct ``x``, or bad seconds.
    """
    xs = np.asarray(x, dtype=float)
    if xs.ndim != 1 or xs.size < 2 or np.unique(xs).size < 2:
        raise ValueError(f"fit_line needs >= 2 points at >= 2 distinct x, got x={xs.tolist()}")
    f = fit_terms({"intercept": np.ones_like(xs), "slope": xs}, seconds)
    return LineFit(f.coef["intercept"], f.coef["slope"], f.r2, f.max_rel_residual)
