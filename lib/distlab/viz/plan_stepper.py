"""The old path of :mod:`distlab.viz.collective_plan_stepper` (the stepper of collective plans,
named for its kind of plan beside the planner's :mod:`distlab.viz.plan`), kept for a release:
importing it warns once (DeprecationWarning) and re-exports the same objects."""

from __future__ import annotations

import warnings

from distlab.viz.collective_plan_stepper import PlanStepper, shown_step

__all__ = ["PlanStepper", "shown_step"]

warnings.warn("distlab.viz.plan_stepper is renamed distlab.viz.collective_plan_stepper; the old "
              "path will be removed", DeprecationWarning, stacklevel=2)
