"""Counting Hogwild's lost updates: an update one process wrote and another overwrote.

A Hogwild step ends with ``p.add_(d)`` on shared memory: for each element, a read, an add and a
write, with nothing stopping another process from writing the same element between this
process's read and write. Its update is then lost: the element never holds it. Two exact counts:

**Witness.** Right after its parameter update, every step adds exactly ``1.0`` to every element
of a shared ``float32`` *witness* shaped like the parameters, with the same unlocked in-place
``add_``. Whole numbers up to ``2**24`` are exact in ``float32``, so at the end each witness
element holds how many of its increments survived: ``expected - witness`` summed over the
elements is the number of overwritten increments (:func:`witness_lost`). The witness runs the
same kernel on the same sizes at the same moments as the parameter update, but it is a second
tensor: it counts the races of the update phase, not of the parameters themselves.

**Parameters.** Each process also sums, in ``float64``, every delta it applied and every delta's
magnitude. An element whose final value differs from ``initial + sum of all deltas`` by more than
``float32`` rounding can explain (at most one ``spacing`` of the largest magnitude the element can
reach, ``|initial| + sum |delta|``, per update) certainly lost (or doubled) an update
(:func:`missed_elements`). The bound is sound, so with a lock this count is 0; small lost
updates hide under the bound, so without one it is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from distlab._checks import check_int

__all__ = ["LostUpdates", "missed_elements", "witness_lost"]


@dataclass(frozen=True)
class LostUpdates:
    """``lost`` of ``total`` updates overwritten (witness); ``elements_hit`` elements lost at
    least one; ``missed`` elements of the real parameters provably missing an update, of
    ``elements``; ``mass`` = sum |unexplained difference| / sum |applied deltas|."""

    lost: int
    total: int
    elements_hit: int
    missed: int
    elements: int
    mass: float

    @property
    def fraction(self) -> float:
        """Lost updates per update (witness)."""
        return self.lost / self.total if self.total else 0.0


def witness_lost(witness: torch.Tensor, expected: int) -> tuple[int, int]:
    """``(overwritten increments, elements with at least one)`` of a witness whose every element
    should hold ``expected``.

    Raises:
        ValueError: ``expected`` over ``2**24`` (no longer exact in float32), or an element that
            is not a whole number in ``[0, expected]`` (not a witness of this run).
    """
    expected = check_int("expected", expected, minimum=0, maximum=2 ** 24)
    w = witness.detach().double().reshape(-1)
    if w.numel() and (bool((w != w.round()).any()) or float(w.min()) < 0
                      or float(w.max()) > expected):
        raise ValueError(f"witness values must be whole numbers in [0, {expected}], got "
                         f"[{float(w.min())}, {float(w.max())}]")
    short = expected - w
    return int(short.sum()), int((short > 0).sum())


def missed_elements(initial: torch.Tensor, final: torch.Tensor, applied: torch.Tensor,
                    magnitude: torch.Tensor, updates: int) -> tuple[int, float]:
    """``(elements provably missing an update, unexplained mass)`` of one parameter.

    Args:
        initial, final: the ``float32`` parameter before and after training.
        applied: the sum (``float64``) over every process and step of the deltas applied.
        magnitude: the sum (``float64``) of the deltas' absolute values.
        updates: how many updates each element received (processes x steps).

    Returns:
        The number of elements whose ``|final - initial - applied|`` exceeds ``updates`` times
        the ``float32`` spacing at ``|initial| + magnitude``, and the sum of all
        ``|final - initial - applied|`` beyond that bound.
    """
    updates = check_int("updates", updates, minimum=0)
    shapes = {tuple(t.shape) for t in (initial, final, applied, magnitude)}
    if len(shapes) != 1:
        raise ValueError(f"initial, final, applied and magnitude must have one shape, got "
                         f"{sorted(shapes)}")
    p0 = initial.detach().double().numpy().reshape(-1)
    residual = np.abs(final.detach().double().numpy().reshape(-1) - p0
                      - applied.detach().double().numpy().reshape(-1))
    reach = np.abs(p0) + magnitude.detach().double().numpy().reshape(-1)
    bound = updates * np.spacing(reach.astype(np.float32)).astype(np.float64)
    over = residual > bound
    return int(over.sum()), float((residual - bound)[over].sum())
