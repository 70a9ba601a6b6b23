"""NCCL's all-to-all model calibrated on published ``alltoall_perf`` tables and judged on the
others: what ``python -m distlab.judge nccl --alltoall`` prints.

The tables are ``data/alltoall_published.json`` beside this package (each with its source URL,
hardware, NCCL release and role: ``calibrate`` or ``held_out``; :func:`alltoall_tables`).
:func:`fit_alltoall` fits the constants of :class:`~distlab.nccl.alltoall.AlltoallConstants`
on the ``calibrate`` tables: per protocol, a least-squares fit of relative time error, linear in
``(base, 1 / efficiency, step_us)`` given NCCL's layout of each row
(:func:`~distlab.nccl.alltoall.alltoall_layout`), inside an NVLink domain on one-node rows and
then across nodes on the rows that cross a network (the NVLink constants held). Across nodes the
fit is of ``(net_base, net_proxy_us, net_step_us)`` with the NIC held at NCCL's rate
(``net_efficiency`` 1): the calibration's one network table moves a third to a half of its NICs'
rate at every large size, which one NIC figure and one proxy figure explain alike, and the
proxy is what the published runs that set ``NCCL_P2P_NET_CHUNKSIZE`` or carry two NICs per GPU
tell apart (``python -m distlab.judge nccl --alltoall``). A table's ``p2p_net_chunksize`` is the
``NCCL_P2P_NET_CHUNKSIZE`` its source states (absent: NCCL's default). The fit is what
``alltoall_calibration.json`` ships (``--write`` refits it). :func:`judge_alltoall` prices every
row of every table and reports, per table, the |time error| (:func:`distlab.vocabulary.error_pct`:
(published - model) / model; :class:`~distlab.vocabulary.ErrorSummary`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from distlab.nccl.alltoall import (
    NET_CHUNK_BYTES,
    P2P_PROTOCOLS,
    AlltoallConstants,
    AlltoallLayout,
    Fabric,
    alltoall_layout,
    alltoall_times,
    fabric,
    shipped_alltoall,
)
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["PUBLISHED_RESOURCE", "NetworkRate", "TableJudgement", "alltoall_tables",
           "fit_alltoall", "judge_alltoall", "judged_lines", "network_rates", "write_calibration"]

PUBLISHED_RESOURCE = ("distlab.evidence.nccl", "data", "alltoall_published.json")
"""``(package, folder, file)`` of the published all-to-all tables."""


def alltoall_tables() -> dict[str, Any]:
    """The published tables (``about``, ``tables``, ``excluded``), a fresh dict per call."""
    package, folder, name = PUBLISHED_RESOURCE
    text = resources.files(package).joinpath(folder).joinpath(name).read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def table_fabric(t: dict[str, Any]) -> Fabric:
    """The :class:`~distlab.nccl.alltoall.Fabric` a published table ran on."""
    n = int(t["nodes"]) * int(t["gpus_per_node"])
    return fabric(t["box"], n, nodes=int(t["nodes"]), nic_gbps=float(t["nic_gbps"]),
                  net_chunk_bytes=int(t.get("p2p_net_chunksize", NET_CHUNK_BYTES)))


def _solve(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative least squares of relative error: ``a @ x ~ t`` weighted by ``1/t``, by
    dropping a negative coefficient and solving again."""
    w = 1.0 / t
    keep = [0] + [k for k in range(1, a.shape[1]) if np.ptp(a[:, k]) > 0]  # a constant: the base
    while True:
        x_keep, *_ = np.linalg.lstsq(a[:, keep] * w[:, None], np.ones_like(t), rcond=None)
        if (x_keep >= 0).all() or len(keep) == 1:
            x = np.zeros(a.shape[1])
            x[keep] = np.maximum(x_keep, 0.0)
            return x
        keep.pop(int(np.argmin(x_keep)))


def _rows(tables: Sequence[dict[str, Any]]) -> list[tuple[Fabric, AlltoallLayout, float]]:
    out = []
    for t in tables:
        f = table_fabric(t)
        out += [(f, alltoall_layout(f, int(r["size"])), float(r["time_us"])) for r in t["rows"]]
    return out


def fit_alltoall(tables: Sequence[dict[str, Any]] | None = None) -> AlltoallConstants:
    """The constants fitted on ``tables`` (default: the published ``calibrate`` tables); see
    the module doc. A protocol no row of a kind runs keeps the other protocol's constants."""
    if tables is None:
        tables = [t for t in alltoall_tables()["tables"] if t["role"] == "calibrate"]
    rows = _rows(tables)
    base, eff, step = {}, {}, {}
    for p in P2P_PROTOCOLS:
        one = [(f, lay, t) for f, lay, t in rows if f.nodes == 1 and lay.protocol == p]
        if not one:
            continue
        a = np.array([[1.0, lay.nvl_bytes / (f.box.nccl_link_gbps * 1e3),
                       lay.steps * lay.batches] for f, lay, _ in one])
        x = _solve(a, np.array([t for *_, t in one]))
        base[p], eff[p], step[p] = x[0], 1.0 / x[1] if x[1] > 0 else 1.0, x[2]
    nbase, nproxy, nstep = {}, {}, {}
    for p in P2P_PROTOCOLS:
        net = [(f, lay, t) for f, lay, t in rows if f.nodes > 1 and lay.protocol == p]
        if not net:
            continue
        a = np.array([[1.0, lay.net_bytes / lay.step_bytes, lay.steps * lay.batches]
                      for f, lay, _ in net])
        x = _solve(a, np.array([t for *_, t in net]))
        nbase[p], nproxy[p], nstep[p] = x[0], x[1], x[2]

    def full(d: dict[str, float]) -> dict[str, float]:
        if not d:
            raise ValueError("fit_alltoall needs rows on one node and across nodes")
        return {p: float(d.get(p, next(iter(d.values())))) for p in P2P_PROTOCOLS}

    wire = {p: 1.0 for p in P2P_PROTOCOLS}  # the NIC at NCCL's rate; the proxy is fitted
    return AlltoallConstants(full(base), full(eff), full(step), full(nbase), wire, full(nstep),
                             full(nproxy), tuple(t["id"] for t in tables))


@dataclass(frozen=True)
class TableJudgement:
    """One published table priced: its id, label, role, world size, and per row the published
    and model times (us) and the error (%)."""

    id: str
    label: str
    role: str
    world_size: int
    sizes: tuple[int, ...]
    published_us: tuple[float, ...]
    model_us: tuple[float, ...]

    @property
    def errors_pct(self) -> list[float]:
        return [error_pct(m, p) for m, p in zip(self.published_us, self.model_us, strict=True)]

    @property
    def summary(self) -> ErrorSummary:
        return ErrorSummary.of(self.errors_pct)


def judge_alltoall(constants: AlltoallConstants | None = None) -> list[TableJudgement]:
    """Every published table priced with ``constants`` (default: the shipped ones)."""
    c = shipped_alltoall() if constants is None else constants
    out = []
    for t in alltoall_tables()["tables"]:
        f = table_fabric(t)
        sizes = [int(r["size"]) for r in t["rows"]]
        runs = alltoall_times(f, sizes, c)
        out.append(TableJudgement(t["id"], t["label"], t["role"], f.world_size, tuple(sizes),
                                  tuple(float(r["time_us"]) for r in t["rows"]),
                                  tuple(r.seconds * 1e6 for r in runs)))
    return out


@dataclass(frozen=True)
class NetworkRate:
    """One cross-node table's network at its largest size, GB/s per GPU each way: what the
    published time moves (the GPU's bytes for other nodes / the call's time) beside the
    model's two bounds, the NIC rate (:attr:`~distlab.nccl.alltoall.Fabric.nic_gbps` times
    ``net_efficiency``) and the proxy's (a step's data / ``net_proxy_us``), with the step (the
    run's ``NCCL_P2P_NET_CHUNKSIZE``, bytes)."""

    id: str
    published_gbps: float
    nic_gbps: float
    proxy_gbps: float
    chunk_bytes: int


def network_rates(constants: AlltoallConstants | None = None) -> list[NetworkRate]:
    """:class:`NetworkRate` of every published table that crosses a network, in file order."""
    c = shipped_alltoall() if constants is None else constants
    out = []
    for t in alltoall_tables()["tables"]:
        f = table_fabric(t)
        if f.nodes == 1:
            continue
        r = max(t["rows"], key=lambda r: int(r["size"]))
        lay = alltoall_layout(f, int(r["size"]))
        p = lay.protocol
        out.append(NetworkRate(t["id"], lay.net_bytes / (float(r["time_us"]) * 1e3),
                               c.net_efficiency[p] * f.nic_gbps,
                               lay.step_bytes / (c.net_proxy_us[p] * 1e3), f.net_chunk_bytes))
    return out


_COLUMNS = (Column("table", "label", width=50, align="<"), Column("role", "role", width=9),
            Column("n", "world_size", width=4), Column("rows", "rows", width=4),
            Column("med", "median", ".1f", width=6), Column("p90", "p90", ".1f", width=6),
            Column("max", "max", ".1f", width=6))


def write_calibration(path: str, constants: AlltoallConstants | None = None) -> None:
    """Write ``constants`` (default: fitted now, :func:`fit_alltoall`) as the shipped
    calibration JSON to ``path``."""
    c = fit_alltoall() if constants is None else constants
    write_json(path, {"about": "NCCL all-to-all constants (distlab.nccl.alltoall), fitted by "
                      "distlab.evidence.nccl.alltoall_judged.fit_alltoall on the published "
                      "tables named in calibrated_on; regenerate: python -m distlab.judge nccl "
                      "--alltoall --write PATH", "constants": c.as_dict()})


def judged_lines(constants: AlltoallConstants | None = None) -> list[str]:
    """The judgement as text: per table the |time error| (%) median, p90 and max, calibration
    tables first, then held out, one line each for the calibration and held-out tables
    together, then per cross-node table its :class:`NetworkRate`."""
    c = shipped_alltoall() if constants is None else constants
    js = sorted(judge_alltoall(c), key=lambda j: (j.role != "calibrate", j.id))
    rows = []
    for j in js:
        s = j.summary
        rows.append({"label": j.label, "role": j.role, "world_size": j.world_size,
                     "rows": s.n, "median": s.median, "p90": s.p90, "max": s.max})
    held = ErrorSummary.of([e for j in js if j.role == "held_out" for e in j.errors_pct])
    cal = ErrorSummary.of([e for j in js if j.role == "calibrate" for e in j.errors_pct])
    nets = [f"#   {r.id:18} {r.published_gbps:5.1f} GB/s; NIC {r.nic_gbps:5.1f}, proxy "
            f"{r.proxy_gbps:5.1f} ({r.chunk_bytes >> 10} KiB steps)" for r in network_rates(c)]
    return ["# NCCL all-to-all (distlab.nccl.alltoall) on published alltoall_perf tables",
            "# error: (published - model) / model time, %; med, p90, max: of |error|",
            f"# calibrated on: {', '.join(c.calibrated_on)}",
            *format_table(rows, _COLUMNS).splitlines(),
            f"# calibration rows: n={cal.n}, median {cal.median:.1f}%, p90 {cal.p90:.1f}%",
            f"# held-out rows: n={held.n}, median {held.median:.1f}%, p90 {held.p90:.1f}%",
            "# across nodes, largest size, per GPU each way: published network rate; the "
            "model's bounds", *nets]
