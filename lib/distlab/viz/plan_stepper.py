"""The widget base of the plan explorers: a world-size and a step slider over a plan's drawing.

:class:`PlanStepper` holds what notebook 04's :class:`~distlab.viz.allreduce.PlanExplorer` and
notebook 08's :class:`~distlab.viz.collectives.CollectiveExplorer` share: the ``world_size`` and
``step`` sliders, the ``image`` and ``summary`` outputs, the current ``schedule`` and its last
drawing (``figure``, ``png``). A subclass adds its own controls (dropdowns) and layout, and says
how to build the plan (:meth:`PlanStepper.build`), draw it after a step
(:meth:`PlanStepper.draw`) and describe it (:meth:`PlanStepper.describe`). The step slider counts
like the pictures' titles: 0 is the start, ``k`` shows the state after "step k/n".
"""

from __future__ import annotations

from typing import Any

import ipywidgets as w
from matplotlib.figure import Figure

from distlab.collectives.plan.schedule import Schedule
from distlab.viz.figure import figure_png

__all__ = ["PlanStepper", "shown_step"]


def shown_step(step: int, nsteps: int) -> str:
    """What the picture after ``step`` of ``nsteps`` shows, in words."""
    return "the start (step 0)" if step == 0 else f"the state after step {step}/{nsteps}"


class PlanStepper:
    """World-size and step sliders over a plan's drawing (see the module docstring).

    Subclasses create their controls, call ``super().__init__``, observe their controls with
    :meth:`plan_changed`, set ``self.widget`` and finally call ``self.plan_changed()``. ``dpi``
    of the PNG (None: the figure's own).
    """

    def __init__(self, world_size: int, max_world_size: int, *,
                 dpi: float | None = 80) -> None:
        self.world_size = w.IntSlider(value=world_size, min=1, max=max_world_size,
                                      description="world size")
        self.step = w.IntSlider(value=0, min=0, max=0, description="step")
        self.image = w.Image(format="png")
        self.summary = w.HTML()
        self.schedule: Schedule | None = None
        self.figure: Figure | None = None
        self.png = b""
        self._dpi = dpi
        self.world_size.observe(self.plan_changed, names="value")
        self.step.observe(lambda _: self.update(), names="value")

    def build(self) -> Schedule:
        """The plan for the current controls."""
        raise NotImplementedError

    def draw(self, schedule: Schedule, step: int) -> Figure:
        """The picture of ``schedule`` after ``step``."""
        raise NotImplementedError

    def describe(self, schedule: Schedule, step: int) -> str:
        """The summary line (HTML) for ``schedule`` shown after ``step``."""
        raise NotImplementedError

    def plan_changed(self, change: Any = None) -> None:
        """Rebuild the plan, keep the step within its steps, redraw."""
        self.schedule = self.build()
        nsteps = len(self.schedule.steps)
        with self.step.hold_trait_notifications():
            self.step.max = nsteps
            self.step.value = min(self.step.value, nsteps)
        self.update()

    def update(self) -> None:
        """Redraw for the current control values."""
        if self.schedule is None:
            raise RuntimeError("update() before the first plan_changed()")
        self.figure = self.draw(self.schedule, self.step.value)
        self.png = figure_png(self.figure, dpi=self._dpi)
        self.image.value = self.png
        self.summary.value = self.describe(self.schedule, self.step.value)
