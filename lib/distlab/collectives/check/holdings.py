"""What each rank holds after each step: the set of ranks whose data went into every element.

The symbolic twin of :func:`distlab.collectives.check.simulate.simulate`: each rank starts with the
bits of its collective's inputs (:mod:`distlab.collectives.plan.semantics`; for an allreduce, bit
``r`` on every element of rank ``r``), a ``"reduce"`` ORs the sender's bits in, a ``"copy"``
replaces them. After the last step of a correct allreduce every element of every rank has all
``world_size`` bits. The step pictures of notebooks 04 and 08 colour each element by how many bits
it has.
"""

from __future__ import annotations

import numpy as np

from distlab._checks import check_instance, check_int
from distlab.collectives.plan.schedule import Schedule, Step
from distlab.collectives.plan.semantics import MAX_RANKS, layout_of

__all__ = ["after_step", "contributors", "final_masks", "holdings"]



def holdings(schedule: Schedule) -> np.ndarray:
    """Bitmasks of shape ``(len(steps) + 1, world_size, count)``, dtype uint64.

    Index 0 is the start; index ``i + 1`` is the state after step ``i``. Needs
    ``world_size <= 64`` (one bit per rank).
    """
    check_instance("schedule", schedule, Schedule)
    p = schedule.world_size
    check_int("schedule.world_size (holdings tracks one bit per rank)", p, minimum=1,
              maximum=MAX_RANKS)
    state = layout_of(schedule).initial()
    out = [state.copy()]
    for step in schedule.steps:
        state = after_step(state, step)
        out.append(state)
    return np.stack(out)


def after_step(state: np.ndarray, step: Step) -> np.ndarray:
    """The ``(p, buffer)`` masks after ``step`` from the masks ``state`` before it (a new
    array): every transfer reads the sender's masks as they were when the step began; a
    ``"reduce"`` ORs them into the receiver's, a ``"copy"`` replaces them."""
    out = state.copy()
    for t in step.transfers:
        data = state[t.src, t.start:t.stop]
        if t.kind == "reduce":
            out[t.dst, t.start:t.stop] |= data
        else:
            out[t.dst, t.start:t.stop] = data
    return out


def final_masks(schedule: Schedule, initial: np.ndarray | None = None) -> np.ndarray:
    """The ``(p, buffer)`` masks after the last step (from ``initial``, default the
    collective's inputs), without keeping every step."""
    state = layout_of(schedule).initial() if initial is None else initial.copy()
    for step in schedule.steps:
        state = after_step(state, step)
    return state


def contributors(masks: np.ndarray) -> np.ndarray:
    """Number of set bits of each uint64 mask (how many ranks' data an element holds)."""
    m = np.asarray(masks, dtype=np.uint64)
    count = np.zeros(m.shape, dtype=np.int64)
    for bit in range(MAX_RANKS):
        count += ((m >> np.uint64(bit)) & np.uint64(1)).astype(np.int64)
    return count
