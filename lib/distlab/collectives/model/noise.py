"""How repeatable a measured row is: the bootstrap interval of its rounds' statistic (pure NumPy).

A profile's row summarizes its timed rounds (20 in a full profile) of the slowest rank's seconds by
a statistic (:data:`~distlab.collectives.model.calibration.STATISTICS`: the median, which
``time_us`` holds, or the mean). On a machine whose rounds fall into two regimes (a wake-up that
comes a scheduler tick late, a transport that switches buffers) the median jumps between the regimes
from one run to the next even when nothing about the machine changed (the mean moves with the share
of slow rounds instead), and no model can be judged more finely than the row itself is known.
:func:`bootstrap_interval` resamples the rounds with replacement (a percentile bootstrap, fixed
seed, so the same rounds always give the same interval) and returns the interval that holds the
statistic of ``confidence`` of the resamples; :func:`row_noise` turns it into what
:mod:`distlab.judge.refit` reports per row:

- ``noise_pct``: the larger distance from the row's value to either end of the interval, in %
  of the value (how far a re-run's value could plausibly land);
- ``within_noise``: whether the prediction lies inside the interval (the model cannot be told
  apart from the measurement there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from distlab._checks import check_float, check_int
from distlab.collectives.model.calibration import round_statistic

__all__ = ["NOISE_CONFIDENCE", "NOISE_RESAMPLES", "RowNoise", "bootstrap_interval",
           "row_noise", "row_seconds", "slowest_rounds"]

NOISE_CONFIDENCE = 0.9
"""Share of the bootstrap resamples' statistics the interval holds."""
NOISE_RESAMPLES = 2000
"""Bootstrap resamples per row (the interval's ends move by well under 1% between seeds)."""


@dataclass(frozen=True)
class RowNoise:
    """A row's value (its rounds' statistic) and the bootstrap interval around it (seconds;
    ``noise_pct`` in % of the value)."""

    value_s: float
    low_s: float
    high_s: float

    @property
    def noise_pct(self) -> float:
        """The larger distance from the value to an end of the interval, % of the value."""
        return 100.0 * max(self.high_s - self.value_s, self.value_s - self.low_s) \
            / self.value_s

    def holds(self, seconds: float) -> bool:
        """Whether ``seconds`` lies inside the interval (ends included)."""
        return self.low_s <= seconds <= self.high_s


def bootstrap_interval(samples: Sequence[float], *, statistic: str = "median",
                       confidence: float = NOISE_CONFIDENCE, resamples: int = NOISE_RESAMPLES,
                       seed: int = 0) -> tuple[float, float]:
    """The central ``confidence`` interval of ``statistic`` (``"median"`` or ``"mean"``) over
    ``resamples`` bootstrap resamples of ``samples`` (each of ``len(samples)`` draws with
    replacement).

    Raises:
        ValueError: no samples, a non-finite sample, an unknown statistic, or ``confidence``
            outside (0, 1).
    """
    x = np.asarray(samples, dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"samples must be a non-empty sequence of finite numbers, got "
                         f"{x.size} values")
    conf = check_float("confidence", confidence, minimum=0.0, maximum=1.0)
    if not 0 < conf < 1:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {conf}")
    n = check_int("resamples", resamples, minimum=1)
    if isinstance(seed, int) and not isinstance(seed, bool):
        return _interval(tuple(x.tolist()), statistic, conf, n, seed)
    return _interval.__wrapped__(tuple(x.tolist()), statistic, conf, n, seed)


@lru_cache(maxsize=8192)
def _interval(samples: tuple[float, ...], statistic: str, confidence: float, resamples: int,
              seed: Any) -> tuple[float, float]:
    """:func:`bootstrap_interval` of checked arguments. A pure function of them (the seed fixes
    the resamples), so the same rounds are resampled once per process: a profile's rows are
    judged again under every calibration that prices them."""
    x = np.asarray(samples, dtype=float)
    rng = np.random.default_rng(seed)
    values = round_statistic(x[rng.integers(0, x.size, size=(resamples, x.size))], statistic,
                             axis=1)
    tail = 100.0 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def slowest_rounds(row: Mapping[str, Any]) -> list[float] | None:
    """The slowest rank's seconds per round of a profile row (``seconds_per_rank``: one list
    of per-round seconds per rank), or ``None`` when the row kept no rounds."""
    per_rank = row.get("seconds_per_rank")
    if not per_rank:
        return None
    a = np.asarray(per_rank, dtype=float)
    if a.ndim != 2 or a.shape[1] == 0:
        raise ValueError(f"seconds_per_rank must be one list of per-round seconds per rank, "
                         f"got shape {a.shape}")
    return a.max(axis=0).tolist()


def row_seconds(row: Mapping[str, Any], statistic: str = "median") -> float:
    """A profile row's measured seconds under ``statistic``: its slowest-rank rounds' median or
    mean; a row that kept no rounds has only its stored median (``time_us``), so ``"mean"``
    raises ``ValueError`` there."""
    rounds = slowest_rounds(row)
    if rounds is None:
        if statistic == "median":
            return float(row["time_us"]) * 1e-6
        raise ValueError(f"the {statistic} of a row needs its rounds (seconds_per_rank); this "
                         f"row kept only its median time_us")
    return float(round_statistic(rounds, statistic))


def row_noise(row: Mapping[str, Any], statistic: str = "median",
              **kwargs: Any) -> RowNoise | None:
    """:class:`RowNoise` of a profile row's slowest-rank rounds under ``statistic`` (``None``
    without rounds); ``kwargs`` go to :func:`bootstrap_interval`."""
    rounds = slowest_rounds(row)
    if rounds is None:
        return None
    low, high = bootstrap_interval(rounds, statistic=statistic, **kwargs)
    return RowNoise(float(round_statistic(rounds, statistic)), low, high)
