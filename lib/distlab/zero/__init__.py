"""distlab.zero: ZeRO (optimizer-state, gradient and parameter sharding) modelled and measured.

Pure models (no torch): :mod:`.memory_model` (bytes per rank by stage, stage 3's units in flight,
DeepSpeed's estimators beside it), :mod:`.comm_volume` (bytes and seconds per step from the
collective plans, stage 3 per unit), :mod:`.prefetch_model` (one stage-3 step simulated: when
prefetch hides the all-gathers), :mod:`.partition` (buckets, units and shards). Runtime:
:mod:`.optimizer` (:class:`ZeroDataParallel`, stages 0-3 on live ranks, over two engines:
:mod:`.bucketed` for stages 0-2 and :mod:`.stage3`, the units gathered ahead, called through
the protocols of :mod:`.engine`), :mod:`.optim` (the optimizer it steps the shards with),
:mod:`.comm_queue` (the thread the stage-3 collectives run on), :mod:`.calls` (distlab's or
torch's collectives), :mod:`.measure` (bytes each rank really holds).
"""

from distlab.zero.comm_volume import (
                                      CommCall,
                                      comm_seconds,
                                      comm_volume,
                                      unit_comm_calls,
                                      zero_comm_calls,
)
from distlab.zero.memory_model import (
                                       DEEPSPEED_SOURCES,
                                       PRECISIONS,
                                       STAGES,
                                       Stage3Memory,
                                       StateBytes,
                                       ZeroMemory,
                                       bytes_per_param,
                                       deepspeed_estimate,
                                       largest_model_that_fits,
                                       stage3_memory,
                                       zero_memory,
)
from distlab.zero.prefetch_model import StepModel, UnitTimes, crossover, simulate_step, unit_times

__all__ = ["CommCall", "DEEPSPEED_SOURCES", "PRECISIONS", "STAGES", "Stage3Memory", "StateBytes",
           "StepModel", "UnitTimes", "ZeroDataParallel", "ZeroMemory", "bytes_per_param",
           "comm_seconds", "comm_volume", "crossover", "deepspeed_estimate",
           "largest_model_that_fits", "simulate_step", "stage3_memory", "unit_comm_calls",
           "unit_times", "zero_comm_calls", "zero_memory"]


def __getattr__(name: str) -> object:
    """:class:`ZeroDataParallel`, the runtime, imported (with torch) on first use, so the pure
    models import without torch."""
    if name == "ZeroDataParallel":
        from distlab.zero.optimizer import ZeroDataParallel

        return ZeroDataParallel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
