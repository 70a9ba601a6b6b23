"""Hogwild: several processes training one ``share_memory()`` model without locks, measured.

Modules: ``task`` (a seeded regression task and its small MLP), ``lost`` (counting updates that
were overwritten: pure), ``worker`` (the training loop a spawned process runs), ``run`` (spawn,
time, gather: :func:`~distlab.hogwild.run.run_hogwild`), ``findings`` (what a set of runs shows,
in words computed from them: pure).
"""

from distlab.hogwild.findings import findings
from distlab.hogwild.lost import LostUpdates, missed_elements, witness_lost
from distlab.hogwild.run import HogwildResult, run_hogwild
from distlab.hogwild.task import Task

__all__ = ["HogwildResult", "LostUpdates", "Task", "findings", "missed_elements", "run_hogwild",
           "witness_lost"]
