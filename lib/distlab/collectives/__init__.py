"""Allreduce algorithms as data: build a schedule, then draw, cost, simulate or run it.

    import distlab.collectives as C
    s = C.ALGORITHMS["ring"](4, 1000)              # a Schedule: steps of (src, dst, range, kind)
    outs = C.simulate(s, [np.ones(1000)] * 4)      # NumPy, one process
    C.cost(s, alpha=5e-6, beta=1/25e9, gamma=1/500e9, itemsize=4)   # seconds
    C.all_reduce(tensor, op="sum", algorithm="ring")   # on real ranks (gloo or NCCL)
"""

from __future__ import annotations

from .algorithms import ALGORITHMS, build, options_of
from .calibrate import Calibration, calibrate, calibrate_local, fit_linear
from .cost import StepCost, cost, step_costs
from .execute import all_reduce, run_schedule
from .ops import OPS
from .peercheck import CollectiveMismatchError
from .presets import PRESETS, LinkPreset, get_preset, loopback_preset, preset_names
from .compare import crossovers, predict_sizes, predict_world_sizes, winners
from .holdings import contributors, holdings
from .schedule import Schedule, Step, Transfer, chunk_bounds, format_schedule
from .simulate import simulate

__all__ = ["ALGORITHMS", "OPS", "PRESETS", "Calibration", "CollectiveMismatchError", "LinkPreset", "Schedule", "Step",
           "StepCost", "Transfer", "all_reduce", "build", "calibrate", "calibrate_local",
           "chunk_bounds", "contributors", "cost", "crossovers", "fit_linear", "format_schedule",
           "get_preset", "holdings", "loopback_preset", "options_of", "predict_sizes",
           "predict_world_sizes", "preset_names", "run_schedule", "simulate", "step_costs",
           "winners"]
