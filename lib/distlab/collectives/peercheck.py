"""Detect ranks that call one collective with different arguments, before anything hangs.

Every rank of an allreduce must run the same schedule (algorithm, options, element count) with
the same dtype and op; if one rank asks for ``ring`` and another for ``tree``, their
point-to-point messages never pair up and both wait until the process group times out. The
executor therefore starts each collective with one tiny ``all_gather`` of a fixed-size
fingerprint (:data:`FIELDS`: six int64 values, 48 bytes per rank). Equal fingerprints cost only
that gather (one small collective per call, measured by the benchmark as part of the per-call
overhead); different ones make every rank (they all see the same gathered table) exchange their
readable descriptions and raise :class:`CollectiveMismatchError` naming the ranks and the fields
that differ.
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

__all__ = ["FIELDS", "CollectiveMismatchError", "check_peers", "describe", "fingerprint"]

FIELDS = ("algorithm", "options", "world_size", "count", "dtype", "op")


class CollectiveMismatchError(RuntimeError):
    """Ranks of one group called a collective with different arguments (see :func:`check_peers`)."""


def describe(algorithm: str, options: dict[str, Any], world_size: int, count: int,
             dtype: Any, op: str) -> dict[str, str]:
    """The readable form of a call, one string per name of :data:`FIELDS`."""
    opts = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items()))
    return {"algorithm": str(algorithm), "options": "{" + opts + "}",
            "world_size": str(int(world_size)), "count": str(int(count)),
            "dtype": str(dtype).replace("torch.", ""), "op": str(op)}


def _h63(text: str) -> int:
    """A stable (not per-process salted) 63-bit hash of ``text``."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def fingerprint(desc: dict[str, str]) -> list[int]:
    """Six int64 values, one per field of :data:`FIELDS`, equal iff the descriptions are equal
    (up to 63-bit hash collisions of the strings)."""
    return [_h63(desc[name]) for name in FIELDS]


def check_peers(desc: dict[str, str], group: Any, device: Any,
                timeout: datetime.timedelta | None) -> None:
    """Collective: raise :class:`CollectiveMismatchError` on every rank if any two ranks of
    ``group`` passed different ``desc`` (from :func:`describe`).

    ``device`` is where the gather runs (CPU for gloo, this rank's GPU for NCCL); ``timeout``
    bounds the wait (``None``: the group's own timeout). Cost when all agree: one all_gather of
    ``6 * 8`` bytes per rank.
    """
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    if world == 1:
        return
    mine = torch.tensor(fingerprint(desc), dtype=torch.int64, device=device)
    table = [torch.empty_like(mine) for _ in range(world)]
    work = dist.all_gather(table, mine, group=group, async_op=True)
    if timeout is None:
        work.wait()
    else:
        work.wait(timeout)
    rows = torch.stack(table).cpu()
    if bool((rows == rows[0]).all()):
        return
    # every rank sees the same table, so every rank takes this branch together
    descs: list[Any] = [None] * world
    dist.all_gather_object(descs, desc, group=group)
    raise CollectiveMismatchError(mismatch_message(descs, dist.get_rank(group)))


def mismatch_message(descs: list[dict[str, str]], rank: int) -> str:
    """The error text for per-rank descriptions ``descs`` (group ranks), seen from ``rank``."""
    parts = []
    for name in FIELDS:
        values: dict[str, list[int]] = {}
        for r, d in enumerate(descs):
            values.setdefault(d[name], []).append(r)
        if len(values) > 1:
            parts.append(f"{name}: " + "; ".join(f"ranks {_ranks(rs)} use {v}"
                                                 for v, rs in values.items()))
    return (f"collective mismatch seen on rank {rank}: the ranks of this group called all_reduce "
            f"with different arguments, which would hang until the timeout. Differences: "
            + " | ".join(parts) + ". Call it with the same algorithm, options, tensor size, "
            "dtype and op on every rank.")


def _ranks(rs: list[int]) -> str:
    return ",".join(str(r) for r in rs)
