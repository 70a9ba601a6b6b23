"""An elastic resume replayed: ranks of one world stop mid-epoch, a world of another size finishes
it.

``old_world`` :class:`~distlab.samplers.torch_compat.DistributedSampler` ranks consume ``steps``
indices each in lockstep; rank 0's ``state_dict()`` is loaded into every rank of a
``new_world``-rank sampler (rank by rank when the size is unchanged), which reads the rest of
the same epoch. :func:`replay_elastic_resume`
records, for every dataset index, how many times it was read, at which lockstep step it was first
read and by which world: what notebook 01 draws (:func:`distlab.viz.samplers.elastic_figure`) and
checks (every index read, twice only through the new world's padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distlab._checks import check_int
from distlab.samplers.torch_compat import DistributedSampler

__all__ = ["ElasticReplay", "replay_elastic_resume"]


@dataclass(frozen=True)
class ElasticReplay:
    """What an elastic resume read. Arrays are indexed by dataset index.

    Attributes:
        old_world, new_world: rank counts before and after the resume.
        steps: lockstep steps the old world ran before stopping.
        old_reads: per old step, the index each old rank read (``steps`` rows of ``old_world``).
        new_reads: per new step, the index each new rank read.
        read_by: how many times each index was read in the epoch.
        first_step: the global lockstep step (old steps, then new ones) of its first read.
        first_world: the world size that first read it.
        padding: repeats the new world's padding adds (its reads minus the indices left).
        state: the state dict the old rank 0 saved.
    """

    old_world: int
    new_world: int
    steps: int
    old_reads: list[list[int]]
    new_reads: list[list[int]]
    read_by: np.ndarray
    first_step: np.ndarray
    first_world: np.ndarray
    padding: int
    state: dict

    @property
    def disjoint(self) -> bool:
        """No index read by the old world was read again by the new one."""
        old = {i for row in self.old_reads for i in row}
        return not old & {i for row in self.new_reads for i in row}


def replay_elastic_resume(n: int, old_world: int, new_world: int, steps: int, *,
                          seed: int = 0, epoch: int = 0) -> ElasticReplay:
    """Replay the resume (see the module docstring) of an ``n``-sample shuffled epoch.

    Raises:
        ValueError: a size below 1, or ``steps`` beyond the old ranks' share of the epoch.
    """
    n = check_int("n", n, minimum=1)
    old_world = check_int("old_world", old_world, minimum=1)
    new_world = check_int("new_world", new_world, minimum=1)
    steps = check_int("steps", steps, minimum=0)
    old = [DistributedSampler(n, old_world, r, seed=seed) for r in range(old_world)]
    for s in old:
        s.set_epoch(epoch)
    if steps > len(old[0]):
        raise ValueError(f"steps must be <= {len(old[0])} (each old rank's share of the epoch), "
                         f"got {steps}")
    its = [iter(s) for s in old]
    old_reads = [[int(next(it)) for it in its] for _ in range(steps)]
    states = [s.state_dict() for s in old]
    state = states[0]
    new = [DistributedSampler(n, new_world, r, seed=seed) for r in range(new_world)]
    for r, s in enumerate(new):  # a same-size world resumes rank by rank
        s.load_state_dict(states[r] if new_world == old_world else state)
    new_reads = [[int(i) for i in row] for row in zip(*[list(s) for s in new], strict=True)]
    read_by = np.zeros(n, int)
    first_step = np.full(n, -1)
    first_world = np.zeros(n, int)
    for step, (world, row) in enumerate([(old_world, r) for r in old_reads]
                                        + [(new_world, r) for r in new_reads]):
        for i in row:
            read_by[i] += 1
            if first_step[i] < 0:
                first_step[i], first_world[i] = step, world
    left = n - sum(len(row) for row in old_reads)
    padding = sum(len(row) for row in new_reads) - left
    return ElasticReplay(old_world, new_world, steps, old_reads, new_reads, read_by, first_step,
                         first_world, padding, state)
