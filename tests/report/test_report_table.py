"""report.table: columns right-aligned by default, left where a column says so, and a
left-aligned last column never padded (no line ends in spaces)."""

from __future__ import annotations

from distlab.report.table import Column, format_table


def test_right_is_the_default_and_left_is_asked_per_column() -> None:
    rows = [{"name": "ring", "us": 12.25}, {"name": "recursive", "us": 3.0}]
    text = format_table(rows, (Column("name", "name", align="<"), Column("us", "us", ".1f")))
    assert text.splitlines() == ["name        us",
                                 "ring      12.2",
                                 "recursive  3.0"]
    right = format_table(rows, (Column("name", "name"), Column("us", "us", ".1f")))
    assert right.splitlines()[1] == "     ring 12.2"


def test_a_left_aligned_last_column_is_not_padded() -> None:
    rows = [{"a": 1, "note": "short"}, {"a": 22, "note": "a longer note"}]
    lines = format_table(rows, (Column("a", "a", width=3), Column("note", "note", align="<")))
    assert lines.splitlines() == ["  a note", "  1 short", " 22 a longer note"]
    assert not any(line.endswith(" ") for line in lines.splitlines())
