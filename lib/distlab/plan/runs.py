"""The old path of :mod:`distlab.evidence.plan.runs`,
kept for a release: importing it warns once (DeprecationWarning) and hands back the new
module itself (evidence apart from models, docs/DESIGN.md)."""

from __future__ import annotations

import importlib
import sys
import warnings

warnings.warn("distlab.plan.runs is moved to "
              "distlab.evidence.plan.runs; "
              "the old path will be removed", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module(
    "distlab.evidence.plan.runs")
