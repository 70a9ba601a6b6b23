"""The allreduce cost model judged on measurements it was not tuned on (offline, pure).

Top floor but figures: reads profiles (:mod:`distlab.profile.load`) and benchmark results,
prices their rows with :mod:`distlab.collectives.model`, and says how far the model is off.

- :mod:`.refit`: every allreduce row of profile folders priced again from their stored
  calibrations; median / p90 of ``|error%|`` per profile and world size, against the target,
  with how well each row is known (:mod:`distlab.collectives.model.noise`).
- :mod:`.windows`: a long profile cut into shorter ones: how many rounds a judgement needs.
- :mod:`.summary`: medians over repeated ``python -m distlab.bench allreduce --json`` runs.
- :mod:`.tables`: the same judgements as text tables (error by size, travel, spread).
- :mod:`.verdict`: what a judgement says, as numbers a reader can check (runs that meet the
  target, ranges of errors, reruns against each other); notebook 11 asserts its prose with them.

One command runs them: ``python -m distlab.judge {refit,windows,travel,summary} --help``.
Their figures are in :mod:`distlab.viz.refit`.
"""
