"""Rehearsed faults: healthy published tables with a fault's mechanism applied, judged.

A published nccl-tests or torch table the project holds (:mod:`distlab.evidence.nccl`: the
8-GPU tables and the multi-node ones, each from a named source) is healthy by its source's
word. A fault is applied to it as the model says the fault changes each size: the measured
time times the fault's price over the healthy price (:data:`~distlab.health.diagnose.FAULTS`),
and a fault the model cannot price is applied as its mechanism says (:data:`SLOW_UPLINK`: every
size across nodes slowed by a rack uplink at a quarter of the rate). A rehearsal counts where
the fault moves at least one size that was inside its band out of it (a fault that leaves every
such size inside is not observable). The judgement: how many faulty tables are flagged, how
many with the right cause first, and how many healthy rows fall outside their band.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from distlab.health.bands import band
from distlab.health.diagnose import FAULTS
from distlab.health.expected import NotPriced, expected
from distlab.health.setup import Setup, setup_of
from distlab.health.verdict import judge_run
from distlab.logs.nccl_tests import NcclTestsRun, Row
from distlab.vocabulary import error_pct

__all__ = ["SLOW_UPLINK", "Rehearsal", "healthy_tables", "rehearse"]

SLOW_UPLINK = ("the fabric or its routing between nodes", 4.0)
"""A fault no single NIC prices: the path between racks at a quarter of the rate, every size
across nodes (latency and bandwidth terms alike) four times slower."""


@dataclass(frozen=True)
class Rehearsal:
    """One faulty table judged: which table and fault, whether it was flagged, and the cause
    the report named first."""

    table: str
    fault: str
    flagged: bool
    first_cause: str

    @property
    def right(self) -> bool:
        return self.first_cause == self.fault


def healthy_tables() -> Iterator[tuple[str, NcclTestsRun, Setup]]:
    """``(label, run, setup)`` of every published all-reduce table of five sizes or more."""
    from distlab.evidence.nccl.fit_execution import (
        box_of,
        calibration_points,
        harness_of,
        multinode_points,
        published_seconds,
    )

    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for p in calibration_points() + multinode_points():
        key = (p["source"], p["system"], box_of(p), int(p["world_size"]), p.get("nodes", 1),
               p.get("network"), p.get("nccl_version"), harness_of(p), p.get("column"),
               tuple(p.get("algorithms") or ()))
        groups.setdefault(key, []).append(p)
    for (_, system, box, n, nodes, network, release, harness, _, algos), pts in groups.items():
        if len(pts) < 5 or algos:
            continue
        rows = tuple(Row(int(p["nbytes"]), 0, "float", "sum", -1, "out-of-place",
                         published_seconds(p) * 1e6, 0.0, 0.0, 0) for p in pts)
        run = NcclTestsRun("all_reduce", rows, gpus_per_process=8 if harness == "nccl-tests"
                           else 1, nccl_version=release, source=system)
        try:
            setup = setup_of(run, box=box, gpus=n, nodes=int(nodes or 1), network=network)
        except ValueError:
            continue
        if harness == "torch-isolated":
            setup = replace(setup, harness=harness)
        yield system, run, setup


def _faulty(run: NcclTestsRun, times: list[float]) -> NcclTestsRun:
    return replace(run, rows=tuple(replace(r, time_us=t) for r, t in
                                   zip(run.rows, times, strict=True)))


def rehearse() -> tuple[list[Rehearsal], int, int]:
    """Every observable fault on every healthy table, judged; and the healthy rows outside
    their band, of all healthy rows."""
    out: list[Rehearsal] = []
    outside = total = 0
    for label, run, setup in healthy_tables():
        sizes = [r.nbytes for r in run.rows]
        healthy = judge_run(run, setup)
        outside += sum(r.verdict != "ok" for r in healthy.rows)
        total += len(healthy.rows)
        base = [p.seconds for p in expected(setup, "all_reduce", sizes)]
        trials: list[tuple[str, list[float]]] = []
        for fault in FAULTS:
            if not fault.applies(setup) or fault.name.startswith("NCCL_"):
                continue
            try:
                priced = [p.seconds for p in expected(fault.change(setup), "all_reduce", sizes)]
            except (NotPriced, ValueError):
                continue
            trials.append((fault.name, [r.time_us * f / b for r, f, b in
                                        zip(run.rows, priced, base, strict=True)]))
        if setup.nodes > 1:
            trials.append((SLOW_UPLINK[0], [r.time_us * SLOW_UPLINK[1] for r in run.rows]))
        for name, times in trials:
            observable = any(h.verdict != "low" and band(r.nbytes, setup.scope).verdict(
                error_pct(t, b * 1e6)) == "low"
                for h, r, t, b in zip(healthy.rows, run.rows, times, base, strict=True))
            if not observable:
                continue
            v = judge_run(_faulty(run, times), setup)
            out.append(Rehearsal(label, name, v.verdict == "low",
                                 v.causes[0].name if v.causes else ""))
    return out, outside, total
