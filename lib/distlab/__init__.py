"""distlab: show, measure and model how distributed training moves data.

Subpackages (see the notebooks for a guided tour):

- :mod:`distlab.launch`: run a function on N local ``torch.distributed`` ranks (or under torchrun).
- :mod:`distlab.samplers`: torch- and libtorch-identical distributed samplers, the assignment model.
- :mod:`distlab.collectives`: allreduce algorithms as schedules; simulate, execute, cost.
- :mod:`distlab.pipeline`: loading stages, executors, the async part loader and its model.
- :mod:`distlab.hogwild`: processes training one ``share_memory()`` model without locks, lost
  updates counted.
- :mod:`distlab.timeline`: one span type for everything we time; Gantt and Chrome trace.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
