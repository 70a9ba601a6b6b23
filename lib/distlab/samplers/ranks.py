"""Samplers inside a process group: functions for :func:`distlab.launch.run` to call per rank.

    from distlab import launch
    from distlab.samplers.ranks import indices_on_rank
    launch.run(indices_on_rank, 4, args=(10,))   # each rank's list; replicas and rank: the group's
"""

from __future__ import annotations

from distlab.samplers.torch_compat import DistributedSampler

__all__ = ["indices_on_rank"]


def indices_on_rank(rank: int, world_size: int, length: int, shuffle: bool = True, seed: int = 0,
                    epoch: int = 0, drop_last: bool = False) -> dict[str, object]:
    """Build a :class:`DistributedSampler` with num_replicas/rank left to the process group.

    Returns:
        ``{"rank", "world_size"}`` as given by the launcher, ``{"num_replicas", "sampler_rank"}``
        as the sampler found them, and ``"indices"``: the list it yields for ``epoch``.
    """
    sampler = DistributedSampler(length, shuffle=shuffle, seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return {"rank": rank, "world_size": world_size, "num_replicas": sampler.num_replicas,
            "sampler_rank": sampler.rank, "indices": list(sampler)}
