"""The cost models judged on measurements and published tables they were not tuned on (offline).

Top floor but figures: reads profiles (:mod:`distlab.profile.load`), benchmark results, published
tables and profiler traces, prices them with :mod:`distlab.collectives.model`, and says how far
the model is off. Three kinds of module:

Pricing and statistics (pure):

- :mod:`.refit`: every allreduce row of a profile priced again from a stored calibration;
  ``|error%|`` statistics (:class:`~distlab.vocabulary.ErrorSummary`), the target, and why a
  profile cannot be priced (:func:`~.refit.refit_problem`).
- :mod:`.refit_summary`: median / p90 of ``|error%|`` per profile and world size, before and
  after, with how well each row is known (:mod:`distlab.collectives.model.noise`).
- :mod:`.windows`: a long profile cut into shorter ones: how many rounds a judgement needs.
- :mod:`.summary`: medians over repeated ``python -m distlab.bench allreduce --json`` runs.
- :mod:`.verdict`: what a judgement says, as numbers a reader can check (runs that meet the
  target, ranges of errors, reruns against each other); notebook 11 asserts its prose with them.
- :mod:`.trace_model`: the NCCL kernels of a profiler trace priced with NCCL's model.
- :mod:`.plan_published`, :mod:`.plan_moe`: the planner (:mod:`distlab.plan`) on published
  training runs, dense and with experts; :mod:`.fit_grid`: the planner on measured GPU runs
  (verify grids).
- :mod:`.trace_judgement` (a run of profiler traces judged: per-rank breakdown, collectives
  priced, :mod:`.pipeline_bubble` a pipeline's bubble and :mod:`.fsdp_exposure` FSDP's exposed
  all-gathers beside their models); :mod:`.demo_parallel` records the committed gloo traces.

Reports (every table through :mod:`distlab.report.table`):

- :mod:`.refit_report`: the refit column sets, its two tables and the lines above them.
- :mod:`.tables`: error by size, travel, spread and windows tables.
- :mod:`.summary_report`: the repeated benchmark runs' medians as tables.
- :mod:`.trace_report`: a trace judgement as the report ``trace`` prints.

Commands (thin: parse options, check their input, print), one per name of
``python -m distlab.judge {refit,windows,travel,summary,verdict,nccl,rccl,trace,plan,fit}
--help``: :mod:`.refit_command`, :mod:`.windows_command`, :mod:`.travel_command`,
:mod:`.summary_command`, :mod:`.verdict_command`, :mod:`.nccl_command` and :mod:`.rccl_command`
(``--published``, ``--boxes``: each library's model on its published tables, the report its own
command prints with ``--judge``: :mod:`distlab.evidence.nccl.judged`,
:mod:`distlab.evidence.rccl.judged`), :mod:`.trace_command`, :mod:`.plan_command` (the planner on
published runs, ``--moe``,
``--refit``) and :mod:`.fit_command` (the planner on measured GPU runs);
:mod:`.profile_args` holds the profile folders they take. NCCL's and RCCL's choice per size are
the models' own commands, ``python -m distlab.nccl`` and ``python -m distlab.rccl``. The
figures are in :mod:`distlab.viz.refit`.
"""
