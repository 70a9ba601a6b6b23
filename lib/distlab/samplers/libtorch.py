"""libtorch's C++ ``DistributedRandomSampler`` and ``DistributedSequentialSampler``, bit-identical.

    s = DistributedRandomSampler(10, num_replicas=4, rank=1)
    s.set_epoch(3); s.reset()            # C++: set_epoch only takes effect at the next reset()
    s.next(2)                            # [..] the same std::vector<size_t> C++ returns

Semantics of ``torch/csrc/api/src/data/samplers/distributed.cpp`` (C++ frontend):

* ``local = ceil(size / W)`` with ``allow_duplicates`` else ``floor(size / W)``; rank ``r`` reads
  the *contiguous* block ``[r * local, (r + 1) * local)`` of an index list (torch's Python sampler
  strides instead).
* Random: the list is ``0 .. sample_count - 1`` with ``sample_count = size`` when ``W == 1`` else
  ``local * W``; entries from ``size`` on are replaced by ``i - size`` (the duplicates), and then
  the whole list is shuffled with libstdc++'s ``std::shuffle`` and ``std::mt19937(epoch)``: the seed
  is the epoch alone (mod 2**32), the same on every rank. Note a libtorch quirk reproduced here:
  when the padding is longer than the dataset (``size < W - 1`` ranks' worth), ``i - size`` reaches
  past ``size - 1``, so indices outside the dataset appear.
* Sequential: rank ``r`` reads ``r * local ...`` and, once a batch reaches ``size``, every index of
  that batch is taken modulo ``size``.
* ``save``/``load`` persist ``sample_index_`` (and ``epoch_`` for the random sampler, whose ``load``
  reshuffles for that epoch and then restores the index); :meth:`state_dict` returns those keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from distlab._checks import check_bool, check_int, check_rank
from distlab.samplers.libstdcxx import MAX_SHUFFLE_SIZE, shuffle
from distlab.samplers.mt19937 import MT19937

__all__ = ["DistributedRandomSampler", "DistributedSequentialSampler"]

_SIZE_T_MAX = (1 << 64) - 1


class _LibtorchDistributed:
    """What the C++ ``DistributedSampler<>`` base holds: size, replicas, rank, epoch, duplicates."""

    def __init__(self, size: int, num_replicas: int, rank: int, allow_duplicates: bool) -> None:
        self.size = self._check_size(size, "size")
        self.num_replicas = check_int("num_replicas", num_replicas, minimum=1)
        self.rank = check_rank(rank, self.num_replicas)
        self.allow_duplicates = check_bool("allow_duplicates", allow_duplicates)
        self._epoch = 0
        self.begin_index = self.end_index = self.sample_index = 0

    @staticmethod
    def _check_size(size: Any, name: str) -> int:
        return check_int(name, size, minimum=0, maximum=MAX_SHUFFLE_SIZE)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch (a C++ ``size_t``); the random sampler uses it at the next ``reset``."""
        self._epoch = check_int("epoch", epoch, minimum=0, maximum=_SIZE_T_MAX)

    def epoch(self) -> int:
        """The epoch set last."""
        return self._epoch

    def local_sample_count(self) -> int:
        """Indices per rank: ``ceil(size / W)`` with duplicates, else ``floor(size / W)``."""
        if self.allow_duplicates:
            return (self.size + self.num_replicas - 1) // self.num_replicas
        return self.size // self.num_replicas

    def index(self) -> int:
        """The position of the next index to hand out (C++ ``index()``)."""
        return self.sample_index

    def _take(self, batch_size: int) -> tuple[int, int] | None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
        if self.sample_index == self.end_index:
            return None
        start, end = self.sample_index, min(self.sample_index + batch_size, self.end_index)
        self.sample_index = end
        return start, end

    def _check_index(self, value: Any) -> int:
        return check_int("state['sample_index_']", value, minimum=self.begin_index,
                         maximum=self.end_index)

    def __len__(self) -> int:
        return self.end_index - self.begin_index

    def __iter__(self) -> Iterator[int]:
        """All of this rank's indices for the current shuffle (does not move ``index()``)."""
        return iter(self.indices().tolist())

    def indices(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, num_replicas={self.num_replicas}, "
                f"rank={self.rank}, allow_duplicates={self.allow_duplicates}, "
                f"epoch={self._epoch}, index={self.sample_index})")


class DistributedRandomSampler(_LibtorchDistributed):
    """``torch::data::samplers::DistributedRandomSampler``; construction shuffles for epoch 0.

    Args:
        size: dataset length, in [0, 2**32 - 1].
        num_replicas: world size, >= 1.
        rank: in [0, num_replicas - 1].
        allow_duplicates: pad to ``ceil(size / W)`` per rank with repeats (True) or cut to
            ``floor(size / W)`` (False; the tail ``local * W .. size - 1`` is never shuffled in).
    """

    def __init__(self, size: int, num_replicas: int = 1, rank: int = 0,
                 allow_duplicates: bool = True) -> None:
        super().__init__(size, num_replicas, rank, allow_duplicates)
        self.all_indices = np.empty(0, dtype=np.int64)
        self.reset(self.size)

    def _populate(self) -> None:
        local = self.local_sample_count()
        count = self.size if self.num_replicas == 1 else local * self.num_replicas
        idx = np.arange(count, dtype=np.int64)
        if count > self.size:
            idx[self.size:] -= self.size  # the duplicates: i - size
        self.all_indices = idx
        self.begin_index = self.rank * local
        self.end_index = self.begin_index + local
        self.sample_index = self.begin_index

    def reset(self, new_size: int | None = None) -> None:
        """Optionally change the size, rebuild the list and shuffle it with ``mt19937(epoch)``."""
        if new_size is not None:
            self.size = self._check_size(new_size, "new_size")
        self._populate()
        shuffle(self.all_indices, MT19937(self._epoch))
        self.sample_index = self.begin_index

    def next(self, batch_size: int) -> list[int] | None:
        """The next up to ``batch_size`` indices of this rank, or None when the epoch is done."""
        span = self._take(batch_size)
        if span is None:
            return None
        return self.all_indices[span[0]:span[1]].tolist()

    def indices(self) -> np.ndarray:
        """This rank's block of the shuffled list (int64 array, a copy)."""
        return self.all_indices[self.begin_index:self.end_index].copy()

    def state_dict(self) -> dict[str, int]:
        """What C++ ``save`` writes: ``sample_index_`` and ``epoch_``."""
        return {"sample_index_": self.sample_index, "epoch_": self._epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """C++ ``load``: set the epoch, ``reset()`` (reshuffle), then restore ``sample_index_``."""
        if not isinstance(state, dict) or not {"sample_index_", "epoch_"} <= set(state):
            raise ValueError("state must be a dict with keys 'sample_index_' and 'epoch_' (from "
                             f"state_dict()), got {state!r}")
        self.set_epoch(state["epoch_"])
        self.reset(self.size)
        self.sample_index = self._check_index(state["sample_index_"])


class DistributedSequentialSampler(_LibtorchDistributed):
    """``torch::data::samplers::DistributedSequentialSampler``: contiguous blocks, no shuffle.

    Args:
        size, num_replicas, rank, allow_duplicates: as :class:`DistributedRandomSampler`.
    """

    def __init__(self, size: int, num_replicas: int = 1, rank: int = 0,
                 allow_duplicates: bool = True) -> None:
        super().__init__(size, num_replicas, rank, allow_duplicates)
        self._populate()

    def _populate(self) -> None:
        local = self.local_sample_count()
        self.begin_index = self.rank * local
        self.end_index = self.begin_index + local
        self.sample_index = self.begin_index

    def reset(self, new_size: int | None = None) -> None:
        """With a different size rebuild the block, else rewind to its start."""
        size = self.size if new_size is None else self._check_size(new_size, "new_size")
        if size != self.size:
            self.size = size
            self._populate()
        else:
            self.sample_index = self.begin_index

    def _values(self, start: int, end: int) -> np.ndarray:
        out = np.arange(start, end, dtype=np.int64)
        if end >= self.size and self.size > 0:
            out %= self.size
        return out

    def next(self, batch_size: int) -> list[int] | None:
        """The next up to ``batch_size`` indices of this rank, or None when the epoch is done."""
        span = self._take(batch_size)
        if span is None:
            return None
        return self._values(*span).tolist()

    def indices(self) -> np.ndarray:
        """This rank's indices, ``begin .. end - 1`` modulo ``size`` (int64 array)."""
        return self._values(self.begin_index, self.end_index)

    def state_dict(self) -> dict[str, int]:
        """What C++ ``save`` writes: ``sample_index_`` only."""
        return {"sample_index_": self.sample_index}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """C++ ``load``: restore ``sample_index_``."""
        if not isinstance(state, dict) or "sample_index_" not in state:
            raise ValueError("state must be a dict with key 'sample_index_' (from state_dict()), "
                             f"got {state!r}")
        self.sample_index = self._check_index(state["sample_index_"])
