"""Sub-ranges of a collective's buffer: blocks, and the pieces a message is cut into.

Two words, one for each kind of sub-range, used everywhere in :mod:`distlab.collectives`:

- a **block** is one of the parts a plan cuts the buffer into: ``p`` near-equal blocks of an
  allreduce vector (:func:`block_bounds`; a ring passes one block per step), or, for the
  collectives whose semantics are blocked (gather, scatter, all-gather, reduce-scatter,
  all-to-all), the ``p`` equal blocks of ``m`` elements, block ``b`` being ``[b m, (b + 1) m)``
  (:func:`check_blocked`, :func:`block_transfers`);
- a **piece** is one of the messages a single transfer is cut into so that the receiver reduces
  each as it lands while the next ones are still in flight (:func:`split`, the ``pieces``
  option). A ring step cut into ``k`` pieces sends ``k`` messages of about ``block / k``
  elements each: the same bytes for ``k - 1`` more messages, which the cost model charges (alpha
  per message), against the reduction of all but the last piece hidden behind the transfer (its
  overlap term). Which ``k`` is fastest depends on alpha, beta and gamma:
  :func:`distlab.collectives.model.choice.best_pieces` asks the calibrated model. The
  ``segment_size`` option of the segmented ring is a piece size in elements.

Ranges are element indices ``[start, stop)``, never bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from distlab._checks import check_int
from distlab.collectives.plan.schedule import Transfer, check_count, check_world_size

__all__ = ["MAX_PIECES", "block_bounds", "block_transfers", "check_blocked", "check_pieces",
           "runs", "split"]

MAX_PIECES = 1024  # far past any useful split; keeps tags (transfer index per step) small


def block_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """Split ``count`` elements into ``parts`` contiguous blocks whose sizes differ by at most 1.

    The first ``count % parts`` blocks get the extra element; blocks may be empty when
    ``count < parts``. Returns ``[(start, stop), ...]`` of length ``parts``.
    """
    base, extra = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def check_blocked(world_size: Any, count: Any, collective: str) -> tuple[int, int, int]:
    """``(p, count, m)`` for a collective of ``p`` blocks; ``count`` must divide by ``p``."""
    p, n = check_world_size(world_size), check_count(count)
    if n % p:
        raise ValueError(f"count (elements) must be a multiple of world_size={p} for "
                         f"{collective} (p blocks of count / p elements), got {n}")
    return p, n, n // p


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


def check_pieces(pieces: Any) -> int:
    """Validate ``pieces`` (messages per transfer, an int in ``[1, MAX_PIECES]``)."""
    return check_int("pieces (messages per transfer)", pieces, minimum=1, maximum=MAX_PIECES)


def split(transfers: Iterable[Transfer], pieces: int) -> list[Transfer]:
    """Each transfer cut into ``pieces`` contiguous pieces of near-equal size, in order
    (transfer by transfer, lowest elements first); empty pieces (a range shorter than
    ``pieces``) are dropped, so a transfer never becomes more messages than elements."""
    if pieces == 1:
        return list(transfers)
    out = []
    for t in transfers:
        for a, b in block_bounds(t.count, pieces):
            if b > a:
                out.append(Transfer(t.src, t.dst, t.start + a, t.start + b, t.kind))
    return out
