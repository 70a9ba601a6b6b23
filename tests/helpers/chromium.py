"""Where the Chromium that the real-browser tests drive is: ``$DISTLAB_CHROMIUM`` or
``chromium`` / ``chromium-browser`` on ``PATH`` (Debian: ``apt-get install -y chromium``).
Playwright's own browser download is never used."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["chromium_executable"]


def chromium_executable() -> str | None:
    """The Chromium binary to drive, or None when there is none."""
    explicit = os.environ.get("DISTLAB_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None
