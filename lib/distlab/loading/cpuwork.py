"""Real CPU work for stages and the part loader: torch matmuls, by wall time or fixed amount."""

from __future__ import annotations

import time

import torch

__all__ = ["burn", "matmuls_per_second"]


def burn(seconds: float, size: int = 128, *, fixed_work: bool = False) -> int:
    """Real CPU work: a loop of ``size`` x ``size`` torch matmuls (~0.03 ms each, long enough that
    the GIL is released for most of the loop, so burning threads run in parallel).

    ``fixed_work=False`` (default): burn until ``seconds`` of wall time have passed (the last
    half millisecond in 32 x 32 matmuls to land close to the deadline). The stage then costs
    ``seconds`` of wall time however much CPU it gets: predictable, what the model assumes.
    ``fixed_work=True``: do the number of matmuls that takes ``seconds`` on an unshared core
    (calibrated once per process); it takes longer when the CPU is shared, as real decoding
    does. Returns the number of matmuls done.
    """
    if seconds <= 0:
        return 0
    big, small = torch.ones(size, size), torch.ones(32, 32)
    out_big, out_small = torch.empty(size, size), torch.empty(32, 32)
    if fixed_work:
        n = max(1, round(seconds * matmuls_per_second(size)))
        for _ in range(n):
            torch.mm(big, big, out=out_big)
        return n
    now = time.perf_counter()
    deadline = now + seconds
    n = 0
    while now < deadline:
        if deadline - now > 5e-4:
            torch.mm(big, big, out=out_big)
        else:
            torch.mm(small, small, out=out_small)
        n += 1
        now = time.perf_counter()
    return n


_RATES: dict[int, float] = {}


def matmuls_per_second(size: int = 128) -> float:
    """``size`` x ``size`` matmuls per second on one core of this machine: the best of five
    short trials (the least disturbed by other processes); cached per process."""
    if size not in _RATES:
        a, out = torch.ones(size, size), torch.empty(size, size)
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(50):
                torch.mm(a, a, out=out)
            best = min(best, (time.perf_counter() - t) / 50)
        _RATES[size] = 1.0 / best
    return _RATES[size]
