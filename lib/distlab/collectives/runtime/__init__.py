"""The runtime of the collectives: schedules executed on real ``torch.distributed`` ranks.

:mod:`.execute` (``run_schedule``, ``all_reduce``), :mod:`.peercheck` (mismatched calls caught
before they hang), :mod:`.rounds` (calibration on live ranks), :mod:`.group` (process-group
helpers). The plans they run (:mod:`distlab.collectives`' other modules) never import this
package or ``torch.distributed``.
"""
