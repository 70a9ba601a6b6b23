"""The one benchmark harness: a typed config per benchmark -> a report of rows -> one table
printer -> JSON with provenance.

A benchmark is a :class:`Benchmark` subclass with a frozen dataclass config whose fields are its
command-line options (:func:`opt` puts the flag, parser and help beside the default, so the CLI
and the config cannot disagree), a :meth:`Benchmark.check` for rules across options, and a
:meth:`Benchmark.run` that turns a config into a :class:`Report`: tables of rows (each column a
:class:`Column`), comment lines above and below them, and whatever else the JSON should carry.
:func:`run_cli` is every benchmark's ``main``; the profile builds configs and calls
:meth:`Benchmark.run` directly, so no argv string is ever built or parsed between them.

    class SleepConfig(BenchConfig):
        ms: float = opt(1.0, "--ms", type=options.positive_float, help="sleep per call")
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from distlab import launch
from distlab.cli import options
from distlab.report.jsonfile import write_json
from distlab.report.provenance import provenance
from distlab.report.table import Column, Table, format_table

__all__ = ["BenchConfig", "Benchmark", "Column", "Report", "SizeSweepConfig", "Table",
           "build_parser", "format_table", "opt", "parse_config", "print_report", "report_json",
           "run_cli"]


def opt(default: Any, *flags: str, help: str, type: Any = None, choices: Sequence[Any] = (),
        action: str | None = None, metavar: str | None = None, nargs: str | None = None) -> Any:
    """A config field that is also a command-line option (``flags`` empty: a positional).

    ``type`` parses one command-line string (see :mod:`distlab.cli.options`); lists it returns
    are stored as tuples so configs stay immutable. ``action="store_true"`` for switches.
    """
    meta = {"flags": flags, "help": help, "type": type, "choices": tuple(choices),
            "action": action, "metavar": metavar, "nargs": nargs}
    if isinstance(default, list):
        raise TypeError("use a tuple default for a sequence option (configs are frozen)")
    return field(default=default, metadata={"option": meta})


@dataclass(frozen=True)
class BenchConfig:
    """Options every benchmark has. Subclasses add their own fields with :func:`opt`."""

    json: Path | None = opt(None, "--json", metavar="PATH", type=options.output_file,
                            help="also write the results with provenance to this JSON file "
                                 "(checked before anything is measured)")

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON-ready values (tuples as lists, paths as strings)."""
        return {k: list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v
                for k, v in dataclasses.asdict(self).items()}


class SizeSweepConfig:
    """For collective benchmarks whose config has ``minbytes``, ``maxbytes``, ``stepfactor``
    (nccl-tests' -b/-e/-f) and ``world_size`` fields: the swept sizes and the ranks that run."""

    minbytes: int
    maxbytes: int
    stepfactor: int
    world_size: int

    @property
    def sizes(self) -> list[int]:
        """The swept message sizes, bytes."""
        return options.size_sweep(self.minbytes, self.maxbytes, self.stepfactor)

    @property
    def ranks(self) -> int:
        """The world size that runs: torchrun's WORLD_SIZE under torchrun, else ``world_size``."""
        return int(os.environ["WORLD_SIZE"]) if launch.in_torchrun() else self.world_size


@dataclass
class Report:
    """What one run of a benchmark produced.

    Attributes:
        tables: the tables, the main one first (its rows are the JSON's ``rows``).
        head: comment lines printed above the tables (without the leading ``# ``).
        tail: comment lines printed below them (targets, ratios, notes).
        data: everything else the JSON carries (calibration, fits, raw runs...).
        extra: what callers in this process may use but the JSON leaves out (per-call spans
            for the profile's trace).
        failed: why the run counts as failed (wrong results, a missed ``--check`` target), or
            "" when it did not; the command then exits 1.
        backend, world_size: for the provenance.
    """

    tables: list[Table]
    head: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    failed: str = ""
    backend: str | None = None
    world_size: int | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The main table's rows."""
        return self.tables[0].rows if self.tables else []


C = TypeVar("C", bound=BenchConfig)


class Benchmark(ABC, Generic[C]):
    """One benchmark: its name, one-line description, config type and run; its help text is
    the docstring of the module that defines it."""

    name: ClassVar[str]
    about: ClassVar[str]
    config_type: ClassVar[type]

    @property
    def doc(self) -> str:
        """The defining module's docstring (the command's ``--help`` text)."""
        return sys.modules[type(self).__module__].__doc__ or self.about

    def check(self, parser: argparse.ArgumentParser, config: C) -> C:
        """Rules across options (exit 2 via :func:`distlab.cli.options.fail`); returns the
        config, possibly completed. Default: none."""
        return config

    @abstractmethod
    def run(self, config: C) -> Report:
        """Measure; never prints the table (the harness does)."""


def build_parser(bench: Benchmark[Any]) -> argparse.ArgumentParser:
    """The argparse parser of a benchmark, made from its config's fields."""
    p = options.parser(f"python -m distlab.bench {bench.name}", bench.doc)
    for f in dataclasses.fields(bench.config_type):
        meta = f.metadata.get("option")
        if meta is None:
            continue
        default = f.default
        if isinstance(default, tuple) and default and meta["type"] is not None:
            everything = getattr(meta["type"], "choices", None)
            word = getattr(meta["type"], "all_word", None)
            named = [g for g, members in getattr(meta["type"], "groups", {}).items()
                     if tuple(members) == default]
            # shown as a user types it; argparse parses a string default with the option's type
            default = word if word and default == everything else \
                named[0] if named else ",".join(map(str, default))
        kw: dict[str, Any] = {"help": meta["help"], "default": default}
        if meta["action"]:
            kw["action"] = meta["action"]
        else:
            for key in ("type", "metavar", "nargs"):
                if meta[key] is not None:
                    kw[key] = meta[key]
            if meta["choices"]:
                kw["choices"] = meta["choices"]
        if meta["flags"]:
            p.add_argument(*meta["flags"], dest=f.name, **kw)
        else:
            kw.pop("default")
            p.add_argument(f.name, **kw)
    return p


def _config_from(bench: Benchmark[C], ns: argparse.Namespace) -> C:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(ns).items()}
    return bench.config_type(**values)


def parse_config(bench: Benchmark[C], argv: Sequence[str]) -> C:
    """The checked config for a command line (a bad option, or a ``--json`` path that cannot
    be written, exits 2 with one line)."""
    p = build_parser(bench)
    return bench.check(p, _config_from(bench, p.parse_args(list(argv))))


def print_report(report: Report, file: Any = None) -> None:
    """Head comments, every table, tail comments."""
    out = sys.stdout if file is None else file
    for line in report.head:
        print(f"# {line}", file=out)
    for table in report.tables:
        print(table.text(), file=out)
    for line in report.tail:
        print(f"# {line}", file=out)


def report_json(bench: Benchmark[Any], config: BenchConfig, report: Report) -> dict[str, Any]:
    """The JSON document of a run: benchmark, provenance, config, rows, extra tables, data."""
    doc: dict[str, Any] = {
        "benchmark": bench.name,
        "provenance": provenance(backend=report.backend, world_size=report.world_size),
        "config": config.to_dict(), "rows": report.rows}
    for i, table in enumerate(report.tables[1:], start=1):
        doc[table.key or f"table{i}"] = table.rows
    doc.update(report.data)
    return doc


def run_cli(bench: Benchmark[Any], argv: Sequence[str] | None = None) -> int:
    """Every benchmark's ``main``: parse, run, print, write JSON; the exit status (0, or 1 when
    the report says it failed). Under torchrun only rank 0 prints and writes."""
    config = parse_config(bench, sys.argv[1:] if argv is None else argv)
    report = bench.run(config)
    if launch.in_torchrun() and int(os.environ.get("RANK", "0")) != 0:
        return 1 if report.failed else 0
    print_report(report)
    if config.json:
        path = write_json(config.json, report_json(bench, config, report))
        print(f"# wrote {path}")
    if report.failed:
        print(f"# FAILED: {report.failed}")
        return 1
    return 0
