"""NCCL's collectives on GPU boxes we cannot reach: what NCCL chooses, how long it runs, and the
command that prints both. One package: the model, its data, its command and its inventory.

Floor 1 (beside the labs): it imports only the core (:mod:`distlab.report`, :mod:`distlab.cli`,
:mod:`distlab.vocabulary`); the planner, the benchmarks, the trace judge and the figures build
on it. Nothing here measures.

The model: two models side by side, NCCL's own tuning model (what it estimates, to choose an
algorithm and protocol per size) and the measured-time model (what a run then takes), both pure
functions of a box, a world size, the sizes and an NCCL release.

- :mod:`.boxes`: the GPU boxes (:class:`~.boxes.GpuBox`, resolved once at each public function
  from a name) and the graphs NCCL's topology search finds on them.
- :mod:`.versions`: the constants that changed between NCCL 2.18 and 2.30, per release; a
  release the model does not hold is priced with its neighbour, and says so.
- :mod:`.tuning`: NCCL's tuning model, term by term, and its choice per size.
- :mod:`.per_size`: the one per-size pipeline (channels, chunk, steps, latency, host term) that
  every execution model below runs, and the shipped constants.
- :mod:`.execution` (allreduce on one node, and the public :func:`~.execution.nccl_execution`),
  :mod:`.multinode` (allreduce across nodes: networks, graphs, tuning), :mod:`.family`
  (all-gather, reduce-scatter, broadcast on one node): each lays a size out and calls the
  pipeline.
- the shipped constants: the three no NCCL file states (``execution_calibration.json``) and
  all-to-all's (``alltoall_calibration.json``). The published tables they are fitted on, the
  fits and the judgement are the model's evidence, apart in :mod:`distlab.evidence.nccl`
  (no module here reads a published table; a test refits the constants there and compares).

- :mod:`.library`: the model behind the one collective-library interface
  (:class:`distlab.collective_library.CollectiveLibrary`, :data:`~.library.NCCL`): what the
  planner and the trace judge ask, the same types and units as RCCL's
  (:mod:`distlab.rccl.library`). Files are named as RCCL's are: :mod:`.tuning` (the library's
  own tuning model), :mod:`.lines` (the per-size table), :mod:`.execution`, :mod:`.boxes`,
  :mod:`.library`.

The command (``python -m distlab.nccl BOX`` / ``--boxes``, :mod:`distlab.nccl.__main__`):

- :mod:`.lines`: the per-size table of one box (NCCL's algorithm, protocol, channels, chunk,
  steps, its own estimate, the predicted measured time, bus bandwidth and what bounds it), for
  an allreduce on one or several nodes or for another collective on one node; and its JSON.
- ``--judge`` and ``--boxes`` print the model's evidence (:mod:`distlab.evidence.nccl.judged`,
  :mod:`distlab.evidence.nccl.inventory`: every box, network and NCCL release the model knows,
  where each constant comes from and how the published tables judge it).

Errors are :func:`distlab.vocabulary.error_pct`: (measured - model) / model of times. The
model's error on the published tables is a judgement: ``python -m distlab.judge nccl
--published``.
"""
