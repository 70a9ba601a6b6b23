"""``python -m distlab.profile``: measure what this machine supports into one profile folder.

    python -m distlab.profile --quick                      # gloo, small sizes, a few minutes
    python -m distlab.profile --only env,collectives --out results/profiles/mybox
    torchrun --nproc-per-node 8 -m distlab.profile         # one rank per GPU; rank 0 writes

A profile folder holds ``profile.json`` (index: provenance, which parts ran, complete or not),
one ``<part>.json`` per part with provenance, ``trace.json`` (a Chrome trace of every timed call,
one lane per part and step) and ``summary.md`` (headline figures). :mod:`distlab.profile.load`
reads it back for notebook 07.
"""

from __future__ import annotations

from distlab.profile.parts import PART_NAMES, PartContext, PartResult

__all__ = ["PART_NAMES", "PartContext", "PartResult"]
