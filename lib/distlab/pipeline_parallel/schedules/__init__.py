"""torch.distributed.pipelining's seven schedules as pure functions
``(ranks, stages_per_rank, microbatches) -> PipelinePlan``, one module each, named and checked in
:mod:`.registry` (:func:`~.registry.build_plan`)."""
