"""What every rank of a DDP must agree on before its first collective, checked once at
construction: the parameters (count, shapes, dtypes), the buffers, and the settings that decide
the bucket sizes. Ranks that disagree would allreduce buckets of different sizes, which gloo does
not survive (one process aborts in C++ with ``Received data size doesn't match expected size``,
the others wait for the bounded timeout). torch checks the shapes the same way
(``_verify_param_shape_across_processes``); here every rank raises the same
:class:`RankMismatchError` naming the ranks that differ, within one all-gather.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["RankMismatchError", "check_ranks_agree", "model_signature"]


class RankMismatchError(ValueError):
    """Ranks of one DDP hold different models or settings (so different bucket sizes)."""


def model_signature(params: Sequence[torch.Tensor], buffers: Sequence[torch.Tensor],
                    settings: str) -> list[int]:
    """Four integers that differ when the parameters, the buffers or ``settings`` differ:
    ``[parameter count, parameter elements, buffer elements, CRC-32 of shapes/dtypes/settings]``."""
    text = ";".join(f"{tuple(p.shape)}:{p.dtype}" for p in params) + "|" + ";".join(
        f"{tuple(b.shape)}:{b.dtype}" for b in buffers) + "|" + settings
    return [len(params), sum(p.numel() for p in params), sum(b.numel() for b in buffers),
            zlib.crc32(text.encode())]


def check_ranks_agree(signature: list[int], group: Any, device: torch.device) -> None:
    """All-gather every rank's :func:`model_signature`; raise :class:`RankMismatchError` on every
    rank (the same message) when any differs from group rank 0's."""
    t0 = time.monotonic()
    world = dist.get_world_size(group)
    mine = torch.tensor(signature, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine, group=group)
    rows = [r.tolist() for r in everyone]
    odd = [r for r, row in enumerate(rows) if row != rows[0]]
    if not odd:
        return
    fields = ("parameters", "parameter elements", "buffer elements", "shapes/dtypes/settings CRC")
    detail = "; ".join(
        f"rank {r}: " + ", ".join(f"{f} {rows[r][k]} (rank 0: {rows[0][k]})"
                                  for k, f in enumerate(fields) if rows[r][k] != rows[0][k])
        for r in odd)
    raise RankMismatchError(
        f"DDP: the ranks do not hold the same model or bucket settings, seen at construction "
        f"after {time.monotonic() - t0:.2f} s: {detail}. Every rank must wrap the same "
        "architecture with the same bucket_cap_mb, find_unused_parameters and static_graph "
        "(otherwise the gradient buckets differ in size across ranks).")
