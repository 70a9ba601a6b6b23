"""The scripts of ``tools/`` (not a package) imported as modules by their tests."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from helpers.paths import ROOT

__all__ = ["load_tool"]


def load_tool(name: str) -> ModuleType:
    """``tools/<name>.py`` as the module ``name`` (registered in ``sys.modules``, so dataclasses
    and pickling inside it work)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
