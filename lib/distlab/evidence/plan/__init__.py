"""The planner's evidence: published training runs (:mod:`.published`, :mod:`.published_moe`)
as the planner's inputs (:mod:`.runs`), the compute rate fitted on them (:mod:`.fit_rate`) and
the planner judged on them (:mod:`.judged`, :mod:`.judged_moe`)."""
