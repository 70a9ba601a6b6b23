"""Bring result files to the current results schema (``distlab.report.jsonfile.SCHEMA_VERSION``).

    python tools/migrate_results.py              # every committed result and the package's data
    python tools/migrate_results.py PATH ...     # these files, or the JSON files under folders
    python tools/migrate_results.py --check      # say what would change; exit 1 if anything

A file is brought from its schema (none: 0) to the current one by the steps of
:data:`MIGRATIONS`, one version at a time, and written with ``write_json`` (which puts
``"schema"`` first); a file already at the current schema is left as it is, so a second run
changes nothing. A profile folder whose JSON changed gets its ``summary.md`` made again
(``distlab.profile.writer.rewrite_summary``), so it stays the one the library makes. Chrome
traces (a ``traceEvents`` list: ``trace.json`` of a profile) are Chrome's format, not
distlab's: they are skipped. A file of a schema newer than this distlab's is an error.

Schema 0 -> 1 fills in, where a file lacks it:

- every calibration (a ``calibration`` object with ``alpha``, ``beta``, ``gamma``):
  ``statistic`` ``"median"`` (its points were medians over rounds);
- the calibrations of a profile's collectives part: ``cpus_allowed``, the CPUs its ranks could
  run on (the part's provenance ``cpus_allowed`` or ``cpu_cores``, else the profile index's),
  and ``local_world_size``, the run's world size (every rank on one host);
- a profile's collectives run of one rank (an NCCL "allreduce" on one GPU, which moves
  nothing): out of ``runs`` and into ``skipped`` with the reason a profile gives today;
- allreduce and collective benchmark rows: ``executor`` (``"builtin"`` for the backend's own
  call, ``"python"`` for distlab's algorithms, the one executor there was); allreduce rows:
  ``options`` ``{}`` (the algorithm's defaults) and, where they kept their rounds
  (``seconds_per_rank``), ``mean_us``, the mean over rounds of the slowest rank;
- ``bench pipeline`` rows: ``startup_s`` None (not measured).

Schema 1 -> 2: every error is :func:`distlab.vocabulary.error_pct`, the measured time against the
model's, in percent (positive: slower than the model), named ``..._pct``. Recomputed from the
row's own measured and modelled numbers:

- ``bench pipeline`` rows: ``sim_err`` ((sim - wall) / wall, a fraction) -> ``sim_error_pct``
  ((wall - sim) / sim), ``sim_err_no_hop`` -> ``sim_error_pct_no_hop``;
- ``bench ddp`` rows: ``error`` ((predicted - step) / step) -> ``error_pct``;
- transfer lab rows: ``error`` ((GB/s - model) / model) -> ``error_pct``
  (:func:`~distlab.vocabulary.bandwidth_error_pct`), and the targets' worst model error per path
  ``max_error`` -> ``max_error_pct``, recomputed from the rows beside it (``met`` again against
  10%);
- ``bench images`` rows: ``model_err`` and ``model_err_without`` (already (model - measured) /
  measured images/s, a rate's error) times 100 -> ``model_error_pct``,
  ``model_error_pct_without``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from distlab.bench.allreduce_ranks import slowest_rank_mean
from distlab.bench.transfers import targets as transfer_targets
from distlab.collectives.algorithms.registry import BUILTIN
from distlab.devices import nccl_problem
from distlab.profile.writer import INDEX, rewrite_summary
from distlab.report.jsonfile import SCHEMA_VERSION, write_json
from distlab.transfers.sweep import Row as TransferRow
from distlab.vocabulary import bandwidth_error_pct, error_pct

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DATA = (REPO / "lib/distlab/data/allreduce_calibration.json",
                REPO / "lib/distlab/nccl/execution_calibration.json",
                REPO / "lib/distlab/plan/data/kernels_h200.json",
                REPO / "lib/distlab/plan/data/kernels_h100.json")
"""The package's data files distlab writes (``published.json`` is written by hand: not here)."""

Document = dict[str, Any]


def _calibrations(doc: Any) -> Iterator[dict[str, Any]]:
    """Every ``calibration`` object (with alpha, beta, gamma) anywhere in ``doc``."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "calibration" and isinstance(value, dict) \
                    and {"alpha", "beta", "gamma"} <= value.keys():
                yield value
            else:
                yield from _calibrations(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _calibrations(value)


def _profile_cpus(part: Document, index: Document | None) -> int | None:
    """The CPUs a profile's ranks could run on: ``cpus_allowed``, else ``cpu_cores``, of the
    part's provenance, else of the index's; None when neither records one."""
    for prov in (part.get("provenance") or {}, (index or {}).get("provenance") or {}):
        for key in ("cpus_allowed", "cpu_cores"):
            value = prov.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _one_rank_skip(run: Document, env: Document | None) -> dict[str, str]:
    """The ``skipped`` entry a profile writes today instead of a run of one rank."""
    backend = str(run["backend"])
    if backend != "nccl":
        return {"what": f"collectives/{backend} ws{run['world_size']}",
                "why": "an allreduce needs at least 2 ranks"}
    facts = (env or {}).get("facts") or {}
    why = nccl_problem(len(facts.get("gpus") or []), 1, 1, nccl_built=bool(facts.get("nccl", True)),
                       torch_version=str(facts.get("torch", "")))
    return {"what": "collectives/nccl", "why": why}


def _fill_rows(rows: Iterable[Document], *, allreduce: bool) -> None:
    for row in rows:
        row.setdefault("executor", BUILTIN if row["algorithm"] == BUILTIN else "python")
        if allreduce:
            row.setdefault("options", {})
            if "mean_us" not in row and row.get("seconds_per_rank"):
                row["mean_us"] = slowest_rank_mean(row["seconds_per_rank"]) * 1e6


def _to_1(doc: Document, folder: Path) -> Document:
    """Schema 0 -> 1 (see the module docstring); ``folder`` holds the file (a profile's index
    and env part are read from it)."""
    for cal in _calibrations(doc):
        cal.setdefault("statistic", "median")
    if doc.get("part") == "collectives":
        index = _read_plain(folder / INDEX)
        cpus = _profile_cpus(doc, index)
        kept = []
        for run in doc.get("runs", []):
            if run["world_size"] < 2:
                doc.setdefault("skipped", []).append(_one_rank_skip(run, _read_plain(
                    folder / "env.json")))
                continue
            kept.append(run)
        doc["runs"] = kept
        for run in doc["runs"] + doc.get("collective_runs", []):
            cal = run.get("calibration")
            if cal and cpus is not None:
                if not cal.get("cpus_allowed"):
                    cal["cpus_allowed"] = cpus
                if not cal.get("local_world_size"):
                    cal["local_world_size"] = int(run["world_size"])
        for run in doc["runs"]:
            _fill_rows(run["rows"], allreduce=True)
        for run in doc.get("collective_runs", []):
            _fill_rows(run["rows"], allreduce=False)
    elif doc.get("benchmark") == "collective":
        _fill_rows(doc["rows"], allreduce=False)
    elif doc.get("benchmark") == "allreduce" or (
            "benchmark" not in doc and "calibration" in doc and "rows" in doc):
        _fill_rows(doc["rows"], allreduce=True)   # `bench allreduce --json`, older layout too
    if "stage_costs_s_measured_sync" in doc:      # `bench pipeline --json`
        for row in doc["rows"]:
            row.setdefault("startup_s", None)
    return doc


def _dicts(doc: Any) -> Iterator[dict[str, Any]]:
    """Every dict in ``doc`` (itself included), parents before children."""
    if isinstance(doc, dict):
        yield doc
        for value in list(doc.values()):
            yield from _dicts(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _dicts(value)


def _time_error(measured: Any, model: Any) -> float | None:
    return error_pct(measured, model) if measured and model and model > 0 else None


def _to_2(doc: Document, folder: Path) -> Document:
    """Schema 1 -> 2: every error is :func:`distlab.vocabulary.error_pct` in percent (see the
    module docstring)."""
    del folder
    for d in _dicts(doc):
        if "sim_err" in d:                         # `bench pipeline` rows: (sim - wall) / wall
            del d["sim_err"]
            d["sim_error_pct"] = _time_error(d.get("wall_s"), d.get("sim_s"))
        if "sim_err_no_hop" in d:
            del d["sim_err_no_hop"]
            d["sim_error_pct_no_hop"] = _time_error(d.get("wall_s"), d.get("sim_s_no_hop"))
        if "model_err" in d:                       # `bench images` rows: already a rate's error
            e = d.pop("model_err")
            d["model_error_pct"] = None if e is None else 100.0 * e
        if "model_err_without" in d:
            d["model_error_pct_without"] = {k: None if e is None else 100.0 * e
                                            for k, e in d.pop("model_err_without").items()}
        if "error" in d and "predicted_step_s" in d:   # `bench ddp` rows: (model - step) / step
            del d["error"]
            d["error_pct"] = _time_error(d.get("step_s"), d.get("predicted_step_s"))
        if "error" in d and "model_gbps" in d:     # transfer rows: (GB/s - model) / model
            del d["error"]
            d["error_pct"] = (bandwidth_error_pct(d["gbps"], d["model_gbps"])
                              if d.get("gbps") and d.get("model_gbps") else None)
        targets = d.get("targets")
        if isinstance(targets, dict) and "model_max_error_ge_64KiB" in targets \
                and isinstance(d.get("rows"), list):   # the transfer lab's targets, again
            fields = {f.name for f in dataclasses.fields(TransferRow)}
            again = transfer_targets([TransferRow(**{k: v for k, v in r.items() if k in fields})
                                      for r in d["rows"]])
            targets["model_max_error_ge_64KiB"] = again["model_max_error_ge_64KiB"]
    return doc


MIGRATIONS: dict[int, Callable[[Document, Path], Document]] = {0: _to_1, 1: _to_2}
"""``version -> step`` bringing a document of that schema to the next one."""


def _read_plain(path: Path) -> Document | None:
    """A JSON file read without a schema check (None when absent): a migration reads files of
    every schema."""
    return json.loads(path.read_text()) if path.is_file() else None


def is_chrome_trace(doc: Any) -> bool:
    """Whether ``doc`` is a Chrome trace (Chrome's format: never migrated)."""
    return isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)


def migrated(doc: Document, folder: Path) -> Document:
    """``doc`` (a result of any schema up to the current one) at :data:`SCHEMA_VERSION`: a copy
    with every step from its schema on applied, ``schema`` set.

    Raises:
        ValueError: its schema is not an int between 0 and the current one.
    """
    version = doc.get("schema", 0)
    if type(version) is not int or not 0 <= version <= SCHEMA_VERSION:
        raise ValueError(f"schema {version!r}: this distlab knows schemas 0 to {SCHEMA_VERSION}")
    out = copy.deepcopy(doc)
    for step in range(version, SCHEMA_VERSION):
        out = MIGRATIONS[step](out, folder)
    out["schema"] = SCHEMA_VERSION
    return out


def committed_files(repo: Path = REPO) -> list[Path]:
    """Every committed result (``results/**/*.json``) and the package data distlab writes."""
    return sorted((repo / "results").rglob("*.json")) + [p for p in PACKAGE_DATA if p.is_file()]


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.rglob("*.json"))
        elif p.is_file():
            out.append(p)
        else:
            raise ValueError(f"{p}: no such file or folder")
    return out


def migrate_files(paths: Iterable[Path], *, write: bool = True) -> list[Path]:
    """Migrate ``paths`` (files; a profile folder's ``profile.json`` first, since its parts read
    it); returns the files that changed (with ``write=False``: that would change). Each file is
    written at most once; a profile folder whose JSON changed gets its summary made again."""
    files = sorted(paths, key=lambda p: (p.parent, p.name != INDEX, p.name))
    changed: list[Path] = []
    for path in files:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or is_chrome_trace(doc):
            continue
        try:
            new = migrated(doc, path.parent)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        if new == doc and list(new) == list(doc):
            continue
        changed.append(path)
        if write:
            write_json(path, new)
    if write:
        for folder in sorted({p.parent for p in changed}):
            if (folder / INDEX).is_file() and (folder / "summary.md").is_file():
                rewrite_summary(folder)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path,
                        help="files or folders (default: results/ and the package data)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list the files that would change, exit 1 if any")
    args = parser.parse_args(argv)
    try:
        files = _files(args.paths) if args.paths else committed_files()
        changed = migrate_files(files, write=not args.check)
    except ValueError as exc:
        print(f"migrate_results: {exc}", file=sys.stderr)
        return 2
    verb = "would change" if args.check else "migrated"
    for p in changed:
        print(f"{verb} {p}")
    print(f"{len(changed)} of {len(files)} files {verb} (schema {SCHEMA_VERSION})")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
