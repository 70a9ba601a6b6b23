"""The one benchmark harness: every benchmark's options come from its typed config, one table
printer, one JSON layout with provenance, one exit-status rule."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from distlab.bench import harness
from distlab.bench.__main__ import MODULES
from distlab.bench.harness import BenchConfig, Benchmark, Report, opt, parse_config, run_cli
from distlab.report.table import Column, Table, format_table

BENCHES = [importlib.import_module(m).BENCHMARK for m in MODULES.values()]


@pytest.mark.parametrize("bench", BENCHES, ids=[b.name for b in BENCHES])
def test_cli_defaults_are_the_config_defaults(bench: Benchmark) -> None:
    """Parsing no option gives exactly the dataclass defaults, so a profile that builds the config
    directly and a user on the command line get the same run."""
    assert parse_config(bench, []) == bench.config_type()


@pytest.mark.parametrize("bench", BENCHES, ids=[b.name for b in BENCHES])
def test_every_option_has_help_and_shows_its_default(bench: Benchmark, capsys) -> None:
    parser = harness.build_parser(bench)
    text = " ".join(parser.format_help().split())
    fields = {f.name for f in dataclasses.fields(bench.config_type)}
    dests = {a.dest for a in parser._actions if a.dest != "help"}
    assert dests == fields, "every config field is an option and nothing else"
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{bench.name}: {action.dest} has no help"
        if action.option_strings and action.default not in (None, False, ()):
            assert f"(default: {action.default})" in text, (bench.name, action.dest)
        kind = getattr(action.type, "__name__", "")   # options.int_at_least(N) is "int>=N"
        minimum = int(kind[len("int>="):]) if kind.startswith("int>=") else 1
        if minimum >= 2:   # e.g. --rounds: a refusal the help announces
            assert f"at least {minimum}" in " ".join(parser._get_formatter()._format_action(
                action).split()), (bench.name, action.dest)
    assert bench.about and bench.doc.strip().splitlines()[0]


def test_format_table_aligns_and_prints_missing_values_as_a_dash() -> None:
    cols = (Column("name", "n"), Column("t(ms)", "t", ".2f", 1e3), Column("x", "x", "+.1f"))
    text = format_table([{"n": "a", "t": 0.0015, "x": None},
                         {"n": "long", "t": float("nan"), "x": 2.0}], cols)
    lines = text.splitlines()
    assert lines == [("name t(ms)    x"), ("   a  1.50    -"), ("long     - +2.0")]
    assert len({len(line) for line in lines}) == 1


@dataclasses.dataclass(frozen=True)
class _Cfg(BenchConfig):
    k: int = opt(2, "--k", type=int, help="how many rows")
    fail: bool = opt(False, "--fail", action="store_true", help="report a failure")


class _Fake(Benchmark[_Cfg]):
    name = "fake"
    about = "a benchmark for the harness test"
    config_type = _Cfg

    def run(self, config: _Cfg) -> Report:
        rows = [{"i": i, "s": i / 10} for i in range(config.k)]
        return Report([Table(rows, (Column("i", "i"), Column("s", "s", ".1f"))),
                       Table([{"i": 9}], (Column("i", "i"),), "more", "more_rows")],
                      ["head line"], ["tail line"], {"extra": 1}, {"not": "written"},
                      failed="it failed" if config.fail else "", world_size=1)


def test_run_cli_prints_writes_json_and_sets_the_exit_status(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    assert run_cli(_Fake(), ["--k", "3", "--json", str(out)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "# head line" and text[1].split() == ["i", "s"] and text[-2] == "# tail line"
    assert "# more" in text
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "fake" and doc["config"] == {"json": str(out), "k": 3,
                                                             "fail": False}
    assert doc["rows"] == [{"i": 0, "s": 0.0}, {"i": 1, "s": 0.1}, {"i": 2, "s": 0.2}]
    assert doc["more_rows"] == [{"i": 9}] and doc["extra"] == 1 and "not" not in doc
    assert {"host", "torch", "date", "command"} <= set(doc["provenance"])
    assert run_cli(_Fake(), ["--fail"]) == 1
    assert "# FAILED: it failed" in capsys.readouterr().out


def test_bad_json_path_and_bad_option_exit_2(tmp_path) -> None:
    for argv in (["--json", str(tmp_path)], ["--k", "x"]):
        with pytest.raises(SystemExit) as exc:
            parse_config(_Fake(), argv)
        assert exc.value.code == 2


def test_sequence_options_need_tuple_defaults() -> None:
    with pytest.raises(TypeError, match="tuple"):
        opt([1], "--x", help="a list default would be shared and mutable")
