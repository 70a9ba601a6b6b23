"""One judged size of a run: measured against expected, with its band and verdict."""

from __future__ import annotations

from dataclasses import dataclass

from distlab.health.bands import Band

__all__ = ["RowVerdict"]


@dataclass(frozen=True)
class RowVerdict:
    """One size: measured and expected time (us), the error (%), its band and verdict, and what
    NCCL runs there in the model."""

    nbytes: int
    measured_us: float
    expected_us: float
    error_pct: float
    band: Band
    verdict: str
    algorithm: str
    protocol: str

    @property
    def expected_low_us(self) -> float:
        """The slowest time the band calls healthy, us."""
        return self.expected_us * (1 + self.band.high_pct / 100)

    @property
    def expected_high_us(self) -> float:
        """The fastest time the band calls healthy, us."""
        return self.expected_us * (1 + self.band.low_pct / 100)

    @property
    def share(self) -> float:
        """Measured bandwidth over the model's: ``expected / measured`` time (1: as priced)."""
        return self.expected_us / self.measured_us
