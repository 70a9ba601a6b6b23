"""NCCL's model from the command line: what NCCL chooses on a GPU box and how long it takes.

Floor 2 (beside :mod:`distlab.bench`): it reads :mod:`distlab.collectives.model.nccl` and prints
through :mod:`distlab.report.table` and :mod:`distlab.cli`. Nothing is measured.

- :mod:`.choice`: the per-size table of one box (NCCL's algorithm, protocol, channels, chunk,
  steps, its own estimate, the predicted measured time, bus bandwidth and what bounds it), for
  an allreduce on one or several nodes or for another collective on one node; and its JSON.
- :mod:`.inventory`: every box, network and NCCL release the model knows, where each constant
  comes from and how the published tables judge it.
- ``python -m distlab.nccl BOX`` / ``python -m distlab.nccl --boxes`` print them
  (:mod:`distlab.nccl.__main__`). The model's error on the published tables is a judgement:
  ``python -m distlab.judge nccl --published``.
"""
