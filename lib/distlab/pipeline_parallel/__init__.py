"""Pipeline parallelism: a model's layers split into stages on different ranks, microbatches
flowing through them in the order a schedule sets.

Not to be confused with :mod:`distlab.loading`, the *loading* pipeline (read, decode, copy).

A schedule is a plan (:class:`PipelinePlan`, each rank's ordered forward, backward and
weight-gradient actions), built by a pure function for each of torch.distributed.pipelining's
seven schedules (:func:`build_plan`, :data:`SCHEDULES`); the same plan is drawn
(:mod:`distlab.viz.pipeline_parallel`), simulated (:func:`simulate`), costed (:mod:`.cost`:
the bubble's closed form, microbatches in flight, bytes sent) and run on real ranks
(:mod:`.runtime`: ``PipelineStage`` and the ``Schedule*`` classes with torch's arguments, so a
torch.distributed.pipelining script runs with ``from distlab.pipeline_parallel import ...``).
Composed with data parallelism (a stage in distlab's or torch's DDP, or a
:class:`~distlab.zero.ZeroDataParallel`, on its replica group) and with tensor parallelism (each
stage split by :func:`distlab.tensor_parallel.parallelize_module` over the ``"tp"`` group of a
``("pp", "tp")`` mesh, ``PipelineStage(..., group=mesh.get_group("pp"))``: see
:mod:`.runtime.stage`).

    from distlab.pipeline_parallel import build_plan, simulate, StageTimes
    plan = build_plan("1F1B", ranks=4, microbatches=8)
    print(plan.format())
    sim = simulate(plan, StageTimes.equal(plan.num_stages, forward_s=1e-3,
                                          backward_input_s=1e-3, backward_weight_s=1e-3))

The pure parts (plans, schedules, simulation, costs) import no torch; the runtime's names
(``PipelineStage``, the ``Schedule*`` classes, ``get_schedule_class``) import :mod:`.runtime`,
and with it torch, when first read, so the planner and its command start fast.
"""

from distlab.pipeline_parallel.actions import Action, Kind
from distlab.pipeline_parallel.cost import (
    activation_bytes,
    bubble_fraction,
    closed_form_step_s,
    grid_bubble_fraction,
    peak_in_flight,
    traffic,
)
from distlab.pipeline_parallel.plan import PipelinePlan, Step, stage_to_rank
from distlab.pipeline_parallel.schedules.registry import (
    SCHEDULES,
    build_plan,
    schedule_info,
    schedule_name,
)
from distlab.pipeline_parallel.simulate import P2PCost, Simulation, StageTimes, simulate

__all__ = ["SCHEDULES", "Action", "Kind", "P2PCost", "PipelinePlan", "PipelineStage",
           "Schedule1F1B", "ScheduleDualPipeV", "ScheduleGPipe", "ScheduleInterleaved1F1B",
           "ScheduleInterleavedZeroBubble", "ScheduleLoopedBFS", "ScheduleZBVZeroBubble",
           "Simulation", "StageTimes", "Step", "activation_bytes", "bubble_fraction",
           "build_plan", "closed_form_step_s", "get_schedule_class", "grid_bubble_fraction",
           "peak_in_flight", "schedule_info", "schedule_name", "simulate", "stage_to_rank",
           "traffic"]

_RUNTIME = frozenset({"PipelineStage", "Schedule1F1B", "ScheduleDualPipeV", "ScheduleGPipe",
                      "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
                      "ScheduleLoopedBFS", "ScheduleZBVZeroBubble", "get_schedule_class"})


def __getattr__(name: str) -> object:
    """The runtime's names, imported (with torch) on first use."""
    if name in _RUNTIME:
        from distlab.pipeline_parallel import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
