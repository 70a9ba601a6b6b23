"""Medians over repeated allreduce benchmark runs (pure statistics; what notebook 04 shows).

One run on a shared machine can be off by tens of percent; the committed summary is the median
over independent runs of ``python -m distlab.bench allreduce ... --json`` of each world size.
:func:`summarize_files` reads the runs (:func:`read_run`), groups them by world size
(:func:`group_runs`) and summarizes each group (:func:`summarize_runs`; the fields are listed in
``python -m distlab.judge summary --help``, :mod:`distlab.judge.summary_command`);
:func:`sweep_problem` says why runs cannot be summarized together. :func:`shown_rows` and
:func:`run_error_range` read one world size's block; its table is
:mod:`distlab.judge.summary_report`'s.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distlab.collectives.algorithms.registry import BUILTIN
from distlab.report.jsonfile import read_json
from distlab.report.words import count
from distlab.vocabulary import busbw_factor, error_pct, gb_per_s

__all__ = ["ROW_KEYS", "group_runs", "read_run", "run_error_range", "shown_rows",
           "summarize_files", "summarize_runs", "sweep_problem"]

ROW_KEYS = frozenset({"nbytes", "count", "dtype", "op", "algorithm", "time_us", "busbw_gbps",
                      "wrong"})
"""The fields every row of a run must have to be summarized."""

_CAL_KEYS = ("alpha", "beta", "gamma", "call_overhead", "handoff", "relay", "comm_r2",
             "comm_max_rel_residual", "reduce_r2", "duplex", "method")


def _median(values: Sequence[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def summarize_runs(runs: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Summarize runs of one world size (each a benchmark JSON payload) into one block.

    Raises ``ValueError`` when the runs differ in world size or in their (size, algorithm)
    rows: a median over different sweeps would mix what it should compare.
    """
    problem = sweep_problem(runs, names)
    if problem is not None:
        raise ValueError(problem)
    world = runs[0]["provenance"].get("world_size")
    keys = [(r["nbytes"], r["algorithm"]) for r in runs[0]["rows"]]
    builtin = [{r["nbytes"]: r["busbw_gbps"] for r in run["rows"] if r["algorithm"] == BUILTIN}
               for run in runs]
    rows = []
    for i, (nbytes, algorithm) in enumerate(keys):
        per_run = [run["rows"][i] for run in runs]
        time_us = statistics.median(float(r["time_us"]) for r in per_run)
        algbw = gb_per_s(nbytes, time_us * 1e-6) if time_us > 0 else 0.0
        ratios = [r["busbw_gbps"] / b[nbytes] if nbytes in b and b[nbytes] > 0 else None
                  for r, b in zip(per_run, builtin, strict=True)]
        errors = [r.get("error_pct") for r in per_run]
        rows.append({
            "nbytes": nbytes, "count": per_run[0]["count"], "dtype": per_run[0]["dtype"],
            "op": per_run[0]["op"], "algorithm": algorithm, "time_us": time_us,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * busbw_factor("all_reduce", world) if world else 0.0,
            "wrong": sum(int(r["wrong"]) for r in per_run),
            "predicted_us": _median([r.get("predicted_us") for r in per_run]),
            "error_pct": _median(errors),
            "time_us_runs": [_round(r["time_us"], 1) for r in per_run],
            "ratio_vs_builtin_runs": [_round(x, 3) for x in ratios],
            "error_pct_runs": ([] if all(e is None for e in errors)
                               else [_round(e, 1) for e in errors]),
            "ratio_vs_builtin_paired_median": _round(_median(ratios), 3),
        })
    calibrations = [{k: run["calibration"][k] for k in _CAL_KEYS if k in run["calibration"]}
                    if run.get("calibration") else None for run in runs]
    return {"runs": list(names), "provenance": runs[0]["provenance"],
            "calibrations": calibrations, "rows": rows}


def sweep_problem(runs: Sequence[dict[str, Any]], names: Sequence[str]) -> str | None:
    """Why :func:`summarize_runs` cannot summarize ``runs`` (named ``names``) together: none, a
    name count that differs, or runs of another world size or other (size, algorithm) rows than
    the first (a median over different sweeps would mix what it should compare); None when it
    can."""
    if not runs:
        return "no runs to summarize"
    if len(names) != len(runs):
        return f"{len(names)} names for {len(runs)} runs"
    world = runs[0]["provenance"].get("world_size")
    keys = [(r["nbytes"], r["algorithm"]) for r in runs[0]["rows"]]
    for name, run in zip(names, runs, strict=True):
        if run["provenance"].get("world_size") != world:
            return (f"{name}: world size {run['provenance'].get('world_size')}, the first run "
                    f"has {world}")
        if [(r["nbytes"], r["algorithm"]) for r in run["rows"]] != keys:
            return (f"{name}: its (size, algorithm) rows differ from {names[0]}'s; summarize "
                    "runs of the same sweep only")
    return None


def read_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The benchmark JSON at ``path``.

    Raises:
        ValueError: not a readable JSON file, or not an allreduce benchmark result (no
            ``rows``/``provenance``, or a row without one of :data:`ROW_KEYS`).
    """
    p = Path(path)
    try:
        payload = read_json(p)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: not a readable benchmark JSON file ({exc})") from None
    if not isinstance(payload, dict) or "rows" not in payload or "provenance" not in payload:
        raise ValueError(f"{p}: not an allreduce benchmark result (no 'rows'/'provenance')")
    if not all(isinstance(r, dict) and ROW_KEYS <= r.keys() for r in payload["rows"]):
        raise ValueError(f"{p}: not an allreduce benchmark result (a row lacks one of "
                         f"{', '.join(sorted(ROW_KEYS))})")
    return payload


def group_runs(paths: Sequence[str | os.PathLike[str]]
               ) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The runs at ``paths`` (:func:`read_run`) by world size (as text), each as (file name,
    run), in the order given; raises :func:`read_run`'s ``ValueError``."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in paths:
        payload = read_run(path)
        ws = str(payload["provenance"].get("world_size"))
        groups.setdefault(ws, []).append((Path(path).name, payload))
    return groups


def summarize_files(paths: Sequence[str | os.PathLike[str]], note: str = "") -> dict[str, Any]:
    """Read benchmark JSON files, group them by world size, summarize each group."""
    groups = group_runs(paths)
    blocks = {ws: summarize_runs([r for _, r in group], [n for n, _ in group])
              for ws, group in sorted(groups.items(), key=lambda kv: int(kv[0]))}
    return {"note": note or _default_note(blocks), "world_sizes": blocks}


def _default_note(blocks: dict[str, dict[str, Any]]) -> str:
    commands = sorted({b["provenance"].get("command", "?") for b in blocks.values()})
    return ("median over independent runs (per world size: "
            + ", ".join(f"{ws}: {count(len(b['runs']), 'run')}" for ws, b in blocks.items())
            + "); ratio = busbw / builtin busbw in the same run, median over runs; error% = "
            "median over runs of each run's (measured - predicted) / predicted, each run "
            "predicted from its own calibration; first run's command: " + commands[0])


def shown_rows(block: dict[str, Any], *, min_bytes: int = 0) -> list[dict[str, Any]]:
    """One world size's summary rows from ``min_bytes`` up, each with ``error_pct`` taken from
    its own two medians, ``(time_us - predicted_us) / predicted_us`` in percent (None without a
    prediction), so that a row reads on its own; the runs' own errors stay in
    ``error_pct_runs`` (see :func:`run_error_range`)."""
    out = []
    for r in block["rows"]:
        if r["nbytes"] < min_bytes:
            continue
        pred = r.get("predicted_us")
        out.append(dict(r, error_pct=None if not pred else error_pct(r["time_us"], pred)))
    return out


def run_error_range(rows: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """(min, max) over ``rows`` of every single run's error in percent (each run against its own
    calibration); None when no row has one."""
    errs = [e for r in rows for e in r.get("error_pct_runs") or [] if e is not None]
    return (min(errs), max(errs)) if errs else None

