"""Every allreduce row of a profile priced again from a stored calibration (pure pricing).

A profile's collectives part stores, for every allreduce sweep, the rows (measured times) and the
calibration fitted on the same timed rounds, with its per-size series. :func:`refit_profile`
prices every row again, distlab's algorithms and ``builtin`` alike, with the model of
:mod:`distlab.collectives.model.predict` (per-size rates of :mod:`distlab.collectives.model.rates`;
the builtin as the backend's own schedule; the cores per rank from the calibration, else from the
profile's ``cpus_allowed``), with the profile's own calibration or another profile's of the same
backend and world size. The measured values are the profile's, untouched.

Each row is judged by the ``statistic`` of its slowest-rank rounds (``"mean"``, the default, or
``"median"``), priced with the calibration restated the same way
(:func:`~distlab.collectives.model.calibration.restate_calibration`); a run whose calibration or
rows kept no rounds holds medians only and is judged median against median (its
:attr:`RefitRun.statistic` says so). :func:`error_stats` gives the median, p90 and maximum of
``|error%|`` over the judged rows (:data:`TARGET_ALGORITHMS`, sizes >= :data:`TARGET_MIN_BYTES`)
and :func:`meets_target` the target (median <= 15%, p90 <= 35%).
:func:`refit_problem` says why a profile cannot be priced, so a command checks its input before
pricing. The summary over runs is :mod:`distlab.judge.refit_summary`, its tables
:mod:`distlab.judge.refit_report`, the command ``python -m distlab.judge refit``
(:mod:`distlab.judge.refit_command`).

Pure: no process group, no ``torch.distributed`` (reading JSON and pricing schedules only).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_choice
from distlab.collectives.algorithms.registry import entry, names
from distlab.collectives.model.calibration import STATISTICS, restate_calibration
from distlab.collectives.model.noise import row_noise, row_seconds
from distlab.collectives.model.predict import CallModel, call_model
from distlab.profile.expected import MODEL_MIN_BYTES
from distlab.profile.load import Profile, load_profile
from distlab.vocabulary import ErrorSummary, error_pct

__all__ = ["as_profile", "JUDGEABLE", "TARGET_ALGORITHMS", "TARGET_MEDIAN_PCT", "TARGET_MIN_BYTES",
           "TARGET_P90_PCT", "RefitRun", "RehearsalProfileError", "algorithms_in",
           "calibrated_runs", "error_stats", "profile_cpus", "refit_problem", "refit_profile",
           "refit_rows", "refit_runs", "rehearsal_text"]

PathLike = str | os.PathLike[str]

JUDGEABLE = names("all_reduce", "plan", "builtin")
"""Every allreduce a profile's rows can hold: distlab's plans and the builtin."""

TARGET_ALGORITHMS = tuple(entry("all_reduce", a).name for a in
                          ("ring", "tree", "recursive_doubling", "rabenseifner", "builtin"))
"""The rows the targets judge (with sizes >= :data:`TARGET_MIN_BYTES`): the four plans whose
steps the calibration prices directly, and the builtin."""
TARGET_MIN_BYTES = MODEL_MIN_BYTES   # the size the profile's verdicts start judging the model at
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
    against ``predicted_us``) from ``model`` (with the row's ``options``, the ones its timed
    calls ran with); the stored values move to ``stored_predicted_us`` / ``stored_error_pct``. A
    row that kept its rounds (``seconds_per_rank``) also gets ``noise_pct`` and ``within_noise``
    (:mod:`distlab.collectives.model.noise`: how far its value could land on a re-run, and whether
    the prediction lies inside that interval); otherwise both are None."""
    out = []
    for row in rows:
        count = int(row["count"])
        itemsize = int(row["nbytes"]) // count if count else 4
        predicted = model.seconds(row["algorithm"], world_size, count, itemsize,
                                  row["options"]) * 1e6
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
        raise RehearsalProfileError(rehearsal_text(profile))
    runs = _calibrated(profile)
    if not runs:
        raise ValueError(_uncalibrated_text(profile))
    return runs


def _calibrated(profile: Profile) -> list[dict[str, Any]]:
    return [r for r in profile.allreduce_runs() if r.get("calibration")]


def rehearsal_text(profile: Profile) -> str:
    """Why no model is judged on the rehearsal ``profile`` (one line)."""
    return (f"profile {profile.path} is a rehearsal of box {profile.rehearsal} (gloo stood in "
            "for NCCL): no model is judged on it")


def _uncalibrated_text(profile: Profile) -> str:
    return (f"profile {profile.path} has no allreduce run with a calibration (its collectives "
            "part did not run, was skipped, or ran with --no-calibrate)")


def _missing_text(source: Profile, key: tuple[str, int], cals: Mapping[Any, Any]) -> str:
    return (f"profile {source.path} has no {key[0]} calibration for world size {key[1]} (it has "
            f"{sorted(cals)})")


def refit_problem(measured: Profile, source: Profile | None = None, *,
                  skip_missing: bool = False) -> str | None:
    """Why :func:`refit_profile` cannot price ``measured`` with ``source``'s calibrations
    (default: its own), in the words it would raise; None when it can. Checked in its order:
    ``source``, then ``measured``, is a rehearsal or has no calibrated allreduce run; a run of
    ``measured`` whose backend and world size ``source`` has no calibration for (unless
    ``skip_missing``)."""
    src = measured if source is None else source
    for profile in ([src] if src is measured else [src, measured]):
        if profile.rehearsal:
            return rehearsal_text(profile)
        if not _calibrated(profile):
            return _uncalibrated_text(profile)
    cals = {(r["backend"], r["world_size"]): r["calibration"] for r in _calibrated(src)}
    for run in _calibrated(measured):
        key = (run["backend"], run["world_size"])
        if key not in cals and not skip_missing:
            return _missing_text(src, key, cals)
    return None


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


def as_profile(profile: PathLike | Profile) -> Profile:
    """``profile`` itself, or the profile folder it names loaded."""
    return profile if isinstance(profile, Profile) else load_profile(profile)


def refit_profile(path: PathLike | Profile, *,
                  calibration_from: PathLike | Profile | None = None,
                  per_size: bool = True, skip_missing: bool = False,
                  statistic: str = "mean") -> list[RefitRun]:
    """Every allreduce run of the profile folder ``path`` priced again (see the module doc).

    Args:
        path: a profile folder (``profile.json`` + ``collectives.json``), or the
            :class:`~distlab.profile.load.Profile` loaded from one (a caller judging many
            pairs loads each profile once).
        calibration_from: another profile folder (or its Profile) whose calibration (same
            backend and world size) prices the rows instead of ``path``'s own: how far the
            model travels.
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
    measured = as_profile(path)
    source = measured if calibration_from is None else as_profile(calibration_from)
    cals = {(r["backend"], r["world_size"]): r["calibration"] for r in calibrated_runs(source)}
    out = []
    for run in calibrated_runs(measured):
        key = (run["backend"], run["world_size"])
        if key not in cals:
            if skip_missing:
                continue
            raise ValueError(_missing_text(source, key, cals))
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

