"""Collectives as data: build a schedule, then draw, cost, simulate or run it.

    import distlab.collectives as C
    s = C.ALGORITHMS["ring"](4, 1000)              # a Schedule: steps of (src, dst, range, kind)
    outs = C.simulate(s, [np.ones(1000)] * 4)      # NumPy, one process
    C.cost(s, alpha=5e-6, beta=1/25e9, gamma=1/500e9, itemsize=4)   # seconds
    C.all_reduce(tensor, op="sum", algorithm="ring")   # on real ranks (gloo or NCCL)
    g = C.build_plan("all_gather", "bruck", 5, 20)      # every MPI collective: PLANS
    C.all_gather(out, tensor, algorithm="bruck")        # ... and run like torch's built-ins

Plans (pure: no process group, no ``torch.distributed``): :mod:`.schedule`, :mod:`.algorithms`
(the allreduce registry; one module per algorithm in :mod:`.allreduce`, gloo's own ring among
them), :mod:`.plans` (every collective's registry: :mod:`.broadcast`, :mod:`.reduce`,
:mod:`.gather`, :mod:`.scatter`, :mod:`.allgather`, :mod:`.reducescatter`, :mod:`.alltoall`,
:mod:`.barrier`), :mod:`.semantics` (what each rank holds before and after each collective),
:mod:`.cost`, :mod:`.regimes` (per-size prices), :mod:`.predict` (one call, builtin included),
:mod:`.refit` (re-predict a profile offline), :mod:`.simulate`, :mod:`.holdings`,
:mod:`.compare`, :mod:`.presets`, :mod:`.calibration`, :mod:`.rank_plan`, :mod:`.pieces` (a
step's messages cut into pieces), :mod:`.tuning` (the model picks the options a call leaves
unset).
Runtime (real ranks): :mod:`.runtime`.
"""

from __future__ import annotations

from distlab.collectives.algorithms.registry import ALGORITHMS, build, options_of
from distlab.collectives.model.calibration import Calibration
from distlab.collectives.model.compare import crossovers, predict_sizes, predict_world_sizes, winners
from distlab.collectives.model.cost import StepCost, cost, step_costs
from distlab.collectives.check.holdings import contributors, holdings
from distlab.collectives.plan.ops import OPS
from distlab.collectives.model.predict import call_model, predict_builtin
from distlab.collectives.algorithms.registry import DEFAULT_ALGORITHM, PLANS, build_plan, plan_options
from distlab.collectives.model.presets import PRESETS, LinkPreset, get_preset, loopback_preset, preset_names
from distlab.collectives.runtime.collectives import (all_gather, all_to_all, barrier, broadcast, gather, reduce,
                                  reduce_scatter, scatter)
from distlab.collectives.runtime.execute import all_reduce, run_schedule
from distlab.collectives.runtime.peercheck import CollectiveMismatchError
from distlab.collectives.runtime.rounds import calibrate, calibrate_local
from distlab.collectives.plan.schedule import Schedule, Step, Transfer, format_schedule
from distlab.collectives.plan.ranges import block_bounds
from distlab.collectives.plan.semantics import COLLECTIVES, layout
from distlab.collectives.check.simulate import simulate
from distlab.collectives.model.choice import best_pieces, pieces_curve, use_calibration

__all__ = ["ALGORITHMS", "COLLECTIVES", "DEFAULT_ALGORITHM", "OPS", "PLANS", "PRESETS",
           "Calibration", "CollectiveMismatchError", "LinkPreset", "Schedule", "Step", "StepCost",
           "Transfer", "all_gather", "all_reduce", "all_to_all", "barrier", "best_pieces",
           "broadcast", "build", "build_plan", "calibrate", "calibrate_local", "call_model",
           "block_bounds", "contributors", "cost", "crossovers", "format_schedule", "gather",
           "get_preset", "holdings", "layout", "loopback_preset", "options_of", "pieces_curve",
           "plan_options", "predict_builtin", "predict_sizes", "predict_world_sizes",
           "preset_names", "reduce", "reduce_scatter", "run_schedule", "scatter", "simulate",
           "step_costs", "use_calibration", "winners"]
