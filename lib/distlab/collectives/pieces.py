"""Pipelining inside a step: each message cut into ``pieces`` smaller ones.

A ring step sends one chunk per rank; cut into ``k`` pieces it sends ``k`` messages of about
``chunk / k`` elements each, and the receiver reduces each piece as it lands while the next ones
are still in flight (the executor posts every receive of a step, and of the next step, before it
waits for any). The bytes are the same; the price is ``k - 1`` more messages per step, which the
cost model charges (alpha per message), and the gain is the reduction of all but the last piece
hidden behind the transfer (the cost model's overlap term). Which ``k`` is fastest depends on
alpha, beta and gamma: :func:`distlab.collectives.tuning.best_pieces` asks the calibrated model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from distlab._checks import check_int

from .schedule import Transfer, chunk_bounds

__all__ = ["MAX_PIECES", "check_pieces", "split"]

MAX_PIECES = 1024  # far past any useful split; keeps tags (transfer index per step) small


def check_pieces(pieces: Any) -> int:
    """Validate ``pieces`` (messages per transfer, an int in ``[1, MAX_PIECES]``)."""
    return check_int("pieces (messages per transfer)", pieces, minimum=1, maximum=MAX_PIECES)


def split(transfers: Iterable[Transfer], pieces: int) -> list[Transfer]:
    """Each transfer cut into ``pieces`` contiguous sub-ranges of near-equal size, in order
    (transfer by transfer, lowest elements first); empty pieces (a range shorter than
    ``pieces``) are dropped, so a transfer never becomes more messages than elements."""
    if pieces == 1:
        return list(transfers)
    out = []
    for t in transfers:
        for a, b in chunk_bounds(t.count, pieces):
            if b > a:
                out.append(Transfer(t.src, t.dst, t.start + a, t.start + b, t.kind))
    return out
