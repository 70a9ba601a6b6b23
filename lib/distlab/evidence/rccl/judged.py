"""RCCL's execution model (:mod:`distlab.rccl.execution`) fitted and judged on published
rccl-tests tables: the tables (``data/published.json`` beside this package), the fit of the
shipped constants (:func:`fit_constants`, :func:`fit_tree`; a test refits and compares them with
:data:`~distlab.rccl.execution.SHIPPED`), every table priced (:func:`judge`, the tree across nodes
left out table by table through :func:`distlab.evidence.judge.leave_one_out`), what a priced
tree rests on (:func:`tree_note`) and the judgement as printed lines and JSON (what ``python -m
distlab.rccl --judge`` and ``python -m distlab.judge rccl --published`` print)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from os import PathLike
from typing import Any

import numpy as np

from distlab.collective_library import load_published
from distlab.evidence.judge import leave_one_out as leave_one_out_fits
from distlab.rccl.execution import (
    FITTED_ARCHS,
    JUDGED_FROM_BYTES,
    LINE_BYTES,
    NIC_GBPS,
    SHIPPED,
    TREE_FIT,
    TREE_FIT_ARCHS,
    ExecutionConstants,
    RcclTime,
    _bus_bytes,
    _msccl_link_bytes,
    _price,
)
from distlab.rccl.tables import DEFAULT_ARCH
from distlab.rccl.tuning import GPUS_PER_NODE, XGMI_BUS_GBPS, RcclChoice, rccl_allreduce_choices
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["JUDGE_COLUMNS", "PUBLISHED_RESOURCE", "JudgedTable", "fit_constants", "fit_tree",
           "judge", "judge_json", "judge_lines", "judge_report", "judge_rows", "published_tables",
           "table_choices", "tree_fit_tables", "tree_note"]

PUBLISHED_RESOURCE = ("distlab.evidence.rccl", "published.json")
"""``(package, file)`` of the published tables in the package's ``data/`` folder, read through
:func:`distlab.collective_library.load_published`."""


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Any], ...]:
    return tuple(load_published(*PUBLISHED_RESOURCE)["tables"])


def published_tables(split: str | None = None) -> list[dict[str, Any]]:
    """The published tables (``data/published.json``), those of one ``split`` if given
    (``"calibration"``, ``"held_out"``, ``"not_modelled"``)."""
    return [t for t in _load() if split is None or t["split"] == split]


def table_choices(t: dict[str, Any]) -> list[RcclChoice]:
    """What RCCL runs at each size of a published table: its nodes, architecture and release,
    and the ring where the table forced it (``NCCL_ALGO=Ring``)."""
    sizes = [p["bytes"] for p in t["points"]]
    choices, _ = rccl_allreduce_choices(t["nodes"], sizes, release=t["rccl"],
                                        arch=t.get("gfx") or DEFAULT_ARCH)
    if t.get("algorithm_forced") == "ring":   # NCCL_ALGO=Ring: the ring at RCCL's protocol
        choices = [c if c.algorithm == "ring" else _forced_ring(c) for c in choices]
    return choices


def _forced_ring(c: RcclChoice) -> RcclChoice:
    rings = [k for k in c.candidates if k.algorithm == "ring"]
    best = min(rings, key=lambda k: k.time_us)
    return RcclChoice(c.nbytes, c.nodes, "cost model", "ring", best.protocol, best.time_us,
                      c.candidates, c.arch)


def _weighted_line(x: Sequence[float], t_us: Sequence[float],
                   groups: Sequence[str] | None = None) -> tuple[dict[str, float], float]:
    """Least squares of ``t = fixed[group] + x * slope`` on relative error: intercepts per
    group, one slope."""
    names = sorted(set(groups)) if groups else ["all"]
    g = list(groups) if groups else ["all"] * len(x)
    a = np.zeros((len(x), len(names) + 1))
    for i, (xi, gi) in enumerate(zip(x, g, strict=True)):
        a[i, names.index(gi)] = 1.0
        a[i, -1] = xi
    w = 1.0 / np.asarray(t_us, dtype=float)
    sol, *_ = np.linalg.lstsq(a * w[:, None], np.asarray(t_us) * w, rcond=None)
    return {n: float(sol[i]) for i, n in enumerate(names)}, float(sol[-1])


def tree_fit_tables() -> list[dict[str, Any]]:
    """The published tables whose tree sizes the tree across nodes is fitted on (their
    ``fits`` lists :data:`TREE_FIT`)."""
    return [t for t in _load() if TREE_FIT in t.get("fits", ())]


def _tree_points(t: dict[str, Any]) -> list[tuple[float, float]]:
    """(wire kB a node sends, measured us) at each tree size >= 64 KiB of a two-node table."""
    return [(p["bytes"] * LINE_BYTES[c.protocol] / 1e3, p["time_us"])
            for p, c in zip(t["points"], table_choices(t), strict=True)
            if c.algorithm == "tree" and p["bytes"] >= JUDGED_FROM_BYTES]


def fit_tree(tables: Iterable[dict[str, Any]] | None = None) -> tuple[float, float]:
    """The tree across nodes' ``(fixed us, rate GB/s)`` fitted on the tree sizes (>= 64 KiB) of
    ``tables`` (default: :func:`tree_fit_tables`), a weighted least squares on relative error.

    Raises:
        ValueError: a table that is not two nodes of an architecture in
            :data:`TREE_FIT_ARCHS`, or no tree size to fit.
    """
    tables = list(tree_fit_tables() if tables is None else tables)
    wrong = [t["id"] for t in tables
             if t["nodes"] != 2 or (t.get("gfx") or DEFAULT_ARCH) not in TREE_FIT_ARCHS]
    if wrong:
        raise ValueError(f"the tree across nodes is fitted on two-node "
                         f"{', '.join(TREE_FIT_ARCHS)} tables only, not on {', '.join(wrong)}")
    points = [x for t in tables for x in _tree_points(t)]
    if not points:
        raise ValueError("the tables hold no tree size across nodes to fit")
    fixed, slope = _weighted_line([x for x, _ in points], [u for _, u in points])
    return round(fixed["all"], 2), round(1 / slope, 2)


def fit_constants(tables: Iterable[dict[str, Any]] | None = None,
                  tree_tables: Iterable[dict[str, Any]] | None = None) -> ExecutionConstants:
    """Fit :class:`ExecutionConstants` on ``tables`` (default: the calibration split), each
    term on the sizes where RCCL runs that path (by :func:`~.tuning.rccl_allreduce_choices` for
    the table's release; a one-node table of unstated release: MSCCL up to 16 MiB), and the
    tree across nodes on ``tree_tables`` (:func:`fit_tree`).

    Raises:
        ValueError: a table of an architecture not in :data:`FITTED_ARCHS` (gfx950: its
            tables only judge), or no size of a path to fit.
    """
    tree_tables = list(tree_fit_tables() if tree_tables is None else tree_tables)
    tree_fixed, tree_gbps = fit_tree(tree_tables)
    tables = list(published_tables("calibration") if tables is None else tables)
    other = [t["id"] for t in tables if (t.get("gfx") or DEFAULT_ARCH) not in FITTED_ARCHS]
    if other:
        raise ValueError(f"the constants are fitted on {', '.join(FITTED_ARCHS)} tables only, "
                         f"not on {', '.join(other)}")
    msccl: list[tuple[float, float, str]] = []
    ring1: list[tuple[float, float]] = []
    ringn: list[tuple[float, float]] = []
    for t in tables:
        n = t["nodes"] * GPUS_PER_NODE
        for p, c in zip(t["points"], table_choices(t), strict=True):
            if c.path == "msccl":
                msccl.append((_msccl_link_bytes(p["bytes"], c.protocol) / 1e3, p["time_us"],
                              c.protocol))
            elif c.algorithm == "ring" and c.protocol == "Simple":
                (ring1 if t["nodes"] == 1 else ringn).append(
                    (_bus_bytes(p["bytes"], n) / 1e3, p["time_us"]))
    if not (msccl and ring1 and ringn):
        raise ValueError("the tables hold no MSCCL, one-node ring or multi-node ring sizes to "
                         "fit")
    fixed, slope = _weighted_line([m[0] for m in msccl], [m[1] for m in msccl],
                                  [m[2] for m in msccl])
    f1, s1 = _weighted_line([r[0] for r in ring1], [r[1] for r in ring1])
    fn, sn = _weighted_line([r[0] for r in ringn], [r[1] for r in ringn])
    r1, rn = f1["all"], fn["all"]
    return ExecutionConstants(
        msccl_fixed_us={k: round(v, 2) for k, v in fixed.items()},
        msccl_link_gbps=round(1 / slope, 2),
        ring_fixed_us=round(r1, 2), xgmi_efficiency=round(1 / s1 / XGMI_BUS_GBPS, 4),
        net_ring_fixed_us=round(rn, 1),
        net_efficiency=round(1 / sn / (GPUS_PER_NODE * NIC_GBPS), 4),
        tree_net_fixed_us=tree_fixed, tree_net_gbps=tree_gbps,
        source="fit_constants on " + ", ".join(t["id"] for t in tables)
               + "; the tree across nodes on " + ", ".join(t["id"] for t in tree_tables))


@dataclass(frozen=True)
class JudgedTable:
    """One published table against the model: per priced size ``(bytes, measured us, model us,
    error %)``; ``unpriced`` the sizes (>= 64 KiB) the model does not price and
    ``unpriced_why`` the reason for each; the median and p90 of ``|error|`` over the priced
    sizes >= 64 KiB (``None`` when none); ``tree_left_out``: its tree sizes fit the tree term,
    so they are priced with that term refitted without this table."""

    id: str
    split: str
    rows: tuple[tuple[int, float, float, float], ...]
    unpriced: tuple[int, ...]
    median_pct: float | None
    p90_pct: float | None
    unpriced_why: tuple[str, ...] = ()
    tree_left_out: bool = False


def _priced_points(t: dict[str, Any], k: ExecutionConstants
                   ) -> Iterable[tuple[dict[str, Any], RcclChoice, float | None, str]]:
    """Each point of a published table with what RCCL runs there and the model's seconds (or
    ``None`` and why), at the table's own nodes, release and algorithm."""
    for p, c in zip(t["points"], table_choices(t), strict=True):
        yield (p, c, *_price(c, k, NIC_GBPS, t["rccl"]))


def judge(constants: ExecutionConstants = SHIPPED,
          tables: Iterable[dict[str, Any]] | None = None, *,
          leave_one_out: bool = True) -> list[JudgedTable]:
    """Every table (default: all but ``not_modelled``) priced by the model at its own nodes,
    release and algorithm; errors are :func:`distlab.vocabulary.error_pct` of times.

    ``leave_one_out``: a table whose tree sizes fit the tree term (:func:`tree_fit_tables`) is
    priced with that term refitted on the other such tables, so no table judges a term fitted
    on it (``False``: with ``constants`` as given).
    """
    tables = [t for t in _load() if t["split"] != "not_modelled"] if tables is None \
        else list(tables)
    tree = (leave_one_out_fits(tree_fit_tables(), lambda u: str(u["id"]), fit_tree)
            if leave_one_out else {})
    out = []
    for t in tables:
        k, left_out = constants, False
        if t["id"] in tree:
            fixed, gbps = tree[t["id"]]
            k, left_out = replace(constants, tree_net_fixed_us=fixed, tree_net_gbps=gbps), True
        rows, unpriced, whys = [], [], []
        for p, _, seconds, why in _priced_points(t, k):
            if p["bytes"] < JUDGED_FROM_BYTES:
                continue
            if seconds is None:
                unpriced.append(p["bytes"])
                whys.append(why)
                continue
            model_us = seconds * 1e6
            rows.append((p["bytes"], p["time_us"], model_us, error_pct(p["time_us"], model_us)))
        summary = ErrorSummary.of(r[3] for r in rows)
        out.append(JudgedTable(t["id"], t["split"], tuple(rows), tuple(unpriced),
                               summary.median if rows else None,
                               summary.p90 if rows else None, tuple(whys), left_out))
    return out


def tree_note(rows: Sequence[RcclTime]) -> str:
    """What a priced tree across nodes among ``rows`` rests on, one line (``""`` if none):
    the tables it is fitted on, their leave-one-out judgement (computed, as :func:`judge`
    gives it) and, beyond two nodes, that nothing judges it there."""
    trees = [r for r in rows
             if r.seconds is not None and r.choice.algorithm == "tree" and r.choice.nodes > 1]
    if not trees:
        return ""
    nodes = {r.choice.nodes for r in trees}
    judged = judge(tables=tree_fit_tables())
    medians = sorted(j.median_pct for j in judged if j.median_pct is not None)
    p90s = sorted(j.p90_pct for j in judged if j.p90_pct is not None)
    beyond = ("; beyond two nodes its fixed cost grows as RCCL's tree latency, and no table "
              "judges it there" if max(nodes) > 2 else "")
    other = sorted({r.choice.arch for r in trees} - set(TREE_FIT_ARCHS))
    return (f"the tree across nodes is fitted on the tree sizes of {len(judged)} published "
            f"2 x 8 MI355X tables (each judged with it fitted on the others: median |error| "
            f"{medians[0]:.0f}-{medians[-1]:.0f}%, p90 {p90s[0]:.0f}-{p90s[-1]:.0f}%){beyond}"
            + "".join(f"; {arch} {_unfitted_tree(arch)}" for arch in other))


def _unfitted_tree(arch: str) -> str:
    """How the published multi-node tables of ``arch`` (not fitted on) meet its tree across
    nodes: the range of measured over modelled time at their tree sizes >= 64 KiB."""
    ratios = [p["time_us"] / (seconds * 1e6)
              for t in _load() if (t.get("gfx") or DEFAULT_ARCH) == arch and t["nodes"] > 1
              for p, c, seconds, _ in _priced_points(t, SHIPPED)
              if c.algorithm == "tree" and p["bytes"] >= JUDGED_FROM_BYTES and seconds]
    if not ratios:
        return "takes the same constants; no published table times its tree"
    return (f"takes the same constants; its published tree sizes run {min(ratios):.1f}-"
            f"{max(ratios):.1f}x the model's time (docs/research/2026-11-27-rccl.md 4.15)")


JUDGE_COLUMNS = (
    Column("table", "id", align="<"), Column("split", "split", align="<"),
    Column("priced", "priced"), Column("unpriced", "unpriced"),
    Column("median |err|%", "median_pct", ".1f"), Column("p90 |err|%", "p90_pct", ".1f"))


def judge_rows() -> list[dict[str, Any]]:
    """One row per published table the model prices: its split, the sizes priced and not,
    the median and p90 of |error| (sizes >= 64 KiB)."""
    return [{"id": j.id, "split": j.split, "priced": len(j.rows), "unpriced": len(j.unpriced),
             "median_pct": j.median_pct, "p90_pct": j.p90_pct,
             "tree_left_out": j.tree_left_out} for j in judge()]


def judge_lines(rows: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The judgement as a title, the table and which tables' tree sizes are judged
    leave-one-out."""
    rows = list(judge_rows() if rows is None else rows)
    left = [r["id"] for r in rows if r.get("tree_left_out")]
    tail = textwrap.wrap(f"{', '.join(left)}: their tree sizes fit the tree across nodes; "
                         "each is judged with it fitted on the others only", 98,
                         initial_indent="# ", subsequent_indent="#   ") if left else []
    return ["# the execution model on published rccl-tests allreduce tables, sizes >= 64 KiB",
            "# error: (measured - model) / model of the out-of-place times",
            format_table(rows, JUDGE_COLUMNS), *tail]


def judge_json(rows: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The judgement as ``--judge --json`` writes it: the table rows (:func:`judge_rows`), each
    table's priced points and its unpriced sizes with the reason."""
    judged = judge()
    return {"tables": judge_rows() if rows is None else list(rows),
            "points": {j.id: [list(r) for r in j.rows] for j in judged},
            "unpriced": {j.id: [[n, why] for n, why in zip(j.unpriced, j.unpriced_why,
                                                            strict=True)]
                         for j in judged}}


def judge_report(out: str | PathLike[str] | None) -> int:
    """Print the execution model on every published table; with ``out``, also its JSON
    (:func:`judge_json`). What ``--judge`` and ``python -m distlab.judge
    rccl --published`` run."""
    rows = judge_rows()
    print("\n".join(judge_lines(rows)))
    if out is not None:
        write_json(out, judge_json(rows))
    return 0
