"""The planner: memory per GPU and step time of every data / ZeRO / tensor / pipeline /
context-parallel layout of a decoder transformer on named GPUs, judged on published runs.

``python -m distlab.plan`` is the command; from Python, :func:`price` one layout or
:func:`plan` them all (:mod:`distlab.plan.planner`), a model from :data:`PRESETS`, a dict or
an ``nn.Module`` (:mod:`distlab.transformer`), a :class:`Layout` and :func:`hardware`
(:mod:`distlab.plan.layout`).

The names below are imported from their modules when first read, so ``python -m distlab.plan``
imports what it needs inside the command, where Ctrl-C ends in one line.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "layout": ("GPU_KINDS", "PRECISIONS", "Hardware", "Layout", "hardware", "parse_layout"),
    "model": ("PRESETS", "ModelSpec", "model_spec", "spec_from_module"),
    "planner": ("plan", "price"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """A public name of the package, imported from its module on first use."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
