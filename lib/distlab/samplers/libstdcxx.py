"""libstdc++'s ``std::shuffle`` with a ``std::mt19937``, vectorised in NumPy.

What libstdc++ (GCC >= 11, as the Linux torch wheels are built) does for ``std::shuffle(first, last,
g)`` with a 32-bit generator and ``n = last - first`` elements, from ``bits/stl_algo.h`` and
``bits/uniform_int_dist.h``:

* ``n == 0``: nothing. Otherwise positions ``i = 1 .. n-1`` are swapped in order with a position
  ``z[i]`` drawn uniformly from ``[0, i]`` (a forward Fisher-Yates).
* If ``n * n <= 2**32 - 1`` (precisely ``(2**32 - 1) // n >= n``) two positions come from one draw:
  when ``n`` is even, ``z[1]`` is drawn alone from ``[0, 1]``; then for each remaining pair
  ``(i, i + 1)`` one value ``x`` is drawn from ``[0, (i + 1) * (i + 2))`` and split as
  ``z[i] = x // (i + 2)``, ``z[i + 1] = x % (i + 2)``.
* Otherwise each ``z[i]`` is its own draw from ``[0, i]``.
* A draw from ``[0, r)`` (``r < 2**32``) is Lemire's nearly divisionless method: ``p = g() * r``
  (64-bit); reject while the low 32 bits are below ``(2**32 - r) % r``; return ``p >> 32``.

This module draws all ``z`` with vectorised rejection handling (:func:`bounded_draws`: a few NumPy
calls per rejected output, of which there are about ``n**2 / 2**34``) and applies the swaps in
blocks that provably do not interact (:func:`apply_swaps`: about ``4 * sqrt(n)`` NumPy steps instead
of ``n`` Python steps). Ten million elements take a few seconds.
"""

from __future__ import annotations

import math

import numpy as np

from distlab._checks import check_int
from distlab.samplers.mt19937 import MT19937

__all__ = ["RawStream", "bounded_draws", "shuffle_targets", "apply_swaps", "shuffle",
           "MAX_SHUFFLE_SIZE"]

_TWO32 = 1 << 32
_MASK = np.uint64(0xFFFFFFFF)
_URNG_RANGE = _TWO32 - 1
_MAX_SHIFT = 16
MAX_SHUFFLE_SIZE = _TWO32 - 1
"""Largest ``n`` handled: every draw then stays on libstdc++'s 32-bit downscaling path."""


class RawStream:
    """Buffered outputs of an :class:`MT19937` that can hand back what a block did not use."""

    def __init__(self, gen: MT19937) -> None:
        self.gen = gen
        self.buf = np.empty(0, dtype=np.uint64)
        self.pos = 0

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` outputs (uint64 array, values < 2**32)."""
        have = self.buf.size - self.pos
        if have < count:
            fresh = self.gen.next_raw(max(count - have, 1 << 16)).astype(np.uint64)
            self.buf = np.concatenate([self.buf[self.pos:], fresh])
            self.pos = 0
        out = self.buf[self.pos:self.pos + count]
        self.pos += count
        return out

    def unread(self, count: int) -> None:
        """Give back the last ``count`` outputs taken (they come out again, in order)."""
        self.pos -= count


def bounded_draws(stream: RawStream, ranges: np.ndarray) -> np.ndarray:
    """``uniform_int_distribution{0, r - 1}(g)`` for each ``r`` in ``ranges``, in order.

    A rejected output shifts the pairing of all later draws with the stream by one. Each block
    takes ``m + _MAX_SHIFT`` outputs, finds the first rejection under the current shift, accepts
    everything before it in one step, and continues with the shift increased, so a rejection
    costs a few NumPy calls; the block ends early when the shift reaches ``_MAX_SHIFT``.

    Args:
        stream: the generator's outputs.
        ranges: uint64 array of exclusive upper bounds, each in ``[1, 2**32 - 1]``.

    Returns:
        uint64 array of the draws, ``out[k]`` in ``[0, ranges[k])``.
    """
    ranges = np.asarray(ranges, dtype=np.uint64)
    total = ranges.size
    out = np.empty(total, dtype=np.uint64)
    k = 0
    while k < total:
        m = min(total - k, 1 << 18)
        # about _MAX_SHIFT / 2 rejections per block: a draw is rejected with probability < r / 2**32
        rmax = int(ranges[k:k + m].max())
        m = min(m, max(256, (_MAX_SHIFT << 31) // rmax))
        r = ranges[k:k + m]
        threshold = (np.uint64(_TWO32) - r) % r  # accept iff low 32 bits >= threshold
        u = stream.take(m + _MAX_SHIFT)
        i = shift = 0
        while i < m and shift < _MAX_SHIFT:
            prod = u[i + shift:m + shift] * r[i:]
            rejected = np.flatnonzero((prod & _MASK) < threshold[i:])
            f = int(rejected[0]) if rejected.size else m - i
            out[k + i:k + i + f] = prod[:f] >> np.uint64(32)
            i += f
            if i < m:
                shift += 1  # output i + shift - 1 was rejected; draw i retries with the next
        stream.unread(m + _MAX_SHIFT - (i + shift))
        k += i
    return out


def shuffle_targets(n: int, gen: MT19937) -> np.ndarray:
    """The swap partner ``z[i]`` of every position ``i`` (``z[0] = 0``) for ``std::shuffle``.

    Args:
        n: number of elements, in ``[0, MAX_SHUFFLE_SIZE]``.
        gen: the generator, consumed exactly as libstdc++ consumes it.

    Returns:
        int64 array of length ``n``.
    """
    n = check_int("n", n, minimum=0, maximum=MAX_SHUFFLE_SIZE)
    z = np.zeros(n, dtype=np.int64)
    if n <= 1:
        return z
    stream = RawStream(gen)
    if _URNG_RANGE // n >= n:  # two positions per draw
        first = 2 if n % 2 == 0 else 1
        b0 = np.arange(first, n, 2, dtype=np.uint64) + np.uint64(1)
        b1 = b0 + np.uint64(1)
        head = np.array([2] if first == 2 else [], dtype=np.uint64)
        x = bounded_draws(stream, np.concatenate([head, b0 * b1]))
        if first == 2:
            z[1] = int(x[0])
            x = x[1:]
        z[first::2] = (x // b1).astype(np.int64)
        z[first + 1::2] = (x % b1).astype(np.int64)
        return z
    z[1:] = bounded_draws(stream, np.arange(2, n + 1, dtype=np.uint64)).astype(np.int64)
    return z


def apply_swaps(values: np.ndarray, z: np.ndarray) -> None:
    """In place: ``for i in 1..n-1: swap(values[i], values[z[i]])``, with ``z[i] <= i``.

    Steps ``i .. i+c-1`` are applied at once when their partners are all below ``i`` and
    distinct: then each step reads a position nothing else in the block writes, and writes
    positions nothing else in the block touches. The first step that breaks this runs alone.
    """
    n = values.size
    i = 1
    while i < n:
        hi = min(n, i + max(16, 2 * math.isqrt(i)))
        zz = z[i:hi]
        c = hi - i
        inside = np.flatnonzero(zz >= i)
        if inside.size:
            c = int(inside[0])
        if c > 1:
            seg = zz[:c]
            order = np.argsort(seg, kind="stable")
            s = seg[order]
            dup = np.flatnonzero(s[1:] == s[:-1])
            if dup.size:
                c = int(order[dup + 1].min())
        if c > 0:
            t = zz[:c]
            mine = values[i:i + c].copy()
            values[i:i + c] = values[t]
            values[t] = mine
            i += c
        if i < n and (c == 0 or i < hi):
            j = int(z[i])
            values[i], values[j] = values[j], values[i]
            i += 1


def shuffle(values: np.ndarray, gen: MT19937) -> None:
    """``std::shuffle(values.begin(), values.end(), gen)`` in place (libstdc++'s algorithm)."""
    apply_swaps(values, shuffle_targets(values.size, gen))
