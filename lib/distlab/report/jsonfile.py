"""Results as JSON files: finite numbers only, parent folders created, one schema version.

Every JSON result distlab writes goes through :func:`write_json`, which puts ``"schema":``
:data:`SCHEMA_VERSION` first in the file; every reader of a result goes through
:func:`read_json` (or :func:`check_schema` on a document it parsed), which refuses a file of
another schema with :class:`SchemaError`, naming the file, the schema found and the one
expected, and the command that brings a file up to date (:data:`MIGRATE_COMMAND`). So a reader
never guesses a field a file lacks: the fields of the current schema are all there.

Chrome trace files (``trace.json``, ``*.pt.trace.json``) are not distlab's schema but Chrome's
trace format, read from other tools too; they carry no ``schema``.
"""

from __future__ import annotations

import json
import math
import os
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

__all__ = ["MIGRATE_COMMAND", "SCHEMA_VERSION", "SchemaError", "check_schema", "read_json",
           "write_json"]

#: The version of the layout of every JSON result distlab writes (the ``schema`` field). Raise
#: it when a field a reader needs is added or changes meaning, and teach
#: ``tools/migrate_results.py`` to fill it in on the committed results.
SCHEMA_VERSION = 2

#: The command (run from a distlab checkout) that brings result files to :data:`SCHEMA_VERSION`.
MIGRATE_COMMAND = "python tools/migrate_results.py"


class SchemaError(ValueError):
    """A result file whose ``schema`` is not :data:`SCHEMA_VERSION` (or that has none)."""


def write_json(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON, creating parent folders; returns the path.

    The file starts with ``"schema": SCHEMA_VERSION`` (a ``schema`` key of ``payload`` is
    replaced: what is written is always the current layout).

    A NaN or infinity anywhere in ``payload`` raises ``ValueError`` naming where it is, and
    nothing is written: a measurement that came out non-finite is a bug to report, not a value
    to store (JSON has no NaN; Python would write a token other readers reject).
    """
    where = _non_finite(payload, "payload")
    if where is not None:
        raise ValueError(f"refusing to write {os.fspath(path)}: {where} is not a finite number; "
                         "results must hold finite values (use None for 'not measured')")
    versioned = {"schema": SCHEMA_VERSION, **{k: v for k, v in payload.items() if k != "schema"}}
    text = json.dumps(versioned, indent=2, sort_keys=False, default=str, allow_nan=False)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")
    return p


def check_schema(document: Any, path: str | os.PathLike[str] | Traversable) -> dict[str, Any]:
    """``document`` (a parsed result file at ``path``) when its ``schema`` is
    :data:`SCHEMA_VERSION`.

    Raises:
        SchemaError: ``document`` is not a JSON object, has no ``schema`` or another one; the
            message names ``path``, the schema found and the one expected, and the command that
            migrates the file.
    """
    found = document.get("schema") if isinstance(document, dict) else None
    if isinstance(document, dict) and type(found) is int and found == SCHEMA_VERSION:
        return document
    what = ("is not a JSON object" if not isinstance(document, dict) else
            "has no schema field" if "schema" not in document else f"has schema {found!r}")
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else str(path)
    raise SchemaError(f"{name} {what}; this distlab reads results of schema {SCHEMA_VERSION}; "
                      f"bring it up to date with: {MIGRATE_COMMAND} {name}")


def read_json(path: str | os.PathLike[str] | Traversable) -> dict[str, Any]:
    """The JSON result at ``path`` (a file, or a package resource), checked by
    :func:`check_schema`.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not JSON (:class:`json.JSONDecodeError`).
        SchemaError: it is not a result of :data:`SCHEMA_VERSION`.
    """
    source = path if isinstance(path, Traversable) else Path(path)
    return check_schema(json.loads(source.read_text()), path)


def _non_finite(value: Any, where: str) -> str | None:
    """The path (``payload['rows'][3]['time_us']``) of the first NaN/inf in ``value``, or None."""
    if isinstance(value, float) or type(value).__name__ in ("float32", "float64", "float16"):
        return None if math.isfinite(float(value)) else f"{where} = {float(value)}"
    if isinstance(value, dict):
        for k, v in value.items():
            found = _non_finite(v, f"{where}[{k!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _non_finite(v, f"{where}[{i}]")
            if found:
                return found
    return None
