"""Pipeline plans run on real ranks, with torch.distributed.pipelining's API.

:class:`PipelineStage` and the schedule classes take the arguments of torch's classes of the
same names, so a torch pipelining script runs with its import changed only::

    from distlab.pipeline_parallel.runtime import PipelineStage, ScheduleGPipe

Each schedule runs its :class:`~distlab.pipeline_parallel.plan.PipelinePlan` (the registry's, or
any plan through :class:`PlanSchedule`): per rank, the plan's actions in order, tensors moved
with ``torch.distributed`` isend/irecv on a process group whose timeout bounds every wait, and
hand-overs in memory between stages on one rank. Modules, one concept each: :mod:`.microbatch`
(the batch cut and merged), :mod:`.p2p` (metadata, tags, bounded waits), :mod:`.backward` (``B``,
and ``I``/``W`` split on autograd), :mod:`.stage`, :mod:`.executor` (one rank's step, timeline
spans), :mod:`.measure` (peak activation bytes, step stats), :mod:`.schedules`.
"""

from distlab.pipeline_parallel.runtime.measure import StepStats
from distlab.pipeline_parallel.runtime.microbatch import merge_outputs, split_batch, split_target
from distlab.pipeline_parallel.runtime.p2p import PipelineCommError
from distlab.pipeline_parallel.runtime.schedules import (
    DEFAULT_TIMEOUT_S,
    PipelineScheduleMulti,
    PipelineScheduleSingle,
    PlanSchedule,
    Schedule1F1B,
    ScheduleDualPipeV,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
    ScheduleLoopedBFS,
    ScheduleZBVZeroBubble,
    get_schedule_class,
)
from distlab.pipeline_parallel.runtime.stage import PipelineStage

__all__ = [
    "DEFAULT_TIMEOUT_S", "PipelineCommError", "PipelineScheduleMulti", "PipelineScheduleSingle",
    "PipelineStage", "PlanSchedule", "Schedule1F1B", "ScheduleDualPipeV", "ScheduleGPipe",
    "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble", "ScheduleLoopedBFS",
    "ScheduleZBVZeroBubble", "StepStats", "get_schedule_class", "merge_outputs", "split_batch",
    "split_target",
]
