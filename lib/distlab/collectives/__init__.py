"""Collectives as data: build a schedule, then draw, cost, simulate or run it.

    import distlab.collectives as C
    s = C.ALGORITHMS["ring"](4, 1000)              # a Schedule: steps of (src, dst, range, kind)
    outs = C.simulate(s, [np.ones(1000)] * 4)      # NumPy, one process
    C.cost(s, alpha=5e-6, beta=1/25e9, gamma=1/500e9, itemsize=4)   # seconds
    C.all_reduce(tensor, op="sum", algorithm="ring")   # on real ranks (gloo or NCCL)
    g = C.build_plan("all_gather", "bruck", 5, 20)      # every MPI collective: PLANS
    C.all_gather(out, tensor, algorithm="bruck")        # ... and run like torch's built-ins

Sub-packages, each importing only the ones before it (a test enforces the order):

- :mod:`.plan`: the plan as data: :mod:`~.plan.schedule` (Schedule, Step, Transfer),
  :mod:`~.plan.ops` (reduction operators), :mod:`~.plan.semantics` (what each rank holds before
  and after each collective), :mod:`~.plan.ranges` (blocks and pieces: the sub-ranges).
- :mod:`.algorithms`: one module per algorithm under ``<collective>/`` and
  :mod:`~.algorithms.registry`, the one registry of every (collective, algorithm), ``builtin``
  included, with :func:`build_plan`.
- :mod:`.check`: a plan run in one process: :mod:`~.check.simulate` (NumPy or torch buffers),
  :mod:`~.check.holdings` (which ranks' data each element holds after each step),
  :mod:`~.check.verify` (a plan against its collective's semantics).
- :mod:`.model`: what a plan costs: :mod:`~.model.cost` (alpha-beta-gamma per step),
  :mod:`~.model.calibration` (fitted from timed rounds), :mod:`~.model.rates` (per-size prices),
  :mod:`~.model.predict` (one call, builtin included), :mod:`~.model.compare` (winners and
  crossovers), :mod:`~.model.choice` (the options a call leaves unset), :mod:`~.model.presets`
  (link presets). NCCL's own estimate and GPU boxes are a package of their own,
  :mod:`distlab.nccl`.
- :mod:`.runtime`: plans executed on real ``torch.distributed`` ranks. Everything else here is
  pure: no process group, no ``torch.distributed``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.registry import (
                                                     ALGORITHMS,
                                                     DEFAULT_ALGORITHM,
                                                     PLANS,
                                                     build,
                                                     build_plan,
                                                     options_of,
                                                     plan_options,
)
from distlab.collectives.check.holdings import contributors, holdings
from distlab.collectives.model.calibration import Calibration
from distlab.collectives.model.choice import best_pieces, pieces_curve, use_calibration
from distlab.collectives.model.compare import (
                                                     crossovers,
                                                     predict_sizes,
                                                     predict_world_sizes,
                                                     winners,
)
from distlab.collectives.model.cost import StepCost, cost, step_costs
from distlab.collectives.model.predict import call_model, predict_builtin
from distlab.collectives.model.presets import (
                                                     PRESETS,
                                                     LinkPreset,
                                                     get_preset,
                                                     loopback_preset,
                                                     preset_names,
)
from distlab.collectives.plan.ops import OPS
from distlab.collectives.plan.ranges import block_bounds
from distlab.collectives.plan.schedule import Schedule, Step, Transfer, format_schedule
from distlab.collectives.plan.semantics import layout
from distlab.vocabulary import COLLECTIVES

chunk_bounds = block_bounds
"""The name :func:`~distlab.collectives.plan.ranges.block_bounds` is also importable by."""

__all__ = ["ALGORITHMS", "COLLECTIVES", "DEFAULT_ALGORITHM", "OPS", "PLANS", "PRESETS",
           "Calibration", "CollectiveMismatchError", "LinkPreset", "Schedule", "Step", "StepCost",
           "Transfer", "all_gather", "all_reduce", "all_to_all", "barrier", "best_pieces",
           "block_bounds", "broadcast", "build", "build_plan", "calibrate", "calibrate_local",
           "call_model", "chunk_bounds", "contributors", "cost", "crossovers", "format_schedule",
           "gather", "get_preset", "holdings", "layout", "loopback_preset", "options_of",
           "pieces_curve", "plan_options", "predict_builtin", "predict_sizes",
           "predict_world_sizes", "preset_names", "reduce", "reduce_scatter", "run_schedule",
           "scatter", "simulate", "step_costs", "use_calibration", "winners"]

_LAZY = {
    "simulate": "distlab.collectives.check.simulate",
    **dict.fromkeys(("all_gather", "all_to_all", "barrier", "broadcast", "gather", "reduce",
                     "reduce_scatter", "scatter"), "distlab.collectives.runtime.collectives"),
    "all_reduce": "distlab.collectives.runtime.execute",
    "run_schedule": "distlab.collectives.runtime.execute",
    "CollectiveMismatchError": "distlab.collectives.runtime.peercheck",
    "calibrate": "distlab.collectives.runtime.rounds",
    "calibrate_local": "distlab.collectives.runtime.rounds",
}
"""The names that need torch (the runtime on real ranks, the simulation on torch buffers):
imported from their module on first use, so the plans and models import without torch."""


def __getattr__(name: str) -> object:
    """A name of :data:`_LAZY`, imported (with torch) on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
