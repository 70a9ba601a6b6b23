"""torch.distributed.pipelining's own schedules as reference grids, built without a process group.

Each torch schedule class is built from mock stage objects (the attributes its ``__init__``
reads) and never stepped over a network:

- multi-stage schedules (``Interleaved1F1B``, ``LoopedBFS``, ``InterleavedZeroBubble``,
  ``ZBVZeroBubble``, ``DualPipeV``) compute ``pipeline_order`` for every rank in ``__init__``;
  :func:`torch_steps` returns a rank's row of it;
- single-stage ``GPipe`` and ``1F1B`` fix only an order inside ``_step_microbatches`` (torch
  2.13's ``Schedule1F1B._get_pipeline_order`` misnames the last rank's forwards ``F1 .. Fm``),
  so :func:`torch_steps` runs ``_step_microbatches`` with a stage that records each
  ``forward_one_chunk``/``backward_one_chunk`` and has no communication.

Steps are tuples of action strings in torch's spelling: ``()`` idle (torch's ``None``), one
action, or an ``OVERLAP_F_B``'s sub-actions in order; ``REDUCE_GRAD``, ``UNSHARD`` and
``RESHARD`` are left out. :func:`torch_refusal` gives the exception torch raises for a
combination it refuses to build (``None`` where it builds).
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from torch.distributed.pipelining import schedules as torch_schedules
from torch.distributed.pipelining._utils import generate_rank_to_stage_mapping

TORCH_CLASSES: dict[str, str] = {
    "GPipe": "ScheduleGPipe",
    "1F1B": "Schedule1F1B",
    "Interleaved1F1B": "ScheduleInterleaved1F1B",
    "LoopedBFS": "ScheduleLoopedBFS",
    "InterleavedZeroBubble": "ScheduleInterleavedZeroBubble",
    "ZBVZeroBubble": "ScheduleZBVZeroBubble",
    "DualPipeV": "ScheduleDualPipeV",
}
SINGLE_STAGE = ("GPipe", "1F1B")
V_STYLE = ("ZBVZeroBubble", "DualPipeV")
_COMPUTE = {"F", "B", "I", "W"}

Step = tuple[str, ...]


class _RecordingStage(SimpleNamespace):
    """A stage with no communication that records the compute calls a schedule makes."""

    def forward_one_chunk(self, mb: int, *args: Any, **kwargs: Any) -> None:
        self.calls.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb: int, *args: Any, **kwargs: Any) -> None:
        self.calls.append(f"{self.stage_index}B{mb}")

    def _no_ops(self, *args: Any, **kwargs: Any) -> list:
        return []

    get_fwd_recv_ops = get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = _no_ops

    def perform_reduce_grad(self, *args: Any, **kwargs: Any) -> None:
        pass

    def clear_runtime_states(self) -> None:
        pass


def rank_stages(schedule: str, ranks: int, stages_per_rank: int, rank: int) -> list[int]:
    """The global stage indices ``rank`` holds for ``schedule`` (loop or V placement)."""
    style = "v" if schedule in V_STYLE else "loop"
    return generate_rank_to_stage_mapping(ranks, ranks * stages_per_rank, style=style)[rank]


def _mock_stage(index: int, num_stages: int, rank: int, ranks: int) -> _RecordingStage:
    return _RecordingStage(
        stage_index=index, num_stages=num_stages, group_rank=rank, group_size=ranks,
        is_first=index == 0, is_last=index == num_stages - 1, submod=None, has_backward=True,
        device="cpu", calls=[], output_chunks=[])


def build_torch_schedule(schedule: str, ranks: int, stages_per_rank: int, microbatches: int,
                         rank: int = 0) -> Any:
    """torch's schedule object for ``rank``, built from mock stages (may raise as torch
    does)."""
    cls = getattr(torch_schedules, TORCH_CLASSES[schedule])
    num_stages = ranks * stages_per_rank
    if schedule in SINGLE_STAGE:
        if stages_per_rank != 1:
            raise ValueError(f"{cls.__name__} takes one stage (stages_per_rank=1)")
        return cls(_mock_stage(rank, num_stages, rank, ranks), microbatches)
    stages = [_mock_stage(i, num_stages, rank, ranks)
              for i in rank_stages(schedule, ranks, stages_per_rank, rank)]
    return cls(stages, microbatches)


def torch_refusal(schedule: str, ranks: int, stages_per_rank: int,
                  microbatches: int) -> BaseException | None:
    """The exception torch raises building ``schedule`` for this combination on any rank,
    ``None`` where every rank builds."""
    try:
        _pipeline_order(schedule, ranks, stages_per_rank, microbatches)
    except Exception as exc:  # noqa: BLE001 - the point is to report what torch raised
        return exc
    return None


def _steps(row: list[Any]) -> tuple[Step, ...]:
    out: list[Step] = []
    for action in row:
        if action is None:
            out.append(())
        elif action.sub_actions is not None:
            out.append(tuple(str(a) for a in action.sub_actions))
        elif action.computation_type.value in _COMPUTE:
            out.append((str(action),))
        # REDUCE_GRAD, UNSHARD, RESHARD and communication are not compute: left out
    return tuple(out)


def _runtime_order(sched: Any, microbatches: int) -> tuple[Step, ...]:
    sched._initialize_stage = lambda *args, **kwargs: None
    sched._step_microbatches([()] * microbatches, [{}] * microbatches)
    return tuple((call,) for call in sched._stage.calls)


@lru_cache(maxsize=4096)
def _pipeline_order(schedule: str, ranks: int, stages_per_rank: int,
                    microbatches: int) -> tuple[tuple[Step, ...], ...]:
    if schedule in SINGLE_STAGE:
        return tuple(_runtime_order(build_torch_schedule(schedule, ranks, stages_per_rank,
                                                         microbatches, rank), microbatches)
                     for rank in range(ranks))
    sched = build_torch_schedule(schedule, ranks, stages_per_rank, microbatches)
    return tuple(_steps(sched.pipeline_order[rank]) for rank in range(ranks))


def torch_grid(schedule: str, ranks: int, stages_per_rank: int,
               microbatches: int) -> tuple[tuple[Step, ...], ...]:
    """Every rank's :func:`torch_steps` (raises where torch refuses the combination)."""
    return _pipeline_order(schedule, ranks, stages_per_rank, microbatches)


def torch_steps(schedule: str, ranks: int, stages_per_rank: int, microbatches: int,
                rank: int) -> tuple[Step, ...]:
    """torch's steps for ``rank``: its ``pipeline_order`` row for multi-stage schedules, the
    order ``_step_microbatches`` runs (one action a step, no idle steps) for GPipe and 1F1B."""
    return _pipeline_order(schedule, ranks, stages_per_rank, microbatches)[rank]


def torch_pipeline_order_ir(schedule: str, ranks: int, stages_per_rank: int,
                            microbatches: int, rank: int = 0) -> tuple[tuple[Step, ...], ...]:
    """torch's ``pipeline_order`` IR as built in ``__init__`` (for single-stage schedules
    ``_get_pipeline_order``, which for 1F1B misnames the last rank's forwards)."""
    sched = build_torch_schedule(schedule, ranks, stages_per_rank, microbatches, rank)
    return tuple(_steps(sched.pipeline_order[r]) for r in range(ranks))
