"""Median summary of repeated allreduce benchmark runs (what notebook 04 shows).

    python -m distlab.judge summary results/allreduce_ws*_run*.json \\
        --out results/allreduce_summary.json

One run on a shared machine can be off by tens of percent; the committed summary is the median
over independent runs of ``python -m distlab.bench allreduce ... --json`` of each world size.
Per world size and per (size, algorithm) row, in the first run's order:

- ``time_us``: median over runs of the run's ``time_us`` (itself the median over iterations
  of the slowest rank); ``algbw_gbps``/``busbw_gbps`` from that median time;
- ``predicted_us``: median over runs of each run's prediction (each run is predicted from its
  own calibration); ``error_pct``: median over runs of each run's own error, in percent;
- ``ratio_vs_builtin_runs``: per run, busbw / the built-in allreduce's busbw at the same size
  in the same run (so load that hit a run hits both); ``ratio_vs_builtin_paired_median``
  their median;
- ``wrong``: the sum over runs (must be 0);
- ``*_runs`` lists keep every run's value, rounded for reading.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.collectives.algorithms.registry import BUILTIN
from distlab.report.jsonfile import write_json
from distlab.report.table import Column, format_table
from distlab.report.words import count
from distlab.vocabulary import busbw_factor, error_pct

__all__ = ["SHOWN_COLUMNS", "SUMMARY_COLUMNS", "main", "run_error_range", "shown_rows",
           "shown_table", "summarize_files", "summarize_runs"]

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
    if not runs:
        raise ValueError("no runs to summarize")
    if len(names) != len(runs):
        raise ValueError(f"{len(names)} names for {len(runs)} runs")
    world = runs[0]["provenance"].get("world_size")
    keys = [(r["nbytes"], r["algorithm"]) for r in runs[0]["rows"]]
    for name, run in zip(names, runs, strict=True):
        if run["provenance"].get("world_size") != world:
            raise ValueError(f"{name}: world size {run['provenance'].get('world_size')}, "
                             f"the first run has {world}")
        if [(r["nbytes"], r["algorithm"]) for r in run["rows"]] != keys:
            raise ValueError(f"{name}: its (size, algorithm) rows differ from {names[0]}'s; "
                             "summarize runs of the same sweep only")
    builtin = [{r["nbytes"]: r["busbw_gbps"] for r in run["rows"] if r["algorithm"] == BUILTIN}
               for run in runs]
    rows = []
    for i, (nbytes, algorithm) in enumerate(keys):
        per_run = [run["rows"][i] for run in runs]
        time_us = statistics.median(float(r["time_us"]) for r in per_run)
        algbw = nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
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


def summarize_files(paths: Sequence[str | os.PathLike[str]], note: str = "") -> dict[str, Any]:
    """Read benchmark JSON files, group them by world size, summarize each group."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in paths:
        p = Path(path)
        try:
            payload = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{p}: not a readable benchmark JSON file ({exc})") from None
        if not isinstance(payload, dict) or "rows" not in payload or "provenance" not in payload:
            raise ValueError(f"{p}: not an allreduce benchmark result (no 'rows'/'provenance')")
        ws = str(payload["provenance"].get("world_size"))
        groups.setdefault(ws, []).append((p.name, payload))
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


SUMMARY_COLUMNS = (Column("ws", "world_size"), Column("size(B)", "nbytes", width=11),
                   Column("algorithm", "algorithm", width=19),
                   Column("time(us)", "time_us", ".1f", width=11),
                   Column("busbw(GB/s)", "busbw_gbps", ".3f"),
                   Column("vs builtin(x)", "ratio_vs_builtin_paired_median", ".3f"),
                   Column("error%", "error_pct", "+.1f", width=8), Column("#wrong", "wrong"))


SHOWN_COLUMNS = (Column("size(B)", "nbytes", width=9), Column("algorithm", "algorithm"),
                 Column("time(us)", "time_us", ".1f", width=9),
                 Column("predicted(us)", "predicted_us", ".1f"),
                 Column("error%", "error_pct", "+.1f", width=7), Column("#wrong", "wrong"),
                 Column("busbw(GB/s)", "busbw_gbps", ".3f"),
                 Column("vs builtin(x)", "ratio_vs_builtin_paired_median", ".2f"))
"""The columns of :func:`shown_table`: the two medians and the error computed from them side by
side, then busbw and its ratio to the builtin's (the median over runs of the ratio within each
run)."""


def shown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows of :func:`shown_rows` under :data:`SHOWN_COLUMNS`, after a ``# dtype op`` line (the
    rows' element types and reductions, comma-joined when they differ): at most 90 characters
    wide, so a notebook shows each row on one line."""
    kinds = ", ".join(dict.fromkeys(f"{r.get('dtype', '?')} {r.get('op', '?')}" for r in rows))
    return f"# {kinds}\n" + format_table(list(rows), SHOWN_COLUMNS)


def _parser() -> argparse.ArgumentParser:
    p = options.parser("python -m distlab.judge summary", __doc__)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="allreduce benchmark JSON files (any world sizes)")
    p.add_argument("--out", "--json", dest="out", metavar="PATH", default=None,
                   type=options.output_file, help="where to write the summary JSON")
    p.add_argument("--note", default="", help="text stored as the summary's note (default: a "
                                              "description of how it was made)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge summary``: the table on stdout, the JSON at ``--out``; exit 1
    when a run has wrong elements, 2 with one error line on bad input, 130 on Ctrl-C."""
    return run_main("python -m distlab.judge summary", _summary_command, argv,
                    on_interrupt="nothing written")


def _summary_command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    try:
        summary = summarize_files(args.runs, note=args.note)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    rows = [{"world_size": int(ws), **r} for ws, block in summary["world_sizes"].items()
            for r in block["rows"]]
    for ws, b in summary["world_sizes"].items():
        print(f"# world size {ws}: {count(len(b['runs']), 'run')}, {count(len(b['rows']), 'row')}")
    print(format_table(rows, SUMMARY_COLUMNS))
    print(f"# {summary['note']}")
    if args.out:
        print(f"# wrote {write_json(args.out, summary)}")
    wrong = sum(r["wrong"] for r in rows)
    if wrong:
        print(f"# FAILED: {wrong} wrong elements in the runs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
