"""distlab.zero: ZeRO (optimizer-state, gradient and parameter sharding) modelled and measured.

Pure models (no torch): :mod:`.memory_model` (bytes per rank by stage, DeepSpeed's estimators
beside it), :mod:`.comm_volume` (bytes and seconds per step from the collective plans),
:mod:`.partition` (buckets and shards). Runtime: :mod:`.optimizer` (:class:`ZeroDataParallel`,
stages 0-2 on live ranks), :mod:`.measure` (bytes each rank really holds).
"""

from distlab.zero.comm_volume import CommCall, comm_seconds, comm_volume, zero_comm_calls
from distlab.zero.memory_model import (
                                       DEEPSPEED_SOURCES,
                                       PRECISIONS,
                                       STAGES,
                                       StateBytes,
                                       ZeroMemory,
                                       bytes_per_param,
                                       deepspeed_estimate,
                                       largest_model_that_fits,
                                       zero_memory,
)
from distlab.zero.optimizer import ZeroDataParallel

__all__ = ["CommCall", "DEEPSPEED_SOURCES", "PRECISIONS", "STAGES", "StateBytes",
           "ZeroDataParallel", "ZeroMemory", "bytes_per_param", "comm_seconds", "comm_volume",
           "deepspeed_estimate", "largest_model_that_fits", "zero_comm_calls", "zero_memory"]
