"""Where the repository's files are, for tests at any depth of ``tests/``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["LIB", "MEASURED_PROFILES", "PROFILES", "RESULTS", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (holds ``lib/``, ``results/``, ``notebooks/``)."""
LIB = ROOT / "lib"
RESULTS = ROOT / "results"
PROFILES = RESULTS / "profiles"


def _measured_profiles() -> list[Path]:
    import json

    out = []
    for folder in sorted(PROFILES.iterdir()):
        index = folder / "profile.json"
        if index.is_file() and not json.loads(index.read_text()).get("rehearsal"):
            out.append(folder)
    return out


MEASURED_PROFILES: list[Path] = _measured_profiles()
"""The committed profile folders a machine measured: every one but the rehearsals
(``--rehearse``, where host memory stood in for GPUs and gloo for NCCL)."""
