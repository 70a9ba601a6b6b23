"""distlab.ddp: torch-identical gradient buckets, a bucketed overlapping DDP (Joinable: uneven
inputs under torch's Join, :mod:`distlab.ddp.join`), and its model. DDP is torch's pair: the
module wrapper (:mod:`distlab.ddp.wrapper`) over its reducer (:mod:`distlab.ddp.reducer`)."""

from distlab.ddp.buckets import (
                                 DEFAULT_BUCKET_CAP_MB,
                                 DEFAULT_FIRST_BUCKET_BYTES,
                                 backward_ready_order,
                                 compute_bucket_assignment_by_size,
                                 initial_buckets,
                                 rebuilt_buckets,
                                 torch_ddp_buckets,
                                 unused_initial_buckets,
)
from distlab.ddp.grad_bucket import GradBucket
from distlab.ddp.wrapper import DDP

__all__ = [
    "DDP", "GradBucket",
    "DEFAULT_BUCKET_CAP_MB", "DEFAULT_FIRST_BUCKET_BYTES", "backward_ready_order",
    "compute_bucket_assignment_by_size", "initial_buckets", "rebuilt_buckets", "torch_ddp_buckets",
    "unused_initial_buckets",
]
