"""Re-predict every allreduce row of profile folders from their stored calibrations (offline).

    python -m distlab.judge refit results/profiles/vm-2026-11-23 results/profiles/h100-2026-11-23
    python -m distlab.judge refit results/profiles/* --json refit.json
    # calibrated on one machine, measured on another:
    python -m distlab.judge refit results/profiles/h100-2026-11-23 \\
        --calibration-from results/profiles/vm-2026-11-23

A profile's collectives part stores, for every allreduce sweep, the rows (measured times) and the
calibration fitted on the same timed rounds, with its per-size series. This command prices every row
again, distlab's algorithms and ``builtin`` alike, with the model of
:mod:`distlab.collectives.model.predict` (per-size rates of :mod:`distlab.collectives.model.rates`;
the builtin as the backend's own schedule; the cores per rank from the calibration, else from the
profile's ``cpus_allowed``), so every model change is judged on every committed machine at once,
without running anything. The measured values are the profile's, untouched.

What is judged (``--statistic``): the model prices a call as the sum of its steps' costs, and sums
add as means do, not as medians (the median of a sum of skewed or two-regime step times is not the
sum of their medians); a training loop, too, pays the mean. So by default every row is judged by the
**mean** of its slowest-rank rounds, priced with the calibration fitted again from its own recorded
rounds by their means (:func:`~distlab.collectives.model.calibration.restate_calibration`). A
profile whose calibration kept no rounds (made before they were stored) has only medians, and is
judged median against median; the ``statistic`` column says which. ``--statistic median`` judges
every profile by medians, as measured rows' ``time_us`` are.

It prints, per profile and world size (and per profile), the median, 90th percentile and maximum of
``|error%|`` over the judged rows (by default sizes >= 64 KiB of ring, tree, recursive_doubling,
rabenseifner and builtin: :data:`TARGET_ALGORITHMS`), before (the predictions stored in the
profile, made when it was measured; builtin had none) and after (this model), and whether the after
numbers meet the target (median <= 15%, p90 <= 35%). Beside them, how well the rows themselves are
known (:mod:`distlab.collectives.model.noise`): the median and p90 of the rows' ``noise_pct`` (how
far each row's median round could land on a re-run of the same rounds, a 90% bootstrap interval)
and ``in noise`` (rows whose prediction lies inside that interval / judged rows). Where the noise
is as large as the target, a miss cannot be told from the measurement's own scatter; where it is
small and the prediction is outside, the model is wrong. The printed report fits 110 columns: head
lines say once what every row shares (where the calibrations came from, the backend), a first table
the model now with the rows' noise (:data:`NOW_COLUMNS`), a second the stored predictions beside it
(:data:`BEFORE_COLUMNS`). ``--json OUT`` writes every run with its rows in the profile's format
(``predicted_us`` and ``error_pct`` filled, ``judged_us`` the measured value under the run's
statistic, ``stored_predicted_us``/ ``stored_error_pct`` keep the old ones) and the summary. A bad
argument exits 2 with one error line.

Pure: no process group, no ``torch.distributed`` (reading JSON and pricing schedules only).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distlab._checks import check_choice
from distlab.cli import options
from distlab.cli.run import UsageError, run_main
from distlab.collectives.algorithms.registry import entry, names
from distlab.collectives.model.calibration import STATISTICS, restate_calibration
from distlab.collectives.model.noise import row_noise, row_seconds
from distlab.collectives.model.predict import CallModel, call_model
from distlab.profile.load import Profile, load_profile
from distlab.report.jsonfile import write_json
from distlab.report.provenance import provenance
from distlab.report.table import Column, Table, format_table
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["BEFORE_COLUMNS", "JUDGEABLE", "NOW_COLUMNS", "PRINT_WIDTH", "SUMMARY_COLUMNS",
           "TARGET_ALGORITHMS", "TARGET_MEDIAN_PCT", "TARGET_MIN_BYTES", "TARGET_P90_PCT",
           "RefitRun", "RehearsalProfileError", "algorithms_in", "calibrated_runs",
           "calibration_source", "error_stats", "main", "meets_target", "profile_cpus",
           "profile_dir_arg",
           "refit_profile", "refit_rows", "refit_runs", "summary_head", "summary_rows",
           "summary_table", "summary_tables"]

PathLike = str | os.PathLike[str]

JUDGEABLE = names("all_reduce", "plan", "builtin")
"""Every allreduce a profile's rows can hold: distlab's plans and the builtin."""

TARGET_ALGORITHMS = tuple(entry("all_reduce", a).name for a in
                          ("ring", "tree", "recursive_doubling", "rabenseifner", "builtin"))
"""The rows the targets judge (with sizes >= :data:`TARGET_MIN_BYTES`): the four plans whose
steps the calibration prices directly, and the builtin."""
TARGET_MIN_BYTES = 64 * 1024
TARGET_MEDIAN_PCT = 15.0
TARGET_P90_PCT = 35.0


def meets_target(stats: ErrorSummary) -> bool:
    """Median <= 15% and p90 <= 35% (the target), over at least one row."""
    return stats.meets(TARGET_MEDIAN_PCT, TARGET_P90_PCT)


@dataclass
class RefitRun:
    """One allreduce sweep of a profile, priced again.

    Attributes:
        profile: the measured profile's folder name.
        calibrated_on: the folder name of the profile whose calibration priced the rows.
        backend, world_size: the sweep's.
        rows: the profile's rows with ``predicted_us``/``error_pct`` from this model and the
            stored ones as ``stored_predicted_us``/``stored_error_pct``.
        calibration: the calibration dict used.
        statistic: how rows and calibration summarize their rounds (``"median"``/``"mean"``).
    """

    profile: str
    calibrated_on: str
    backend: str
    world_size: int
    rows: list[dict[str, Any]]
    calibration: dict[str, Any] = field(default_factory=dict)
    statistic: str = "median"

    def stats(self, key: str = "error_pct", *, min_bytes: int = TARGET_MIN_BYTES,
              algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> ErrorSummary:
        """:func:`error_stats` of this run's rows."""
        return error_stats(self.rows, key, min_bytes=min_bytes, algorithms=algorithms)


def error_stats(rows: Iterable[Mapping[str, Any]], key: str = "error_pct", *,
                min_bytes: int = TARGET_MIN_BYTES,
                algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> ErrorSummary:
    """:class:`~distlab.vocabulary.ErrorSummary` of ``row[key]`` over rows of ``algorithms``
    (None: all) with ``nbytes >= min_bytes``; rows whose ``key`` is missing or None are left
    out."""
    algos = None if algorithms is None else set(algorithms)
    return ErrorSummary.of(float(r[key]) for r in rows
                           if r.get(key) is not None and r["nbytes"] >= min_bytes
                           and (algos is None or r["algorithm"] in algos))


def refit_rows(rows: Sequence[Mapping[str, Any]], world_size: int,
               model: CallModel, statistic: str = "median") -> list[dict[str, Any]]:
    """Each row (profile format: ``algorithm``, ``nbytes``, ``count``, ``time_us`` ...) with
    ``judged_us`` (its measured time under ``statistic``:
    :func:`distlab.collectives.model.noise.row_seconds`),
    ``predicted_us`` and ``error_pct`` (:func:`distlab.vocabulary.error_pct` of ``judged_us``
    against ``predicted_us``) from ``model`` (with
    the row's ``options``, the ones its timed calls ran with; rows of profiles made before rows kept
    them ran with none); the stored values move to ``stored_predicted_us`` / ``stored_error_pct``. A
    row that kept its rounds (``seconds_per_rank``) also gets ``noise_pct`` and ``within_noise``
    (:mod:`distlab.collectives.model.noise`: how far its value could land on a re-run, and whether
    the prediction lies inside that interval); otherwise both are None."""
    out = []
    for row in rows:
        count = int(row["count"])
        itemsize = int(row["nbytes"]) // count if count else 4
        predicted = model.seconds(row["algorithm"], world_size, count, itemsize,
                                  row.get("options")) * 1e6
        measured = row_seconds(row, statistic) * 1e6
        noise = row_noise(row, statistic)
        out.append({**row, "judged_us": measured, "predicted_us": predicted,
                    "error_pct": error_pct(measured, predicted) if predicted else None,
                    "stored_predicted_us": row.get("predicted_us"),
                    "stored_error_pct": row.get("error_pct"),
                    "noise_pct": None if noise is None else noise.noise_pct,
                    "within_noise": None if noise is None else noise.holds(predicted * 1e-6)})
    return out


def calibrated_runs(profile: Profile) -> list[dict[str, Any]]:
    """The profile's allreduce runs that stored a calibration.

    Raises:
        RehearsalProfileError: the profile is a rehearsal (``--rehearse``).
        ValueError: none did.
    """
    if profile.rehearsal:
        raise RehearsalProfileError(
            f"profile {profile.path} is a rehearsal of box {profile.rehearsal} (gloo stood in "
            "for NCCL): no model is judged on it")
    runs = [r for r in profile.allreduce_runs() if r.get("calibration")]
    if not runs:
        raise ValueError(f"profile {profile.path} has no allreduce run with a calibration (its "
                         "collectives part did not run, was skipped, or ran with "
                         "--no-calibrate)")
    return runs


def profile_cpus(profile: Profile) -> int | None:
    """The CPUs the profile's ranks could run on (``cpus_allowed`` of its collectives part,
    else of the profile, else the host's ``cpu_cores``; None when it records neither)."""
    for prov in ((profile.part("collectives") or {}).get("provenance") or {},
                 profile.index.get("provenance") or {}):
        for key in ("cpus_allowed", "cpu_cores"):
            value = prov.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


class RehearsalProfileError(ValueError):
    """The profile is a rehearsal (``python -m distlab.profile --rehearse BOX``): gloo stood in
    for NCCL and host memory for GPUs, so no model is judged on its runs."""


def refit_profile(path: str | os.PathLike[str], *,
                  calibration_from: str | os.PathLike[str] | None = None,
                  per_size: bool = True, skip_missing: bool = False,
                  statistic: str = "mean") -> list[RefitRun]:
    """Every allreduce run of the profile folder ``path`` priced again (see the module doc).

    Args:
        path: a profile folder (``profile.json`` + ``collectives.json``).
        calibration_from: another profile folder whose calibration (same backend and world
            size) prices the rows instead of ``path``'s own: how far the model travels.
        per_size: per-size rates (default) or the one beta and gamma of the calibration.
        skip_missing: leave out runs that ``calibration_from`` has no calibration for
            (default: raise).
        statistic: ``"mean"`` (default) or ``"median"``: how rows and calibration summarize
            their rounds; a run falls back to the median where the calibration or a row kept
            no rounds (see the module docstring).

    Raises:
        RehearsalProfileError: ``path`` or ``calibration_from`` is a rehearsal.
        ValueError: not a profile folder, no calibrated allreduce run, or no calibration of the
            same backend and world size in ``calibration_from``.
    """
    measured = load_profile(path)
    source = measured if calibration_from is None else load_profile(calibration_from)
    cals = {(r["backend"], r["world_size"]): r["calibration"] for r in calibrated_runs(source)}
    out = []
    for run in calibrated_runs(measured):
        key = (run["backend"], run["world_size"])
        if key not in cals:
            if skip_missing:
                continue
            raise ValueError(f"profile {source.path} has no {key[0]} calibration for world size "
                             f"{key[1]} (it has {sorted(cals)})")
        cal, stat = _restated(cals[key], run["rows"], statistic)
        model = call_model(cal, per_size=per_size, cpus=profile_cpus(source))
        out.append(RefitRun(measured.name, source.name, run["backend"], run["world_size"],
                            refit_rows(run["rows"], run["world_size"], model, stat), cal, stat))
    return out


def refit_runs(profiles: Iterable[PathLike | RefitRun], *,
               calibration_from: PathLike | None = None) -> list[RefitRun]:
    """:func:`refit_profile` of every profile folder (runs given as :class:`RefitRun` pass
    through), in order.

    Raises:
        ValueError: ``profiles`` is empty, or a folder cannot be refitted.
    """
    out: list[RefitRun] = []
    for p in profiles:
        if isinstance(p, RefitRun):
            out.append(p)
        else:
            out += refit_profile(p, calibration_from=calibration_from)
    if not out:
        raise ValueError("profiles must name at least one profile folder, got none")
    return out


def algorithms_in(runs: Sequence[RefitRun], algorithms: Iterable[str] | None = None) -> list[str]:
    """The algorithms to show: ``algorithms`` as given, else every algorithm in the runs' rows,
    the judged ones first (:data:`TARGET_ALGORITHMS`), then the registry's order."""
    if algorithms is not None:
        return list(algorithms)
    seen = {r["algorithm"] for run in runs for r in run.rows}
    order = list(dict.fromkeys((*TARGET_ALGORITHMS, *JUDGEABLE)))
    return [a for a in order if a in seen] + sorted(seen - set(order))


def _restated(cal: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
              statistic: str) -> tuple[dict[str, Any], str]:
    """The calibration under ``statistic`` and the statistic used: the median where the
    calibration or a row kept no rounds."""
    check_choice("statistic", statistic, STATISTICS)
    if statistic == str(cal.get("statistic") or "median"):
        return dict(cal), statistic
    if not cal.get("round_seconds") or not all(r.get("seconds_per_rank") for r in rows):
        return dict(cal), str(cal.get("statistic") or "median")
    return restate_calibration(cal, statistic).to_dict(), statistic


SUMMARY_COLUMNS = (
    Column("measured on", "profile"), Column("calibrated on", "calibrated_on"),
    Column("backend", "backend"), Column("ws", "world_size"), Column("statistic", "statistic"),
    Column("n before", "before_n"), Column("median%", "before_median", ".1f"),
    Column("p90%", "before_p90", ".1f"), Column("max%", "before_max", ".1f"),
    Column("n after", "after_n"), Column("median%", "after_median", ".1f"),
    Column("p90%", "after_p90", ".1f"), Column("max%", "after_max", ".1f"),
    Column("target", "target"), Column("noise median%", "noise_median", ".1f"),
    Column("noise p90%", "noise_p90", ".1f"), Column("in noise", "within_noise"))
"""Every column of :func:`summary_rows` in one table (wider than a terminal: the command prints
:data:`NOW_COLUMNS` and :data:`BEFORE_COLUMNS` instead)."""

NOW_COLUMNS = (
    Column("profile", "profile"), Column("ws", "world_size"), Column("statistic", "statistic"),
    Column("n", "after_n"), Column("median%", "after_median", ".1f"),
    Column("p90%", "after_p90", ".1f"), Column("max%", "after_max", ".1f"),
    Column("target", "target"), Column("noise med%", "noise_median", ".1f"),
    Column("noise p90%", "noise_p90", ".1f"), Column("in noise", "within_noise"))
"""The printed table of the model as it is: ``|error%|`` after, the target, the rows' noise."""

BEFORE_COLUMNS = (
    Column("profile", "profile"), Column("ws", "world_size"), Column("n", "before_n"),
    Column("median%", "before_median", ".1f"), Column("p90%", "before_p90", ".1f"),
    Column("max%", "before_max", ".1f"), Column("median% now", "after_median", ".1f"),
    Column("p90% now", "after_p90", ".1f"))
"""The printed table of the predictions stored in the profiles, beside this model's."""

PRINT_WIDTH = 110
"""The widest comment line the command prints (characters); the tables of profiles whose
names are at most 31 characters long fit it too."""


def _summary_row(profile: str, calibrated_on: str, backend: str, ws: Any,
                 rows: list[dict[str, Any]], min_bytes: int,
                 algorithms: Iterable[str] | None, statistic: str) -> dict[str, Any]:
    algos = None if algorithms is None else tuple(algorithms)
    before = error_stats(rows, "stored_error_pct", min_bytes=min_bytes, algorithms=algos)
    after = error_stats(rows, "error_pct", min_bytes=min_bytes, algorithms=algos)
    noise = error_stats(rows, "noise_pct", min_bytes=min_bytes, algorithms=algos)
    judged = [r for r in rows if r.get("within_noise") is not None
              and r["nbytes"] >= min_bytes and (algos is None or r["algorithm"] in algos)]
    inside = f"{sum(bool(r['within_noise']) for r in judged)}/{len(judged)}" if judged else "-"
    return {"profile": profile, "calibrated_on": calibrated_on, "backend": backend,
            "world_size": ws, "statistic": statistic, "before_n": before.n,
            "before_median": before.median,
            "before_p90": before.p90, "before_max": before.max, "after_n": after.n,
            "after_median": after.median, "after_p90": after.p90, "after_max": after.max,
            "target": "met" if meets_target(after) else "missed",
            "noise_median": noise.median, "noise_p90": noise.p90, "within_noise": inside}


def summary_rows(runs: Sequence[RefitRun], *, min_bytes: int = TARGET_MIN_BYTES,
                 algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> list[dict[str, Any]]:
    """One row per (profile, world size), one per profile (``world_size`` "all") when it has
    more than one run, and one over everything (``profile`` "all") when there are several
    profiles: counts and median/p90/max of ``|error%|`` before and after, and the target."""
    algos = None if algorithms is None else tuple(algorithms)
    out = []
    names = list(dict.fromkeys(r.profile for r in runs))
    for name in names:
        mine = [r for r in runs if r.profile == name]
        for r in mine:
            out.append(_summary_row(name, r.calibrated_on, r.backend, r.world_size, r.rows,
                                    min_bytes, algos, r.statistic))
        if len(mine) > 1:
            cal = ",".join(dict.fromkeys(r.calibrated_on for r in mine))
            out.append(_summary_row(name, cal, ",".join(dict.fromkeys(r.backend for r in mine)),
                                    "all", [x for r in mine for x in r.rows], min_bytes, algos,
                                    _statistics(mine)))
    if len(names) > 1:
        out.append(_summary_row("all", "own" if all(r.profile == r.calibrated_on for r in runs)
                                else "given", ",".join(dict.fromkeys(r.backend for r in runs)),
                                "all", [x for r in runs for x in r.rows], min_bytes, algos,
                                _statistics(runs)))
    return out


def _statistics(runs: Sequence[RefitRun]) -> str:
    return ",".join(dict.fromkeys(r.statistic for r in runs))


def calibration_source(runs: Sequence[RefitRun]) -> str | None:
    """Where every run's calibration came from, said once: ``"each profile's own"``, the one
    profile that calibrated them all, or None when they differ in some other way (then each row
    says it)."""
    if all(r.calibrated_on == r.profile for r in runs):
        return "each profile's own"
    sources = set(r.calibrated_on for r in runs)
    return next(iter(sources)) if len(sources) == 1 else None


def _with_columns(columns: tuple[Column, ...], runs: Sequence[RefitRun]) -> tuple[Column, ...]:
    """``columns`` with "calibrated on" and "backend" after the profile where the runs differ
    in them (otherwise the head lines say them once)."""
    extra = [] if calibration_source(runs) is not None else [
        Column("calibrated on", "calibrated_on")]
    if len({r.backend for r in runs}) > 1:
        extra.append(Column("backend", "backend"))
    return (columns[0], *extra, *columns[1:])


def summary_tables(runs: Sequence[RefitRun], *, min_bytes: int = TARGET_MIN_BYTES,
                   algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> list[Table]:
    """:func:`summary_rows` as the two tables the command prints: the model now
    (:data:`NOW_COLUMNS`) and the stored predictions beside it (:data:`BEFORE_COLUMNS`)."""
    rows = summary_rows(runs, min_bytes=min_bytes, algorithms=algorithms)
    return [Table(rows, _with_columns(NOW_COLUMNS, runs),
                  "the model now: |error%| of the judged rows; noise med% / p90%: how far a "
                  "row's value could land on a re-run (90% bootstrap half-width); in noise: "
                  "predictions inside it"),
            Table(rows, _with_columns(BEFORE_COLUMNS, runs),
                  "before: the predictions stored in each profile when it was measured "
                  "(builtin had none), beside the model now")]


def summary_table(runs: Sequence[RefitRun], *, min_bytes: int = TARGET_MIN_BYTES,
                  algorithms: Iterable[str] | None = TARGET_ALGORITHMS) -> str:
    """The text of :func:`summary_tables` (titles wrapped to :data:`PRINT_WIDTH`), one blank
    line between the tables."""
    parts = []
    for table in summary_tables(runs, min_bytes=min_bytes, algorithms=algorithms):
        parts.append("\n".join([*_comment(table.title), format_table(table.rows,
                                                                       table.columns)]))
    return "\n\n".join(parts)


def _comment(text: str) -> list[str]:
    """``text`` as ``# `` lines of at most :data:`PRINT_WIDTH` characters."""
    return textwrap.wrap(text, PRINT_WIDTH, initial_indent="# ", subsequent_indent="#   ",
                         break_on_hyphens=False, break_long_words=False)


def summary_head(runs: Sequence[RefitRun], *, min_bytes: int, algorithms: Sequence[str],
                 statistic: str, constant: bool) -> list[str]:
    """The comment lines above the tables: which rows are judged, the target, the statistic
    asked for, the model, and where the calibrations came from (once, when every row shares
    it) and the backend (when every run has the same)."""
    source = calibration_source(runs)
    backends = list(dict.fromkeys(r.backend for r in runs))
    where = []
    if source is not None:
        given = "" if source == "each profile's own" else " (--calibration-from), for every profile"
        where.append(f"calibrated on: {source}{given}")
    if len(backends) == 1:
        where.append(f"backend: {backends[0]}")
    return [*_comment(f"{'constant' if constant else 'per-size'} model; judged: |error%| of "
                      f"rows >= {min_bytes} B of {', '.join(algorithms)}"),
            *_comment(f"target: median <= {TARGET_MEDIAN_PCT:g}%, p90 <= {TARGET_P90_PCT:g}%; "
                      "each run is judged by the statistic of its rounds (asked: "
                      f"{statistic})"),
            *(_comment("; ".join(where)) if where else [])]


def profile_dir_arg(text: str) -> Path:
    """argparse type: ``text`` as a profile folder (one holding ``profile.json``)."""
    path = Path(text)
    if not (path / "profile.json").is_file():
        raise argparse.ArgumentTypeError(
            f"invalid profile folder {text!r}: must be a folder holding profile.json (make one "
            "with: python -m distlab.profile)")
    return path


def _parser() -> argparse.ArgumentParser:
    p = options.parser("python -m distlab.judge refit", __doc__)
    p.add_argument("profiles", nargs="+", type=profile_dir_arg, metavar="DIR",
                   help="profile folders to re-predict")
    p.add_argument("--json", metavar="OUT", default=None, type=options.output_file,
                   help="also write every run's rows and the summary to this JSON file")
    p.add_argument("--calibration-from", metavar="DIR", type=profile_dir_arg, default=None,
                   help="price the rows with this profile's calibration (same backend and "
                        "world size) instead of each profile's own")
    p.add_argument("--min-bytes", type=options.size_bytes, default=TARGET_MIN_BYTES,
                   help="judge rows of at least this many bytes (1K = 1024)")
    p.add_argument("--algorithms", type=options.comma_choices(JUDGEABLE),
                   default=",".join(TARGET_ALGORITHMS),
                   help="comma list of the algorithms judged, or 'all'")
    p.add_argument("--statistic", choices=STATISTICS, default="mean",
                   help="judge each row by the mean (default) or the median of its slowest-rank "
                        "rounds, with the calibration restated the same way (profiles whose "
                        "calibration kept no rounds: median)")
    p.add_argument("--constant", action="store_true",
                   help="price every size with the calibration's one beta and gamma (the model "
                        "without per-size rates), for comparison")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distlab.judge refit``: exit 0, 2 with one error line, or 130 on Ctrl-C
    (one line, no traceback; :func:`distlab.cli.run.run_main`)."""
    return run_main("python -m distlab.judge refit", _refit_command, argv,
                    on_interrupt="nothing printed")


def _refit_command(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    runs: list[RefitRun] = []
    for path in args.profiles:
        try:
            runs += refit_profile(path, calibration_from=args.calibration_from,
                                  per_size=not args.constant, statistic=args.statistic)
        except RehearsalProfileError as exc:
            if len(args.profiles) == 1 or args.calibration_from is not None:
                raise UsageError(f"argument DIR: invalid value {str(path)!r}: {exc}") from None
            print(f"# skipped {path}: a rehearsal, no model is judged on it")
            continue
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"argument DIR: invalid value {str(path)!r}: must be a profile "
                             f"with calibrated allreduce runs ({exc})") from None
    if not runs:
        raise UsageError("argument DIR: every profile named is a rehearsal: nothing to judge")
    algos = tuple(args.algorithms)
    print("\n".join(summary_head(runs, min_bytes=args.min_bytes, algorithms=algos,
                                 statistic=args.statistic, constant=args.constant)))
    print()
    print(summary_table(runs, min_bytes=args.min_bytes, algorithms=algos))
    if args.json:
        doc = {"provenance": provenance(), "min_bytes": args.min_bytes, "algorithms": list(algos),
               "model": "constant" if args.constant else "per-size",
               "statistic": args.statistic,
               "summary": summary_rows(runs, min_bytes=args.min_bytes, algorithms=algos),
               "runs": [{"profile": r.profile, "calibrated_on": r.calibrated_on,
                         "backend": r.backend, "world_size": r.world_size,
                         "statistic": r.statistic, "calibration": r.calibration,
                         "rows": r.rows} for r in runs]}
        print(f"# wrote {write_json(args.json, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
