"""The shared option types and parser: output paths checked before any work, one-line errors,
each default said once in ``--help``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from distlab.cli import options


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """``tmp_path`` holding a file ``f`` and a folder ``d``."""
    (tmp_path / "f").write_text("")
    (tmp_path / "d").mkdir()
    return tmp_path


@pytest.mark.parametrize("rel, kind", [
    ("new.json", "file"), ("a/b/new.json", "file"), ("f", "file"), ("d/new.json", "file"),
    ("new", "dir"), ("a/b/new", "dir"), ("d", "dir"), ("d/new", "dir"),
])
def test_writable_paths_pass_and_nothing_is_created(place: Path, rel: str, kind: str) -> None:
    before = sorted(place.rglob("*"))
    assert options.output_problem(place / rel, kind) is None
    assert sorted(place.rglob("*")) == before, "checking must create nothing"
    assert (place / "f").read_text() == ""


@pytest.mark.parametrize("rel, kind, why", [
    ("f/prof", "dir", "is a file, not a folder"),
    ("f/a/b/prof", "dir", "is a file, not a folder"),
    ("f/x.json", "file", "is a file, not a folder"),
    ("f", "dir", "it is a file, and a folder path is needed"),
    ("d", "file", "it is a folder, and a file path is needed"),
    ("new/", "file", "it is a folder, and a file path is needed"),
])
def test_unwritable_paths_say_why(place: Path, rel: str, kind: str, why: str) -> None:
    text = str(place / rel) + ("/" if rel.endswith("/") else "")
    got = options.output_problem(text, kind)
    assert got is not None and why in got
    if "not a folder" in why:
        assert repr(str(place / "f")) in got, "names the file in the way"
    assert sorted(p.name for p in place.iterdir()) == ["d", "f"]


def test_a_folder_where_nothing_can_be_created() -> None:
    """/proc refuses new entries even to root, where permission bits would not."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    got = options.output_problem("/proc/distlab-nope/x.json", "file")
    assert got is not None and "nothing can be created in '/proc'" in got
    assert options.output_problem("", "dir") == "an empty path"


def test_output_types_raise_one_argparse_message(place: Path) -> None:
    assert options.output_file(str(place / "x.json")) == place / "x.json"
    assert options.output_dir(str(place / "new")) == place / "new"
    with pytest.raises(argparse.ArgumentTypeError, match=r"cannot write to '.*/f/x': '.*/f' is a "
                                                         "file, not a folder"):
        options.output_dir(str(place / "f" / "x"))


def test_parser_error_is_one_line_naming_help(capsys) -> None:
    p = options.parser("prog", "doc")
    p.add_argument("--n", type=options.positive_int, default=1, help="n")
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["--n", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["prog: error: argument --n: invalid value 0: must be >= 1 "
                                "(see --help)"]


def test_a_default_the_help_states_is_not_appended_again() -> None:
    p = options.parser("prog", None)
    p.add_argument("--a", default=(), help="names (default: all of them)")
    p.add_argument("--b", default=3, help="count")
    text = " ".join(p.format_help().split())
    assert "names (default: all of them) --b" in text and "(default: ())" not in text
    assert "count (default: 3)" in text


def test_a_minimum_above_one_is_said_in_the_help() -> None:
    """An option typed ``int_at_least(N)`` with N >= 2 says ``(at least N)`` in the help (the
    refusal is no surprise); N = 1 and a help that states its minimum add nothing."""
    p = options.parser("prog", None)
    p.add_argument("--rounds", type=options.int_at_least(2), default=5, help="timed rounds")
    p.add_argument("--n", type=options.positive_int, default=1, help="count")
    p.add_argument("--k", type=options.int_at_least(3), default=4, help="ways (at least 3)")
    text = " ".join(p.format_help().split())
    assert "timed rounds (at least 2) (default: 5)" in text
    assert "count (default: 1)" in text and "(at least 1)" not in text
    assert text.count("at least 3") == 1
