"""A constant-memory shuffled sampler: the epoch's order is a keyed bijection of ``[0, N)``.

    from distlab.samplers import PermutationSampler
    s = PermutationSampler(10**10, num_replicas=8, rank=3, seed=0)
    s.set_epoch(2)
    first = s.indices(stop=1_000_000)   # this rank's first million indices, computed directly

Torch's sampler materialises ``randperm(N)`` on every rank (8 bytes per sample and more); here
position ``p`` of the epoch's order holds ``perm(p)``, where ``perm`` is a Feistel network over
the smallest domain ``[0, 4**h)`` that holds ``N`` (6 rounds, round keys derived from
``(seed, epoch)``), restricted to ``[0, N)`` by cycle-walking: values that land outside are
encrypted again until they land inside, which keeps the map a bijection of ``[0, N)``. Because
``4**h < 4 N``, a value walks fewer than 4 steps on average; each chunk of positions is walked
together, vectorized in NumPy, and only the entries still outside are recomputed, so a chunk
finishes in a few dozen iterations at most.

Layout, padding and dropping are those of ``torch.utils.data.DistributedSampler``: rank ``r``
reads positions ``r, r + W, ...`` of the padded order, position ``p >= N`` repeats ``perm(p % N)``
(so each rank gets ``ceil(N / W)``), or with ``drop_last`` the tail is cut to ``floor(N / W)``
per rank. ``set_epoch``, ``__len__``, ``__iter__``, ``indices()``, ``state_dict()`` and
``load_state_dict()`` behave as in :class:`~distlab.samplers.DistributedSampler`.

It is NOT torch-identical: the order is a different (statistically uniform-looking, not
cryptographic) shuffle of the same indices. Memory is O(1) in ``N``: only one chunk of 64 Ki
positions exists at a time while iterating.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distlab._checks import check_int
from distlab.samplers.torch_compat import _CHUNK, _ShardedSampler

__all__ = ["PermutationSampler", "FeistelPermutation"]

_ROUNDS = 6
_M64 = (1 << 64) - 1
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class FeistelPermutation:
    """A keyed bijection of ``[0, length)``, evaluated at any array of positions.

    Args:
        length: domain size ``N`` >= 0 (up to 2**62).
        seed, epoch: the key; different (seed, epoch) pairs give unrelated permutations.
    """

    def __init__(self, length: int, seed: int, epoch: int) -> None:
        self.length = check_int("length", length, minimum=0, maximum=1 << 62)
        bits = max(2, (self.length - 1).bit_length())
        self.half = (bits + 1) // 2  # domain [0, 4**half) holds N, 4**half < 4 N
        self.mask = np.uint64((1 << self.half) - 1)
        state = _splitmix64((seed & _M64) ^ _splitmix64(epoch & _M64))
        keys = []
        for _ in range(_ROUNDS):
            state = _splitmix64(state)
            keys.append(np.uint64(state))
        self.keys = keys

    def _round(self, right: np.ndarray, key: np.uint64) -> np.ndarray:
        x = (right + key) * _C1
        x ^= x >> np.uint64(29)
        x *= _C2
        x ^= x >> np.uint64(32)
        return x & self.mask

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        shift = np.uint64(self.half)
        left, right = x >> shift, x & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        return (left << shift) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """``perm(p)`` for each ``p`` in ``positions`` (ints in ``[0, N)``) as int64."""
        x = np.asarray(positions, dtype=np.uint64)
        if x.size == 0:
            return x.astype(np.int64)
        x = self._encrypt(x)
        n = np.uint64(self.length)
        outside = np.flatnonzero(x >= n)
        while outside.size:  # cycle-walk only the entries still outside [0, N)
            y = self._encrypt(x[outside])
            x[outside] = y
            outside = outside[y >= n]
        return x.astype(np.int64)


class _Share:
    """This rank's positions of the padded order, as a lazy tensor-like: ``numel`` and slices."""

    def __init__(self, sampler: PermutationSampler) -> None:
        s = sampler
        self.base, self.n, self.size, _ = s._current()
        self.w, self.r = s.num_replicas, s.rank
        self.perm = FeistelPermutation(s.length, s.seed, s.epoch) if s.shuffle else None

    def numel(self) -> int:
        return self.size

    def values(self, start: int, stop: int) -> np.ndarray:
        stop = min(stop, self.size)
        pos = np.arange(start, max(start, stop), dtype=np.int64) * self.w + self.r
        pos %= max(self.n, 1)  # padding positions repeat the order from its start
        pos += self.base  # after an elastic resume: only the positions not yet done
        return pos if self.perm is None else self.perm(pos)

    def __getitem__(self, item: slice) -> torch.Tensor:
        return torch.from_numpy(self.values(item.start or 0, item.stop))


class PermutationSampler(_ShardedSampler):
    """Distributed sampler whose shuffle is a keyed Feistel bijection: O(1) memory at any N.

    Same arguments, layout, padding/drop, ``set_epoch`` and resume as
    :class:`~distlab.samplers.DistributedSampler`, but **not torch-identical**: the order of an
    epoch is a pseudorandom permutation keyed by ``(seed, epoch)``, and each rank computes only
    its own positions, 64 Ki at a time (see the module docstring).

    Args:
        dataset: a sized dataset, or its length as an int in [0, 2**62].
        num_replicas, rank: world size and this rank (None: from the process group).
        shuffle: False gives ``0, 1, ..., N - 1`` split as torch splits it.
        seed: int, the same on every rank.
        drop_last: cut the tail to ``floor(N / W)`` per rank instead of padding.
        warn_repeated_epoch: warn when a shuffled pass repeats the previous pass's epoch.
    """

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, *,
                 warn_repeated_epoch: bool = True) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last,
                         warn_repeated_epoch)
        check_int("length", self.length, maximum=1 << 62)

    def _rank_parts(self) -> list[Any]:
        return [_Share(self)] if len(self) else []

    def indices(self, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """This rank's indices at its positions ``[start, stop)`` (default: the whole epoch)."""
        size = len(self)
        start = check_int("start", start, minimum=0, maximum=size)
        stop = size if stop is None else check_int("stop", stop, minimum=start, maximum=size)
        share = _Share(self)
        out = torch.empty(stop - start, dtype=torch.int64)
        for a in range(start, stop, _CHUNK):
            b = min(a + _CHUNK, stop)
            out[a - start:b - start] = torch.from_numpy(share.values(a, b))
        return out
