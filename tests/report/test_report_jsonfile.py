"""report.jsonfile: every result is written with the current schema first, and a reader refuses a
file without it or of another one with one error naming the file, both schemas and the command
that migrates it."""

from __future__ import annotations

import json
import re

import pytest

from distlab.report.jsonfile import (
    MIGRATE_COMMAND,
    SCHEMA_VERSION,
    SchemaError,
    check_schema,
    read_json,
    write_json,
)


def test_written_results_start_with_the_current_schema(tmp_path) -> None:
    path = write_json(tmp_path / "r.json", {"rows": [1], "schema": 99})
    data = json.loads(path.read_text())
    assert list(data) == ["schema", "rows"] and data["schema"] == SCHEMA_VERSION
    assert read_json(path) == {"schema": SCHEMA_VERSION, "rows": [1]}


@pytest.mark.parametrize("document, found", [
    ({"rows": []}, "has no schema field"),
    ({"schema": SCHEMA_VERSION + 1, "rows": []}, f"has schema {SCHEMA_VERSION + 1}"),
    ({"schema": str(SCHEMA_VERSION)}, f"has schema '{SCHEMA_VERSION}'"),
    ({"schema": True}, "has schema True"),
    ([1, 2], "is not a JSON object"),
])
def test_a_result_of_another_schema_is_one_clear_error(tmp_path, document, found) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SchemaError) as info:
        read_json(path)
    message = str(info.value)
    assert message.startswith(f"{path} {found};")
    assert f"reads results of schema {SCHEMA_VERSION};" in message
    assert message.endswith(f"{MIGRATE_COMMAND} {path}") and "\n" not in message
    assert isinstance(info.value, ValueError)


def test_check_schema_returns_the_document_itself() -> None:
    doc = {"schema": SCHEMA_VERSION, "x": 1}
    assert check_schema(doc, "x.json") is doc
    with pytest.raises(SchemaError, match=re.escape("x.json has no schema field")):
        check_schema({"x": 1}, "x.json")
