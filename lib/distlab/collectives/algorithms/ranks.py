"""Rank arithmetic the builders share: ranks relative to a root, powers of two, a root's check.

Rooted algorithms work on *relative* ranks (``q = (r - root) mod p``: the root is 0) and map back
with :func:`real`.
"""

from __future__ import annotations

from typing import Any

from distlab._checks import check_int

__all__ = ["ceil_log2", "check_root", "real"]


def check_root(root: Any, world_size: int) -> int:
    """Validate ``root`` (an int in ``[0, world_size)``)."""
    return check_int("root", root, minimum=0, maximum=world_size - 1)


def real(q: int, root: int, p: int) -> int:
    """The rank of relative rank ``q``."""
    return (q + root) % p


def ceil_log2(p: int) -> int:
    """``ceil(log2 p)`` (0 for ``p = 1``)."""
    return (p - 1).bit_length()

