"""Next-epoch precompute: one value computed in a background thread, keyed by what it is for.

``DistributedSampler(prefetch_next_epoch=True)`` starts one of these for epoch ``e + 1`` when it
takes epoch ``e``'s order; ``torch.randperm`` releases the GIL, so the draw overlaps the
consumption of the current epoch. The owner checks :attr:`Precompute.key` before using the
result (a wrong guess is discarded) and always joins the thread (:meth:`result`), so none is left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["Precompute"]


class Precompute:
    """``compute()`` running in a daemon thread named ``distlab-next-epoch``.

    Args:
        key: what the value is for (compared by the owner before use).
        compute: the function to run, without arguments.
    """

    def __init__(self, key: Hashable, compute: Callable[[], Any]) -> None:
        self.key = key
        self._out: list[Any] = []
        self.thread = threading.Thread(target=lambda: self._out.append(compute()),
                                       name="distlab-next-epoch", daemon=True)
        self.thread.start()

    def result(self) -> Any | None:
        """Join the thread; the computed value, or None if ``compute`` raised."""
        self.thread.join()
        return self._out[0] if self._out else None
