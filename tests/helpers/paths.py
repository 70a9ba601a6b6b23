"""Where the repository's files are, for tests at any depth of ``tests/``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["LIB", "PROFILES", "RESULTS", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (holds ``lib/``, ``results/``, ``notebooks/``)."""
LIB = ROOT / "lib"
RESULTS = ROOT / "results"
PROFILES = RESULTS / "profiles"
