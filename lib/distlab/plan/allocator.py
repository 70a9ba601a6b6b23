"""torch's CUDA caching allocator, replayed: how many bytes a sequence of allocations and frees
makes it reserve from the GPU.

A training step asks the allocator for tensors and gives them back; the allocator keeps what
it got from ``cudaMalloc`` (its *segments*) and carves requests out of them. What it reserves at
its peak is more than the most bytes ever allocated at once: a freed block serves only a
request no larger than itself on the same stream, blocks of one segment are never moved, and a
new segment is taken whenever no cached block fits. :class:`CachingAllocator` follows
``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.x) with its default settings:

- sizes rounded up to 512 bytes; requests of at most 1 MiB served from the *small* pool (2 MiB
  segments), larger ones from the *large* pool (a 20 MiB segment under 10 MiB, else the size
  rounded up to 2 MiB);
- a request takes the smallest cached block of its pool and stream that holds it (best fit,
  the lowest address among equals) and splits it when more than 1 MiB would be left over
  (512 bytes in the small pool); a freed block merges with free neighbours of its segment;
- with no cached block that fits, a new segment; if the device cannot hold it, every unsplit
  cached segment is released and the request tried once more, else out of memory;
- ``expandable_segments=True`` (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``): one
  segment per stream and pool whose end grows by whole pages (20 MiB, 2 MiB in the small pool)
  when no cached block fits, the free block at its end merged into the request.

Sizes are bytes. The allocator's other settings (``max_split_size_mb``,
``roundup_power2_divisions``, garbage collection) are left at their defaults and not modelled.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["K_LARGE_BUFFER", "K_MIN_BLOCK", "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE", "K_SMALL_BUFFER",
           "K_SMALL_SIZE", "AllocatorPeaks", "CachingAllocator", "Event", "OutOfMemory",
           "allocation_size", "replay", "round_size"]

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    """A request rounded as the allocator rounds it: at least 512 bytes, a multiple of 512."""
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK


def allocation_size(nbytes: int) -> int:
    """Bytes of the segment a (rounded) request that no cached block serves makes the allocator
    take from the device."""
    if nbytes <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if nbytes < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-nbytes // K_ROUND_LARGE) * K_ROUND_LARGE


class OutOfMemory(RuntimeError):
    """The device could not hold a new segment even after the cache was emptied."""


@dataclass(eq=False, slots=True)
class _Block:
    ptr: int
    size: int
    stream: int
    small: bool
    segment: int
    allocated: bool = False
    prev: _Block | None = None
    next: _Block | None = None

    def key(self) -> tuple[int, int, int]:
        return (self.stream, self.size, self.ptr)


@dataclass
class _Pool:
    keys: list[tuple[int, int, int]] = field(default_factory=list)
    blocks: dict[tuple[int, int, int], _Block] = field(default_factory=dict)

    def add(self, b: _Block) -> None:
        k = (b.stream, b.size, b.ptr)   # b.key(), inline: the replay's hottest lines
        bisect.insort(self.keys, k)
        self.blocks[k] = b

    def remove(self, b: _Block) -> None:
        k = (b.stream, b.size, b.ptr)
        keys = self.keys
        del keys[bisect.bisect_left(keys, k)]
        del self.blocks[k]

    def best_fit(self, stream: int, size: int) -> _Block | None:
        i = bisect.bisect_left(self.keys, (stream, size, -1))
        if i == len(self.keys) or self.keys[i][0] != stream:
            return None
        return self.blocks[self.keys[i]]


@dataclass(frozen=True)
class AllocatorPeaks:
    """What a replay saw, bytes: the most allocated (requests rounded) and reserved at once,
    the reserved bytes at the end, and the number of segments taken."""

    allocated: int
    reserved: int
    reserved_at_end: int
    segments: int


class CachingAllocator:
    """The allocator's state (the module docstring). ``capacity``: bytes the device can give
    (``None``: unlimited)."""

    def __init__(self, *, expandable_segments: bool = False, capacity: int | None = None
                 ) -> None:
        self.expandable = expandable_segments
        self.capacity = capacity
        self.pools = {True: _Pool(), False: _Pool()}
        self.live: dict[int, _Block] = {}
        self.allocated = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.segments_taken = 0
        self._next_ptr = 1 << 40
        self._segments: dict[int, list[_Block]] = {}   # segment id -> its first block, size
        self._seg_size: dict[int, int] = {}
        self._expandable_seg: dict[tuple[int, bool], int] = {}
        self._seg_id = 0

    # -- segments ------------------------------------------------------------------------
    def _new_segment(self, size: int, stream: int, small: bool) -> _Block:
        if self.capacity is not None and self.reserved + size > self.capacity:
            self._release_cached()
            if self.reserved + size > self.capacity:
                raise OutOfMemory(f"asked {size} bytes with {self.reserved} reserved of "
                                  f"{self.capacity}")
        self._seg_id += 1
        b = _Block(self._next_ptr, size, stream, small, self._seg_id)
        self._next_ptr += size + (1 << 30)
        self._segments[self._seg_id] = [b]
        self._seg_size[self._seg_id] = size
        self.reserved += size
        self.segments_taken += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return b

    def _release_cached(self) -> None:
        """Release every segment that is one free block (what ``release_cached_blocks``
        returns to the device)."""
        for pool in self.pools.values():
            for k in list(pool.keys):
                b = pool.blocks[k]
                if b.prev is None and b.next is None and b.segment in self._seg_size \
                        and self._seg_size[b.segment] == b.size:
                    pool.remove(b)
                    self.reserved -= b.size
                    del self._seg_size[b.segment]
                    self._expandable_seg = {kk: v for kk, v in self._expandable_seg.items()
                                            if v != b.segment}

    def _grow(self, stream: int, small: bool, size: int) -> _Block:
        """An expandable segment's end grown to serve ``size`` bytes (the free block at its end
        merged in); a new segment when the stream has none."""
        page = K_SMALL_BUFFER if small else K_LARGE_BUFFER
        seg = self._expandable_seg.get((stream, small))
        if seg is None:
            n = -(-size // page) * page
            b = self._new_segment(n, stream, small)
            self._expandable_seg[(stream, small)] = b.segment
            return b
        tail = self._tail(seg)
        have = tail.size if not tail.allocated else 0
        extra = -(-(size - have) // page) * page
        if self.capacity is not None and self.reserved + extra > self.capacity:
            raise OutOfMemory(f"asked {extra} more bytes with {self.reserved} reserved of "
                              f"{self.capacity}")
        self.reserved += extra
        self._seg_size[seg] += extra
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        if tail.allocated:
            b = _Block(tail.ptr + tail.size, extra, stream, small, seg, prev=tail)
            tail.next = b
            return b
        self.pools[small].remove(tail)
        tail.size += extra
        return tail

    def _tail(self, seg: int) -> _Block:
        b = self._segments[seg][0]
        while b.next is not None:
            b = b.next
        return b

    # -- requests -----------------------------------------------------------------------
    def malloc(self, handle: int, nbytes: int, stream: int = 0) -> None:
        """Serve a request of ``nbytes`` on ``stream``, remembered as ``handle`` (freed by
        :meth:`free`)."""
        size = K_MIN_BLOCK if nbytes < K_MIN_BLOCK else -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK
        small = size <= K_SMALL_SIZE   # (round_size, inline)
        pool = self.pools[small]
        b = pool.best_fit(stream, size)
        if b is not None:
            pool.remove(b)
        elif self.expandable:
            b = self._grow(stream, small, size)
        else:
            b = self._new_segment(allocation_size(size), stream, small)
        remaining = b.size - size
        if (remaining >= K_MIN_BLOCK) if small else (remaining > K_SMALL_SIZE):
            rest = _Block(b.ptr + size, remaining, stream, small, b.segment, prev=b, next=b.next)
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = size
            pool.add(rest)
        b.allocated = True
        self.live[handle] = b
        self.allocated += b.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated

    def free(self, handle: int) -> None:
        """Give back the block of ``handle``; it merges with free neighbours."""
        b = self.live.pop(handle)
        b.allocated = False
        self.allocated -= b.size
        pool = self.pools[b.small]
        n = b.prev
        if n is not None and not n.allocated:   # merge into the free block before it
            pool.remove(n)
            n.size += b.size
            n.next = b.next
            if b.next is not None:
                b.next.prev = n
            if self._segments[b.segment][0] is b:
                self._segments[b.segment][0] = n
            b = n
        n = b.next
        if n is not None and not n.allocated:   # and the free block after it into it
            pool.remove(n)
            b.size += n.size
            b.next = n.next
            if n.next is not None:
                n.next.prev = b
        pool.add(b)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: release every cached segment that holds nothing."""
        self._release_cached()

    def peaks(self) -> AllocatorPeaks:
        """:class:`AllocatorPeaks` so far."""
        return AllocatorPeaks(self.peak_allocated, self.peak_reserved, self.reserved,
                              self.segments_taken)


@dataclass(frozen=True)
class Event:
    """One request (``nbytes > 0``) or the free of ``handle`` (``nbytes == 0``) on ``stream``."""

    handle: int
    nbytes: int
    stream: int = 0


def replay(events: Iterable[Event], *, expandable_segments: bool = False,
           capacity: int | None = None) -> AllocatorPeaks:
    """Run ``events`` through a fresh :class:`CachingAllocator`; raises :class:`OutOfMemory`
    where the device (``capacity`` bytes) cannot hold the segments."""
    a = CachingAllocator(expandable_segments=expandable_segments, capacity=capacity)
    for e in events:
        if e.nbytes:
            a.malloc(e.handle, e.nbytes, e.stream)
        else:
            a.free(e.handle)
    return a.peaks()
