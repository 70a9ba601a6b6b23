"""Old paths and old names kept for a release after a rename or a move: the one place they are
kept.

- A module renamed: a shim module at the old path calls :func:`same_module`: importing the old
  path warns once (DeprecationWarning) and gives the new module object, and for a package,
  ``old.X`` gives the module ``new.X`` itself (a meta-path alias, never a second copy). So
  ``isinstance`` holds, classes keep pickling under the new path, and a pickle that names the
  old path still loads.
- Names renamed inside their module (``__getattr__ = renamed(__name__, globals(), {"Layout":
  "Placement"})``) or moved to another module (``__getattr__ = moved(__name__, {"judge":
  "distlab.evidence.rccl.judged"})``), at the end of the old module: reading an old name warns
  once per name and hands back the same object. A moved name's new module is named as a
  string, so the old module's own imports stay what its floor allows.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["moved", "renamed", "same_module"]


class _SameModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``old.X`` as the module ``new.X`` for every renamed package ``old -> new``."""

    def __init__(self) -> None:
        self.renamed: dict[str, str] = {}

    def _new_name(self, fullname: str) -> str | None:
        for old, new in self.renamed.items():
            if fullname.startswith(old + "."):
                return new + fullname[len(old):]
        return None

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = self._new_name(fullname)
        if new is None or (new not in sys.modules and importlib.util.find_spec(new) is None):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(str(self._new_name(spec.name)))
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system has just set the module's __spec__ to the old name's: give it back
        alias = module.__spec__
        if alias is not None and alias.loader is self and alias.loader_state is not None:
            module.__spec__ = alias.loader_state


def _finder() -> _SameModule:
    for f in sys.meta_path:
        if type(f).__name__ == _SameModule.__name__ and hasattr(f, "renamed"):
            return f  # type: ignore[return-value]
    finder = _SameModule()
    sys.meta_path.insert(0, finder)
    return finder


def same_module(old: str, new: str, why: str = "") -> None:
    """Make the module being imported as ``old`` the module ``new``; call it last in the shim
    at ``old``. Warns once per import of ``old`` (the caller's importer is blamed)."""
    module = importlib.import_module(new)
    if hasattr(module, "__path__"):
        _finder().renamed[old] = new
    warnings.warn(f"{old} is renamed {new}{f' ({why})' if why else ''}; the old path will be "
                  "removed", DeprecationWarning, stacklevel=3)
    sys.modules[old] = module


def _old_names(old: str, names: Mapping[str, str], lookup: Callable[[str], Any],
               said: Callable[[str], str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for module ``old`` whose old ``names`` resolve with ``lookup``
    (warning ``said(name)`` once per name: the names warned of are the hook's ``warned`` set);
    any other name raises AttributeError as usual."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        if name not in __getattr__.warned:  # type: ignore[attr-defined]
            __getattr__.warned.add(name)  # type: ignore[attr-defined]
            warnings.warn(said(name), DeprecationWarning, stacklevel=2)
        return lookup(name)

    __getattr__.warned = set()  # type: ignore[attr-defined]
    return __getattr__


def renamed(old: str, namespace: Mapping[str, Any],
            names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for module ``old`` (its ``namespace``: ``globals()``) whose
    ``names`` (old name -> new name in the same module) were renamed."""
    return _old_names(old, names, lambda name: namespace[names[name]],
                      lambda name: f"{old}.{name} is renamed {names[name]}; the old name will "
                                   "be removed")


def moved(old: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for module ``old`` whose ``names`` (name -> the module that now
    defines it) moved; the mapping is kept as the hook's ``moved`` attribute."""
    hook = _old_names(old, names,
                      lambda name: getattr(importlib.import_module(names[name]), name),
                      lambda name: f"{old}.{name} is moved to {names[name]}.{name}; the old "
                                   "path will be removed")
    hook.moved = dict(names)  # type: ignore[attr-defined]
    return hook
