"""A profile folder as ``python -m distlab.profile`` leaves it after Ctrl-C, for tests: a copy
of a committed profile whose collectives part was interrupted, whose ddp part never ran, and
whose trace was not written; ``profile.json`` says it is incomplete and why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helpers.paths import PROFILES

__all__ = ["STOPPED", "incomplete_profile"]

#: The reason the profiler writes when Ctrl-C stops it.
STOPPED = "interrupted by Ctrl-C"


def incomplete_profile(dest: Path, source: str = "vm-2026-11-23") -> Path:
    """Copy committed profile ``source`` to ``dest`` and cut it as Ctrl-C during the
    collectives part would: env and transfers kept, collectives ``interrupted`` (no file), ddp
    ``not run``, no ``trace.json``, the index marked incomplete. Returns ``dest``."""
    shutil.copytree(PROFILES / source, dest)
    for name in ("collectives.json", "ddp.json", "trace.json"):
        (dest / name).unlink(missing_ok=True)
    index = json.loads((dest / "profile.json").read_text())
    index["complete"] = False
    index["stopped"] = STOPPED
    index["parts"]["collectives"] = {"status": "interrupted", "reason": STOPPED,
                                     "file": "collectives.json", "seconds": 12.0}
    index["parts"]["ddp"] = {"status": "not run", "reason": STOPPED}
    (dest / "profile.json").write_text(json.dumps(index, indent=1))
    return dest
