"""Shared pieces of the collectives' builders: blocks of a buffer, ranks relative to a root, the
transfers of a set of blocks, and the checks of the options every builder takes.

``p`` blocks of ``m`` elements: block ``b`` is ``[b m, (b + 1) m)``. Rooted algorithms work on
*relative* ranks (``q = (r - root) mod p``: the root is 0) and map back with :func:`real`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from distlab._checks import check_int

from .schedule import Transfer, check_count, check_world_size

__all__ = ["block_transfers", "ceil_log2", "check_blocked", "check_root", "pof2_below", "real",
           "runs"]


def check_root(root: Any, world_size: int) -> int:
    """Validate ``root`` (an int in ``[0, world_size)``)."""
    return check_int("root", root, minimum=0, maximum=world_size - 1)


def check_blocked(world_size: Any, count: Any, collective: str) -> tuple[int, int, int]:
    """``(p, count, m)`` for a collective of ``p`` blocks; ``count`` must divide by ``p``."""
    p, n = check_world_size(world_size), check_count(count)
    if n % p:
        raise ValueError(f"count (elements) must be a multiple of world_size={p} for "
                         f"{collective} (p blocks of count / p elements), got {n}")
    return p, n, n // p


def real(q: int, root: int, p: int) -> int:
    """The rank of relative rank ``q``."""
    return (q + root) % p


def ceil_log2(p: int) -> int:
    """``ceil(log2 p)`` (0 for ``p = 1``)."""
    return (p - 1).bit_length()


def pof2_below(p: int) -> int:
    """The largest power of two ``<= p``."""
    return 1 << (p.bit_length() - 1)


def runs(blocks: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted block indices as maximal runs ``[first, last + 1)``."""
    out: list[tuple[int, int]] = []
    for b in sorted(blocks):
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0], b + 1)
        else:
            out.append((b, b + 1))
    return out


def block_transfers(src: int, dst: int, blocks: Iterable[int], m: int,
                    kind: str) -> list[Transfer]:
    """Transfers moving ``blocks`` (indices of blocks of ``m`` elements) from ``src`` to
    ``dst``: one per run of consecutive blocks (none when ``m`` is 0)."""
    return [Transfer(src, dst, a * m, b * m, kind) for a, b in runs(blocks) if b > a and m]
