"""The old path of :mod:`distlab.loading` (the data-loading lab, renamed so that it no longer
reads like pipeline parallelism, :mod:`distlab.pipeline_parallel`), kept for one release.

``import distlab.pipeline`` warns once (DeprecationWarning) and gives the module
:mod:`distlab.loading` itself; ``distlab.pipeline.X`` gives the module ``distlab.loading.X``
itself, so classes, ``isinstance`` and pickles are those of :mod:`distlab.loading` (a class
pickled by a process executor is named under ``distlab.loading``; a pickle that names
``distlab.pipeline.X`` still loads).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

OLD = __name__
NEW = "distlab.loading"


class _SameModule(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``distlab.pipeline.X`` as the module ``distlab.loading.X`` (no second copy)."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(OLD + "."):
            return None
        new = NEW + fullname[len(OLD):]
        if new not in sys.modules and importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(NEW + spec.name[len(OLD):])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system has just set the module's __spec__ to the old name's: give it back
        alias = module.__spec__
        if alias is not None and alias.loader is self and alias.loader_state is not None:
            module.__spec__ = alias.loader_state


if not any(isinstance(f, _SameModule) for f in sys.meta_path):
    sys.meta_path.insert(0, _SameModule())

warnings.warn("distlab.pipeline is renamed distlab.loading (pipeline parallelism is "
              "distlab.pipeline_parallel); the old path will be removed",
              DeprecationWarning, stacklevel=2)

sys.modules[OLD] = importlib.import_module(NEW)
