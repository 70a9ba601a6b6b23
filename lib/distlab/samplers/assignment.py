"""Who reads which dataset index: the :class:`Assignment` of one epoch, as a pure function.

    a = assign(10, 4, layout="torch", shuffle=False)
    a.per_rank[1].tolist()   # [1, 5, 9]
    a.num_padded, a.is_disjoint(), a.covers_all()    # (2, True, True)

Layouts:

* ``"torch"`` (``torch.utils.data.DistributedSampler``): rank ``r`` reads positions
  ``r, r + W, ...`` (strided) of the epoch order padded by repeats from its start to
  ``ceil(n / W) * W`` entries, or cut to ``floor(n / W) * W`` with ``drop_last``. With ``exact``
  (:class:`~distlab.samplers.DistributedEvalSampler`) nothing is padded or dropped.
* ``"libtorch"`` (C++ ``DistributedRandomSampler`` / ``DistributedSequentialSampler``): rank ``r``
  reads a contiguous block of ``local`` entries; ``drop_last`` means ``allow_duplicates=False``; the
  shuffle seed is the epoch alone (``seed`` is ignored, as in C++).

Plots, statistics, the notebook and the tests read the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distlab._checks import check_bool, check_choice, check_int, check_str
from distlab.samplers.libstdcxx import MAX_SHUFFLE_SIZE
from distlab.samplers.libstdcxx import shuffle as std_shuffle
from distlab.samplers.mt19937 import MT19937
from distlab.samplers.torch_compat import epoch_order

__all__ = ["LAYOUTS", "Assignment", "assign"]

LAYOUTS = ("torch", "libtorch")


@dataclass(frozen=True)
class Assignment:
    """One epoch's split of ``length`` dataset indices over ``num_replicas`` ranks.

    Attributes:
        length, num_replicas, layout, shuffle, seed, epoch, drop_last, exact: the parameters.
        per_rank: rank -> int64 array of the dataset indices it reads, in reading order.
        padded: rank -> bool array, True where that position is a padded duplicate.
        dropped: sorted int64 array of dataset indices that no rank reads.
    """

    length: int
    num_replicas: int
    layout: str
    shuffle: bool
    seed: int
    epoch: int
    drop_last: bool
    exact: bool
    per_rank: tuple[np.ndarray, ...] = field(repr=False)
    padded: tuple[np.ndarray, ...] = field(repr=False)
    dropped: np.ndarray = field(repr=False)

    @property
    def counts(self) -> np.ndarray:
        """Indices per rank (int64 array of length ``num_replicas``)."""
        return np.array([a.size for a in self.per_rank], dtype=np.int64)

    @property
    def num_padded(self) -> int:
        """How many positions, over all ranks, are padded duplicates."""
        return int(sum(int(p.sum()) for p in self.padded))

    @property
    def num_dropped(self) -> int:
        """How many dataset indices no rank reads."""
        return int(self.dropped.size)

    def out_of_range(self) -> np.ndarray:
        """Indices read that are not in ``[0, length)`` (libtorch's padding quirk; else empty)."""
        every = np.concatenate(self.per_rank) if self.per_rank else np.empty(0, np.int64)
        return np.unique(every[(every < 0) | (every >= self.length)])

    def owner(self) -> np.ndarray:
        """For each dataset index, the rank reading it as a real (unpadded) sample, else -1."""
        out = np.full(self.length, -1, dtype=np.int64)
        for rank, (idx, pad) in enumerate(zip(self.per_rank, self.padded, strict=True)):
            real = idx[~pad]
            out[real[(real >= 0) & (real < self.length)]] = rank
        return out

    def shared_indices(self) -> np.ndarray:
        """Dataset indices read (unpadded) by more than one rank; empty for a correct sampler."""
        real = [np.unique(idx[~pad]) for idx, pad in zip(self.per_rank, self.padded, strict=True)]
        every = np.concatenate(real) if real else np.empty(0, np.int64)
        values, times = np.unique(every, return_counts=True)
        return values[times > 1]

    def is_disjoint(self) -> bool:
        """No dataset index is read by two ranks, apart from padded duplicates."""
        return self.shared_indices().size == 0

    def covers_all(self) -> bool:
        """Every dataset index in ``[0, length)`` is read by some rank."""
        return bool((self.owner() >= 0).all())

    def steps(self, batch_size: int) -> np.ndarray:
        """Batches per rank for ``batch_size`` (the last batch may be short)."""
        batch_size = check_int("batch_size", batch_size, minimum=1)
        return -(-self.counts // batch_size)

    def mean_over_reads(self, values: np.ndarray) -> float:
        """Mean of ``values[i]`` over every index read by every rank, duplicates included.

        This is what a metric averaged over all ranks' evaluation samples computes: padded
        duplicates count twice, dropped indices not at all. ``values`` has one entry per dataset
        index; NaN when nothing is read.
        """
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (self.length,):
            raise ValueError(f"values must have shape ({self.length},) (one per dataset index), "
                             f"got {values.shape}")
        every = np.concatenate(self.per_rank) if self.per_rank else np.empty(0, np.int64)
        return float(values[every].mean()) if every.size else float("nan")

    def grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, padded) as rank x position matrices; missing cells are -1 / False."""
        width = int(self.counts.max()) if self.num_replicas and self.counts.size else 0
        idx = np.full((self.num_replicas, width), -1, dtype=np.int64)
        pad = np.zeros((self.num_replicas, width), dtype=bool)
        for rank, (a, p) in enumerate(zip(self.per_rank, self.padded, strict=True)):
            idx[rank, :a.size] = a
            pad[rank, :p.size] = p
        return idx, pad

    def problems(self) -> list[str]:
        """Human-readable violations of the checks (empty when all hold)."""
        out = []
        shared = self.shared_indices()
        if shared.size:
            out.append(f"{shared.size} indices are read by more than one rank: "
                       f"{shared[:10].tolist()}")
        if self.num_dropped == 0 and not self.covers_all():
            out.append("nothing is dropped, yet some indices are read by no rank")
        bad = self.out_of_range()
        if bad.size:
            out.append(f"indices outside [0, {self.length}) are read: {bad[:10].tolist()}")
        return out


def assign(length: int, num_replicas: int, *, layout: str = "torch", shuffle: bool = True,
           seed: int = 0, epoch: int = 0, drop_last: bool = False,
           exact: bool = False) -> Assignment:
    """The :class:`Assignment` a sampler with these parameters produces for one epoch.

    Args:
        length: dataset length, >= 0.
        num_replicas: world size, >= 1.
        layout: ``"torch"`` (strided) or ``"libtorch"`` (contiguous blocks).
        shuffle: permute (torch: ``randperm`` seeded ``seed + epoch``; libtorch: ``std::shuffle``
            with ``std::mt19937(epoch)``).
        seed: torch layout only; libtorch ignores it.
        epoch: >= 0.
        drop_last: cut the tail instead of padding (libtorch: ``allow_duplicates=False``).
        exact: torch layout only, neither pad nor drop (:class:`DistributedEvalSampler`).

    Raises:
        ValueError / TypeError: an argument out of range, or ``exact`` with ``drop_last`` or with
            the libtorch layout.
    """
    check_choice("layout", check_str("layout", layout), LAYOUTS)
    n = check_int("length", length, minimum=0,
                  maximum=MAX_SHUFFLE_SIZE if layout == "libtorch" else None)
    w = check_int("num_replicas", num_replicas, minimum=1)
    shuffle = check_bool("shuffle", shuffle)
    seed = check_int("seed", seed)
    epoch = check_int("epoch", epoch, minimum=0)
    drop_last = check_bool("drop_last", drop_last)
    exact = check_bool("exact", exact)
    if exact and (drop_last or layout != "torch"):
        raise ValueError("exact=True (neither pad nor drop) needs layout='torch' and "
                         f"drop_last=False, got layout={layout!r}, drop_last={drop_last}")
    build = _torch_split if layout == "torch" else _libtorch_split
    per_rank, padded, dropped = build(n, w, shuffle, seed, epoch, drop_last, exact)
    return Assignment(n, w, layout, shuffle, seed, epoch, drop_last, exact, tuple(per_rank),
                      tuple(padded), np.sort(dropped).astype(np.int64))


def _torch_split(n: int, w: int, shuffle: bool, seed: int, epoch: int, drop_last: bool,
                 exact: bool) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    order = epoch_order(n, shuffle, seed, epoch).numpy().astype(np.int64)
    if exact:
        total = n
    elif drop_last and n % w:
        total = (n // w) * w
    else:
        total = -(-n // w) * w
    pos = np.arange(total, dtype=np.int64)
    values = order[pos % n] if n else pos
    per_rank = [values[r::w] for r in range(w)]
    padded = [pos[r::w] >= n for r in range(w)]
    return per_rank, padded, order[total:]


def _libtorch_split(n: int, w: int, shuffle: bool, seed: int, epoch: int, drop_last: bool,
                    exact: bool) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    local = n // w if drop_last else -(-n // w)
    if shuffle:
        count = n if w == 1 else local * w
        origin = np.arange(count, dtype=np.int64)  # which list slot each entry started in
        std_shuffle(origin, MT19937(epoch))
        values = np.where(origin >= n, origin - n, origin)
        is_pad = origin >= n
        dropped = np.arange(count, n, dtype=np.int64)
    else:
        pos = np.arange(local * w, dtype=np.int64)
        values = pos % n if n else pos
        is_pad = pos >= n
        dropped = np.arange(min(local * w, n), n, dtype=np.int64)
    per_rank = [values[r * local:(r + 1) * local] for r in range(w)]
    padded = [is_pad[r * local:(r + 1) * local] for r in range(w)]
    return per_rank, padded, dropped
