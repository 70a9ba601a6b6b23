"""The collective library of each GPU, as the planner asks it: one lookup from
:attr:`distlab.gpus.Gpu.library` to the model behind
:class:`~distlab.collective_library.CollectiveLibrary` (NCCL's or RCCL's)."""

from __future__ import annotations

from distlab.collective_library import CollectiveLibrary
from distlab.gpus import Gpu
from distlab.nccl.library import NCCL
from distlab.rccl.library import RCCL

__all__ = ["COLLECTIVE_LIBRARIES", "library_of"]

COLLECTIVE_LIBRARIES: dict[str, CollectiveLibrary] = {"nccl": NCCL, "rccl": RCCL}
"""Each library of :data:`distlab.gpus.LIBRARIES`, by name (``tests/test_gpus.py`` checks that
every library the registry names has its model here)."""


def library_of(gpu: Gpu) -> CollectiveLibrary:
    """The model of the library that runs ``gpu``'s collectives."""
    return COLLECTIVE_LIBRARIES[gpu.library]
