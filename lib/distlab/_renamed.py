"""Old module paths kept for a release after a rename: the old path is the new module itself.

A shim module at the old path calls :func:`same_module`: importing the old path warns once
(DeprecationWarning) and gives the new module object, and for a package, ``old.X`` gives the
module ``new.X`` itself (a meta-path alias, never a second copy). So ``isinstance`` holds,
classes keep pickling under the new path, and a pickle that names the old path still loads.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["same_module"]


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
