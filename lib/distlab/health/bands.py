"""How far a healthy run may be from the model: the model's own error on tables it was not
fitted on, per size class, as a band of the time error.

A measured time ``t`` against the model's ``m`` has the error ``e = (t - m) / m`` in percent
(:func:`distlab.vocabulary.error_pct`). A band is the 2.5th and 97.5th percentile of ``e`` over
published points the model was not fitted on, so about 5% of healthy rows fall outside it:

- one node: the published 8-GPU all-reduce tables, each priced with the constants fitted on
  the other sources (leave one source out,
  :func:`distlab.evidence.nccl.fit_execution.leave_one_source_out`);
- across nodes: the published multi-node tables (nothing is fitted on them).

Size classes (:data:`SIZE_CLASSES`) follow where the model's terms change: below 1 MiB latency
and the host's launch rate decide; from 64 MiB on the links' bandwidth; between, both.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from distlab.vocabulary import error_quantiles

__all__ = ["SHIPPED", "SIZE_CLASSES", "Band", "band", "bands", "derive_bands", "scope_of",
           "size_class", "write_bands"]

SIZE_CLASSES: tuple[tuple[str, int], ...] = (("small", 1 << 20), ("medium", 64 << 20),
                                             ("large", 1 << 62))
"""``(name, upper bound in bytes, exclusive)``: below 1 MiB, 1 MiB to 64 MiB, 64 MiB and up."""

QUANTILES = (2.5, 97.5)
"""The percentiles of the held-out errors a band spans: 95% of healthy rows inside."""


@dataclass(frozen=True)
class Band:
    """The time errors (percent) a healthy row of a size class may have, and how many held-out
    points say so."""

    scope: str
    size_class: str
    low_pct: float
    high_pct: float
    points: int

    def verdict(self, error_pct: float) -> str:
        """``"ok"`` inside, ``"low"`` slower than the band (less bandwidth), ``"high"`` faster."""
        if error_pct > self.high_pct:
            return "low"
        if error_pct < self.low_pct:
            return "high"
        return "ok"


def size_class(nbytes: int) -> str:
    """The name of the :data:`SIZE_CLASSES` entry ``nbytes`` falls in."""
    return next(name for name, upper in SIZE_CLASSES if nbytes < upper)


SHIPPED = Path(__file__).with_name("bands.json")
"""The bands as derived (:func:`derive_bands`), with where they come from and the command that
derives them again; ``tests/health`` derives them and compares."""


@functools.lru_cache(maxsize=1)
def bands() -> dict[tuple[str, str], Band]:
    """``(scope, size class) -> Band`` for scope ``"node"`` and ``"nodes"``, as shipped in
    :data:`SHIPPED` (so a report is the same on every machine and costs no refit)."""
    data = json.loads(SHIPPED.read_text())
    return {(b["scope"], b["size_class"]): Band(b["scope"], b["size_class"], b["low_pct"],
                                                 b["high_pct"], b["points"])
            for b in data["bands"]}


def derive_bands() -> dict[tuple[str, str], Band]:
    """The bands from the published tables (about two seconds: each 8-GPU source is priced with
    constants refitted on the others), percentages rounded to 0.1."""
    from distlab.evidence.nccl.fit_execution import (
        calibration_points,
        judge,
        leave_one_source_out,
        multinode_points,
        shipped_constants,
    )

    populations = {"node": leave_one_source_out(calibration_points()),
                   "nodes": judge(multinode_points(), shipped_constants())}
    out = {}
    for scope, points in populations.items():
        for name, _ in SIZE_CLASSES:
            errors = [p.error_pct for p in points if size_class(p.nbytes) == name]
            lo, hi = error_quantiles(errors, QUANTILES)
            out[scope, name] = Band(scope, name, round(lo, 1), round(hi, 1), len(errors))
    return out


def write_bands(path: Path = SHIPPED) -> Path:
    """Derive the bands and write them, with their provenance, to ``path``."""
    payload = {
        "what": "time error (measured - model) / model, %, that healthy rows of a size class "
                "stay inside: the 2.5th and 97.5th percentile of the NCCL model's error on "
                "published tables it was not fitted on",
        "kind": "measured",
        "data": {"node": "distlab/evidence/nccl/data/published.json allreduce_8gpu, each "
                         "source priced with constants refitted on the others",
                 "nodes": "distlab/evidence/nccl/data/published.json allreduce_multinode, "
                          "shipped constants (never fitted on)"},
        "command": "python -m distlab.health.bands",
        "bands": [{"scope": b.scope, "size_class": b.size_class, "low_pct": b.low_pct,
                   "high_pct": b.high_pct, "points": b.points}
                  for b in derive_bands().values()],
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def scope_of(nodes: int, box_gpus: int) -> str:
    """``"node"`` for one box of at most 8 GPUs (the population the 8-GPU tables judge),
    ``"nodes"`` for several nodes or one NVLink domain of more (a GB200 NVL72 rack is judged
    among the multi-node tables)."""
    return "node" if nodes == 1 and box_gpus <= 8 else "nodes"


def band(nbytes: int, scope: str) -> Band:
    """The band of a row of ``nbytes`` in ``scope`` (:func:`scope_of`)."""
    return bands()[scope, size_class(nbytes)]


if __name__ == "__main__":
    print(f"wrote {write_bands()}")
