"""``torch.utils.data.DistributedSampler``, index for index, without a Python list of the dataset.

    from distlab.samplers import DistributedSampler, DistributedEvalSampler
    sampler = DistributedSampler(1_000_000, num_replicas=8, rank=3, seed=0)
    sampler.set_epoch(5)
    mine = sampler.indices()        # int64 tensor, exactly list(torch_sampler) for rank 3

How torch defines the sequence (``torch/utils/data/distributed.py``): take ``randperm(n, generator
seeded with seed + epoch)`` (or ``range(n)``), pad it by repeating it from the start up to
``total_size = num_samples * num_replicas`` (or cut it to ``total_size`` with ``drop_last``), and
give rank ``r`` the positions ``r, r + W, r + 2W, ...``. So position ``p`` of the padded list holds
``order[p % n]``; this module computes exactly those values for this rank's positions only.

Why it is leaner than torch: torch turns the whole permutation into a Python list (about 36 bytes
per index, plus the padded copy) before slicing. Here the permutation is drawn into an int32 buffer
(``torch.randperm`` draws the same random numbers whatever the dtype, so the values are identical;
int64 is used from 2**31 elements on); iteration reads this rank's strided view of it and converts
64 Ki indices at a time to Python ints, and :meth:`indices` copies only this rank's share.

Resuming: ``state_dict()`` records epoch, seed and how many indices of the current epoch the
running iterator has handed out; after ``load_state_dict`` the next iteration continues with exactly
the remaining indices, and the one after starts the epoch afresh. A finished pass counts as
finished (torchdata's semantics): the state saved after the last index says
``consumed == len(sampler)``, exactly as one ``next`` earlier once the last index is out, and
loading it yields nothing more for that epoch; ``set_epoch(e + 1)`` then starts the next one.

``consumed`` counts indices handed out *by the sampler*. A ``DataLoader`` with workers draws
indices ahead of the batches it delivers (``num_workers * prefetch_factor`` batches), so with 2
workers and batch size 4, ``consumed`` is 24 after 8 samples were delivered, and resuming from
it would skip the 16 in flight. For exact resume, save the state through a loader that tracks
delivered samples (``torchdata.stateful_dataloader.StatefulDataLoader``, which calls this
sampler's ``state_dict``/``load_state_dict``) or iterate with ``num_workers=0``.

``isinstance(sampler, torch.utils.data.DistributedSampler)`` is True (frameworks such as
PyTorch Lightning check it to decide whether to insert their own sampler); torch's ``__init__``
is not run and every attribute torch's code reads (``num_replicas``, ``rank``, ``epoch``,
``dataset``, ``shuffle``, ``seed``, ``drop_last``, ``num_samples``, ``total_size``) is set here.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler as _TorchDistributedSampler
from torch.utils.data import Sampler

from distlab._checks import check_bool, check_int, check_rank, dataset_length
from distlab.samplers.next_epoch import Precompute

__all__ = ["DistributedSampler", "DistributedEvalSampler", "SetEpochWarning", "epoch_order"]

_CHUNK = 1 << 16
_SEED_MIN, _SEED_MAX = -(1 << 63), (1 << 64) - 1


class SetEpochWarning(UserWarning):
    """A shuffled sampler started a second pass with the same epoch (``set_epoch`` forgotten).

    Silence it with ``warn_repeated_epoch=False`` on the sampler, or globally with
    ``warnings.filterwarnings("ignore", category=SetEpochWarning)``.
    """


def epoch_order(length: int, shuffle: bool, seed: int, epoch: int) -> torch.Tensor:
    """The dataset order of one epoch before padding: torch's ``randperm`` or ``arange``.

    Args:
        length: dataset length (>= 0).
        shuffle: draw ``torch.randperm(length)`` from a generator seeded with ``seed + epoch``.
        seed, epoch: as in torch's DistributedSampler.

    Returns:
        A 1-D integer tensor of ``length`` values (int32 below 2**31 elements, else int64).
    """
    dtype = torch.int32 if length < (1 << 31) else torch.int64
    if not shuffle:
        return torch.arange(length, dtype=dtype)
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(length, generator=g, dtype=dtype)


def _process_group_default(name: str) -> int:

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(f"{name}=None takes its value from the default torch.distributed process "
                         f"group, but none is initialized; pass {name} explicitly or call "
                         "torch.distributed.init_process_group first")
    return int(dist.get_world_size() if name == "num_replicas" else dist.get_rank())


class _ShardedSampler(Sampler[int]):
    """Shared machinery: arguments, epoch, this rank's positions, iteration, state, warning."""

    _pad_or_drop = True  # False: every index exactly once, uneven counts

    def __init__(self, dataset: Any, num_replicas: int | None, rank: int | None, shuffle: bool,
                 seed: int, drop_last: bool, warn_repeated_epoch: bool) -> None:
        self.dataset = dataset
        self.length = dataset_length(dataset)
        if num_replicas is None:
            num_replicas = _process_group_default("num_replicas")
        self.num_replicas = check_int("num_replicas", num_replicas, minimum=1)
        if rank is None:
            rank = _process_group_default("rank")
        self.rank = check_rank(rank, self.num_replicas)
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_int("seed", seed, minimum=_SEED_MIN, maximum=_SEED_MAX)
        self.drop_last = check_bool("drop_last", drop_last)
        self.warn_repeated_epoch = check_bool("warn_repeated_epoch", warn_repeated_epoch)
        self.epoch = 0
        self.num_samples, self.total_size = self._layout(self.length, self.num_replicas,
                                                         self.rank)
        self._elastic: tuple[int, int] | None = None  # (epoch, order positions already done)
        self._resume_from = 0
        self._active: _Progress | None = None
        self._last_pass_epoch: int | None = None
        self._warned = False

    def _layout(self, m: int, w: int, r: int) -> tuple[int, int]:
        """(indices per rank, padded total) for ``m`` order positions split over ``w`` ranks."""
        if not self._pad_or_drop:
            return len(range(r, m, w)), m
        num = math.ceil((m - w) / w) if self.drop_last and m % w != 0 else math.ceil(m / w)
        return num, num * w

    def _current(self) -> tuple[int, int, int, int]:
        """(base, m, per-rank count, padded total) of the current epoch's layout.

        Normally base 0 and m = N. After an elastic resume the resumed epoch lays out only the
        ``m = N - base`` order positions not yet done: sub-position ``q`` is order position
        ``base + q % m``.
        """
        base = self._elastic[1] if self._elastic and self._elastic[0] == self.epoch else 0
        if base == 0:
            return 0, self.length, self.num_samples, self.total_size
        m = self.length - base
        return (base, m, *self._layout(m, self.num_replicas, self.rank))

    def __len__(self) -> int:
        return self._current()[2]

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch; shuffled orders are ``randperm`` seeded with ``seed + epoch``."""
        epoch = check_int("epoch", epoch)
        if not _SEED_MIN <= self.seed + epoch <= _SEED_MAX:
            raise ValueError(f"seed + epoch must be in [{_SEED_MIN}, {_SEED_MAX}] (torch's "
                             f"generator seed range), got seed={self.seed}, epoch={epoch}")
        self.epoch = epoch
        self._last_pass_epoch = None  # epochs are managed: the next pass is not "forgotten"

    def _rank_parts(self) -> list[torch.Tensor]:
        """This rank's indices as [strided view into the epoch order, padding (if any)]."""
        base, n, num, total = self._current()
        w, r = self.num_replicas, self.rank
        if num == 0:
            return []
        order = self._order()[base:]
        head = order[r:min(total, n):w]  # a view: nothing of the order is copied
        if total <= n:
            return [head]
        # padding: positions n..total-1 repeat the order from its start (at most W - 1 of them,
        # so at most one per rank); position p holds order[p % n]
        pad_pos = torch.tensor(range(r + head.numel() * w, total, w), dtype=torch.int64)
        return [head, order[pad_pos % n]]

    def _order(self) -> torch.Tensor:
        return epoch_order(self.length, self.shuffle, self.seed, self.epoch)

    def indices(self) -> torch.Tensor:
        """This rank's indices for the current epoch, in order, as an int64 tensor."""
        parts = self._rank_parts()
        if not parts:
            return torch.empty(0, dtype=torch.int64)
        return torch.cat([p.to(torch.int64) for p in parts])

    def __iter__(self) -> Iterator[int]:
        start = self._resume_from
        self._resume_from = 0
        if start == 0 and self.shuffle and self._last_pass_epoch == self.epoch:
            self._warn_repeated()
        self._last_pass_epoch = self.epoch
        progress = _Progress(self._rank_parts(), start, self.epoch)
        self._active = progress
        return progress.run()

    def _warn_repeated(self) -> None:
        if not self.warn_repeated_epoch or self._warned:
            return
        self._warned = True
        warnings.warn(
            f"{type(self).__name__}: a new pass started with shuffle=True and the same epoch "
            f"({self.epoch}) as the previous pass, so it repeats the same order. Call "
            "sampler.set_epoch(epoch) at the start of every epoch, before iterating the "
            "DataLoader. To silence this, pass warn_repeated_epoch=False or filter "
            "distlab.samplers.SetEpochWarning.", SetEpochWarning, stacklevel=3)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, seed, parameters and ``consumed``: indices of this epoch already handed out."""
        consumed, epoch = self._resume_from, self.epoch
        active = self._active
        if active is not None and not active.done:  # a pass is under way
            consumed, epoch = active.consumed(), active.epoch
        elif active is not None and active.epoch == self.epoch and self._resume_from == 0:
            consumed = len(self)  # the pass finished: the epoch is done
        base = self._elastic[1] if self._elastic and self._elastic[0] == epoch else 0
        return {"epoch": epoch, "seed": self.seed, "consumed": consumed, "base": base,
                "length": self.length, "num_replicas": self.num_replicas, "rank": self.rank,
                "shuffle": self.shuffle, "drop_last": self.drop_last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields the indices of ``state``'s epoch after ``consumed``.

        Elastic resume: a state saved by a world of another size (ranks consume in lockstep, so
        any old rank's state describes the run) continues the same epoch here. With ``W`` old
        ranks each past ``k`` indices, the old ranks read padded positions ``[0, k W)``, i.e.
        order positions ``[0, min(base + k W, N))`` (``base``: positions done before that world
        started; a padded position ``p >= N`` repeats ``order[p % N]``, already read, so it
        marks nothing new). A finished old pass (``k`` = its length) marks the whole epoch done,
        its dropped tail included. The remaining ``m`` positions are split over the new ranks
        as a dataset of length ``m`` (strided, padded from the remainder's start or dropped):
        over the epoch every index is read once, up to the new world's padding or drop. The
        next epoch uses the normal layout again.

        Raises:
            ValueError: the state belongs to a sampler with another length, shuffle or
                drop_last, or (same world size) another rank, or is malformed.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = {"epoch", "seed", "consumed"} - set(state)
        if missing:
            raise ValueError(f"state is missing keys {sorted(missing)}")
        old_w = check_int("state['num_replicas']", state.get("num_replicas", self.num_replicas),
                          minimum=1)
        keys = ["length", "shuffle", "drop_last"] + (["rank"] if old_w == self.num_replicas else [])
        for key in keys:
            if key in state and state[key] != getattr(self, key):
                raise ValueError(f"state[{key!r}]={state[key]!r} but this sampler has "
                                 f"{key}={getattr(self, key)!r}; a state resumes only a sampler "
                                 "with the same parameters")
        self.seed = check_int("state['seed']", state["seed"], minimum=_SEED_MIN,
                              maximum=_SEED_MAX)
        self.set_epoch(state["epoch"])
        n = self.length
        base = check_int("state['base']", state.get("base", 0), minimum=0, maximum=n)
        old_rank = min(check_int("state['rank']", state.get("rank", 0), minimum=0), old_w - 1)
        old_len = self._layout(n - base, old_w, old_rank)[0] if base else (
            self._layout(n, old_w, old_rank)[0])
        consumed = check_int("state['consumed']", state["consumed"], minimum=0, maximum=old_len)
        if old_w == self.num_replicas:
            self._resume_from = consumed
        else:  # elastic: mark what the old world read, lay out the rest over this world
            done = n if consumed == old_len else min(base + consumed * old_w, n)
            base, self._resume_from = done, 0
        self._elastic = (self.epoch, base) if base else None
        self._active = None
        self._last_pass_epoch = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(length={self.length}, num_replicas={self.num_replicas}, "
                f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
                f"drop_last={self.drop_last}, epoch={self.epoch})")


class _Progress:
    """One pass: hands out Python ints 64 Ki at a time and knows how many it has handed out."""

    def __init__(self, parts: list[torch.Tensor], start: int, epoch: int) -> None:
        self.parts = parts
        self.epoch = epoch
        self.base = start
        self.chunk: Iterator[int] = iter(())
        self.chunk_len = 0
        self.done = False

    def consumed(self) -> int:
        remaining = self.chunk.__length_hint__()  # type: ignore[attr-defined]
        return self.base + self.chunk_len - remaining

    def run(self) -> Iterator[int]:
        pos, offset = self.base, 0
        for part in self.parts:
            size = part.numel()
            while pos < offset + size:
                values = part[pos - offset:pos - offset + _CHUNK].tolist()
                self.base, self.chunk_len = pos, len(values)
                self.chunk = iter(values)
                yield from self.chunk
                pos += len(values)
            offset += size
        self.parts = []
        self.done = True


class DistributedSampler(_ShardedSampler, _TorchDistributedSampler):
    """Drop-in for ``torch.utils.data.DistributedSampler``: same arguments, same indices.

    A subclass of ``torch.utils.data.DistributedSampler`` (torch's ``__init__`` is not run;
    every method and attribute torch defines comes from here).

    Args:
        dataset: a sized dataset, or its length as an int >= 0.
        num_replicas: world size, >= 1; None takes it from the initialized process group.
        rank: this rank, in [0, num_replicas - 1]; None takes it from the process group.
        shuffle: permute with ``torch.randperm`` seeded ``seed + epoch``.
        seed: int; the same on every rank.
        drop_last: cut the tail so that every rank gets ``floor(n / W)`` indices, instead of
            padding with repeats from the start so that every rank gets ``ceil(n / W)``.
        warn_repeated_epoch: warn (once, :class:`SetEpochWarning`) when a shuffled pass starts
            with the same epoch as the previous one.
        prefetch_next_epoch: draw epoch ``e + 1``'s order in a background thread while epoch
            ``e`` is consumed (one more order in memory); output is identical either way.
            :meth:`close` (or garbage collection) joins the thread.
    """

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, *,
                 warn_repeated_epoch: bool = True, prefetch_next_epoch: bool = False) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last,
                         warn_repeated_epoch)
        self.prefetch_next_epoch = check_bool("prefetch_next_epoch", prefetch_next_epoch)
        self._next: Precompute | None = None

    def _order(self) -> torch.Tensor:
        """The epoch's order: the precomputed one if it was guessed right, else computed now.

        With ``prefetch_next_epoch=True``, taking epoch ``e``'s order starts a background thread
        that draws epoch ``e + 1``'s (same seed) while ``e`` is consumed, so ``iter()`` after
        ``set_epoch(e + 1)`` finds it ready. A wrong guess (another epoch, a changed seed) is
        discarded and the order is computed here: the output never depends on the guess.
        """
        key = (self.length, self.shuffle, self.seed, self.epoch)
        ahead, self._next = self._next, None
        order = None
        if ahead is not None:  # joined either way: a wrong guess leaves no thread behind
            result = ahead.result()
            order = result if ahead.key == key else None
        if order is None:
            order = epoch_order(self.length, self.shuffle, self.seed, self.epoch)
        if self.prefetch_next_epoch and self.shuffle:
            nxt = (self.length, self.shuffle, self.seed, self.epoch + 1)
            if _SEED_MIN <= self.seed + self.epoch + 1 <= _SEED_MAX:
                self._next = Precompute(nxt, lambda: epoch_order(*nxt))
        return order

    def close(self) -> None:
        """Join the background precompute thread (if any) and drop its result."""
        ahead, self._next = getattr(self, "_next", None), None
        if ahead is not None:
            ahead.thread.join()

    def __del__(self) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()  # DataLoader workers get a copy: no thread to pickle
        state["_next"] = None
        return state


class DistributedEvalSampler(_ShardedSampler):
    """Evaluation sharding: every index exactly once over all ranks, no padding, no drop.

    Rank ``r`` gets positions ``r, r + W, ...`` of the (optionally shuffled) order, so the first
    ``n % W`` ranks get one index more than the others. Use it for evaluation, where padded
    duplicates would be counted twice in a metric; do not use it where every rank must run the
    same number of steps of a collective (training with DDP).

    Args:
        dataset, num_replicas, rank, seed: as :class:`DistributedSampler`.
        shuffle: default False (evaluation order rarely matters).
        warn_repeated_epoch: as :class:`DistributedSampler`.
    """

    _pad_or_drop = False

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = False, seed: int = 0, *,
                 warn_repeated_epoch: bool = True) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, False, warn_repeated_epoch)
