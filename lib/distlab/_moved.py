"""Names that moved to another module, kept importable from their old one for a release.

``__getattr__ = moved(__name__, {"judge": "distlab.evidence.rccl.judged"})`` at the end of the
old module: reading an old name there imports its new module by name, warns once per name
(DeprecationWarning) and hands back the same object. The new module is named as a string, so
the old module's own imports stay what its floor allows (``tests/test_import_graph.py`` checks
that every name a module lists as moved exists where it points).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved"]


def moved(old: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` whose ``names`` (name -> the module that now defines
    it) moved; any other name raises AttributeError as usual."""
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        new = names[name]
        if name not in warned:
            warned.add(name)
            warnings.warn(f"{old}.{name} is moved to {new}.{name}; the old path will be removed",
                          DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    __getattr__.moved = dict(names)  # type: ignore[attr-defined]
    return __getattr__
