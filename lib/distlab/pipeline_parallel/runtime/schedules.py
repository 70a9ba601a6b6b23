"""torch.distributed.pipelining's schedule classes, run from distlab's plans.

Each class takes the arguments of torch's class of the same name and builds its
:class:`~distlab.pipeline_parallel.plan.PipelinePlan` with
:func:`~distlab.pipeline_parallel.schedules.registry.build_plan` (so a microbatch count the
schedule cannot run is refused with the registry's message); ``step()`` then runs this rank's
actions of the plan (:func:`~distlab.pipeline_parallel.runtime.executor.run_step`). A torch
script runs with its import changed only::

    from distlab.pipeline_parallel.runtime import PipelineStage, ScheduleGPipe
    stage = PipelineStage(part, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=torch.nn.MSELoss())
    if rank == 0:
        schedule.step(x)
    elif rank == world - 1:
        losses = []
        out = schedule.step(target=y, losses=losses)
    else:
        schedule.step()

``step(*args, target=None, losses=None, return_outputs=True, loss_kwargs=None, **kwargs)`` as
torch's: the first stage's rank passes the whole batch, the last stage's rank the target; both
are cut into ``n_microbatches`` along dim 0 (:mod:`.microbatch`); keyword arguments reach every
stage's forward. On the last stage each microbatch's loss is ``loss_fn(output, target)``; the
losses (detached) replace the contents of ``losses``, and the outputs, concatenated along dim 0,
are returned. Gradients accumulate into ``.grad``; with ``scale_grads`` every loss's gradient is
seeded with ``1 / n_microbatches`` (torch divides the accumulated ``.grad`` by the same number
after the last backward: equal up to rounding, bitwise for a power of two). Without ``loss_fn``
a step runs the forwards only, as in torch; ``eval()`` runs the forwards only always.

distlab's additions, keyword-only: ``timeline`` (a :class:`~distlab.timeline.Timeline` that
records every action and turns on the count of activation bytes from live tensors,
:mod:`.executor`; also settable as the attribute, so one step of many can be traced) and
``timeout`` (seconds any send or receive may wait before it raises; 30 by default; the schedule
makes a process group of its own with that backend timeout, :func:`distlab.uneven.bounded_group`, at
construction, a collective of the pipeline group's ranks). After each step,
``last_step_stats`` holds this rank's :class:`~.measure.StepStats` (step seconds, compute and
wait seconds, bubble, and on a traced step the peak activation bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from distlab._checks import check_bool, check_instance, check_int
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.runtime.executor import StepInputs, run_step
from distlab.pipeline_parallel.runtime.measure import StepStats
from distlab.pipeline_parallel.runtime.microbatch import merge_outputs, split_batch, split_target
from distlab.pipeline_parallel.runtime.p2p import Channel
from distlab.pipeline_parallel.runtime.stage import PipelineStage
from distlab.timeline import Timeline
from distlab.uneven import bounded_group, check_timeout

__all__ = ["DEFAULT_TIMEOUT_S", "PipelineScheduleMulti", "PipelineScheduleSingle", "PlanSchedule",
           "Schedule1F1B", "ScheduleDualPipeV", "ScheduleGPipe", "ScheduleInterleaved1F1B",
           "ScheduleInterleavedZeroBubble", "ScheduleLoopedBFS", "ScheduleZBVZeroBubble",
           "get_schedule_class"]

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a pipeline send or receive may wait for its peer before it raises."""


def _refuse_spec(name: str, value: Any) -> None:
    if value is not None:
        raise ValueError(f"{name}={value!r} is not supported: distlab cuts every tensor "
                         "argument along dim 0 and merges outputs along dim 0 (torch's default); "
                         f"pass {name}=None")


class _Schedule:
    """What every schedule class shares: checks, the plan, the bounded group and ``step``."""

    _name = ""

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: Callable[..., torch.Tensor] | None, scale_grads: bool,
                 backward_requires_autograd: bool, timeline: Timeline | None,
                 timeout: float | None, plan: PipelinePlan | None = None) -> None:
        if not stages:
            raise ValueError("stages must hold at least one PipelineStage, got none")
        for i, st in enumerate(stages):
            check_instance(f"stages[{i}]", st, PipelineStage,
                           "a distlab.pipeline_parallel.runtime.PipelineStage")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable (output, target) -> loss, or None, got "
                            f"{type(loss_fn).__name__}")
        self._n_microbatches = check_int("n_microbatches", n_microbatches, minimum=1)
        self._loss_fn = loss_fn
        self.scale_grads = check_bool("scale_grads", scale_grads)
        self._backward_requires_autograd = check_bool("backward_requires_autograd",
                                                      backward_requires_autograd)
        self._has_backward = loss_fn is not None
        if timeline is not None:
            check_instance("timeline", timeline, Timeline, "a distlab.timeline.Timeline or None")
        self.timeline = timeline
        self.timeout = check_timeout(timeout)
        self._stages = list(stages)
        group = stages[0].group
        for st in stages[1:]:
            if st.group is not group:
                raise ValueError(f"stages {stages[0].stage_index} and {st.stage_index} are on "
                                 "different process groups; a rank's stages share one group")
        ranks, rank = stages[0].group_size, stages[0].group_rank
        if plan is None:
            from distlab.pipeline_parallel.schedules.registry import build_plan

            plan = build_plan(self._name, ranks, self._n_microbatches, len(stages))
        self._plan = plan
        _check_stages(plan, self._stages, ranks, rank)
        self._rank = rank
        if ranks > 1:
            for st in stages:
                if st.device.type != "cpu":
                    raise ValueError(
                        f"stage {st.stage_index} is on device {st.device}: pipelines of several "
                        "ranks run on CPU over gloo here; NCCL's point-to-point needs each "
                        "pair's sends and receives posted in one order on both ranks, which "
                        "this executor's early receives do not keep (use device='cpu')")
        if dist.is_initialized() and ranks > 1:
            global_ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
            comm = bounded_group(group, self.timeout)
        else:
            global_ranks, comm = [0], group
        self._channel = Channel(comm, global_ranks, self.timeout)
        self.last_step_stats: StepStats | None = None

    @property
    def plan(self) -> PipelinePlan:
        """The plan this schedule runs."""
        return self._plan

    @property
    def pipeline_order(self) -> dict[int, list[str]]:
        """Each rank's compute actions in order (torch's attribute, as strings like ``"0F1"``)."""
        return {r: [str(a) for a in self._plan.compute(r)] for r in range(self._plan.ranks)}

    def step(self, *args: Any, target: Any = None, losses: list[Any] | None = None,
             return_outputs: bool = True, loss_kwargs: dict[str, Any] | None = None,
             **kwargs: Any) -> Any:
        """One training step on the whole batch (see the module docstring). Returns the merged
        outputs on the rank of the last stage (``return_outputs``), else ``None``.

        Raises:
            RuntimeError: called under ``torch.no_grad()`` while it has a backward.
            ValueError: a batch or target that cannot be cut into ``n_microbatches``, or no
                target on the last stage's rank while ``loss_fn`` is set.
            TypeError: ``losses`` is not a list.
        """
        if self._has_backward and self._backward_requires_autograd and \
                not torch.is_grad_enabled():
            raise RuntimeError("step() needs gradients enabled for its backward; it is running "
                               "under torch.no_grad(): call eval() for a forward-only step")
        return self._run(args, kwargs, target, losses, return_outputs, loss_kwargs,
                         self._has_backward)

    def eval(self, *args: Any, target: Any = None, losses: list[Any] | None = None,
             **kwargs: Any) -> Any:
        """The forwards of one step only (losses computed where ``target`` is given)."""
        return self._run(args, kwargs, target, losses, True, None, False)

    def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any], target: Any,
             losses: list[Any] | None, return_outputs: bool,
             loss_kwargs: dict[str, Any] | None, has_backward: bool) -> Any:
        if losses is not None and not isinstance(losses, list):
            raise TypeError(f"losses must be a list (filled with each microbatch's loss) or "
                            f"None, got {type(losses).__name__}")
        return_outputs = check_bool("return_outputs", return_outputs)
        n = self._n_microbatches
        last = next((st for st in self._stages if st.is_last), None)
        arg_mbs, kwarg_mbs = split_batch(args, kwargs, n)
        targets = split_target(target, n) if last is not None else None
        if last is not None and has_backward and targets is None:
            raise ValueError("target=None on the rank of the last stage, but loss_fn is set: "
                             "pass target= (the whole batch's) to step() there")
        for st in self._stages:
            st.has_backward = has_backward
            st.clear_runtime_states()
            st.microbatches_in_step = n
        loss_fn = self._loss_fn if (has_backward or targets is not None) else None
        step = StepInputs(arg_mbs, kwarg_mbs, targets, loss_fn, loss_kwargs,
                          1.0 / n if self.scale_grads else 1.0,
                          return_outputs and last is not None, has_backward)
        self.last_step_stats = run_step(self._plan, self._rank,
                                        {st.stage_index: st for st in self._stages},
                                        self._channel, step, self.timeline)
        if last is None:
            return None
        if losses is not None:
            losses.clear()
            if len(last.losses) == n:
                losses.extend(last.losses[m] for m in range(n))
        out = merge_outputs([last.output_chunks[m] for m in range(n)]) if return_outputs \
            else None
        last.clear_runtime_states()
        return out


def _check_stages(plan: PipelinePlan, stages: list[PipelineStage], ranks: int,
                  rank: int) -> None:
    if plan.ranks != ranks:
        raise ValueError(f"the plan ({plan.schedule}) is for {plan.ranks} pipeline ranks, but "
                         f"the stages' process group has {ranks}")
    for st in stages:
        if st.num_stages != plan.num_stages:
            raise ValueError(f"stage {st.stage_index} says num_stages={st.num_stages}, but "
                             f"{plan.schedule} on {plan.ranks} ranks with "
                             f"{plan.stages_per_rank} stage(s) per rank has {plan.num_stages}")
    held = sorted(st.stage_index for st in stages)
    want = list(plan.stages_of(rank))
    if held != want:
        raise ValueError(f"pipeline rank {rank} holds stages {held}, but {plan.schedule} "
                         f"({plan.style} style, {plan.ranks} ranks) puts stages {want} on it")


class PipelineScheduleSingle(_Schedule):
    """A schedule of one stage per rank (torch's base class of GPipe and 1F1B)."""

    def __init__(self, stage: PipelineStage, n_microbatches: int,
                 loss_fn: Callable[..., torch.Tensor] | None = None,
                 args_chunk_spec: Any = None, kwargs_chunk_spec: Any = None,
                 output_merge_spec: Any = None, scale_grads: bool = True, *,
                 timeline: Timeline | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        if isinstance(stage, (list, tuple)):
            raise TypeError(f"{type(self).__name__} takes one PipelineStage, got a "
                            f"{type(stage).__name__}; schedules of several stages per rank "
                            "(ScheduleInterleaved1F1B, ...) take a list")
        _refuse_spec("args_chunk_spec", args_chunk_spec)
        _refuse_spec("kwargs_chunk_spec", kwargs_chunk_spec)
        _refuse_spec("output_merge_spec", output_merge_spec)
        super().__init__([stage], n_microbatches, loss_fn, scale_grads, True, timeline, timeout)
        self._stage = stage


class ScheduleGPipe(PipelineScheduleSingle):
    """GPipe: every forward, then every backward (torch's ``ScheduleGPipe``)."""

    _name = "GPipe"


class Schedule1F1B(PipelineScheduleSingle):
    """1F1B: warm-up forwards, then one forward and one backward in turn (torch's
    ``Schedule1F1B``)."""

    _name = "1F1B"


class PipelineScheduleMulti(_Schedule):
    """A schedule of several stages per rank (torch's base class of the looped and V
    schedules). ``defer_pp_recv`` is accepted and has no effect: receives are always posted one
    compute action ahead."""

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: Callable[..., torch.Tensor] | None = None,
                 args_chunk_spec: Any = None, kwargs_chunk_spec: Any = None,
                 output_merge_spec: Any = None, scale_grads: bool = True,
                 backward_requires_autograd: bool = True, defer_pp_recv: bool = False, *,
                 timeline: Timeline | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        if not isinstance(stages, (list, tuple)):
            raise TypeError(f"{type(self).__name__} takes a list of PipelineStage (this "
                            f"rank's stages), got {type(stages).__name__}")
        _refuse_spec("args_chunk_spec", args_chunk_spec)
        _refuse_spec("kwargs_chunk_spec", kwargs_chunk_spec)
        _refuse_spec("output_merge_spec", output_merge_spec)
        check_bool("defer_pp_recv", defer_pp_recv)
        super().__init__(list(stages), n_microbatches, loss_fn, scale_grads,
                         backward_requires_autograd, timeline, timeout)


class ScheduleInterleaved1F1B(PipelineScheduleMulti):
    """Interleaved 1F1B over looped stages (torch's ``ScheduleInterleaved1F1B``)."""

    _name = "Interleaved1F1B"


class ScheduleLoopedBFS(PipelineScheduleMulti):
    """Looped breadth-first (torch's ``ScheduleLoopedBFS``, which takes no chunk specs)."""

    _name = "LoopedBFS"

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: Callable[..., torch.Tensor] | None = None,
                 output_merge_spec: Any = None, scale_grads: bool = True,
                 backward_requires_autograd: bool = True, defer_pp_recv: bool = False, *,
                 timeline: Timeline | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(stages, n_microbatches, loss_fn, None, None, output_merge_spec,
                         scale_grads, backward_requires_autograd, defer_pp_recv,
                         timeline=timeline, timeout=timeout)


class ScheduleInterleavedZeroBubble(PipelineScheduleMulti):
    """Interleaved 1F1B with the backward split into ``I`` and ``W`` (torch's
    ``ScheduleInterleavedZeroBubble``)."""

    _name = "InterleavedZeroBubble"


class ScheduleZBVZeroBubble(PipelineScheduleMulti):
    """ZB-V: two stages per rank in a V, backward split (torch's ``ScheduleZBVZeroBubble``)."""

    _name = "ZBVZeroBubble"


class ScheduleDualPipeV(PipelineScheduleMulti):
    """DualPipe-V: a V with a forward beside a backward (torch's ``ScheduleDualPipeV``; the two
    actions of an overlapped step run one after the other here)."""

    _name = "DualPipeV"


class PlanSchedule(_Schedule):
    """Any :class:`~distlab.pipeline_parallel.plan.PipelinePlan` run as a schedule (one's own,
    or a registry plan changed by hand): ``n_microbatches`` is ``plan.microbatches``.

    Args:
        stages: this rank's stages (a list, or one stage).
        plan: the plan; its ranks must be the stages' group size.
        loss_fn, scale_grads, timeline, timeout: as for the other schedules.
    """

    def __init__(self, stages: list[PipelineStage] | PipelineStage, plan: PipelinePlan,
                 loss_fn: Callable[..., torch.Tensor] | None = None,
                 scale_grads: bool = True, *, timeline: Timeline | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        check_instance("plan", plan, PipelinePlan, "a PipelinePlan")
        self._name = plan.schedule
        listed = list(stages) if isinstance(stages, (list, tuple)) else [stages]
        super().__init__(listed, plan.microbatches, loss_fn, scale_grads, True, timeline,
                         timeout, plan=plan)


_CLASSES: dict[str, type[_Schedule]] = {
    c._name: c for c in (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, ScheduleLoopedBFS,
                         ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleDualPipeV)}
_BASES: dict[str, type[_Schedule]] = {"pipelineschedulesingle": PipelineScheduleSingle,
                                      "pipelineschedulemulti": PipelineScheduleMulti}


def get_schedule_class(schedule_name: str) -> type[Any]:
    """The schedule class ``schedule_name`` names, case-insensitively, as torch's
    ``get_schedule_class`` (``"1F1B"``, ``"gpipe"``, ``"ScheduleZBVZeroBubble"``, and the
    bases ``"PipelineScheduleSingle"``, ``"PipelineScheduleMulti"``).

    Raises:
        TypeError: ``schedule_name`` is not a str.
        ValueError: an unknown name; the message lists the allowed ones.
    """
    from distlab.pipeline_parallel.schedules.registry import schedule_name as resolve

    if isinstance(schedule_name, str) and schedule_name.strip().lower() in _BASES:
        return _BASES[schedule_name.strip().lower()]
    return _CLASSES[resolve(schedule_name)]
