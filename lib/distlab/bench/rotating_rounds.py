"""The timed loop of the collective benchmarks' ranks: rounds whose case order rotates.

Every round runs the in-round calibration (if any) and then every case once, each call after a
device sync and a barrier on a buffer refilled first, in an order that rotates from round to
round, so a burst of load from other work hits every case (and the calibration) alike. The
first ``warmup`` rounds are not recorded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.runtime.group import sync_device
from distlab.collectives.runtime.rounds import RoundCalibrator

__all__ = ["rotating_rounds"]


def rotating_rounds(rank: int, cases: list[dict[str, Any]], calibrator: RoundCalibrator | None,
                    iters: int, warmup: int, device: torch.device, *, label: str,
                    progress: bool, prepare: Callable[[dict[str, Any]], None],
                    call: Callable[[dict[str, Any]], None]) -> None:
    """``warmup`` + ``iters`` rounds of ``cases`` (see the module docstring): ``prepare(case)``
    refills the case's buffer before its call, ``call(case)`` is what is timed; each timed
    call's seconds are appended to ``case["seconds"]``. Rank 0 prints a progress line per round
    to stderr as ``[label] round i/n`` when ``progress``."""
    for i in range(warmup + iters):
        timed = i >= warmup
        if progress and rank == 0:
            print(f"[{label}] round {i + 1}/{warmup + iters}{'' if timed else ' (warmup)'}",
                  file=sys.stderr, flush=True)
        if calibrator is not None:
            calibrator.run_round(record=timed)
        for case in cases[i % len(cases):] + cases[:i % len(cases)]:
            prepare(case)
            sync_device(device)
            dist.barrier()
            t0 = time.perf_counter()
            call(case)
            sync_device(device)
            if timed:
                case["seconds"].append(time.perf_counter() - t0)
