"""Results as JSON files: finite numbers only, parent folders created."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["write_json"]


def write_json(path: str | os.PathLike[str], payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON, creating parent folders; returns the path.

    A NaN or infinity anywhere in ``payload`` raises ``ValueError`` naming where it is, and
    nothing is written: a measurement that came out non-finite is a bug to report, not a value
    to store (JSON has no NaN; Python would write a token other readers reject).
    """
    where = _non_finite(payload, "payload")
    if where is not None:
        raise ValueError(f"refusing to write {os.fspath(path)}: {where} is not a finite number; "
                         "results must hold finite values (use None for 'not measured')")
    text = json.dumps(payload, indent=2, sort_keys=False, default=str, allow_nan=False)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")
    return p


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
