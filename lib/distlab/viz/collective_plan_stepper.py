"""The explorer base of the collective plan pictures: choice controls, world-size and step
sliders.

:class:`PlanStepper` is the :class:`~distlab.viz.explorer.Explorer` that notebook 04's
:class:`~distlab.viz.allreduce.PlanExplorer` and notebook 08's
:class:`~distlab.viz.collectives.CollectiveExplorer` share: the subclass's choice controls
(dropdowns) above the ``world_size`` and ``step`` sliders, the current ``schedule``, and the
rule that a new plan keeps the step within its steps. A subclass says how to build the plan
(:meth:`PlanStepper.build`), draw it after a step (:meth:`PlanStepper.picture`) and describe it
(:meth:`PlanStepper.describe`). The step slider counts like the pictures' titles: 0 is the start,
``k`` shows the state after "step k/n".
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable, Sequence
from typing import Any

import ipywidgets as w
from matplotlib.figure import Figure

from distlab.collectives.plan.schedule import Schedule
from distlab.viz.explorer import Drawing, Explorer

__all__ = ["PlanStepper", "shown_step"]


def shown_step(step: int, nsteps: int) -> str:
    """What the picture after ``step`` of ``nsteps`` shows, in words."""
    return "the start (step 0)" if step == 0 else f"the state after step {step}/{nsteps}"


class PlanStepper(Explorer):
    """Choice controls, world-size and step sliders over a plan's drawing (see the module doc).

    Args:
        choices: the subclass's controls that, with the world size, decide the plan.
        world_size: the world-size slider's first value, ``1 .. max_world_size``.
        max_world_size: the world-size slider's maximum.
        dpi: of the PNG (None: the figure's own).

    Attributes: the ``world_size`` and ``step`` sliders, ``schedule`` (the current plan), and
    the :class:`~distlab.viz.explorer.Explorer` attributes.
    """

    def __init__(self, choices: Sequence[Any], world_size: int, max_world_size: int, *,
                 dpi: float | None = None) -> None:
        self.world_size = w.IntSlider(value=world_size, min=1, max=max_world_size,
                                      description="world size")
        self.step = w.IntSlider(value=0, min=0, max=0, description="step")
        self.schedule: Schedule | None = None
        self._plan_key: Hashable = None
        choices = list(choices)
        super().__init__([*choices, self.world_size, self.step],
                         rows=[w.HBox(choices), w.HBox([self.world_size, self.step])], dpi=dpi)

    @abstractmethod
    def build(self) -> Schedule:
        """The plan for the current controls."""

    @abstractmethod
    def picture(self, schedule: Schedule, step: int) -> Figure:
        """The picture of ``schedule`` after ``step``."""

    @abstractmethod
    def describe(self, schedule: Schedule, step: int) -> str:
        """The summary line (plain text) for ``schedule`` shown after ``step``."""

    def plan_key(self) -> Hashable:
        """What decides the plan: the values of every control but the step."""
        return tuple(c.value for c in self._controls if c is not self.step)

    def settle(self) -> None:
        """Rebuild the plan when what decides it changed; keep the step within its steps."""
        key = self.plan_key()
        if self.schedule is not None and key == self._plan_key:
            return
        self.schedule, self._plan_key = self.build(), key
        nsteps = len(self.schedule.steps)
        with self.step.hold_trait_notifications():
            self.step.max = nsteps
            self.step.value = min(self.step.value, nsteps)

    def draw(self) -> Drawing:
        if self.schedule is None:
            raise RuntimeError("draw() before settle() built the first plan")
        step = self.step.value
        return Drawing(self.picture(self.schedule, step), self.describe(self.schedule, step))
