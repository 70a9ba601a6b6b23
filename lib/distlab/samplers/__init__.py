"""Distributed samplers: which rank reads which sample, exactly as torch and libtorch decide it.

- :class:`DistributedSampler` / :class:`DistributedEvalSampler`: torch-identical (and an
  evaluation variant that neither pads nor drops), tensor-fast and resumable.
- :class:`DistributedRandomSampler` / :class:`DistributedSequentialSampler`: libtorch's C++
  samplers, bit-identical (``std::mt19937`` and libstdc++'s ``std::shuffle`` in NumPy).
- :class:`PermutationSampler`: the same layout with a keyed Feistel shuffle, O(1) memory at
  any length (not torch-identical).
- :func:`assign` and :class:`Assignment`: who owns which index, padding, dropped tail, checks.
"""

from distlab.samplers.assignment import LAYOUTS, Assignment, assign
from distlab.samplers.libtorch import DistributedRandomSampler, DistributedSequentialSampler
from distlab.samplers.permutation import FeistelPermutation, PermutationSampler
from distlab.samplers.torch_compat import (
                                           DistributedEvalSampler,
                                           DistributedSampler,
                                           SetEpochWarning,
                                           epoch_order,
)

__all__ = [
    "LAYOUTS",
    "FeistelPermutation",
    "PermutationSampler",
    "Assignment",
    "DistributedEvalSampler",
    "DistributedRandomSampler",
    "DistributedSampler",
    "DistributedSequentialSampler",
    "SetEpochWarning",
    "assign",
    "epoch_order",
]
