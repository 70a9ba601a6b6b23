"""The runtime of the collectives: schedules executed on real ``torch.distributed`` ranks.

:mod:`distlab.collectives.runtime.execute` (``run_schedule``, ``all_reduce``),
:mod:`distlab.collectives.runtime.peercheck` (mismatched calls caught before they hang),
:mod:`distlab.collectives.runtime.rounds` (calibration on live ranks),
:mod:`distlab.collectives.runtime.group` (process-group helpers),
:mod:`distlab.collectives.runtime.by_name` (a collective on a plan or torch's built-in, chosen
by name). The plans they run
(:mod:`distlab.collectives`' other modules) never import this package or ``torch.distributed``.
"""
