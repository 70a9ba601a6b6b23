"""The seven pipeline schedules by name: :data:`SCHEDULES`, :data:`INFO`, :func:`schedule_name`
and :func:`build_plan`.

Names are torch's (``torch.distributed.pipelining.schedules.get_schedule_class``) without the
``Schedule`` prefix; a user's string resolves case-insensitively, torch's class name included
(``"schedulegpipe"`` -> ``"GPipe"``). :func:`build_plan` is the boundary that checks its
arguments: every combination torch's class refuses to build is refused here with a
``ValueError`` saying which argument, its value and torch's rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_str
from distlab.pipeline_parallel.plan import PipelinePlan, Style
from distlab.pipeline_parallel.schedules import (
    dualpipe_v,
    gpipe,
    interleaved_1f1b,
    interleaved_zero_bubble,
    looped_bfs,
    one_f_one_b,
    zbv_zero_bubble,
)

__all__ = ["SCHEDULES", "INFO", "ScheduleInfo", "schedule_name", "schedule_info", "build_plan",
           "check_combination"]


@dataclass(frozen=True)
class ScheduleInfo:
    """What a schedule is and how it is built.

    Attributes:
        name: the name (torch's spelling without ``Schedule``), e.g. ``"1F1B"``.
        torch_class: the torch class it mirrors, e.g. ``"Schedule1F1B"``.
        style: how stages sit on ranks, ``"loop"`` or ``"v"``.
        single_stage: True where a rank holds exactly one stage (GPipe, 1F1B).
        splits_backward: True where backwards run (some or all) as ``I`` then ``W``.
        description: one line on the idea.
        build: ``(ranks, stages_per_rank, microbatches) -> PipelinePlan``.
        check: ``(ranks, stages_per_rank, microbatches) -> (ints)``, raising where torch
            refuses.
    """

    name: str
    torch_class: str
    style: Style
    single_stage: bool
    splits_backward: bool
    description: str
    build: Callable[[int, int, int], PipelinePlan]
    check: Callable[[Any, Any, Any], tuple[int, int, int]]

    @property
    def default_stages_per_rank(self) -> int:
        """1 for single-stage schedules, 2 for the others."""
        return 1 if self.single_stage else 2


def _info(module: Any, build: Callable[[int, int, int], PipelinePlan], style: Style,
          single_stage: bool, splits_backward: bool, description: str) -> ScheduleInfo:
    return ScheduleInfo(module.NAME, module.TORCH_CLASS, style, single_stage, splits_backward,
                        description, build, module.check)


_ALL = (
    _info(gpipe, gpipe.gpipe, "loop", True, False,
          "all forwards, then all backwards (fill and drain)"),
    _info(one_f_one_b, one_f_one_b.one_f_one_b, "loop", True, False,
          "a warm-up of forwards, then one forward and one backward in turn"),
    _info(interleaved_1f1b, interleaved_1f1b.interleaved_1f1b, "loop", False, False,
          "1F1B over several looped stages per rank, earlier microbatch first (depth first)"),
    _info(looped_bfs, looped_bfs.looped_bfs, "loop", False, False,
          "several looped stages per rank, each stage's microbatches all at once "
          "(breadth first)"),
    _info(interleaved_zero_bubble, interleaved_zero_bubble.interleaved_zero_bubble, "loop",
          False, True,
          "interleaved 1F1B with the backward split into I and W, W filling the bubbles"),
    _info(zbv_zero_bubble, zbv_zero_bubble.zbv_zero_bubble, "v", False, True,
          "two stages per rank in a V, backward split into I and W: near-zero bubble"),
    _info(dualpipe_v, dualpipe_v.dualpipe_v, "v", False, True,
          "two stages per rank in a V, forward of one microbatch overlapped with the backward "
          "of another"),
)

INFO: dict[str, ScheduleInfo] = {info.name: info for info in _ALL}
"""Each schedule's :class:`ScheduleInfo`, by name."""

SCHEDULES: tuple[str, ...] = tuple(INFO)
"""The schedule names, torch's spelling without ``Schedule``."""

_LOOKUP: dict[str, str] = {}
for _name, _i in INFO.items():
    _LOOKUP[_name.lower()] = _name
    _LOOKUP[_i.torch_class.lower()] = _name


def schedule_name(text: Any) -> str:
    """The schedule ``text`` names, case-insensitively: ``"gpipe"``, ``"ScheduleGPipe"`` ->
    ``"GPipe"``.

    Raises:
        TypeError: ``text`` is not a str.
        ValueError: no schedule has that name; the message lists the allowed names.
    """
    check_str("schedule", text)
    name = _LOOKUP.get(text.strip().lower())
    if name is None:
        raise ValueError(f"schedule={text!r} is not a known schedule; allowed (any case, "
                         f"optionally with torch's 'Schedule' prefix): {', '.join(SCHEDULES)}")
    return name


def schedule_info(schedule: Any) -> ScheduleInfo:
    """The :class:`ScheduleInfo` of the schedule ``schedule`` names (see :func:`schedule_name`)."""
    return INFO[schedule_name(schedule)]


def check_combination(schedule: Any, ranks: Any, microbatches: Any,
                      stages_per_rank: Any = None) -> tuple[str, int, int, int]:
    """``(name, ranks, stages_per_rank, microbatches)`` checked as :func:`build_plan` checks
    them, without building the plan."""
    info = schedule_info(schedule)
    if stages_per_rank is None:
        stages_per_rank = info.default_stages_per_rank
    ranks, stages_per_rank, microbatches = info.check(ranks, stages_per_rank, microbatches)
    return info.name, ranks, stages_per_rank, microbatches


def build_plan(schedule: Any, ranks: Any, microbatches: Any,
               stages_per_rank: Any = None) -> PipelinePlan:
    """The :class:`PipelinePlan` of ``schedule`` for ``ranks`` pipeline ranks and
    ``microbatches`` microbatches, each rank holding ``stages_per_rank`` stages (default 1 for
    GPipe and 1F1B, 2 for the others).

    Raises:
        TypeError: ``schedule`` is not a str, or a size is not an int (bools refused).
        ValueError: an unknown schedule, ``ranks < 1``, ``microbatches < 1``,
            ``stages_per_rank < 1``, or a combination torch's class refuses (the message names
            the argument, its value and torch's rule).
    """
    name, ranks, stages_per_rank, microbatches = check_combination(
        schedule, ranks, microbatches, stages_per_rank)
    return INFO[name].build(ranks, stages_per_rank, microbatches)
