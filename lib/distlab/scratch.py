"""Scratch folders that do not outlive the process that made them.

Notebooks write shard files and traces for the length of one kernel; they should neither land in
the repository nor pile up in the system's temporary folder run after run (CI executes every
notebook several times).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

__all__ = ["scratch_dir"]


def scratch_dir(prefix: str = "distlab_") -> Path:
    """A new empty folder under the system's temporary folder, removed with everything in it
    when this Python process exits normally (``atexit``: a kernel shut down or restarted from
    JupyterLab, a script's end). A process killed by a signal leaves it behind, as any
    ``tempfile.mkdtemp`` folder.

    Args:
        prefix: the start of the folder's name, so a leftover says where it came from.
    """
    if not isinstance(prefix, str) or "/" in prefix or "\\" in prefix:
        raise ValueError(f"prefix must be a file-name prefix without path separators, "
                         f"got {prefix!r}")
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
