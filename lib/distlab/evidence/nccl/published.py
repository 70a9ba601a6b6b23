"""The published tables the NCCL model is fitted and judged on, shipped with this package.

``data/published.json`` beside this module holds, copied by hand from public sources (each
point with its URL and the line it comes from): ``allreduce_8gpu`` (the 8-GPU allreduce tables
the execution constants are fitted on), ``allreduce_multinode`` (beyond one 8-GPU box: judged
only), ``collectives_8gpu`` (other collectives, and allreduce with an algorithm switched off:
judged only) and ``nccl_choice_8gpu`` (what a source says NCCL chose, size by size), each with
its ``*_about``, and ``*_sources`` / ``*_excluded`` where kept. The model owns these tables; the
profile (:func:`distlab.profile.load.published`) and the judge read them from here.

Read with :func:`distlab.collective_library.load_published` (:mod:`importlib.resources`, so an
installed package, a wheel or a zip, finds them too), the one loader RCCL's tables go through.
"""

from __future__ import annotations

from typing import Any

from distlab.collective_library import load_published

__all__ = ["PUBLISHED_RESOURCE", "published_tables"]

PUBLISHED_RESOURCE = ("distlab.evidence.nccl", "data", "published.json")
"""``(package, folder, file)`` of the published tables for :mod:`importlib.resources`."""


def published_tables() -> dict[str, Any]:
    """The published tables (see the module doc), a fresh dict on every call (JSON: sizes in
    bytes, bus bandwidth in GB/s of 1e9 B/s, times in us)."""
    package, _, name = PUBLISHED_RESOURCE
    return load_published(package, name)
